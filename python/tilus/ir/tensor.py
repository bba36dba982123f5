"""``tilus.ir.tensor``: the tensor classes of a traced body (tilus.RegisterTensor, ...)."""
from .. import GlobalTensor, RegisterTensor, SharedTensor

__all__ = ["GlobalTensor", "RegisterTensor", "SharedTensor"]
