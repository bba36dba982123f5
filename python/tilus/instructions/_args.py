"""How the instruction methods take their arguments: conversions with errors at the user's line, and
the wrapper every method goes through."""

import functools
import inspect
import re
from typing import Sequence, Union

from .. import _C
from .._C import CompileError, DataType, Expr
from ..tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, TMemoryTensor, Unusable, _builder,
                       _describe, _here, _is_scalar, _located, _raised_at, _where)


_KINDS = {RegisterTensor: "a register tensor", SharedTensor: "a shared tensor", GlobalTensor: "a global tensor",
          TMemoryTensor: "a tensor-memory tensor (tcgen05.alloc)"}


def _tensor(x, what, loc, cls=RegisterTensor):
    if isinstance(x, cls):
        return x.t
    if isinstance(x, Unusable):
        raise x.error()
    hint = ""
    if isinstance(x, Region):
        hint = " (a region such as g[a:b] is for copy / async_copy)"
    raise CompileError(f"{_where(loc)}{what}: expects {_KINDS[cls]}, got {_describe(x)}{hint}")


def _sequence(xs, what, loc):
    if isinstance(xs, (list, tuple)):
        return list(xs)
    if isinstance(xs, (str, bytes, dict, set, TensorBase, Region, Unusable)) or not hasattr(xs, "__iter__"):
        if isinstance(xs, Unusable):
            raise xs.error()
        raise CompileError(f"{_where(loc)}{what} must be a list, got {_describe(xs)}")
    return list(xs)


def _ints(xs, what, loc, one=False):
    """A list of Python ints (a single int is a list of one); `one`: a single int."""
    if xs is None:
        return []
    out = []
    for x in [xs] if one or isinstance(xs, (int, Expr)) else _sequence(xs, what, loc):
        if isinstance(x, bool) or not isinstance(x, int):
            if hasattr(x, "__index__") and not isinstance(x, (bool, Expr, Unusable)):
                x = x.__index__()  # numpy integers
            else:
                raise CompileError(f"{_where(loc)}{what} must be {'a Python int' if one else 'Python ints'}, got "
                                   f"{_describe(x)}")
        out.append(_int64(x, what, loc))
    return out


def _int64(x, what, loc):
    if not -(1 << 63) <= x < (1 << 63):
        raise CompileError(f"{_where(loc)}{what}: {x} does not fit in 64 bits")
    return x


def _int(x, what, loc):
    return _ints(x, what, loc, one=True)[0]


def _exprs(xs, what, loc):
    """A list of integer scalars (Python ints or tilus expressions)."""
    if xs is None:
        return []
    if isinstance(xs, (int, Expr)):
        return [xs]
    out = _sequence(xs, what, loc)
    for x in out:
        if isinstance(x, Unusable):
            raise x.error()
        if not _is_scalar(x) or isinstance(x, float):
            raise CompileError(f"{_where(loc)}{what} must be integers (Python ints or kernel scalars), got "
                               f"{_describe(x)}")
        if isinstance(x, int):
            _int64(x, what, loc)
    return out


def _scalar(x, what, loc):
    if isinstance(x, Unusable):
        raise x.error()
    if not _is_scalar(x):
        raise CompileError(f"{_where(loc)}{what} must be a scalar (a number or a kernel scalar), got {_describe(x)}")
    return x


def _operand(x, what, loc):
    """A register tensor or a scalar, as the core takes it."""
    return x.t if isinstance(x, RegisterTensor) else _scalar(x, what + " (a register tensor or a scalar)", loc)


def _bool(x, what, loc):
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return bool(x)
    raise CompileError(f"{_where(loc)}{what} must be True or False, got {_describe(x)}")


def _optional(x, kind, what, loc):
    if x is None or isinstance(x, kind):
        return x
    raise CompileError(f"{_where(loc)}{what} must be {kind.__name__ if kind is not str else 'a str'} or None, got "
                       f"{_describe(x)}")


def _layout(x, what, loc, optional=True):
    if (x is None and optional) or isinstance(x, _C.RegisterLayout):
        return x
    raise CompileError(f"{_where(loc)}{what} must be a register layout (tilus.spatial(...), tilus.local(...), ...), "
                       f"got {_describe(x)}")


def _instruction(fn, pure):
    """The Script method `fn` with its argument mistakes reported as CompileErrors at the user's
    line (see the module docstring). `pure`: it only computes a new tensor (its discarded
    result is a warning, see transform_runtime._Runtime.discard)."""
    name = fn.__name__

    @functools.wraps(fn)
    def method(self, *args, **kw):
        try:
            return fn(self, *args, **kw)
        except CompileError as e:
            if _located(str(e)):
                raise
            raise CompileError(f"{_where(_here())}{name}: {e}") from None  # a core error without a line
        except (TypeError, ValueError, OverflowError, RuntimeError, AttributeError, KeyError) as e:
            if _raised_at(e.__traceback__.tb_next) is not None:
                raise  # raised in the user's own code (an init function, ...): the trace reports it there
            if isinstance(e, TypeError) and e.__traceback__.tb_next is None:
                why = re.sub(r"^[\w.]+\(\) ", "", str(e))  # Python's: missing / repeated / unknown arguments
            else:
                why = f"wrong argument types: {name}({_arguments(fn, self, args, kw)})"
            raise CompileError(f"{_where(_here())}{name}: {why}") from None

    method._tilus_pure = pure
    return method


