"""``tilus.ir.layout.ops``: the layout functions under NVIDIA Tilus's import path: the register
layouts (``local``, ``spatial``, ``column_local``, ``column_spatial``, ``replicated``, ``reduce``,
``concat``, ``permute``, ``reshape``; tilus's own layouts) and the shared ones
(``shared_row_major``, ``shared_column_major``, ``shared_row_major_swizzle``;
docs/tilus-compatibility.md says where they differ from Tilus's)."""
from ... import replicated
from ..._C import SharedLayout
from ...layouts import column_local, column_spatial, concat, local, permute, reduce, reshape, spatial


def shared_row_major(*shape: int) -> SharedLayout:
    """The row-major shared layout of ``shape``."""
    return SharedLayout.row_major([int(d) for d in shape])


def shared_column_major(*shape: int) -> SharedLayout:
    """The column-major shared layout of ``shape`` (the first dim contiguous)."""
    return SharedLayout.column_major([int(d) for d in shape])


def shared_row_major_swizzle(shape, dtype_nbytes: int) -> SharedLayout:
    """A row-major shared layout of ``shape`` (rank >= 2) whose 16-byte units are XOR-swizzled so
    that ldmatrix reads and 16-byte writes of any 8 consecutive rows are free of bank conflicts.

    Rows of 32, 64 or 128 bytes take the 32B / 64B / 128B swizzle, as in NVIDIA Tilus; rows of
    16 bytes stay unswizzled. Longer rows (a power of two) XOR the units with the row index,
    where Tilus splits the row into 128-byte column blocks (the same freedom from conflicts, a
    different order of the blocks); other row lengths stay unswizzled.

    Raises:
        ValueError: fewer than 2 dims, rows (``shape[-2]``) not a multiple of 8, or a row not a
            multiple of 16 bytes (Tilus's conditions).
    """
    shape = [int(d) for d in shape]
    if len(shape) < 2:
        raise ValueError("shared_row_major_swizzle: the shape must have at least two dims, got " + str(shape))
    if shape[-2] % 8 or shape[-1] * dtype_nbytes % 16:
        raise ValueError(f"shared_row_major_swizzle: shape {shape} with {dtype_nbytes}-byte elements: the rows "
                         "(shape[-2]) must be a multiple of 8 and a row a multiple of 16 bytes")
    return SharedLayout.row_major_swizzled(shape, int(dtype_nbytes))


__all__ = ["column_local", "column_spatial", "concat", "local", "permute", "reduce", "replicated", "reshape",
           "shared_column_major", "shared_row_major", "shared_row_major_swizzle", "spatial"]
