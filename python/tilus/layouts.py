"""Register layouts as NVIDIA Tilus writes them: ``spatial`` / ``local`` (with ``ranks=``),
``column_*``, the chained composition ``layout.local(...)``, and ``reduce``, ``concat``,
``permute``, ``reshape``; thin functions over the C++ layout algebra (tilus._C.RegisterLayout)."""
from typing import Sequence

from . import _C
from ._C import CompileError, RegisterLayout
from .tracing import _describe


def _layout_shape(name, shape):
    """The shape of a layout function's call: ints (NVIDIA Tilus's ``spatial(4, 8)``) or one
    list/tuple of ints (``spatial([4, 8])``); a CompileError naming the function otherwise."""
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in shape):
        raise CompileError(f"tilus.{name}: the shape must be positive ints, as {name}(4, 8) or {name}([4, 8]); got "
                           f"{', '.join(_describe(d) for d in shape) or 'nothing'}")
    return list(shape)


def _ranked(name, shape, ranks, plain):
    """A spatial or local layout whose dims are ordered by ``ranks`` (rank 0 the most significant,
    NVIDIA Tilus's parameter) instead of row-major."""
    shape = _layout_shape(name, shape)
    if ranks is None:
        return plain(shape)
    ranks = list(ranks)
    if sorted(ranks) != list(range(len(shape))):
        raise CompileError(f"tilus.{name}: ranks must order the {len(shape)} dims (a permutation of 0..{len(shape) - 1}), "
                           f"got {ranks}")
    order = [ranks.index(r) for r in range(len(shape))]  # dims, most significant first
    if name == "spatial":
        return RegisterLayout(shape, shape, order, [])
    return RegisterLayout(shape, shape, [], order)


def spatial(*shape, ranks=None):
    """A register layout that spreads a tile of ``shape`` over ``prod(shape)`` threads, one
    element each, row-major (``spatial(4, 8)`` or ``spatial([4, 8])``); ``ranks`` orders the dims
    instead (rank 0 the most significant; ``ranks=[1, 0]`` is ``column_spatial``)."""
    return _ranked("spatial", shape, ranks, _C.spatial)


def local(*shape, ranks=None):
    """A register layout in which one thread holds a whole tile of ``shape``, row-major in its
    slots (``local(2, 1)`` or ``local([2, 1])``); ``ranks`` orders the dims instead."""
    return _ranked("local", shape, ranks, _C.local)


def column_spatial(*shape):
    """``spatial`` with threads numbered column-major."""
    return _C.column_spatial(_layout_shape("column_spatial", shape))


def column_local(*shape):
    """``local`` with slots numbered column-major."""
    return _C.column_local(_layout_shape("column_local", shape))


def _compose_with(make):
    def method(self, *shape, **kw):
        return self * make(*shape, **kw)
    method.__name__ = make.__name__
    method.__doc__ = f"This layout composed with ``{make.__name__}(*shape)`` inside it (NVIDIA Tilus's chaining)."
    return method


# layout.local(2, 1).spatial(8, 4): NVIDIA Tilus's chained composition.
for _make in (local, spatial, column_local, column_spatial):
    setattr(RegisterLayout, _make.__name__, _compose_with(_make))


def _layout(x, what):
    if not isinstance(x, RegisterLayout):
        raise CompileError(f"{what}: expected a register layout, got {type(x).__name__} {x!r}")
    return x


def reduce(layout: RegisterLayout, dims: Sequence[int], *, keepdims: bool = False) -> RegisterLayout:
    """The layout of ``layout`` reduced over ``dims``: those dims removed (kept with extent 1 when
    ``keepdims``), and the threads that held them holding replicas."""
    return _layout(layout, "reduce").reduce_dims(list(dims), bool(keepdims))


def concat(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """The layout of rank ``lhs.rank + rhs.rank`` whose dims are lhs's then rhs's: lhs's threads
    and slots the major ones, rhs's the minor ones."""
    a, b = _layout(lhs, "concat"), _layout(rhs, "concat")
    shift = len(a.mode_shape)
    return RegisterLayout(list(a.shape) + list(b.shape), list(a.mode_shape) + list(b.mode_shape),
                          list(a.spatial_modes) + [m + shift if m >= 0 else m for m in b.spatial_modes],
                          list(a.local_modes) + [m + shift for m in b.local_modes])


def permute(layout: RegisterLayout, dims: Sequence[int]) -> RegisterLayout:
    """``layout`` with its dims reordered: dim i of the result is dim ``dims[i]`` of ``layout``."""
    return _layout(layout, "permute").permute(list(dims))


def reshape(layout: RegisterLayout, shape: Sequence[int]) -> RegisterLayout:
    """``layout`` over another shape of the same elements (CompileError when the new dims do not
    align with its modes)."""
    return _layout(layout, "reshape").reshape(list(shape))
