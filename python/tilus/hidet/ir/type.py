"""``tilus.hidet.ir.type``: ``DataType`` and ``void_p`` (tilus.DataType, tilus.void_p)."""
from ... import DataType, void_p

__all__ = ["DataType", "void_p"]
