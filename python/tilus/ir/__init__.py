"""NVIDIA Tilus's ``tilus.ir`` import paths, kept for the names its kernels import: the tensor
classes (``tilus.ir.RegisterTensor``, ``SharedTensor``, ``GlobalTensor``, also from
``tilus.ir.tensor``) and the layout functions of ``tilus.ir.layout.ops``. They are tilus's own."""
from .. import GlobalTensor, RegisterLayout, RegisterTensor, SharedTensor  # noqa: F401
from . import layout, tensor

__all__ = ["GlobalTensor", "RegisterLayout", "RegisterTensor", "SharedTensor", "layout", "tensor"]
