"""``tilus.hidet.ir``: ``DataType`` (tilus.DataType) and the ``dtypes`` and ``type`` modules."""
from ... import DataType
from . import dtypes, type  # noqa: A004 - NVIDIA Tilus's module name

__all__ = ["DataType", "dtypes", "type"]