def _arguments(fn, self, args, kw):
    try:
        bound = inspect.signature(fn).bind(self, *args, **kw).arguments
        items = [(k, v) for k, v in bound.items() if k != "self"]
    except TypeError:
        items = [(None, a) for a in args] + list(kw.items())
    return ", ".join((f"{k}=" if k else "") + _describe(v) for k, v in items)


_INT32 = DataType.from_name("int32")


class MappedBarrier:
    """A barrier of another block of the cluster (``self.cluster.map_shared_addr(bars[i], rank)``):
    ``barrier`` (this block's barrier at the same offset) and ``rank``. mbarrier.arrive and
    arrive_and_expect_tx arrive on it, and a TMA load with cta_group=2 completes on it."""
    __slots__ = ("_barrier", "rank", "source", "rank_var")

    def __init__(self, barrier, rank, source=None, rank_var=False):
        # source: what map_shared_addr was given (a rebinding of it to this mapping in a branch
        # merges: transform._mapped_barrier); rank_var: rank is a kernel variable of such a merge.
        self._barrier, self.rank, self.source, self.rank_var = barrier, rank, source, rank_var

    @property
    def barrier(self):
        """This block's barrier at the same offset (the core's shared tensor), made where it is used
        when the mapping outlives the scope that made it."""
        return self._barrier if self._barrier is not None else _barrier(self.source, "barrier", _here())

    def __repr__(self):
        return f"MappedBarrier(rank={self.rank})"


def _peer(barrier, cta_id, what, loc):
    """(barrier, cta_id) of an arrival: a MappedBarrier names its block itself."""
    if isinstance(barrier, MappedBarrier):
        if cta_id is not None:
            raise CompileError(f"{_where(loc)}{what}: the barrier is already another block's (map_shared_addr); "
                               f"give the block once")
        return barrier.barrier, barrier.rank
    return _barrier(barrier, f"{what}: barrier", loc), cta_id


# --- the types of the Script methods' parameters (annotations only: the methods check their
# arguments themselves, and also take numpy integers and a single int for a list of one) ----------
_Int = Union[int, Expr]                      # a Python int or an integer kernel scalar


_Scalar = Union[int, float, Expr]            # a Python number (bool included) or a kernel scalar


_Operand = Union[RegisterTensor, int, float, Expr]


_Src = Union[GlobalTensor, SharedTensor, RegisterTensor, Region]


_Dims = Union[int, Sequence[int], None]


def _barrier(x, what, loc):
    """An mbarrier: a one-element shared tensor, or ``bars[i]`` (an element of mbarrier.alloc's tensor)."""
    if isinstance(x, MappedBarrier):
        raise CompileError(f"{_where(loc)}{what}: a barrier of another block (cluster.map_shared_addr) can only be "
                           f"arrived at (mbarrier.arrive, arrive_and_expect_tx) or completed by a TMA load with "
                           f"cta_group=2; a block waits on, expects bytes on and copies to its own barriers")
    if isinstance(x, Region) and isinstance(x.tensor, SharedTensor) and all(
            isinstance(e, int) and e == 1 for e in x.extents):
        return _builder().index_shared(x.tensor.t, list(x.offsets), loc)
    return _tensor(x, what, loc, SharedTensor)


def _cache_policy(x, what, loc):
    """A raw 64-bit L2 cache policy: None, a Python int (its 64 bits; past 2^63 as the negative int64 of
    the same bits) or an integer kernel scalar."""
    if x is None:
        return None
    if isinstance(x, int) and not isinstance(x, bool):
        if not -(1 << 63) <= x < (1 << 64):
            raise CompileError(f"{_where(loc)}{what}: cache_policy={x:#x} does not fit in 64 bits")
        return x - (1 << 64) if x >= (1 << 63) else x
    return _scalar(x, f"{what}: cache_policy", loc)


def _one_of(dim, dims, what, loc):
    """dim (NVIDIA Tilus's name) or dims (tilus's first name for it), exactly one."""
    if (dim is None) == (dims is None):
        raise CompileError(f"{_where(loc)}{what}: give the dims to {what} once, as dim= (or positionally), got "
                           f"dim={dim!r}, dims={dims!r}")
    return dim if dim is not None else dims


def _choice(x, allowed, what, loc):
    if not isinstance(x, str) or x not in allowed:
        raise CompileError(f"{_where(loc)}{what}={x!r} is not one of {', '.join(repr(a) for a in allowed)}")
    return x
