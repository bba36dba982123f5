"""tilus.Script: kernels as Python classes, traced into the tile IR by the C++ core.

Every instruction method goes through one wrapper (`_instruction`): a mistake in how it is
called (a wrong type, a missing or repeated argument) is a CompileError that names the method,
the arguments as the user gave them and the user's file:line, never a pybind11 dump. The rules
about shapes and dtypes are the C++ verifier's."""
import functools
import inspect
import re
from typing import Any, Callable, ContextManager, Dict, Iterable, Optional, Sequence, Union

from . import _C
from . import layouts as _layouts
from .artifacts import Artifacts
from .classes import _traced
from .instructions import clc as _clc
from .instructions import defined as _defined
from .instructions import tcgen05 as _tcgen05
from .launch import launch as _launch
from ._C import CompileError, DataType, Expr
from .tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, TMemoryTensor, Unusable, _binary,
                      _builder,
                      _declare_kernel_variable, _describe, _dtype, _fail, _here, _is_scalar, _located, _raised_at,
                      _set_attribute, _tracing, _where)


# --- argument helpers of the Script methods ------------------------------------------------------

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
    result is a warning, see transform._Runtime.discard)."""
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


class Attrs:
    """The kernel's launch attributes, ``self.attrs`` in a Script body; each is handed to the
    tracer as soon as it is set:

    - ``blocks``: the grid, 1 to 3 block counts (Python ints or integer expressions of the
      kernel's parameters, evaluated at every launch), e.g. ``[tilus.cdiv(n, 1024)]``;
    - ``warps``: warps per block, a Python int from 1 to 32;
    - ``cluster_blocks``: the thread-block cluster, 1 to 3 positive Python ints.

    Any other name is a CompileError.
    """

    def __init__(self):
        object.__setattr__(self, "_values", {})

    def __setattr__(self, name, value):
        loc = _here()
        if name not in ("blocks", "warps", "cluster_blocks"):
            raise CompileError(f"{_where(loc)}unknown kernel attribute '{name}' (blocks, warps, cluster_blocks)")
        self._values[name] = value
        b = getattr(_tracing, "builder", None)
        if b is None:
            return
        if name == "blocks":
            b.set_blocks(_exprs(value, "attrs.blocks", loc), loc)
        elif name == "warps":
            if not isinstance(value, int) or isinstance(value, bool):
                raise CompileError(f"{_where(loc)}attrs.warps must be a Python int, got {_describe(value)}")
            b.set_warps(value, loc)
        else:
            b.set_cluster(_ints(value, "attrs.cluster_blocks", loc), loc)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


_INT32 = DataType.from_name("int32")


class Dim3:
    """Three values ``x``, ``y``, ``z`` (NVIDIA Tilus's ``tilus.Dim3``): ``self.blockIdx``,
    ``self.gridDim`` and the cluster's ``blockIdx`` and ``clusterDim`` are Dim3s of int32 scalars.
    ``x, y, z = dim3`` unpacks it; ``dim3[0]`` is ``x``."""
    __slots__ = ("_values",)

    def __init__(self, x: Any = 1, y: Any = 1, z: Any = 1):
        self._values = (x, y, z)

    @property
    def x(self) -> Any:
        """The first value."""
        return self._values[0]

    @property
    def y(self) -> Any:
        """The second value."""
        return self._values[1]

    @property
    def z(self) -> Any:
        """The third value."""
        return self._values[2]

    def __iter__(self):
        """``x, y, z = ...``: the three values in order."""
        return iter(self._values)

    def __getitem__(self, i):
        """``[0]``, ``[1]``, ``[2]``: ``x``, ``y``, ``z``."""
        return self._values[i]

    def __len__(self):
        """3."""
        return 3

    def __repr__(self):
        return f"Dim3({', '.join(repr(v) for v in self._values)})"


def _block_idx() -> Dim3:
    return Dim3(_C.block_idx(0), _C.block_idx(1), _C.block_idx(2))


def _Dim3(make) -> Dim3:
    return Dim3(make(0), make(1), make(2))


class _Cluster:
    """``self.cluster``: the thread-block cluster instructions, under NVIDIA Tilus's names.

    ``self.attrs.cluster_blocks`` sets the cluster's shape (without it every block is a cluster of
    one); clusters need sm_90 on the GPU.
    """

    def sync(self) -> None:
        """A barrier of every thread of every block of the cluster (barrier.cluster.arrive + wait).

        On the CPU backend it is a no-op for clusters of one block and a CompileError for larger
        ones (the CPU runs each block on its own).
        """
        _builder().cluster_sync(_here())

    @property
    def blockIdx(self) -> _Dim3:
        """The block's index in its cluster (``%cluster_ctaid``): ``.x``, ``.y``, ``.z``, int32 scalars."""
        return _Dim3(_C.cluster_block_idx)

    @property
    def clusterDim(self) -> _Dim3:
        """The cluster's shape (``attrs.cluster_blocks``, 1 where unset): ``.x``, ``.y``, ``.z``."""
        return _Dim3(_C.cluster_dim)

    @property
    def blockRank(self) -> Expr:
        """The block's rank in its cluster (``%cluster_ctarank``), an int32 scalar from 0 to the cluster's size - 1."""
        return _C.cluster_block_rank()

    def map_shared_addr(self, addr: Any, target_rank: "_Int") -> "MappedBarrier":
        """The barrier at ``addr``'s offset in block ``target_rank`` of the cluster (NVIDIA Tilus's name;
        PTX ``mapa.shared::cluster``). ``addr`` is a barrier (``bars[i]`` of ``mbarrier.alloc``): tilus
        keeps barriers as shared tensors, where Tilus has uint32 addresses, so the passes can follow
        them. The result goes to ``mbarrier.arrive`` and ``mbarrier.arrive_and_expect_tx`` (and the
        seed's ``mbarrier_arrive``), which then arrive on the peer's barrier; a block waits only on
        its own barriers. Raw addresses (uint32 register tensors) are a CompileError."""
        loc = _here()
        if isinstance(addr, MappedBarrier):
            addr = addr.source
        source = addr
        if isinstance(addr, (RegisterTensor, Expr)) or not isinstance(addr, (SharedTensor, Region)):
            raise CompileError(f"{_where(loc)}cluster.map_shared_addr: addr must be a barrier (bars[i] of "
                               f"mbarrier.alloc), got {_describe(addr)}; tilus keeps barriers as shared tensors, so "
                               f"raw uint32 shared addresses cannot be mapped")
        return MappedBarrier(_barrier(addr, "cluster.map_shared_addr: addr", loc),
                             _scalar(target_rank, "cluster.map_shared_addr: target_rank", loc), source=source)


class MappedBarrier:
    """A barrier of another block of the cluster (``self.cluster.map_shared_addr(bars[i], rank)``):
    ``barrier`` (this block's barrier at the same offset) and ``rank``. mbarrier.arrive and
    arrive_and_expect_tx arrive on it."""
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


class _ThreadGroup:
    def __init__(self, kind, begin, n, loc):
        self.args = (kind, begin, n, loc)

    def __enter__(self):
        _builder().begin_thread_group(*self.args)
        # The open groups as (first thread in the block, threads), for current_thread_begin & co.
        groups = _tracing.__dict__.setdefault("thread_groups", [])
        groups.append(((groups[-1][0] if groups else 0) + self.args[1], self.args[2]))

    def __exit__(self, exc_type, exc, tb):
        _tracing.__dict__.get("thread_groups", [None]).pop()
        if exc_type is None:
            _builder().end_thread_group()
        return False


# --- the types of the Script methods' parameters (annotations only: the methods check their
# arguments themselves, and also take numpy integers and a single int for a list of one) ----------
_Int = Union[int, Expr]                      # a Python int or an integer kernel scalar
_Scalar = Union[int, float, Expr]            # a Python number (bool included) or a kernel scalar
_Operand = Union[RegisterTensor, int, float, Expr]
_Src = Union[GlobalTensor, SharedTensor, RegisterTensor, Region]
_Dims = Union[int, Sequence[int], None]

# --- the Script base class ----------------------------------------------------------------------

class Script(Artifacts):
    """Base class of tilus kernels (see docs/python.md).

    Subclasses take hyperparameters in ``__init__`` (calling ``super().__init__()``) and define
    the kernel body, one thread block's work, as ``__call__`` with annotated parameters
    (``int32`` etc.: runtime scalars; ``~float16`` etc.: arrays; ``int``/``float``/``bool``/
    ``str``: compile-time constants). Calling an instance launches the kernel, tracing and
    compiling it on the first call of each specialization: CUDA arrays run on the GPU, host
    arrays (numpy) on the CPU backend. ``source``, ``ptx``, ``sass``, ``ir`` and ``compiled``
    show what a call compiles to without launching it.

    In the body:

    - ``self.attrs.blocks`` / ``.warps`` / ``.cluster_blocks``: the launch attributes (Attrs);
    - ``self.blockIdx.x`` / ``.y`` / ``.z``: the block index (int32 scalars);
    - ``self.cluster``: the thread-block cluster group (``sync()``, ``blockIdx``, ``clusterDim``,
      ``blockRank``), under NVIDIA Tilus's names;
    - the instruction methods (``global_view``, ``load_global``, ``copy_async``, ``dot``, ...,
      docs/instructions.md) record the kernel's tile instructions; they may only be called
      while the body is traced. A wrong call (a wrong argument type, a missing, repeated or
      unknown argument, shapes or dtypes that do not fit) raises ``tilus.CompileError`` at the
      caller's ``file:line``.
    """

    def __init__(self):
        self.attrs = Attrs()
        self.blockIdx = _block_idx()
        self.cluster = _Cluster()

    def __setattr__(self, name, value):
        # While tracing, an attribute holding a kernel variable (``self.i: int32 = 0``) is assigned.
        _set_attribute(self, name, value)

    def __call__(self, *args, **kw):
        """Launches the kernel (a subclass defines the body as ``__call__``; this base class has none)."""
        raise CompileError(f"{type(self).__name__} has no kernel body: a tilus.Script subclass defines __call__")

    def __getattr__(self, name):
        # A subclass whose __init__ forgot super().__init__() still has its attrs, blockIdx, cluster.
        if name in ("attrs", "blockIdx", "cluster"):
            value = Attrs() if name == "attrs" else _block_idx() if name == "blockIdx" else _Cluster()
            self.__dict__[name] = value
            return value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Helper methods are normalized like the body when it calls them (as NVIDIA Tilus
        # does): `if` on kernel values, `for ... in range(...)` and `x: int32 = 0` work in them.
        for name, value in list(vars(cls).items()):
            if inspect.isfunction(value) and not name.startswith("__") and not getattr(value, "_tilus_traced", False):
                setattr(cls, name, _traced(value, plain_outside=True))
        body = cls.__dict__.get("__call__")
        if body is None:
            return
        cls._tilus_body = body
        # The names visible where the class statement ran (a factory function's arguments and
        # locals): string annotations (PEP 563) are evaluated with them (launch._annotations).
        frame = inspect.currentframe().f_back
        if frame is not None and frame.f_locals is not frame.f_globals:
            cls._tilus_scope = dict(frame.f_locals)
        else:
            cls._tilus_scope = {}

        def __call__(self, *args, **kw):
            if not kw:
                fast = self.__dict__.get("_tilus_fast")  # see launch._make_fast
                if fast is not None and fast(args):
                    return None
            return _launch(self, args, kw)

        __call__.__doc__ = body.__doc__
        __call__.__wrapped__ = body
        cls.__call__ = __call__

    # --- tensors ---------------------------------------------------------------------------------
    def global_view(self, ptr: Expr, *, dtype: Optional[DataType] = None, shape: Sequence[_Int],
                    strides: Optional[Sequence[_Int]] = None) -> GlobalTensor:
        """A global tensor over the array of a pointer parameter.

        Args:
            ptr: a pointer parameter of the kernel (annotated ``~dtype``).
            dtype: the element type; defaults to the pointer's element type.
            shape: the extents, Python ints or integer kernel scalars (e.g. parameters).
            strides: in elements, one per dim; default: row-major (C-contiguous).

        The views of a pointer parameter are its argument contract, checked at every launch:
        a view without ``strides`` reads a C-contiguous array, one with ``strides`` an array of
        its rank with exactly those strides, and the array must hold every element a view may
        reach (docs/gpu.md, "Argument checks").
        """
        loc = _here()
        if not isinstance(ptr, Expr):
            raise CompileError(f"{_where(loc)}global_view: ptr must be a pointer parameter of the kernel (~dtype), got "
                               f"{_describe(ptr)}")
        if dtype is None:
            if not ptr.dtype.is_pointer():
                raise CompileError(f"{_where(loc)}global_view: needs dtype= for {_describe(ptr)}")
            dtype = ptr.dtype.pointee
        name = ptr.name if isinstance(ptr, _C.Var) else "g"
        return GlobalTensor(_builder().global_view(ptr, _dtype(dtype, "global_view: dtype", loc),
                                                   _exprs(shape, "global_view: shape", loc),
                                                   _exprs(strides, "global_view: strides", loc), loc, name))

    def global_tensor(self, dtype: DataType, shape: Sequence[_Int], *, layout=None,
                      requires_clean: bool) -> GlobalTensor:
        """Global memory the runtime provides at every launch, as a row-major tensor shared by every
        block of the launch (NVIDIA Tilus's ``global_tensor``).

        Args:
            dtype: the element type.
            shape: Python ints or integer expressions of the kernel's parameters (the runtime sizes
                the memory from the arguments before the launch).
            layout: Tilus's global layout; only the default (row-major, ``None``) is supported.
            requires_clean: ``True``: all zeros at the kernel's first launch, and the kernel must
                leave it all zeros (the runtime clears it only when it allocates it; the CPU
                backend reports a launch that leaves it dirty). ``False``: its contents are
                undefined.

        The memory is kept per CUDA stream and grows when a launch needs more (docs/gpu.md,
        "Global tensors"): launches on one stream share it one after the other.
        """
        loc = _here()
        if layout is not None:
            raise CompileError(f"{_where(loc)}global_tensor: only the default row-major layout is supported, got "
                               f"layout={_describe(layout)}")
        return GlobalTensor(_builder().global_tensor(_dtype(dtype, "global_tensor: dtype", loc),
                                                     _exprs(shape, "global_tensor: shape", loc),
                                                     _bool(requires_clean, "global_tensor: requires_clean", loc),
                                                     loc, "g"))

    def shared_tensor(self, *, dtype: DataType, shape: Sequence[int]) -> SharedTensor:
        """A new shared-memory tensor of ``dtype`` and a static ``shape`` (positive Python ints).

        Its layout is row-major, or swizzled by layout inference for conflict-free access
        (docs/passes.md); its memory is planned by the shared-memory planner (see ``free_shared``).
        """
        loc = _here()
        return SharedTensor(_builder().shared_tensor(_dtype(dtype, "shared_tensor: dtype", loc),
                                                     _ints(shape, "shared_tensor: shape", loc), loc))

    def free_shared(self, t: SharedTensor) -> None:
        """Ends the lifetime of the shared tensor ``t``, so that the planner may reuse its memory."""
        loc = _here()
        _builder().free_shared(_tensor(t, "free_shared", loc, SharedTensor), loc)

    def register_tensor(self, *, dtype: DataType, shape: Sequence[int],
                        init: Union[_Scalar, Callable[..., _Scalar], None] = None) -> RegisterTensor:
        """A new register tensor of ``dtype`` and a static ``shape`` (positive Python ints).

        Args:
            init: None (uninitialized), a scalar (every element), or a function of the index
                variables giving each element, e.g. ``lambda i, j: i * 8 + j``.

        A register tensor holds at most 512 KiB per thread (CUDA's local memory per thread).
        """
        loc = _here()
        if init is not None and not callable(init):
            _scalar(init, "register_tensor: init (a scalar or a function of the indices)", loc)
        return RegisterTensor(_builder().register_tensor(_dtype(dtype, "register_tensor: dtype", loc),
                                                         _ints(shape, "register_tensor: shape", loc), init, loc))

    def declare(self, name: str, dtype: DataType, init: _Scalar) -> _C.Var:
        """A mutable scalar kernel variable named ``name`` of ``dtype``, initialized to ``init``.

        Assign to it with ``=`` anywhere in the body (in loops and branches too); names that are
        assigned in a loop or branch become such variables by themselves (docs/python.md).
        """
        loc = _here()
        if not isinstance(name, str) or not name.isidentifier():
            raise CompileError(f"{_where(loc)}declare: name must be an identifier (a str), got {_describe(name)}")
        return _declare_kernel_variable(_builder(), name, _dtype(dtype, "declare: dtype", loc),
                                        _scalar(init, "declare: init", loc), loc)

    @property
    def gridDim(self) -> Dim3:
        """The grid's extents (``attrs.blocks``, 1 where not given) as int32 scalars ``.x``, ``.y``,
        ``.z``; ``attrs.blocks`` must be set before."""
        loc = _here()
        blocks = self.attrs._values.get("blocks")
        if blocks is None:
            raise CompileError(f"{_where(loc)}gridDim: set self.attrs.blocks before reading self.gridDim")
        blocks = list(blocks) if isinstance(blocks, (list, tuple)) else [blocks]
        blocks += [1] * (3 - len(blocks))
        return Dim3(*(_C.cast(v, _INT32) if isinstance(v, Expr) and v.dtype != _INT32 else v for v in blocks))

    def _block_threads(self, what):
        groups = _tracing.__dict__.get("thread_groups")
        if groups:
            return groups[-1]
        warps = self.attrs._values.get("warps")
        if not isinstance(warps, int):
            raise CompileError(f"{_where(_here())}{what}: set self.attrs.warps before it (the block's threads are "
                               "not known yet)")
        return 0, warps * 32

    @property
    def current_thread_begin(self) -> int:
        """The block thread index of the first thread of the current thread group (0 outside any), a
        Python int."""
        return self._block_threads("current_thread_begin")[0]

    @property
    def current_thread_end(self) -> int:
        """One past the block thread index of the last thread of the current thread group (the
        block's threads outside any), a Python int."""
        begin, n = self._block_threads("current_thread_end")
        return begin + n

    @property
    def current_num_threads(self) -> int:
        """The threads of the current thread group (the block's outside any), a Python int."""
        return self._block_threads("current_num_threads")[1]

    @staticmethod
    def static_assert(cond: Union[bool, Expr], msg: str = "static_assert failed") -> None:
        """Checks ``cond`` while the kernel is traced: a Python bool (or a constant kernel
        expression); False raises ``AssertionError(msg)``, reported as a CompileError at the line.
        A condition only known when the kernel runs is a CompileError."""
        if isinstance(cond, Expr):
            if not cond.is_const():
                _fail(f"static_assert: the condition must be known while tracing (a Python bool or a constant), "
                      f"got {_describe(cond)}")
            cond = repr(cond) == "true" if cond.dtype.is_bool() else cond.int_value() != 0
        elif isinstance(cond, (TensorBase, Unusable)) or not isinstance(cond, (bool, int)) and \
                type(cond).__name__ != "bool_":
            _fail(f"static_assert: the condition must be a Python bool, got {_describe(cond)}")
        if not cond:
            raise AssertionError(msg)

    def fast_divmod(self, a: _Int, b: _Int) -> Any:
        """``(a // b, a % b)`` of integer scalars with ``a >= 0`` and ``b > 0`` (NVIDIA Tilus's name):
        Python ints for two Python ints, else kernel expressions (the remainder is ``a - q * b``)."""
        loc = _here()
        for v in (a, b):
            _scalar(v, "fast_divmod: operands", loc)
            if isinstance(v, float) or isinstance(v, Expr) and not v.dtype.is_integer():
                raise CompileError(f"{_where(loc)}fast_divmod: expects integers, got {_describe(a)} and "
                                   f"{_describe(b)}")
        q = a // b
        return q, a - q * b

    # --- memory ----------------------------------------------------------------------------------
    def load_global(self, src: GlobalTensor, *, offsets: Sequence[_Int], shape: Optional[Sequence[int]] = None,
                    dims: _Dims = None, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """A tile of a global tensor loaded into a new register tensor.

        Args:
            src: the global tensor (``global_view``).
            offsets: where the tile starts, one per dim of ``src``.
            shape: the tile's static shape (required).
            dims: which dims of ``src`` the tile's dims map to (default: the trailing dims;
                negative dims count from the end).
            out: write the tile into this register tensor instead, and return it.

        Elements outside the global tensor read as zero.
        """
        loc = _here()
        g = _tensor(src, "load_global", loc, GlobalTensor)
        if shape is None:
            raise CompileError(f"{_where(loc)}load_global: shape= is required")
        t = RegisterTensor(_builder().load_global(g, _exprs(offsets, "load_global: offsets", loc),
                                                  _ints(shape, "load_global: shape", loc),
                                                  _ints(dims, "load_global: dims", loc), loc))
        return self._into(out, t, loc, "load_global")

    def store_global(self, dst: GlobalTensor, src: RegisterTensor, *, offsets: Sequence[_Int],
                     dims: _Dims = None) -> None:
        """Stores the register tensor ``src`` into the global tensor ``dst`` at ``offsets``.

        ``offsets`` has one entry per dim of ``dst``; ``dims`` maps the tile's dims to the dims
        of ``dst`` as in ``load_global``. Elements outside the global tensor are not written.
        """
        loc = _here()
        _builder().store_global(_tensor(dst, "store_global", loc, GlobalTensor), _tensor(src, "store_global", loc),
                                _exprs(offsets, "store_global: offsets", loc), _ints(dims, "store_global: dims", loc),
                                loc)

    def store_global_scatter(self, dst: GlobalTensor, *, dim: int, indices: RegisterTensor,
                             values: RegisterTensor) -> None:
        """``dst[..., indices[k], ...] = values[k]`` for each element ``k`` of the tile (NVIDIA
        Tilus's): the element keeps its own coordinates in the other dims, and ``indices`` (integers,
        ``values``' shape) picks the one along ``dim``. Not atomic: under duplicate indices one of
        the values lands. Elements whose coordinates fall outside ``dst`` are not written."""
        _scatter("global", None, dst, dim, indices, values, "relaxed", "gpu", None, _here())

    def store_shared_scatter(self, dst: SharedTensor, *, dim: int, indices: RegisterTensor,
                             values: RegisterTensor) -> None:
        """``store_global_scatter`` into a shared tensor (its other dims equal ``values``')."""
        _scatter("shared", None, dst, dim, indices, values, "relaxed", "cta", None, _here())

    def load_shared(self, src: SharedTensor, *, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The whole shared tensor ``src`` loaded into a new register tensor (or into ``out``, returned)."""
        loc = _here()
        t = RegisterTensor(_builder().load_shared(_tensor(src, "load_shared", loc, SharedTensor), loc))
        return self._into(out, t, loc, "load_shared")

    def store_shared(self, dst: SharedTensor, src: RegisterTensor) -> None:
        """Stores the register tensor ``src`` into the shared tensor ``dst`` (same shape and dtype)."""
        loc = _here()
        _builder().store_shared(_tensor(dst, "store_shared", loc, SharedTensor), _tensor(src, "store_shared", loc), loc)

    def copy_async(self, src: GlobalTensor, dst: SharedTensor, *, offsets: Sequence[_Int], dims: _Dims = None,
                   evict: Optional[str] = None, check_bounds: bool = True) -> None:
        """Copies a tile of the global tensor ``src`` into the shared tensor ``dst`` with cp.async.

        Args:
            offsets: where the tile starts, one per dim of ``src``.
            dims: the dim of ``src`` of each dim of ``dst``, in any order (default: the
                trailing dims in order).
            evict: the L2 eviction hint, "evict_normal" (the default), "evict_first" or
                "evict_last".
            check_bounds: True (default): elements outside ``src`` are zero-filled; False
                removes the bounds predicate.

        Asynchronous: pair it with ``copy_async_commit_group`` / ``copy_async_wait_group`` /
        ``copy_async_wait_all``, or let the async-wait pass add the commits and waits before the
        shared tensor is read (docs/passes.md).
        """
        loc = _here()
        _builder().copy_async(_tensor(src, "copy_async", loc, GlobalTensor),
                              _tensor(dst, "copy_async", loc, SharedTensor),
                              _exprs(offsets, "copy_async: offsets", loc), _ints(dims, "copy_async: dims", loc),
                              _optional(evict, str, "copy_async: evict", loc),
                              _bool(check_bounds, "copy_async: check_bounds", loc), loc)

    def copy_async_commit_group(self) -> None:
        """Closes the group of ``copy_async`` copies issued since the last commit."""
        _builder().copy_async_commit_group(_here())

    def copy_async_wait_group(self, n: int) -> None:
        """Waits until at most ``n`` (a Python int >= 0) committed copy groups are still pending."""
        loc = _here()
        _builder().copy_async_wait_group(_int(n, "copy_async_wait_group: n", loc), loc)

    def copy_async_wait_all(self) -> None:
        """Waits for every pending ``copy_async`` copy."""
        _builder().copy_async_wait_all(_here())

    @staticmethod
    def _region(x, loc):
        if isinstance(x, Region):
            return x.tensor.t, x.offsets, x.extents
        if isinstance(x, TensorBase):
            return x.t, [], []
        raise CompileError(f"{_where(loc)}copy: expects a tensor or a tensor region, got {type(x).__name__}")

    def _copy(self, src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, api, loc,
              barrier=None):
        s, so, se = self._region(src, loc)
        d, do, de = self._region(dst, loc)
        annotations = {str(k): str(v) for k, v in (annotations or {}).items()}
        _builder().copy(s, so, se, d, do, de, coalesced_width, bool(disable_tma), eviction_policy, annotations,
                        loop_layout, api, barrier, loc)

    @staticmethod
    def _copy_options(what, loc, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None,
                      loop_layout=None):
        if coalesced_width is not None:
            _int(coalesced_width, f"{what}: coalesced_width", loc)
        _bool(disable_tma, f"{what}: disable_tma", loc)
        _optional(eviction_policy, str, f"{what}: eviction_policy", loc)
        _optional(annotations, dict, f"{what}: annotations", loc)
        _layout(loop_layout, f"{what}: loop_layout", loc)

    def copy(self, src: _Src, dst: _Src, *, coalesced_width: Optional[int] = None, disable_tma: bool = False,
             eviction_policy: Optional[str] = None, annotations: Optional[Dict[str, Any]] = None,
             loop_layout: Optional[_C.RegisterLayout] = None) -> None:
        """Copies between any two of global, shared and register regions.

        A region is a whole tensor or a slice of a global or shared tensor (``g[a:b, c:d]``;
        an integer index fixes a dim with extent 1); register regions are whole tensors, and
        register to register is an assignment. The extents of the two sides are matched
        right-aligned into a tile of constant extents: equal extents stay, a memory side's 1
        takes the other side's extent, leading dims of ``dst`` that ``src`` lacks broadcast
        ``src``. A dynamic extent is taken only where its region is global and reaches its
        tensor's end (``g[i0:]``); anything else that does not match is a CompileError naming
        both regions. Out-of-bounds global elements read as zero and are not written.

        Args:
            coalesced_width: elements per access, forcing a narrower vector (clamped, with a
                warning, when not legal).
            disable_tma: skip the TMA path.
            eviction_policy: the L2 hint of the global accesses, "evict_normal",
                "evict_first" or "evict_last".
            annotations: ``coalesced_width``, ``disable_tma``, ``eviction_policy`` (winning
                over the arguments), ``use_tma`` (TMA or an error), ``use_cp_async`` (cp.async,
                global to shared, committing its own group); any other key is an error.
            loop_layout: pins the thread mapping of a memory-to-memory copy.

        Synchronous: the passes add the waits and barriers around it. The instruction
        (cp.async, ldmatrix, stmatrix or vectorized SIMT) is chosen by the
        ``select_instructions`` pass (docs/instructions.md, docs/passes.md).
        """
        loc = _here()
        self._copy_options("copy", loc, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout)
        self._copy(src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, "copy", loc)

    def async_copy(self, src: Union[GlobalTensor, Region], dst: Union[SharedTensor, Region], *,
                   coalesced_width: Optional[int] = None, annotations: Optional[Dict[str, Any]] = None,
                   loop_layout: Optional[_C.RegisterLayout] = None) -> None:
        """cp.async from a global region to a shared region, followed by a commit; no wait is added.

        The kernel waits itself (``copy_async_wait_group`` / ``copy_async_wait_all``); reading
        the shared data without a wait is a CompileError. Regions and options as in ``copy``.
        """
        loc = _here()
        self._copy_options("async_copy", loc, coalesced_width, annotations=annotations, loop_layout=loop_layout)
        self._copy(src, dst, coalesced_width, False, None, annotations, loop_layout, "async_copy", loc)

    def tma_copy(self, src: _Src, dst: _Src, *, barrier: SharedTensor, eviction_policy: Optional[str] = None,
                 annotations: Optional[Dict[str, Any]] = None) -> None:
        """Split-phase TMA copy (seed 000): arrive-and-expect-tx on ``barrier`` plus a TMA load; no wait.

        ``src`` and ``dst`` are regions as in ``copy``: a global region into a shared one (a
        load, completing on ``barrier``, an mbarrier from ``self.mbarrier.alloc``), or a shared
        region into a global one (a TMA store; ``barrier`` is then None and the kernel waits
        with ``tma_store_arrive`` / ``tma_store_wait``). Issued once by the current thread
        group; the kernel waits on the barrier itself (``mbarrier_wait_parity``). Needs sm_90:
        when the box cannot be a TMA box the error says why.
        """
        loc = _here()
        self._copy_options("tma_copy", loc, eviction_policy=eviction_policy, annotations=annotations)
        b = None if barrier is None else _barrier(barrier, "tma_copy: barrier", loc)
        self._copy(src, dst, None, False, eviction_policy, annotations, None, "tma_copy", loc, b)

    def c2d_im2col(self, img: GlobalTensor, col: SharedTensor, nhw_step: _Int, c_step: _Int, kernel: int, stride: int,
                   dilation: int, pad: int, eviction_policy: Optional[str] = None,
                   barrier: Optional[SharedTensor] = None) -> None:
        """im2col for a 2-D convolution (seed 000): the tile (``nhw_step``, ``c_step``) of the im2col
        matrix of the NHWC image ``img`` [N, H, W, C] into the shared tensor ``col`` [bm, bk].

        ``col[i, j] = img[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c]``
        for the output pixel ``nhw_step * bm + i = (n, oh, ow)`` (row-major over [N, OH, OW]) and
        ``c_step * bk + j = (kh, kw, c)`` (row-major over [kernel, kernel, C]); zero outside the
        image and past the matrix. Synchronous; vectorized along the channels where C allows (on
        sm_90 a TMA im2col load where C is a known multiple of bk).

        ``barrier`` (an mbarrier, ``bars[i]``): split-phase, as ``tma_copy``: the group's first thread
        arrives once on it with the tile's bytes and issues the TMA im2col load; the kernel waits on
        the barrier before reading ``col`` (the passes report a missing wait). Needs TMA im2col on
        the GPU (a CompileError says why not); on the CPU backend the gathers, then the arrival.
        """
        loc = _here()
        _builder().c2d_im2col(_tensor(img, "c2d_im2col: img", loc, GlobalTensor),
                              _tensor(col, "c2d_im2col: col", loc, SharedTensor),
                              _scalar(nhw_step, "c2d_im2col: nhw_step", loc), _scalar(c_step, "c2d_im2col: c_step", loc),
                              _int(kernel, "c2d_im2col: kernel", loc), _int(stride, "c2d_im2col: stride", loc),
                              _int(dilation, "c2d_im2col: dilation", loc), _int(pad, "c2d_im2col: pad", loc),
                              _optional(eviction_policy, str, "c2d_im2col: eviction_policy", loc), loc,
                              None if barrier is None else _barrier(barrier, "c2d_im2col: barrier", loc))

    def mbarrier_wait_parity(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """Waits until the phase of parity ``parity`` (0 or 1) of ``mbarrier`` has completed (seed 004)."""
        self.mbarrier.wait(mbarrier, parity)

    def mbarrier_arrive(self, mbarrier: SharedTensor, cta_id: Optional[_Scalar] = None, scope: str = "cta") -> None:
        """Every thread of the group arrives once at ``mbarrier`` (seed 004); with ``cta_id``, at the
        barrier at the same offset in block ``cta_id`` of the cluster. ``scope="cluster"`` makes the
        arrival a release at cluster scope (the thread's earlier writes to the peer's memory become
        visible to its waiters); the default, as the seed's, releases at block scope only, which is
        enough to hand back a buffer the peer overwrites."""
        loc = _here()
        scope = _choice(scope, ("cta", "cluster"), "mbarrier_arrive: scope", loc)
        cta = None if cta_id is None else _scalar(cta_id, "mbarrier_arrive: cta_id", loc)
        b, cta = _peer(mbarrier, cta, "mbarrier_arrive", loc)
        _builder().mbarrier("arrive", b, 1, "release", scope, cta, loc)

    def mbarrier_expect_tx(self, mbarrier: SharedTensor, tx: _Scalar) -> None:
        """Adds ``tx`` bytes to the transaction count of ``mbarrier``'s current phase, without arriving (seed 004)."""
        loc = _here()
        _builder().mbarrier("expect_tx", _barrier(mbarrier, "mbarrier_expect_tx: mbarrier", loc),
                            _scalar(tx, "mbarrier_expect_tx: tx", loc), "relaxed", "cta", None, loc)

    def cp_async_barrier_noinc(self, barrier: SharedTensor) -> None:
        """Every thread of the group arrives once at ``barrier`` when all the cp.async copies it issued
        before (``copy_async``, ``async_copy``) have landed (seed 004; PTX
        ``cp.async.mbarrier.arrive.noinc``): the arrival counts toward the barrier's expected count,
        so allocate it with one count per arriving thread. A wait on the barrier then covers those
        copies: the passes add no ``copy_async_wait_group`` for the waiting threads. sm_80."""
        loc = _here()
        _builder().mbarrier("cp_async_arrive", _barrier(barrier, "cp_async_barrier_noinc: barrier", loc), 1,
                            "release", "cta", None, loc)

    def barrier_wait(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """``mbarrier_wait_parity`` under its other seed name."""
        self.mbarrier.wait(mbarrier, parity)

    def barrier_arrive(self, mbarrier: SharedTensor) -> None:
        """``mbarrier_arrive`` under its other seed name."""
        self.mbarrier.arrive(mbarrier)

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta`` (seed 004): orders this thread's generic shared-memory
        accesses with TMA's (``self.fence.proxy_async()``)."""
        self.fence.proxy_async()

    def tma_store_arrive(self) -> None:
        """Commits the TMA stores issued since the last commit (seed 004; ``self.tma.commit_group()``)."""
        self.tma.commit_group()

    def tma_store_wait(self) -> None:
        """Waits until every committed TMA store has read its shared source (seed 004;
        ``self.tma.wait_group(0, read=True)``)."""
        self.tma.wait_group(0, read=True)

    @property
    def mbarrier(self) -> "MbarrierGroup":
        """mbarrier instructions (NVIDIA Tilus's ``self.mbarrier``): alloc, arrive, arrive_and_expect_tx, wait."""
        return _MBARRIER

    @property
    def tma(self) -> "TmaGroup":
        """TMA instructions (NVIDIA Tilus's ``self.tma``): global_to_shared, shared_to_global, commit_group, wait_group."""
        return _TMA

    @property
    def fence(self) -> "FenceGroup":
        """Proxy fences (NVIDIA Tilus's ``self.fence``): proxy_async."""
        return _FENCE

    @property
    def cuda(self) -> "CudaHelpers":
        """Layout helpers (NVIDIA Tilus's ``self.cuda``): resolve_dot_config, default_register_layout."""
        return _CUDA

    @property
    def atomic(self) -> "AtomicGroup":
        """Element-wise atomics on shared and global tiles (NVIDIA Tilus's ``self.atomic``):
        global_/shared_ add, sub, min, max, exch, cas."""
        return _ATOMIC

    @property
    def wgmma(self) -> "WgmmaGroup":
        """Warp-group MMA (NVIDIA Tilus's ``self.wgmma``, sm_90a): fence, mma, commit_group, wait_group."""
        return _WGMMA

    @property
    def tcgen05(self) -> "_tcgen05.Tcgen05Group":
        """Tensor memory and Blackwell's tensor cores (NVIDIA Tilus's ``self.tcgen05``, sm_100a): alloc,
        dealloc, relinquish_alloc_permit, slice, view, load, store, wait_load, wait_store, copy, commit,
        mma."""
        return _tcgen05._TCGEN05

    @property
    def clc(self) -> "_clc.ClcGroup":
        """Cluster launch control (NVIDIA Tilus's ``self.clc``, sm_100): try_cancel, query_response."""
        return _clc._CLC

    def warpgroup_arrive(self) -> None:
        """``wgmma.fence`` (seed 004; ``self.wgmma.fence()``)."""
        self.wgmma.fence()

    def warpgroup_commit_batch(self) -> None:
        """``wgmma.commit_group`` (seed 004; ``self.wgmma.commit_group()``)."""
        self.wgmma.commit_group()

    def warpgroup_wait(self, num_mma: int) -> None:
        """``wgmma.wait_group(num_mma)`` (seed 004; ``self.wgmma.wait_group(num_mma)``)."""
        self.wgmma.wait_group(num_mma)

    def wait_wgmma(self, id: int) -> None:  # noqa: A002 (the seed's parameter name)
        """``wgmma.wait_group(id)`` (seed 004)."""
        self.wgmma.wait_group(id)

    def warpgroup_fence_operand(self, buffer_or_ptr: Any, offset: Any = 0, num_regs: Any = None,
                                dtype: Any = None) -> None:
        """Seed 004's accumulator fence. tilus ties every wgmma accumulator to each ``wgmma.wait_group``
        itself, so there is nothing to record: accepted for TileLang-style kernels, a no-op."""
        loc = _here()
        _tensor(buffer_or_ptr, "warpgroup_fence_operand: buffer_or_ptr", loc, RegisterTensor)

    # --- compute ---------------------------------------------------------------------------------
    def _into(self, out, t, loc, what):
        """`t` written into `out=` (when given)."""
        if out is None:
            return t
        try:
            _builder().assign_tensor(_tensor(out, f"{what}: out=", loc), t.t, loc)
        except CompileError as e:
            raise CompileError(f"{_where(loc)}{what}: out= {_describe(out)} cannot hold the result {_describe(t)} "
                               f"({str(e).rsplit(': ', 1)[-1]})") from None
        return out

    def dot(self, a: RegisterTensor, b: RegisterTensor, c: Optional[RegisterTensor] = None, *,
            out: Optional[RegisterTensor] = None, acc_dtype: Optional[DataType] = None) -> RegisterTensor:
        """The matrix product ``a [m, k] @ b [k, n] + c [m, n]`` as a new register tensor.

        ``a`` and ``b`` have one dtype; the result has ``c``'s dtype. Without ``c`` the
        accumulator is zeros of ``acc_dtype`` (default: float32 for float inputs, int32 for
        integers). ``c`` is not updated: write ``acc = self.dot(a, b, acc)``, or pass ``out=``
        to write the result into a register tensor (returned). float16 / bfloat16 use tensor
        cores; other dtypes a SIMT product.
        """
        loc = _here()
        ta, tb = _tensor(a, "dot", loc), _tensor(b, "dot", loc)
        tc = None if c is None else _tensor(c, "dot", loc)
        acc_dtype = None if acc_dtype is None else _dtype(acc_dtype, "dot: acc_dtype", loc)
        return self._into(out, RegisterTensor(_builder().dot(ta, tb, tc, acc_dtype, loc)), loc, "dot")

    def cast(self, x: RegisterTensor, dtype: DataType) -> RegisterTensor:
        """The register tensor ``x`` converted elementwise to ``dtype`` (the same as ``x.to(dtype)``)."""
        loc = _here()
        return RegisterTensor(_builder().cast(_tensor(x, "cast", loc), _dtype(dtype, "cast: dtype", loc), loc))

    def view(self, x: RegisterTensor, *, dtype: Optional[DataType] = None,
             layout: Optional[_C.RegisterLayout] = None) -> RegisterTensor:
        """The registers of ``x`` reinterpreted, bit for bit, as ``dtype`` and/or ``layout``.

        A dtype of another width scales the last dim by the bit-width ratio; with ``layout``
        the result has that layout and its shape. The total bits must match.
        """
        loc = _here()
        dtype = None if dtype is None else _dtype(dtype, "view: dtype", loc)
        layout = _layout(layout, "view: layout", loc)
        return RegisterTensor(_builder().view(_tensor(x, "view", loc), dtype, layout, loc))

    def slice_shared(self, tensor: SharedTensor, offsets: Sequence[_Int], slice_dims: Sequence[int],
                     slice_shape: Sequence[int]) -> SharedTensor:
        """The view of the sub-tensor of ``tensor`` of shape ``slice_shape`` at ``offsets`` (one per dim
        of ``tensor``; kernel scalars allowed): view dim k is dim ``slice_dims[k]``, the other dims are
        fixed at their offset. E.g. the half of a [256, 64] tile a block of a cluster loads:
        ``self.slice_shared(s, [rank * 128, 0], [0, 1], [128, 64])``."""
        loc = _here()
        return SharedTensor(_builder().slice_shared(_tensor(tensor, "slice_shared: tensor", loc, SharedTensor),
                                                    _exprs(offsets, "slice_shared: offsets", loc),
                                                    _ints(slice_dims, "slice_shared: slice_dims", loc),
                                                    _ints(slice_shape, "slice_shared: slice_shape", loc), loc))

    def reshape_shared(self, tensor: SharedTensor, shape: Sequence[int]) -> SharedTensor:
        """The bytes of ``tensor``, a ``shared_tensor`` allocation (or a reshape of one), under
        ``shape`` with as many elements, both read row-major (NVIDIA Tilus's ``reshape_shared``): a
        view that shares its memory and swizzle. A slice (``s[i]``) or a tensor annotated with a
        non-row-major layout cannot be reshaped."""
        loc = _here()
        return SharedTensor(_builder().reshape_shared(_tensor(tensor, "reshape_shared: tensor", loc, SharedTensor),
                                                      _ints(shape, "reshape_shared: shape", loc), loc))

    def reshape(self, x: RegisterTensor, shape: Sequence[int]) -> RegisterTensor:
        """``x`` with a new static shape of the same element count (one -1 is inferred)."""
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "reshape", loc), _ints(shape, "reshape: shape", loc), loc))

    def squeeze(self, x: RegisterTensor, dim: Union[int, Sequence[int], None] = None, *,
                out: Optional[RegisterTensor] = None, dims: Union[int, Sequence[int], None] = None) -> RegisterTensor:
        """``x`` without its dims ``dim`` (each of extent 1; negative dims count from the end); NVIDIA
        Tilus's ``dim=`` keyword, or positional; ``dims=`` is the same."""
        loc = _here()
        d = _one_of(dim, dims, "squeeze", loc)
        t = RegisterTensor(_builder().squeeze(_tensor(x, "squeeze", loc), _ints(d, "squeeze: dim", loc), loc))
        return self._into(out, t, loc, "squeeze")

    def unsqueeze(self, x: RegisterTensor, dim: Union[int, Sequence[int], None] = None, *,
                  out: Optional[RegisterTensor] = None, dims: Union[int, Sequence[int], None] = None) -> RegisterTensor:
        """``x`` with dims of extent 1 inserted at ``dim`` (dims of the result; negative count from the
        end); NVIDIA Tilus's ``dim=`` keyword, or positional; ``dims=`` is the same."""
        loc = _here()
        d = _one_of(dim, dims, "unsqueeze", loc)
        t = RegisterTensor(_builder().unsqueeze(_tensor(x, "unsqueeze", loc), _ints(d, "unsqueeze: dim", loc), loc))
        return self._into(out, t, loc, "unsqueeze")

    def transpose(self, x: RegisterTensor) -> RegisterTensor:
        """The transpose of the rank-2 register tensor ``x`` (the same as ``x.T``)."""
        loc = _here()
        return RegisterTensor(_builder().transpose(_tensor(x, "transpose", loc), loc))

    def repeat(self, x: RegisterTensor, repeats: Sequence[int]) -> RegisterTensor:
        """``x`` tiled ``repeats`` times along each dim (right-aligned, like ``numpy.tile``)."""
        loc = _here()
        return RegisterTensor(_builder().repeat(_tensor(x, "repeat", loc), _ints(repeats, "repeat: repeats", loc), loc))

    # --- counter-based random numbers (Philox-4x32, NVIDIA Tilus's and Triton's) ----------------
    def randint4x(self, seed: _Int, offset: RegisterTensor, n_rounds: int = 10):
        """Four uint32 register tensors of random bits for the counters ``offset`` (a register
        tensor, taken as uint32) under the key ``seed`` (a uint64 scalar): Philox-4x32 with
        ``n_rounds`` rounds, counter (offset, 0, 0, 0) and key (low, high 32 bits of seed), the
        same numbers NVIDIA Tilus and Triton give. A composition of elementwise integer operations,
        so both backends give the same bits."""
        loc = _here()
        u32, u64 = DataType.from_name("uint32"), DataType.from_name("uint64")
        if not isinstance(n_rounds, int) or isinstance(n_rounds, bool) or n_rounds < 1:
            raise CompileError(f"{_where(loc)}randint4x: n_rounds must be a positive Python int, got "
                               f"{_describe(n_rounds)}")
        c0 = RegisterTensor(_builder().cast(_tensor(offset, "randint4x: offset", loc), u32, loc))
        if isinstance(seed, int) and not isinstance(seed, bool):
            seed &= (1 << 64) - 1
            k0, k1 = seed & 0xFFFFFFFF, seed >> 32
        else:
            s = _C.cast(_scalar(seed, "randint4x: seed", loc), u64)
            k0, k1 = _C.cast(s & 0xFFFFFFFF, u32), _C.cast(s >> 32, u32)
        zero = RegisterTensor(_builder().register_tensor(u32, list(c0.shape), 0, loc))
        c1 = c2 = c3 = zero

        def mulhi(a, x):  # the high 32 bits of the 64-bit product a * x
            return ((x.to(u64) * a) >> 32).to(u32)

        for _ in range(n_rounds):
            p0, p2 = c0, c2
            c0 = mulhi(0xCD9E8D57, p2) ^ c1 ^ k0
            c2 = mulhi(0xD2511F53, p0) ^ c3 ^ k1
            c1 = p2 * 0xCD9E8D57
            c3 = p0 * 0xD2511F53
            if isinstance(k0, int):
                k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
            else:
                k0, k1 = k0 + 0x9E3779B9, k1 + 0xBB67AE85
        return c0, c1, c2, c3

    def randint(self, seed: _Int, offset: RegisterTensor, n_rounds: int = 10) -> RegisterTensor:
        """The first of ``randint4x``'s four results: random uint32 bits for each offset."""
        return self.randint4x(seed, offset, n_rounds)[0]

    def _uniform(self, bits):
        """uint32 random bits as float32 in [0, 1): the bits as int32, folded to non-negative,
        times 2**-31 (Triton's and Tilus's mapping)."""
        i32 = DataType.from_name("int32")
        x = bits.to(i32)  # the same bits: a cast between 32-bit integers keeps them
        x = self.where(x < 0, -x - 1, x)
        return x.to(DataType.from_name("float32")) * 4.6566127342e-10

    def rand(self, seed: _Int, offset: RegisterTensor, n_rounds: int = 10) -> RegisterTensor:
        """Random float32 in [0, 1) for each offset (Philox-4x32; NVIDIA Tilus's and Triton's)."""
        return self._uniform(self.randint4x(seed, offset, n_rounds)[0])

    def randn(self, seed: _Int, offset: RegisterTensor, n_rounds: int = 10) -> RegisterTensor:
        """Standard normal float32 for each offset: Box-Muller over the first two of
        ``randint4x``'s results (NVIDIA Tilus's and Triton's)."""
        i0, i1, _, _ = self.randint4x(seed, offset, n_rounds)
        u1 = self.maximum(self._uniform(i0), 1.0e-7)
        u2 = self._uniform(i1)
        return self.sqrt(self.log(u1) * -2.0) * self.cos(u2 * 6.283185307179586)

    def repeat_interleave(self, x: RegisterTensor, repeats: Sequence[int], *,
                          out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Each element of ``x`` repeated ``repeats[d]`` times along each dim d, in place (like
        ``torch.repeat_interleave``; ``[1, 2]`` by ``[2]`` is ``[1, 1, 2, 2]``). ``repeats`` is
        right-aligned with the dims (missing leading ones are 1; extra ones add leading dims).
        With ``out``, the result is written into it (returned)."""
        loc = _here()
        t = _tensor(x, "repeat_interleave", loc)
        repeats = _ints(repeats, "repeat_interleave: repeats", loc)
        if any(r < 1 for r in repeats):
            raise CompileError(f"{_where(loc)}repeat_interleave: repeats must be >= 1, got {repeats}")
        shape = list(t.shape)
        if len(repeats) > len(shape):
            shape = [1] * (len(repeats) - len(shape)) + shape
            t = _builder().reshape(t, shape, loc)
        repeats = [1] * (len(shape) - len(repeats)) + repeats
        if all(r == 1 for r in repeats):
            return self._into(out, RegisterTensor(t), loc, "repeat_interleave")
        b = _builder()
        t = b.unsqueeze(t, [2 * d + 1 for d in range(len(shape))], loc)          # [d0, 1, d1, 1, ...]
        t = b.repeat(t, [v for r in repeats for v in (1, r)], loc)              # [d0, r0, d1, r1, ...]
        t = b.reshape(t, [d * r for d, r in zip(shape, repeats)], loc)          # [d0 * r0, d1 * r1, ...]
        return self._into(out, RegisterTensor(t), loc, "repeat_interleave")

    def flatten(self, x: RegisterTensor) -> RegisterTensor:
        """``x`` as a rank-1 tensor of all its elements, row-major (``reshape(x, [-1])``)."""
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "flatten", loc), [-1], loc))

    def add(self, lhs: _Operand, rhs: _Operand, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """``lhs + rhs`` elementwise (register tensors or scalars; numpy broadcasting); with ``out``
        the result is written into it (returned)."""
        loc = _here()
        return self._into(out, _binary("+", lhs, rhs, loc), loc, "add")

    def assign(self, dst: RegisterTensor, src: RegisterTensor) -> None:
        """Writes the register tensor ``src`` into the register tensor ``dst`` (same dtype and shape)."""
        loc = _here()
        d, t = _tensor(dst, "assign: dst", loc), _tensor(src, "assign: src", loc)
        if d.dtype != t.dtype:
            raise CompileError(f"{_where(loc)}assign: dst and src must have one dtype, got {_describe(dst)} and "
                               f"{_describe(src)}")
        _builder().assign_tensor(d, t, loc)

    def where(self, cond: RegisterTensor, x: _Operand, y: _Operand) -> RegisterTensor:
        """Elementwise ``x`` where the bool register tensor ``cond`` holds, else ``y``.

        ``x`` and ``y`` are register tensors or scalars; the shapes broadcast as in numpy.
        """
        loc = _here()
        return RegisterTensor(_builder().where(_tensor(cond, "where", loc), _operand(x, "where: x", loc),
                                               _operand(y, "where: y", loc), loc))

    def clip(self, x: RegisterTensor, lo: _Scalar, hi: _Scalar) -> RegisterTensor:
        """``min(max(x, lo), hi)`` elementwise, for a register tensor ``x`` and scalars ``lo``, ``hi``."""
        loc = _here()
        return RegisterTensor(_builder().clip(_tensor(x, "clip", loc), _scalar(lo, "clip: lo", loc),
                                              _scalar(hi, "clip: hi", loc), loc))

    def maximum(self, a: _Operand, b: _Operand) -> RegisterTensor:
        """The elementwise maximum of ``a`` and ``b`` (register tensors or scalars; numpy broadcasting)."""
        return _binary("max", a, b, _here())

    def minimum(self, a: _Operand, b: _Operand) -> RegisterTensor:
        """The elementwise minimum of ``a`` and ``b`` (register tensors or scalars; numpy broadcasting)."""
        return _binary("min", a, b, _here())

    def _reduce(self, op, x, dims, dim, keepdim, loc):
        if dim is not None:
            if dims is not None:
                raise CompileError(f"{_where(loc)}{op}: give dim= or dims=, not both")
            dims = dim
        dims = None if dims is None else _ints(dims, f"{op}: dims", loc)
        keepdim = _bool(keepdim, f"{op}: keepdim", loc)
        return RegisterTensor(_builder().reduce(op, _tensor(x, op, loc), dims, keepdim, loc))

    def _scan(self, what, op, x, dim, exclusive, out, loc):
        t = _builder().scan(op, _tensor(x, what, loc), _int(dim, f"{what}: dim", loc),
                            _bool(exclusive, f"{what}: exclusive", loc), loc)
        return self._into(out, RegisterTensor(t), loc, what)

    def scan(self, x: RegisterTensor, *, dim: int, op: str, exclusive: bool = False,
             out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The prefix scan of ``x`` along ``dim`` (NVIDIA Tilus's): element ``i`` combines elements
        ``0..i`` (inclusive) or ``0..i-1`` with the identity first (``exclusive=True``) under ``op``:
        ``"add"``, ``"mul"``, ``"max"``, ``"min"``, or for integers and bool ``"and"``, ``"or"``,
        ``"xor"``. Each slice along the other dims is scanned independently. Into ``out`` when
        given. Composed of log2(n) steps through a shared buffer (docs/instructions.md)."""
        loc = _here()
        if not isinstance(op, str):
            raise CompileError(f"{_where(loc)}scan: op must be a str such as 'add', got {_describe(op)}")
        return self._scan("scan", op, x, dim, exclusive, out, loc)

    def cumsum(self, x: RegisterTensor, *, dim: int, exclusive: bool = False,
               out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The cumulative sum of ``x`` along ``dim``: ``scan`` with ``op="add"``."""
        return self._scan("cumsum", "add", x, dim, exclusive, out, _here())

    def cumprod(self, x: RegisterTensor, *, dim: int, exclusive: bool = False,
                out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """The cumulative product of ``x`` along ``dim``: ``scan`` with ``op="mul"``."""
        return self._scan("cumprod", "mul", x, dim, exclusive, out, _here())

    def sum(self, x: RegisterTensor, *, dims: _Dims = None, dim: _Dims = None, keepdim: bool = False) -> RegisterTensor:
        """The sum of ``x`` over ``dims`` (or ``dim``; default: every dim).

        Negative dims count from the end; ``keepdim=True`` keeps the reduced dims with extent 1.
        """
        return self._reduce("sum", x, dims, dim, keepdim, _here())

    def max(self, x: RegisterTensor, *, dims: _Dims = None, dim: _Dims = None, keepdim: bool = False) -> RegisterTensor:
        """The maximum of ``x`` over ``dims`` (or ``dim``; default: every dim), as in ``sum``."""
        return self._reduce("max", x, dims, dim, keepdim, _here())

    def min(self, x: RegisterTensor, *, dims: _Dims = None, dim: _Dims = None, keepdim: bool = False) -> RegisterTensor:
        """The minimum of ``x`` over ``dims`` (or ``dim``; default: every dim), as in ``sum``."""
        return self._reduce("min", x, dims, dim, keepdim, _here())

    def any(self, x: RegisterTensor, *, dims: _Dims = None, dim: _Dims = None, keepdim: bool = False) -> RegisterTensor:
        """Whether any element of the bool tensor ``x`` holds, over ``dims`` (or ``dim``; default: every dim)."""
        return self._reduce("any", x, dims, dim, keepdim, _here())

    def all(self, x: RegisterTensor, *, dims: _Dims = None, dim: _Dims = None, keepdim: bool = False) -> RegisterTensor:
        """Whether every element of the bool tensor ``x`` holds, over ``dims`` (or ``dim``; default: every dim)."""
        return self._reduce("all", x, dims, dim, keepdim, _here())

    # --- synchronization, debugging, hints -----------------------------------------------------
    def sync(self) -> None:
        """A barrier of the current thread group (the whole block outside any thread group)."""
        _builder().sync(_here())

    def lock_semaphore(self, semaphore: Expr, value: _Int) -> None:
        """Waits until the int32 at ``semaphore`` holds ``value`` (NVIDIA Tilus's name).

        ``semaphore`` is an address (``~int32``), such as ``semaphores[i, j].item_ptr()`` of an
        int32 ``global_tensor``. The group's first thread spins on acquire loads at GPU scope; then
        the group meets at a barrier, so every thread sees what was written before the release that
        set the value. On the CPU backend a lock that no running block can release is an error,
        not a hang.
        """
        loc = _here()
        _builder().semaphore(True, semaphore, _scalar(value, "lock_semaphore: value", loc), loc)

    def release_semaphore(self, semaphore: Expr, value: _Int) -> None:
        """Stores ``value`` into the int32 at ``semaphore`` after the group's earlier writes
        (NVIDIA Tilus's name): the group meets at a barrier, then its first thread stores with
        release semantics at GPU scope."""
        loc = _here()
        _builder().semaphore(False, semaphore, _scalar(value, "release_semaphore: value", loc), loc)

    def print_tensor(self, msg: str, tensor: Union[RegisterTensor, SharedTensor], fmt: Optional[str] = None, *,
                     cond: _Scalar = True) -> None:
        """Prints ``msg`` and then the elements of a register or shared tensor, one row per line in
        brackets, with the ``printf`` conversion ``fmt`` (NVIDIA Tilus's name and defaults: ``%5d``
        for integers and bool, ``%5.2f`` for 16-bit floats, ``%6.3f`` for other floats). Every block
        prints where ``cond`` holds (our extra: ``cond=self.blockIdx.x == 0`` for one block).

        A composition: a register tensor is staged in a shared tensor of its shape; after a
        barrier the group's first thread prints element by element in IR loops; a barrier ends it.
        On the CPU backend each block prints once, in order of its instructions."""
        loc = _here()
        if not isinstance(msg, str):
            raise CompileError(f"{_where(loc)}print_tensor: msg must be a str, got {_describe(msg)}")
        if not isinstance(tensor, (RegisterTensor, SharedTensor)):
            raise CompileError(f"{_where(loc)}print_tensor: tensor must be a register or shared tensor, got "
                               f"{_describe(tensor)} (load a global tile first)")
        dt = tensor.dtype
        if fmt is None:
            fmt = "%6.3f" if dt.is_float() and dt.bits > 16 else "%5.2f" if dt.is_float() else "%5d"
        elif not isinstance(fmt, str) or fmt.count("%") != 1:
            raise CompileError(f"{_where(loc)}print_tensor: fmt must be one printf conversion such as '%6.3f', got "
                               f"{_describe(fmt)}")
        b = _builder()
        shape = list(tensor.shape)
        staged = isinstance(tensor, RegisterTensor)
        if staged:
            s = b.shared_tensor(dt, shape, loc)
            b.store_shared(s, tensor.t, loc)
        else:
            s = tensor.t
        b.sync(loc)
        b.begin_if(_scalar(cond, "print_tensor: cond", loc), loc)
        with _ThreadGroup("single_thread", 0, 1, loc):
            b.printf(msg.replace("%", "%%") + "\n", [], loc)
            index = []
            for d, extent in enumerate(shape):
                if d == len(shape) - 1:
                    b.printf("[", [], loc)
                index.append(b.begin_for(f"print_i{d}", 0, extent, 1, 0, loc))
            value = b.item(b.load_shared(b.index_shared(s, index, loc), loc), loc)
            b.printf(fmt + " ", [value], loc)
            for d in reversed(range(len(shape))):
                b.end_for()
                if d == len(shape) - 1:
                    b.printf("]\n", [], loc)
            if not shape:
                value = b.item(b.load_shared(s, loc), loc)
                b.printf(fmt + "\n", [value], loc)
        b.end_if()
        b.sync(loc)
        if staged:
            b.free_shared(s, loc)

    def printf(self, fmt: str, *args: _Scalar) -> None:
        """Device ``printf`` of scalars; the number of ``%`` conversions must match the arguments.

        On the CPU backend it prints once per block.
        """
        loc = _here()
        if not isinstance(fmt, str):
            raise CompileError(f"{_where(loc)}printf: the format must be a str, got {_describe(fmt)}")
        _builder().printf(fmt, [_scalar(a, "printf: arguments", loc) for a in args], loc)

    def assume(self, cond: _Scalar) -> None:
        """States a fact the compiler may use: ``cond``, a bool scalar expression, holds here."""
        loc = _here()
        _builder().assume(_scalar(cond, "assume: the condition", loc), loc)

    def annotate_layout(self, tensor: Union[RegisterTensor, SharedTensor],
                        layout: Union[_C.RegisterLayout, _C.SharedLayout]) -> None:
        """Fixes the layout of ``tensor``: a register layout (``tilus.spatial([8, 4])``, ...) of a
        register tensor, or a shared layout (``tilus.SharedLayout``,
        ``tilus.ir.layout.ops.shared_row_major_swizzle``, ``self.cuda.shared_layout``) of a
        ``shared_tensor`` allocation.

        Layout inference takes it as an anchor (docs/passes.md).
        """
        loc = _here()
        if isinstance(tensor, SharedTensor):
            if not isinstance(layout, _C.SharedLayout):
                _fail(f"annotate_layout: a shared tensor takes a shared layout (tilus.SharedLayout, "
                      f"shared_row_major_swizzle(...), self.cuda.shared_layout(...)), got {_describe(layout)}")
            _builder().annotate_shared_layout(tensor.t, layout, loc)
            return
        _builder().annotate_layout(_tensor(tensor, "annotate_layout", loc),
                                   _layout(layout, "annotate_layout: layout", loc, optional=False), loc)

    # --- thread-level builtins (seed 004, docs/instructions.md) -----------------------------------
    def sync_threads(self, barrier_id: Optional[int] = None, arrive_count: Optional[int] = None) -> None:
        """A barrier. Without ``barrier_id``: ``sync()``, the current thread group's barrier.

        With ``barrier_id`` (1 to 15; 0 is the block's own barrier): the named barrier
        ``bar.sync barrier_id, arrive_count``, which waits until ``arrive_count`` threads of the
        block (a multiple of 32, default: the current thread group's threads, at least those)
        have arrived at it; groups that meet at one barrier (warp specialization) all name it.
        """
        loc = _here()
        _builder().sync_threads(None if barrier_id is None else _int(barrier_id, "sync_threads: barrier_id", loc),
                                None if arrive_count is None else _int(arrive_count, "sync_threads: arrive_count", loc),
                                loc)

    def sync_warp(self, mask: Optional[_Int] = None) -> None:
        """``__syncwarp(mask)``: waits for the lanes of ``mask`` (default: the current group's lanes)."""
        loc = _here()
        _builder().sync_warp(None if mask is None else _exprs(mask, "sync_warp: mask", loc)[0], loc)

    def sync_grid(self) -> None:
        """A barrier of every thread of the grid (as ``cooperative_groups::this_grid().sync()``).

        The kernel is launched cooperatively, and each launch checks that its blocks fit on the GPU
        at once. Not inside a thread group; not on the CPU backend (a CompileError: it runs blocks in
        batches).
        """
        _builder().sync_grid(_here())

    def sync_global(self) -> None:
        """The same as ``sync_grid()`` (the seed's other name)."""
        _builder().sync_grid(_here())

    def set_max_nreg(self, reg_count: int, is_inc: Union[bool, int]) -> None:
        """``setmaxnreg.inc`` (``is_inc`` true / 1) or ``.dec`` (false / 0) of the warp group's register budget.

        ``reg_count``: registers per thread, a multiple of 8 from 24 to 256. Needs an sm_90a target
        and a thread group of whole, aligned warp groups (128 threads); a no-op on the CPU backend.
        """
        loc = _here()
        if not isinstance(is_inc, (bool, int)) or is_inc not in (0, 1, True, False):
            raise CompileError(f"{_where(loc)}set_max_nreg: is_inc must be True / False (or 1 / 0), got "
                               f"{_describe(is_inc)}")
        _builder().set_max_nreg(_int(reg_count, "set_max_nreg: reg_count", loc), bool(is_inc), loc)

    def inc_max_nreg(self, reg_count: int) -> None:
        """``set_max_nreg(reg_count, True)``: raises the warp group's registers per thread to ``reg_count``."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "inc_max_nreg: reg_count", loc), True, loc)

    def dec_max_nreg(self, reg_count: int) -> None:
        """``set_max_nreg(reg_count, False)``: lowers the warp group's registers per thread to ``reg_count``."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "dec_max_nreg: reg_count", loc), False, loc)

    def _thread_index(self, op, loc, warp_size=None, warps_per_group=None, thread_extent=0):
        ws = 32 if warp_size is None else _int(warp_size, f"{op}: warp_size", loc)
        wpg = 4 if warps_per_group is None else _int(warps_per_group, f"{op}: warps_per_group", loc)
        return RegisterTensor(_builder().thread_index(op, ws, wpg, thread_extent, loc))

    def get_lane_idx(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's lane: an int32 tensor of one element per thread of the current group (element t:
        thread t's block thread index % ``warp_size``, default 32)."""
        return self._thread_index("get_lane_idx", _here(), warp_size)

    def get_warp_idx_sync(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp in the block (block thread index // ``warp_size``), one int32 element per
        thread of the current group; the warp is assumed converged."""
        return self._thread_index("get_warp_idx_sync", _here(), warp_size)

    def get_warp_idx(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp in the block (block thread index // ``warp_size``), one int32 element per
        thread of the current group."""
        return self._thread_index("get_warp_idx", _here(), warp_size)

    def get_warp_group_idx(self, warp_size: Optional[int] = None,
                           warps_per_group: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp group (block thread index // (``warp_size`` * ``warps_per_group``), default
        32 * 4), one int32 element per thread of the current group."""
        return self._thread_index("get_warp_group_idx", _here(), warp_size, warps_per_group)

    def shuffle_elect(self, thread_extent: int) -> RegisterTensor:
        """One elected thread per ``thread_extent`` threads: a bool tensor of one element per thread of the
        current group, true for threads t with t % thread_extent == 0 (``thread_extent`` 0: thread 0 only)."""
        loc = _here()
        return self._thread_index("shuffle_elect", loc, thread_extent=_int(thread_extent, "shuffle_elect: "
                                                                                          "thread_extent", loc))

    def _shuffle(self, op, value, lane, mask, width, loc):
        if not isinstance(value, RegisterTensor):
            # A block-uniform scalar holds the same value in every thread: its shuffle is itself.
            return _scalar(value, f"{op}: value (a register tensor or a scalar)", loc)
        lane_name = "srcLane" if op == "shfl_sync" else "offset"
        return RegisterTensor(_builder().shuffle(op, value.t, _exprs(lane, f"{op}: {lane_name}", loc)[0],
                                                 None if mask is None else _exprs(mask, f"{op}: mask", loc)[0],
                                                 32 if width is None else _int(width, f"{op}: width", loc), loc))

    def shfl_xor(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_xor_sync``: slot s of each thread t of the result is slot s of lane t ^ ``offset``.

        ``value``: a register tensor (in whatever layout it has; its slots move between the threads
        of each warp) or a scalar (the same in every thread: returned unchanged). The current group
        must be whole warps.
        """
        return self._shuffle("shfl_xor", value, offset, None, None, _here())

    def shfl_down(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_down_sync``: each thread's slots from lane + ``offset`` (its own past the warp's end); see ``shfl_xor``."""
        return self._shuffle("shfl_down", value, offset, None, None, _here())

    def shfl_up(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_up_sync``: each thread's slots from lane - ``offset`` (its own below lane 0); see ``shfl_xor``."""
        return self._shuffle("shfl_up", value, offset, None, None, _here())

    def shfl_sync(self, mask: _Int, value: _Operand, srcLane: _Int, width: Optional[int] = None) -> _Operand:
        """``__shfl_sync(mask, value, srcLane, width)``: each thread's slots from lane ``srcLane`` of its
        ``width``-lane segment (default 32); see ``shfl_xor``."""
        return self._shuffle("shfl_sync", value, srcLane, mask, width, _here())

    @staticmethod
    def _vector_region(x, what, loc):
        if isinstance(x, Region):
            return x.tensor.t, x.offsets, x.extents
        if isinstance(x, GlobalTensor):
            return x.t, [], []
        raise CompileError(f"{_where(loc)}{what}: expects a global tensor or a region of one (g[i:i + 8]), got "
                           f"{_describe(x)}")

    def _ldg(self, bits, src, pred, loc):
        t, offsets, extents = self._vector_region(src, f"ldg{bits}", loc)
        p = None if pred is None else _scalar(pred, f"ldg{bits}: pred", loc)
        return RegisterTensor(_builder().ldg(bits, t, offsets, extents, p, loc))

    def _stg(self, bits, dst, value, pred, loc):
        t, offsets, extents = self._vector_region(dst, f"stg{bits}", loc)
        p = None if pred is None else _scalar(pred, f"stg{bits}: pred", loc)
        _builder().stg(bits, t, offsets, extents, _tensor(value, f"stg{bits}: value", loc), p, loc)

    def ldg32(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """Loads the 4 bytes of the global region ``src`` (``g[i:i + 2]`` of 16-bit elements; a single
        element ``g[i]`` stands for the vector that starts there) with one ``ld.global.u32`` in every
        thread of the current group: a register tensor of the region's shape that every thread holds
        whole. ``pred`` (a bool scalar) false gives zeros. The address must be provably 4-byte aligned;
        no bounds predicate is added (``pred`` is the only guard)."""
        return self._ldg(32, src, pred, _here())

    def ldg64(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 8 bytes (``ld.global.v2.u32``, 8-byte aligned)."""
        return self._ldg(64, src, pred, _here())

    def ldg128(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 16 bytes (``ld.global.v4.u32``, 16-byte aligned)."""
        return self._ldg(128, src, pred, _here())

    def ldg256(self, src: Union[GlobalTensor, Region], pred: Optional[_Scalar] = None) -> RegisterTensor:
        """``ldg32`` for 32 bytes (two ``ld.global.v4.u32``, 16-byte aligned)."""
        return self._ldg(256, src, pred, _here())

    def stg32(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """Stores ``value`` (a register tensor of the region's dtype and shape, 4 bytes) to the global
        region ``dst`` with ``st.global.u32`` from every thread of the current group; skipped where
        ``pred`` is false. 4-byte aligned; no bounds predicate."""
        self._stg(32, dst, value, pred, _here())

    def stg64(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 8 bytes (``st.global.v2.u32``)."""
        self._stg(64, dst, value, pred, _here())

    def stg128(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 16 bytes (``st.global.v4.u32``)."""
        self._stg(128, dst, value, pred, _here())

    def stg256(self, dst: Union[GlobalTensor, Region], value: RegisterTensor, pred: Optional[_Scalar] = None) -> None:
        """``stg32`` for 32 bytes (two ``st.global.v4.u32``, 16-byte aligned)."""
        self._stg(256, dst, value, pred, _here())

    def loop_break(self) -> None:
        """``break`` out of the innermost loop of the kernel (the same as Python's ``break`` there)."""
        _builder().emit_break(_here(), "loop_break")

    # --- control flow ----------------------------------------------------------------------------
    def range(self, *args: _Int, unroll: Union[bool, int, None] = None) -> Iterable[Expr]:
        """``for i in self.range(end)`` / ``(begin, end[, step])``: an IR loop with ``unroll``.

        Valid only as the iterable of a ``for`` statement in ``__call__``: like
        ``for i in range(...)``, the body is traced once with a symbolic ``i``. ``unroll``:
        True unrolls fully, a positive int by that factor, None or False not at all.
        """
        _fail("self.range(...) is only valid as the iterable of a `for` loop in __call__")

    def thread_group(self, thread_begin: int, num_threads: int) -> ContextManager[None]:
        """``with self.thread_group(begin, n):``: the body runs on threads ``[begin, begin + n)`` only.

        Thread numbers count within the enclosing thread group (the block outside any), and the
        group must fit in it; ``sync()`` inside it is the group's barrier.
        """
        loc = _here()
        return _ThreadGroup("thread_group", _int(thread_begin, "thread_group: thread_begin", loc),
                            _int(num_threads, "thread_group: num_threads", loc), loc)

    def single_thread(self, thread: int = -1) -> ContextManager[None]:
        """``with self.single_thread():``: the body runs on one thread of the enclosing thread group
        only: thread ``thread`` of the group, or, for -1 (NVIDIA Tilus's "any thread"), the first."""
        loc = _here()
        thread = _int(thread, "single_thread: thread", loc)
        if thread < -1:
            raise CompileError(f"{_where(loc)}single_thread: thread must be -1 (any) or a thread of the group, got "
                               f"{thread}")
        return _ThreadGroup("single_thread", max(thread, 0), 1, loc)

    def single_warp(self, warp: int = 0) -> ContextManager[None]:
        """``with self.single_warp(w):``: the body runs on warp ``w`` of the enclosing thread group only."""
        loc = _here()
        return _ThreadGroup("single_warp", _int(warp, "single_warp: warp", loc) * 32, 32, loc)

    def warp_group(self, warp_begin: int, num_warps: int) -> ContextManager[None]:
        """``with self.warp_group(w, n):``: the body runs on warps ``[w, w + n)`` of the enclosing thread group only."""
        loc = _here()
        return _ThreadGroup("warp_group", _int(warp_begin, "warp_group: warp_begin", loc) * 32,
                            _int(num_warps, "warp_group: num_warps", loc) * 32, loc)


# The elementwise math methods and their docstrings.
_UNARY = {
    "abs": "The absolute value of each element of ``x`` (a numeric register tensor).",
    "exp": "``e ** x`` elementwise, for a float register tensor ``x``.",
    "exp2": "``2 ** x`` elementwise, for a float register tensor ``x``.",
    "log": "The natural logarithm of each element of ``x`` (a float register tensor).",
    "log2": "The base-2 logarithm of each element of ``x`` (a float register tensor).",
    "sqrt": "The square root of each element of ``x`` (a float register tensor).",
    "rsqrt": "``1 / sqrt(x)`` elementwise, for a float register tensor ``x``.",
    "sin": "The sine of each element of ``x`` (a float register tensor, radians).",
    "cos": "The cosine of each element of ``x`` (a float register tensor, radians).",
    "tanh": "The hyperbolic tangent of each element of ``x`` (a float register tensor).",
    "round": "Each element of ``x`` (a float register tensor) rounded to the nearest integer, ties to even.",
    "square": "``x * x`` elementwise, for a numeric register tensor ``x``.",
    "floor": "Each element of ``x`` (a float register tensor) rounded down to an integer.",
    "ceil": "Each element of ``x`` (a float register tensor) rounded up to an integer.",
}


def _unary_method(op):
    def method(self, x: RegisterTensor) -> RegisterTensor:
        loc = _here()
        return RegisterTensor(_builder().unary(op, _tensor(x, op, loc), loc))

    method.__name__ = op
    method.__qualname__ = f"Script.{op}"
    method.__doc__ = _UNARY[op]
    return method


for _op in _UNARY:
    setattr(Script, _op, _unary_method(_op))

# Every public method is an instruction method (checked arguments, errors at the user's line);
# those that only compute a new tensor are pure.
_PURE = {"global_view", "shared_tensor", "register_tensor", "load_global", "load_shared", "dot", "cast", "view",
         "repeat_interleave", "flatten", "add", "fast_divmod", "randint", "rand", "randn",
         "reshape", "squeeze", "unsqueeze", "transpose", "repeat", "where", "clip", "maximum", "minimum", "sum", "max",
         "min", "any", "all", "get_lane_idx", "get_warp_idx_sync", "get_warp_idx", "get_warp_group_idx",
         "shuffle_elect", "shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "ldg32", "ldg64", "ldg128", "ldg256",
         *_UNARY}
for _name, _fn in list(vars(Script).items()):
    if not _name.startswith("_") and inspect.isfunction(_fn):
        setattr(Script, _name, _instruction(_fn, _name in _PURE))


# --- instruction groups (NVIDIA Tilus's self.mbarrier / self.tma / self.fence) ---------------------

def _barrier(x, what, loc):
    """An mbarrier: a one-element shared tensor, or ``bars[i]`` (an element of mbarrier.alloc's tensor)."""
    if isinstance(x, MappedBarrier):
        raise CompileError(f"{_where(loc)}{what}: a barrier of another block (cluster.map_shared_addr) can only be "
                           f"arrived at (mbarrier.arrive, arrive_and_expect_tx); a block waits on, expects bytes on "
                           f"and copies to its own barriers")
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


class MbarrierGroup:
    """mbarriers in shared memory (``self.mbarrier``): the arrival counters asynchronous copies and
    thread groups synchronize on. A barrier is one element of the tensor ``alloc`` returns
    (``bars[i]``; a tensor of one barrier may be passed whole)."""

    #: The phase a producer waits on first (the slot starts free).
    producer_initial_phase = 1
    #: The phase a consumer waits on first (the slot starts empty).
    consumer_initial_phase = 0

    def alloc(self, counts: Union[_Int, Sequence[_Int]]) -> SharedTensor:
        """Allocates and initializes ``len(counts)`` mbarriers (one for a single count): barrier i
        completes a phase after ``counts[i]`` arrivals (and its expected transaction bytes). Returns a
        uint64 shared tensor of shape [n]; pass ``bars[i]`` to the other methods."""
        loc = _here()
        counts = [counts] if isinstance(counts, (int, Expr)) else counts
        return SharedTensor(_builder().mbarrier_alloc(_exprs(counts, "mbarrier.alloc: counts", loc), loc))

    def arrive(self, barrier: SharedTensor, count: _Int = 1, sem: str = "release", scope: str = "cta") -> None:
        """Every thread of the current thread group arrives ``count`` times at ``barrier``."""
        loc = _here()
        b, peer = _peer(barrier, None, "mbarrier.arrive", loc)
        _builder().mbarrier("arrive", b, _scalar(count, "mbarrier.arrive: count", loc),
                            _choice(sem, ("release", "relaxed"), "mbarrier.arrive: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.arrive: scope", loc), peer, loc)

    def arrive_and_expect_tx(self, barrier: SharedTensor, transaction_bytes: _Int, sem: str = "release",
                             scope: str = "cta") -> None:
        """Every thread of the group arrives once at ``barrier`` and adds ``transaction_bytes`` to the
        bytes its current phase waits for (the TMA loads completing on it). Usually inside
        ``single_thread()``."""
        loc = _here()
        b, peer = _peer(barrier, None, "mbarrier.arrive_and_expect_tx", loc)
        _builder().mbarrier("arrive_and_expect_tx", b,
                            _scalar(transaction_bytes, "mbarrier.arrive_and_expect_tx: transaction_bytes", loc),
                            _choice(sem, ("release", "relaxed"), "mbarrier.arrive_and_expect_tx: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.arrive_and_expect_tx: scope", loc), peer, loc)

    def arrive_and_expect_tx_remote(self, barrier: SharedTensor, transaction_bytes: _Int, target_rank: _Int,
                                    sem: str = "release", scope: str = "cluster") -> None:
        """Every thread of the group arrives once at the barrier at ``barrier``'s offset in block
        ``target_rank`` of the cluster and adds ``transaction_bytes`` to the bytes its phase waits for
        (NVIDIA Tilus's name; ``scope="cta"`` releases at block scope only, which costs less)."""
        loc = _here()
        w = "mbarrier.arrive_and_expect_tx_remote"
        _builder().mbarrier("arrive_and_expect_tx", _barrier(barrier, f"{w}: barrier", loc),
                            _scalar(transaction_bytes, f"{w}: transaction_bytes", loc),
                            _choice(sem, ("release", "relaxed"), f"{w}: sem", loc),
                            _choice(scope, ("cta", "cluster"), f"{w}: scope", loc),
                            _scalar(target_rank, f"{w}: target_rank", loc), loc)

    def arrive_and_expect_tx_multicast(self, barrier: SharedTensor, transaction_bytes: _Int, multicast_mask: int,
                                       sem: str = "release", scope: str = "cluster") -> None:
        """For each block of the cluster in ``multicast_mask`` (bit i: rank i), one thread of the group
        (its i-th) arrives once at that block's barrier at ``barrier``'s offset and adds
        ``transaction_bytes`` to its expected bytes (NVIDIA Tilus's name): what every receiver of a
        multicast TMA load needs. A composition of ``arrive_and_expect_tx_remote``."""
        loc = _here()
        mask = _int(multicast_mask, "mbarrier.arrive_and_expect_tx_multicast: multicast_mask", loc)
        if not 0 < mask < 1 << 16:
            raise CompileError(f"{_where(loc)}mbarrier.arrive_and_expect_tx_multicast: multicast_mask must name 1 to 16 "
                               f"blocks (a Python int in [1, 2^16)), got {mask}")
        for rank in range(16):
            if mask >> rank & 1:
                with _ThreadGroup("thread_group", rank, 1, loc):
                    self.arrive_and_expect_tx_remote(barrier, transaction_bytes, rank, sem, scope)

    def wait(self, barrier: SharedTensor, phase: _Int, sem: str = "acquire", scope: str = "cta") -> None:
        """Every thread of the group waits until the phase of parity ``phase`` (0 or 1) of ``barrier``
        has completed. On the CPU backend a wait that can never complete is an error naming it."""
        loc = _here()
        if isinstance(phase, RegisterTensor):  # a phase kept in a one-element tensor (phases[stage])
            _builder().mbarrier_wait_tensor(_barrier(barrier, "mbarrier.wait: barrier", loc), phase.t,
                                            _choice(sem, ("acquire", "relaxed"), "mbarrier.wait: sem", loc),
                                            _choice(scope, ("cta", "cluster"), "mbarrier.wait: scope", loc), loc)
            return
        _builder().mbarrier("wait", _barrier(barrier, "mbarrier.wait: barrier", loc),
                            _scalar(phase, "mbarrier.wait: phase", loc),
                            _choice(sem, ("acquire", "relaxed"), "mbarrier.wait: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.wait: scope", loc), None, loc)


class TmaGroup:
    """Bulk tensor copies by the Tensor Memory Accelerator (``self.tma``, sm_90): one box between a
    global tensor and a shared tensor, issued once by the current thread group."""

    def global_to_shared(self, *, src: GlobalTensor, dst: SharedTensor, offsets: Sequence[_Int],
                         dims: _Dims = None, mbarrier: SharedTensor, cta_group: int = 1,
                         multicast_mask: Optional[_Int] = None, cache_policy: Any = None) -> None:
        """Copies the tile of ``src`` at ``offsets`` (one per dim of ``src``; the tile's dims are the
        global dims ``dims``, default the trailing ones) into ``dst``; its bytes complete on
        ``mbarrier``, whose expected transaction bytes the kernel sets
        (``mbarrier.arrive_and_expect_tx``) and on which it waits. Elements outside ``src`` are
        zero-filled. ``multicast_mask`` (an integer, bit i for the cluster's block of rank i): every
        block of the mask receives the tile at ``dst``'s offset in its shared memory, and its barrier
        at ``mbarrier``'s offset completes the bytes. ``cache_policy``: a raw 64-bit L2 cache policy
        (an integer, such as CUTLASS's ``0x12F0000000000000`` for evict-first, or a uint64 kernel
        parameter), issued with the ``.L2::cache_hint`` form of the load. ``cta_group=2`` (Blackwell,
        sm_100a): the load of one block of a pair, whose bytes may complete on the pair's barrier in the
        other block: ``mbarrier`` may then be ``cluster.map_shared_addr(bar, rank)``."""
        loc = _here()
        w = "tma.global_to_shared"
        group = _int(cta_group, f"{w}: cta_group", loc)
        mask = None if multicast_mask is None else _scalar(multicast_mask, f"{w}: multicast_mask", loc)
        rank = None
        if isinstance(mbarrier, MappedBarrier):
            if group != 2:
                raise CompileError(f"{_where(loc)}{w}: the mbarrier is another block's (cluster.map_shared_addr): a TMA "
                                   f"load completes on a peer's barrier only with cta_group=2, got cta_group={group}")
            bar, rank = mbarrier.barrier, mbarrier.rank
        else:
            bar = _barrier(mbarrier, f"{w}: mbarrier", loc)
        _builder().tma_copy_tile(_tensor(src, f"{w}: src", loc, GlobalTensor), _tensor(dst, f"{w}: dst", loc, SharedTensor),
                                 _exprs(offsets, f"{w}: offsets", loc), _ints(dims, f"{w}: dims", loc), bar, True, loc, mask,
                                 _cache_policy(cache_policy, w, loc), group, rank)

    def shared_to_global(self, src: SharedTensor, dst: GlobalTensor, offsets: Sequence[_Int], dims: _Dims = None,
                         cache_policy: Any = None) -> None:
        """Copies ``src`` into the tile of ``dst`` at ``offsets``; elements outside ``dst`` are not
        written. Asynchronous: ``commit_group`` then ``wait_group`` before ``src`` is written again
        (a write before the wait is a CompileError). ``cache_policy``: a raw 64-bit L2 cache policy, as
        for ``global_to_shared``."""
        loc = _here()
        _builder().tma_copy_tile(_tensor(dst, "tma.shared_to_global: dst", loc, GlobalTensor),
                                 _tensor(src, "tma.shared_to_global: src", loc, SharedTensor),
                                 _exprs(offsets, "tma.shared_to_global: offsets", loc),
                                 _ints(dims, "tma.shared_to_global: dims", loc), None, False, loc, None,
                                 _cache_policy(cache_policy, "tma.shared_to_global", loc))

    def commit_group(self) -> None:
        """Closes the group of TMA stores issued since the last commit."""
        _builder().tma_commit_group(_here())

    def wait_group(self, n: int, read: bool = False) -> None:
        """Waits until at most ``n`` committed TMA store groups are pending; ``read=True``: only until
        they have read their shared source."""
        loc = _here()
        _builder().tma_wait_group(_int(n, "tma.wait_group: n", loc), _bool(read, "tma.wait_group: read", loc), loc)


class WgmmaGroup:
    """Warp-group matrix multiply-accumulate (``self.wgmma``, sm_90a). Every instruction runs on whole
    warp groups: the current thread group's threads (a multiple of 128, starting at one)."""

    def fence(self) -> None:
        """Orders the warp group's earlier register and shared-memory accesses before the ``mma`` that
        follow: needed before the first ``mma`` and whenever the accumulator was touched since."""
        _builder().wgmma_fence(_here())

    def mma(self, a: Union[SharedTensor, RegisterTensor], b: SharedTensor, d: RegisterTensor) -> None:
        """``d += a @ b``, asynchronously. ``b`` [k, n] is shared and K-major (usually a transposed
        [n, k] tile, ``sb.transpose()``), stored in rows of 32, 64 or 128 bytes (what TMA writes and
        layout inference chooses); ``a`` [m, k] likewise, or a float16/bfloat16 register tensor,
        whose layout becomes the wgmma A-fragment layout. ``d`` is a float32 register tensor whose
        layout becomes the wgmma accumulator layout. f16, bf16 and fp8 (e4m3/e5m2) operands; m a
        multiple of 64 per warp group, n of 8, k of 16 (32 for fp8). ``d`` and the operands may be
        touched again only after ``commit_group`` and a ``wait_group`` that covers it (a CompileError
        names both lines otherwise)."""
        loc = _here()
        a = _tensor(a, "wgmma.mma: a", loc, RegisterTensor if isinstance(a, RegisterTensor) else SharedTensor)
        _builder().wgmma_mma(a, _tensor(b, "wgmma.mma: b", loc, SharedTensor),
                             _tensor(d, "wgmma.mma: d", loc, RegisterTensor), loc)

    def commit_group(self) -> None:
        """Closes the group of ``mma`` issued since the last commit."""
        _builder().wgmma_commit_group(_here())

    def wait_group(self, n: int) -> None:
        """Waits until at most ``n`` (0 to 7) committed groups of this warp group are pending."""
        loc = _here()
        _builder().wgmma_wait_group(_int(n, "wgmma.wait_group: n", loc), loc)


class FenceGroup:
    """Proxy fences (``self.fence``)."""

    def proxy_async(self, space: str = "shared") -> None:
        """Orders this thread's generic-proxy accesses of ``space`` ("shared" or "global") with the
        async proxy's (TMA). The passes add the ones TMA stores of generic writes need."""
        loc = _here()
        _builder().fence_proxy_async(_choice(space, ("shared", "global"), "fence.proxy_async: space", loc), loc)


def _atomic(space, op, dst, values, compare, sem, scope, output, offsets, dims):
    name = f"atomic.{space}_{op}"
    loc = _here()
    kind = GlobalTensor if space == "global" else SharedTensor
    d = _tensor(dst, f"{name}: dst", loc, kind)
    v = _tensor(values, f"{name}: values", loc)
    c = None if compare is None else _tensor(compare, f"{name}: compare", loc)
    # The core defaults a global tile's offsets to zeros and checks sem and scope (the verifier).
    t = RegisterTensor(_builder().atomic(op, d, v, c, _exprs(offsets, f"{name}: offsets", loc),
                                         _ints(dims, f"{name}: dims", loc), sem, scope, loc))
    return Script._into(None, output, t, loc, name)


def _scatter(space, op, dst, dim, indices, values, sem, scope, output, loc):
    """atomic.<space>_scatter_<op>, or store_<space>_scatter when op is None."""
    name = f"store_{space}_scatter" if op is None else f"atomic.{space}_scatter_{op}"
    kind = GlobalTensor if space == "global" else SharedTensor
    t = _builder().atomic_scatter(op or "exch", op is None, _tensor(dst, f"{name}: dst", loc, kind),
                                  _int(dim, f"{name}: dim", loc), _tensor(indices, f"{name}: indices", loc),
                                  _tensor(values, f"{name}: values", loc), sem, scope, loc)
    return None if op is None else Script._into(None, output, RegisterTensor(t), loc, name)


class AtomicGroup:
    """Element-wise atomic read-modify-write of a shared or global tile (``self.atomic``, NVIDIA
    Tilus's names): element i of ``dst`` becomes ``op(dst[i], values[i])`` atomically, each element
    once (by the thread that holds it), and the call returns the elements' previous values (or
    writes them into ``output``). ``sem``: "relaxed" (default), "acquire", "release", "acq_rel";
    ``scope``: "cta" (shared default), "cluster", "gpu" (global default), "sys". A global ``dst``
    takes ``offsets`` (default all zero) and ``dims`` as ``store_global`` does, and out-of-bounds
    elements are skipped (previous value 0); a shared ``dst`` is the whole tensor. When the
    previous values are never read the GPU uses ``red`` instead of ``atom``. Types: add / sub on
    32/64-bit integers, float32, float64, float16, bfloat16 (sm_90); min / max on 32/64-bit
    integers; exch on 32/64-bit, cas on 16/32/64-bit elements."""

    def global_add(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] += values[i]`` atomically; returns the previous values."""
        return _atomic("global", "add", dst, values, None, sem, scope, output, offsets, dims)

    def global_sub(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] -= values[i]`` atomically (an add of ``-values``); returns the previous values."""
        return _atomic("global", "sub", dst, values, None, sem, scope, output, offsets, dims)

    def global_min(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = min(dst[i], values[i])`` atomically; returns the previous values."""
        return _atomic("global", "min", dst, values, None, sem, scope, output, offsets, dims)

    def global_max(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = max(dst[i], values[i])`` atomically; returns the previous values."""
        return _atomic("global", "max", dst, values, None, sem, scope, output, offsets, dims)

    def global_exch(self, dst, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = values[i]`` atomically; returns the previous values."""
        return _atomic("global", "exch", dst, values, None, sem, scope, output, offsets, dims)

    def global_cas(self, dst, compare, values, *, sem="relaxed", scope="gpu", output=None, offsets=None, dims=None):
        """``dst[i] = values[i]`` where ``dst[i] == compare[i]`` (bit for bit), atomically; returns
        the previous values."""
        return _atomic("global", "cas", dst, values, compare, sem, scope, output, offsets, dims)

    def shared_add(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] += values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "add", dst, values, None, sem, scope, output, None, None)

    def shared_sub(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] -= values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "sub", dst, values, None, sem, scope, output, None, None)

    def shared_min(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = min(dst[i], values[i])`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "min", dst, values, None, sem, scope, output, None, None)

    def shared_max(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = max(dst[i], values[i])`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "max", dst, values, None, sem, scope, output, None, None)

    def shared_exch(self, dst, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = values[i]`` atomically on shared memory; returns the previous values."""
        return _atomic("shared", "exch", dst, values, None, sem, scope, output, None, None)

    def shared_cas(self, dst, compare, values, *, sem="relaxed", scope="cta", output=None):
        """``dst[i] = values[i]`` where ``dst[i] == compare[i]``, atomically on shared memory; returns
        the previous values."""
        return _atomic("shared", "cas", dst, values, compare, sem, scope, output, None, None)

    # Scatter forms (torch.scatter_add_'s semantics): element k of values goes to dst at k's own
    # coordinates, except along `dim`, where indices[k] (integers, values' shape) picks it; an index
    # outside dst is skipped (previous value 0). dst has values' rank; a shared dst equals values in
    # the other dims.
    def global_scatter_add(self, dst, *, dim, indices, values, sem="relaxed", scope="gpu", output=None):
        """``dst[..., indices[k], ...] += values[k]`` atomically; returns the previous values."""
        return _scatter("global", "add", dst, dim, indices, values, sem, scope, output, _here())

    def global_scatter_sub(self, dst, *, dim, indices, values, sem="relaxed", scope="gpu", output=None):
        """``dst[..., indices[k], ...] -= values[k]`` atomically; returns the previous values."""
        return _scatter("global", "sub", dst, dim, indices, values, sem, scope, output, _here())

    def global_scatter_min(self, dst, *, dim, indices, values, sem="relaxed", scope="gpu", output=None):
        """``dst[..., indices[k], ...] = min(.., values[k])`` atomically; returns the previous values."""
        return _scatter("global", "min", dst, dim, indices, values, sem, scope, output, _here())

    def global_scatter_max(self, dst, *, dim, indices, values, sem="relaxed", scope="gpu", output=None):
        """``dst[..., indices[k], ...] = max(.., values[k])`` atomically; returns the previous values."""
        return _scatter("global", "max", dst, dim, indices, values, sem, scope, output, _here())

    def shared_scatter_add(self, dst, *, dim, indices, values, sem="relaxed", scope="cta", output=None):
        """``global_scatter_add`` on shared memory."""
        return _scatter("shared", "add", dst, dim, indices, values, sem, scope, output, _here())

    def shared_scatter_sub(self, dst, *, dim, indices, values, sem="relaxed", scope="cta", output=None):
        """``global_scatter_sub`` on shared memory."""
        return _scatter("shared", "sub", dst, dim, indices, values, sem, scope, output, _here())

    def shared_scatter_min(self, dst, *, dim, indices, values, sem="relaxed", scope="cta", output=None):
        """``global_scatter_min`` on shared memory."""
        return _scatter("shared", "min", dst, dim, indices, values, sem, scope, output, _here())

    def shared_scatter_max(self, dst, *, dim, indices, values, sem="relaxed", scope="cta", output=None):
        """``global_scatter_max`` on shared memory."""
        return _scatter("shared", "max", dst, dim, indices, values, sem, scope, output, _here())


_ATOMIC = AtomicGroup()


class DotConfig:
    """A dot's operand layouts on a block (NVIDIA Tilus's BlockMmaConfig): ``la``, ``lb``, ``lc``
    for a [m, k] x [k, n] product on ``num_warps`` warps, and the dtypes, exactly as layout
    inference lays out such a dot with that warp split (annotating them keeps that split)."""

    def __init__(self, operand_dtype, accumulator_dtype, m, n, k, num_warps, warp_m, warp_n, la, lb, lc):
        self.operand_dtype, self.accumulator_dtype = operand_dtype, accumulator_dtype
        self.m, self.n, self.k, self.num_warps, self.warp_m, self.warp_n = m, n, k, num_warps, warp_m, warp_n
        self.la, self.lb, self.lc = la, lb, lc

    @property
    def lb_T(self):
        """``lb`` transposed: the layout of b as an [n, k] tile (NVIDIA Tilus's ``lb_T``)."""
        return self.lb.permute([1, 0])

    def __repr__(self):
        return (f"DotConfig({self.operand_dtype.name} -> {self.accumulator_dtype.name}, m={self.m}, n={self.n}, "
                f"k={self.k}, warps {self.warp_m}x{self.warp_n})")


class AtomicMmaConfig:
    """One warp's mma.sync instruction (NVIDIA Tilus's AtomicMmaConfig): ``m``, ``n``, ``k``,
    ``vec_k``, ``operand_type``, ``acc_type`` and the fragment layouts ``la`` [m, k], ``lb`` [k, n],
    ``lc`` [m, n] of its 32 threads (the hardware's, as tilus's own dot lowering uses them)."""

    def __init__(self, name, operand_type, acc_type, m, n, k):
        plans = _C.dot_plans(operand_type, acc_type, m, n, k, 32)
        if not plans or not plans[0]["op"].startswith("mma.sync"):
            raise AttributeError(f"atomic_mma_configs.{name}: tilus has no mma.sync for {operand_type.name} operands "
                                 f"with {acc_type.name} accumulation (docs/tilus-compatibility.md)")
        self.name, self.operand_type, self.acc_type = name, operand_type, acc_type
        self.m, self.n, self.k, self.vec_k = m, n, k, 1
        self.la, self.lb, self.lc = plans[0]["a"], plans[0]["b"], plans[0]["c"]

    def __repr__(self):
        return f"AtomicMmaConfig({self.name})"


class AtomicMmaConfigs:
    """``self.cuda.atomic_mma_configs`` (NVIDIA Tilus's names): ``m16n8k16_f16_f32``,
    ``m16n8k16_f16_f16``, ``m16n8k16_bf16_f32``; the int8 ones are an AttributeError (no int8
    mma.sync in tilus yet)."""

    _SPECS = {"m16n8k16_f16_f32": ("float16", "float32", 16, 8, 16),
              "m16n8k16_f16_f16": ("float16", "float16", 16, 8, 16),
              "m16n8k16_bf16_f32": ("bfloat16", "float32", 16, 8, 16),
              "m8n8k16_i8_i32": ("int8", "int32", 8, 8, 16),
              "m16n8k16_i8_i32": ("int8", "int32", 16, 8, 16),
              "m16n8k32_i8_i32": ("int8", "int32", 16, 8, 32)}

    def __getattr__(self, name):
        spec = AtomicMmaConfigs._SPECS.get(name)
        if spec is None:
            raise AttributeError(f"atomic_mma_configs has no '{name}' (it has {', '.join(AtomicMmaConfigs._SPECS)})")
        a, c, m, n, k = spec
        config = AtomicMmaConfig(name, DataType.from_name(a), DataType.from_name(c), m, n, k)
        setattr(self, name, config)
        return config

    def from_dtypes(self, operand_dtype, accumulator_dtype):
        for name, (a, c, *_) in AtomicMmaConfigs._SPECS.items():
            if (operand_dtype.name, accumulator_dtype.name) == (a, c) and name != "m8n8k16_i8_i32":
                return getattr(self, name)
        raise ValueError(f"no mma config for {operand_dtype.name} operands with {accumulator_dtype.name} accumulation")


class CudaHelpers:
    """``self.cuda`` (NVIDIA Tilus's names): the layouts the compiler would choose, for kernels
    that annotate them."""

    atomic_mma_configs = AtomicMmaConfigs()

    @staticmethod
    def mma_dot_config(atomic_mma, warp_spatial, warp_repeat):
        """NVIDIA Tilus's block mma layouts: ``warp_spatial`` (wsm, wsn) warps, each repeating the
        ``atomic_mma`` instruction ``warp_repeat`` (wrm, wrn, wrk) times, the warps major and the
        repeats minor in every dim, as Tilus composes them. tilus's default dot plans put the
        repeats major; a dot annotated with these layouts takes the warps-major plan (its lowering
        record says ``warps_major``)."""
        wsm, wsn = warp_spatial
        wrm, wrn, wrk = warp_repeat
        la = _layouts.reduce(_layouts.spatial(wsm, 1, wsn, ranks=[1, 0, 2]), dims=[2]).local(wrm, wrk) * atomic_mma.la
        lb = _layouts.reduce(_layouts.spatial(1, wsn, wsm, ranks=[0, 2, 1]), dims=[2]).local(wrk, wrn) * atomic_mma.lb
        lc = _layouts.spatial(wsm, wsn).local(wrm, wrn) * atomic_mma.lc
        return DotConfig(atomic_mma.operand_type, atomic_mma.acc_type, atomic_mma.m * wsm * wrm,
                         atomic_mma.n * wsn * wrn, atomic_mma.k * wrk, wsm * wsn, wsm, wsn, la, lb, lc)

    @staticmethod
    def resolve_dot_config(operand_dtype, acc_dtype, *, m, n, k, num_warps=None, warp_m=None, warp_n=None):
        """The operand layouts of a [m, k] x [k, n] dot on ``num_warps`` warps (or
        ``warp_m`` x ``warp_n``): mma.sync m16n8k16 fragments for float16 / bfloat16 operands
        on tiles that fit them. With warp_m / warp_n the split is theirs, else the one layout
        inference takes by default. ValueError when no split fits."""
        if num_warps is None:
            if warp_m is None or warp_n is None:
                raise ValueError("resolve_dot_config: give num_warps, or both warp_m and warp_n")
            num_warps = warp_m * warp_n
        plans = _C.dot_plans(operand_dtype, acc_dtype, m, n, k, 32 * num_warps)
        if not plans[0]["op"].startswith("mma.sync") and (warp_m is not None or warp_n is not None):
            raise ValueError(f"resolve_dot_config: a {operand_dtype.name} x {operand_dtype.name} -> {acc_dtype.name} "
                             f"dot of m={m}, n={n}, k={k} takes no mma.sync, so it has no warp split")
        fits = [p for p in plans if (warp_m is None or p["warps_m"] == warp_m) and
                (warp_n is None or p["warps_n"] == warp_n)]
        if not fits:
            splits = ", ".join(f"{p['warps_m']}x{p['warps_n']}" for p in plans)
            raise ValueError(f"resolve_dot_config: no split of {num_warps} warps into warp_m={warp_m} x "
                             f"warp_n={warp_n} fits m={m}, n={n}, k={k} (the splits that fit: {splits})")
        p = fits[0]
        return DotConfig(operand_dtype, acc_dtype, m, n, k, num_warps, p["warps_m"], p["warps_n"], p["a"], p["b"],
                         p["c"])

    @staticmethod
    def shared_layout(shape):
        """A row-major shared layout of ``shape`` (NVIDIA Tilus's ``self.cuda.shared_layout``): an
        annotation with it keeps the tile unswizzled."""
        return _C.SharedLayout.row_major([int(d) for d in shape])

    @staticmethod
    def default_register_layout(num_warps, dtype, shape, vector_size=None):
        """The layout layout inference gives a free register tensor of ``shape`` and ``dtype`` on
        ``num_warps`` warps (16-byte vectors along the last dim unless ``vector_size`` says)."""
        return _C.default_register_layout(list(shape), dtype, 32 * num_warps, vector_size or 0)


_CUDA = CudaHelpers()

for _group, _prefix in ((MbarrierGroup, "mbarrier"), (TmaGroup, "tma"), (FenceGroup, "fence"), (WgmmaGroup, "wgmma"),
                        (AtomicGroup, "atomic")):
    for _name, _fn in list(vars(_group).items()):
        if not _name.startswith("_") and inspect.isfunction(_fn):
            _fn.__name__ = f"{_prefix}.{_name}"
            _wrapped = _instruction(_fn, _name == "alloc")
            _wrapped.__name__ = _name
            setattr(_group, _name, _wrapped)

_MBARRIER, _TMA, _FENCE, _WGMMA = MbarrierGroup(), TmaGroup(), FenceGroup(), WgmmaGroup()


def static_range(*args: int) -> range:
    """``range(*args)`` for a loop that runs in Python while tracing (its body unrolled into the IR).

    ``for s in tilus.static_range(3):`` in a kernel body is a Python loop, where
    ``for i in range(3):`` is an IR loop. The bounds must be Python ints.
    """
    for a in args:
        if isinstance(a, (Expr, TensorBase, Unusable)):
            _fail(f"static_range: its bounds must be Python ints (it runs while tracing), got {_describe(a)}; "
                  "a loop over run-time bounds is `for ... in range(...)`")
    try:
        return range(*args)
    except TypeError as e:
        _fail(f"static_range: {e}")


# --- the definition-driven instructions (tilus/instructions/defined.py) ----------------------------

class _DefinedArgs:
    """How the methods made from instruction definitions take their arguments."""
    here = staticmethod(_here)
    builder = staticmethod(_builder)
    scalar = staticmethod(_scalar)

    @staticmethod
    def tensor(x, operand, what, loc):
        if operand["scopes"] == "shared" and operand["dtype"] == "uint64" and operand["numel"] == 1:
            return _barrier(x, what, loc)
        cls = {"shared": SharedTensor, "global": GlobalTensor, "tmem": TMemoryTensor}.get(operand["scopes"],
                                                                                           RegisterTensor)
        return _tensor(x, what, loc, cls)


_defined.install(Script, {"mbarrier": MbarrierGroup, "tma": TmaGroup, "fence": FenceGroup, "wgmma": WgmmaGroup,
                          "atomic": AtomicGroup, "cluster": _Cluster, "tcgen05": _tcgen05.Tcgen05Group,
                          "clc": _clc.ClcGroup}, _instruction, _DefinedArgs)
