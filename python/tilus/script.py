"""tilus.Script: kernels as Python classes, traced into the tile IR by the C++ core.

Every instruction method goes through one wrapper (`_instruction`): a mistake in how it is
called (a wrong type, a missing or repeated argument) is a CompileError that names the method,
the arguments as the user gave them and the user's file:line, never a pybind11 dump. The rules
about shapes and dtypes are the C++ verifier's."""
import functools
import inspect
import re

from . import _C
from .artifacts import Artifacts
from .launch import launch as _launch
from ._C import CompileError, Expr
from .tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, Unusable, _binary, _builder,
                      _declare_kernel_variable, _describe, _dtype, _fail, _here, _is_scalar, _located, _raised_at,
                      _tracing, _where)


# --- argument helpers of the Script methods ------------------------------------------------------

_KINDS = {RegisterTensor: "a register tensor", SharedTensor: "a shared tensor", GlobalTensor: "a global tensor"}


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
    """self.attrs.blocks / .warps / .cluster_blocks: handed to the tracer as soon as they are set."""

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


class _BlockIdx:
    @property
    def x(self):
        return _C.block_idx(0)

    @property
    def y(self):
        return _C.block_idx(1)

    @property
    def z(self):
        return _C.block_idx(2)


class _ThreadGroup:
    def __init__(self, kind, begin, n, loc):
        self.args = (kind, begin, n, loc)

    def __enter__(self):
        _builder().begin_thread_group(*self.args)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            _builder().end_thread_group()
        return False

# --- the Script base class ----------------------------------------------------------------------

class Script(Artifacts):
    """Base class of tilus kernels (see docs/python.md).

    Subclasses take hyperparameters in ``__init__`` and define the kernel body as ``__call__``;
    calling an instance launches the kernel (compiling it on the first call for each
    specialization). ``source``, ``ptx``, ``sass``, ``ir`` and ``compiled`` show what a call
    compiles to without launching it (tilus/artifacts.py).
    """

    def __init__(self):
        self.attrs = Attrs()
        self.blockIdx = _BlockIdx()

    def __call__(self, *args, **kw):
        raise CompileError(f"{type(self).__name__} has no kernel body: a tilus.Script subclass defines __call__")

    def __getattr__(self, name):
        # A subclass whose __init__ forgot super().__init__() still has its attrs and blockIdx.
        if name in ("attrs", "blockIdx"):
            value = Attrs() if name == "attrs" else _BlockIdx()
            self.__dict__[name] = value
            return value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
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
    def global_view(self, ptr, *, dtype=None, shape, strides=None):
        loc = _here()
        if not isinstance(ptr, Expr):
            raise CompileError(f"{_where(loc)}global_view: ptr must be a pointer parameter of the kernel (~dtype), got "
                               f"{_describe(ptr)}")
        if dtype is None:
            if not ptr.dtype.is_pointer:
                raise CompileError(f"{_where(loc)}global_view: needs dtype= for {_describe(ptr)}")
            dtype = ptr.dtype.pointee
        name = ptr.name if isinstance(ptr, _C.Var) else "g"
        return GlobalTensor(_builder().global_view(ptr, _dtype(dtype, "global_view: dtype", loc),
                                                   _exprs(shape, "global_view: shape", loc),
                                                   _exprs(strides, "global_view: strides", loc), loc, name))

    def shared_tensor(self, *, dtype, shape):
        loc = _here()
        return SharedTensor(_builder().shared_tensor(_dtype(dtype, "shared_tensor: dtype", loc),
                                                     _ints(shape, "shared_tensor: shape", loc), loc))

    def free_shared(self, t):
        loc = _here()
        _builder().free_shared(_tensor(t, "free_shared", loc, SharedTensor), loc)

    def register_tensor(self, *, dtype, shape, init=None):
        loc = _here()
        if init is not None and not callable(init):
            _scalar(init, "register_tensor: init (a scalar or a function of the indices)", loc)
        return RegisterTensor(_builder().register_tensor(_dtype(dtype, "register_tensor: dtype", loc),
                                                         _ints(shape, "register_tensor: shape", loc), init, loc))

    def declare(self, name, dtype, init):
        """A mutable scalar kernel variable (assign to it with `=` anywhere)."""
        loc = _here()
        if not isinstance(name, str) or not name.isidentifier():
            raise CompileError(f"{_where(loc)}declare: name must be an identifier (a str), got {_describe(name)}")
        return _declare_kernel_variable(_builder(), name, _dtype(dtype, "declare: dtype", loc),
                                        _scalar(init, "declare: init", loc), loc)

    # --- memory ----------------------------------------------------------------------------------
    def load_global(self, src, *, offsets, shape=None, dims=None, out=None):
        loc = _here()
        g = _tensor(src, "load_global", loc, GlobalTensor)
        if shape is None:
            raise CompileError(f"{_where(loc)}load_global: shape= is required")
        t = RegisterTensor(_builder().load_global(g, _exprs(offsets, "load_global: offsets", loc),
                                                  _ints(shape, "load_global: shape", loc),
                                                  _ints(dims, "load_global: dims", loc), loc))
        return self._into(out, t, loc, "load_global")

    def store_global(self, dst, src, *, offsets, dims=None):
        loc = _here()
        _builder().store_global(_tensor(dst, "store_global", loc, GlobalTensor), _tensor(src, "store_global", loc),
                                _exprs(offsets, "store_global: offsets", loc), _ints(dims, "store_global: dims", loc),
                                loc)

    def load_shared(self, src, *, out=None):
        loc = _here()
        t = RegisterTensor(_builder().load_shared(_tensor(src, "load_shared", loc, SharedTensor), loc))
        return self._into(out, t, loc, "load_shared")

    def store_shared(self, dst, src):
        loc = _here()
        _builder().store_shared(_tensor(dst, "store_shared", loc, SharedTensor), _tensor(src, "store_shared", loc), loc)

    def copy_async(self, src, dst, *, offsets, dims=None, evict=None, check_bounds=True):
        loc = _here()
        _builder().copy_async(_tensor(src, "copy_async", loc, GlobalTensor),
                              _tensor(dst, "copy_async", loc, SharedTensor),
                              _exprs(offsets, "copy_async: offsets", loc), _ints(dims, "copy_async: dims", loc),
                              _optional(evict, str, "copy_async: evict", loc),
                              _bool(check_bounds, "copy_async: check_bounds", loc), loc)

    def copy_async_commit_group(self):
        _builder().copy_async_commit_group(_here())

    def copy_async_wait_group(self, n):
        loc = _here()
        _builder().copy_async_wait_group(_int(n, "copy_async_wait_group: n", loc), loc)

    def copy_async_wait_all(self):
        _builder().copy_async_wait_all(_here())

    @staticmethod
    def _region(x, loc):
        if isinstance(x, Region):
            return x.tensor.t, x.offsets, x.extents
        if isinstance(x, TensorBase):
            return x.t, [], []
        raise CompileError(f"{_where(loc)}copy: expects a tensor or a tensor region, got {type(x).__name__}")

    def _copy(self, src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, commit, loc):
        s, so, se = self._region(src, loc)
        d, do, de = self._region(dst, loc)
        annotations = {str(k): str(v) for k, v in (annotations or {}).items()}
        _builder().copy(s, so, se, d, do, de, coalesced_width, bool(disable_tma), eviction_policy, annotations,
                        loop_layout, commit, loc)

    @staticmethod
    def _copy_options(what, loc, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None,
                      loop_layout=None):
        if coalesced_width is not None:
            _int(coalesced_width, f"{what}: coalesced_width", loc)
        _bool(disable_tma, f"{what}: disable_tma", loc)
        _optional(eviction_policy, str, f"{what}: eviction_policy", loc)
        _optional(annotations, dict, f"{what}: annotations", loc)
        _layout(loop_layout, f"{what}: loop_layout", loc)

    def copy(self, src, dst, *, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None,
             loop_layout=None):
        loc = _here()
        self._copy_options("copy", loc, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout)
        self._copy(src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, False, loc)

    def async_copy(self, src, dst, *, coalesced_width=None, annotations=None, loop_layout=None):
        loc = _here()
        self._copy_options("async_copy", loc, coalesced_width, annotations=annotations, loop_layout=loop_layout)
        self._copy(src, dst, coalesced_width, False, None, annotations, loop_layout, True, loc)

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

    def dot(self, a, b, c=None, *, out=None, acc_dtype=None):
        loc = _here()
        ta, tb = _tensor(a, "dot", loc), _tensor(b, "dot", loc)
        tc = None if c is None else _tensor(c, "dot", loc)
        acc_dtype = None if acc_dtype is None else _dtype(acc_dtype, "dot: acc_dtype", loc)
        return self._into(out, RegisterTensor(_builder().dot(ta, tb, tc, acc_dtype, loc)), loc, "dot")

    def cast(self, x, dtype):
        loc = _here()
        return RegisterTensor(_builder().cast(_tensor(x, "cast", loc), _dtype(dtype, "cast: dtype", loc), loc))

    def view(self, x, *, dtype=None, layout=None):
        loc = _here()
        dtype = None if dtype is None else _dtype(dtype, "view: dtype", loc)
        layout = _layout(layout, "view: layout", loc)
        return RegisterTensor(_builder().view(_tensor(x, "view", loc), dtype, layout, loc))

    def reshape(self, x, shape):
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "reshape", loc), _ints(shape, "reshape: shape", loc), loc))

    def squeeze(self, x, dims):
        loc = _here()
        return RegisterTensor(_builder().squeeze(_tensor(x, "squeeze", loc), _ints(dims, "squeeze: dims", loc), loc))

    def unsqueeze(self, x, dims):
        loc = _here()
        return RegisterTensor(_builder().unsqueeze(_tensor(x, "unsqueeze", loc), _ints(dims, "unsqueeze: dims", loc),
                                                   loc))

    def transpose(self, x):
        loc = _here()
        return RegisterTensor(_builder().transpose(_tensor(x, "transpose", loc), loc))

    def repeat(self, x, repeats):
        loc = _here()
        return RegisterTensor(_builder().repeat(_tensor(x, "repeat", loc), _ints(repeats, "repeat: repeats", loc), loc))

    def where(self, cond, x, y):
        loc = _here()
        return RegisterTensor(_builder().where(_tensor(cond, "where", loc), _operand(x, "where: x", loc),
                                               _operand(y, "where: y", loc), loc))

    def clip(self, x, lo, hi):
        loc = _here()
        return RegisterTensor(_builder().clip(_tensor(x, "clip", loc), _scalar(lo, "clip: lo", loc),
                                              _scalar(hi, "clip: hi", loc), loc))

    def maximum(self, a, b):
        return _binary("max", a, b, _here())

    def minimum(self, a, b):
        return _binary("min", a, b, _here())

    def _reduce(self, op, x, dims, dim, keepdim, loc):
        if dim is not None:
            if dims is not None:
                raise CompileError(f"{_where(loc)}{op}: give dim= or dims=, not both")
            dims = dim
        dims = None if dims is None else _ints(dims, f"{op}: dims", loc)
        keepdim = _bool(keepdim, f"{op}: keepdim", loc)
        return RegisterTensor(_builder().reduce(op, _tensor(x, op, loc), dims, keepdim, loc))

    def sum(self, x, *, dims=None, dim=None, keepdim=False):
        return self._reduce("sum", x, dims, dim, keepdim, _here())

    def max(self, x, *, dims=None, dim=None, keepdim=False):
        return self._reduce("max", x, dims, dim, keepdim, _here())

    def min(self, x, *, dims=None, dim=None, keepdim=False):
        return self._reduce("min", x, dims, dim, keepdim, _here())

    def any(self, x, *, dims=None, dim=None, keepdim=False):
        return self._reduce("any", x, dims, dim, keepdim, _here())

    def all(self, x, *, dims=None, dim=None, keepdim=False):
        return self._reduce("all", x, dims, dim, keepdim, _here())

    # --- synchronization, debugging, hints -----------------------------------------------------
    def sync(self):
        _builder().sync(_here())

    def printf(self, fmt, *args):
        loc = _here()
        if not isinstance(fmt, str):
            raise CompileError(f"{_where(loc)}printf: the format must be a str, got {_describe(fmt)}")
        _builder().printf(fmt, [_scalar(a, "printf: arguments", loc) for a in args], loc)

    def assume(self, cond):
        loc = _here()
        _builder().assume(_scalar(cond, "assume: the condition", loc), loc)

    def annotate_layout(self, t, layout):
        loc = _here()
        _builder().annotate_layout(_tensor(t, "annotate_layout", loc),
                                   _layout(layout, "annotate_layout: layout", loc, optional=False), loc)

    # --- control flow ----------------------------------------------------------------------------
    def range(self, *args, unroll=None):
        _fail("self.range(...) is only valid as the iterable of a `for` loop in __call__")

    def thread_group(self, thread_begin, num_threads):
        loc = _here()
        return _ThreadGroup("thread_group", _int(thread_begin, "thread_group: thread_begin", loc),
                            _int(num_threads, "thread_group: num_threads", loc), loc)

    def single_thread(self):
        return _ThreadGroup("single_thread", 0, 1, _here())

    def single_warp(self, warp=0):
        loc = _here()
        return _ThreadGroup("single_warp", _int(warp, "single_warp: warp", loc) * 32, 32, loc)

    def warp_group(self, warp_begin, num_warps):
        loc = _here()
        return _ThreadGroup("warp_group", _int(warp_begin, "warp_group: warp_begin", loc) * 32,
                            _int(num_warps, "warp_group: num_warps", loc) * 32, loc)


def _unary_method(op):
    def method(self, x):
        loc = _here()
        return RegisterTensor(_builder().unary(op, _tensor(x, op, loc), loc))

    method.__name__ = method.__qualname__ = op
    return method


_UNARY = ["abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "round", "square", "floor",
          "ceil"]
for _op in _UNARY:
    setattr(Script, _op, _unary_method(_op))

# Every public method is an instruction method (checked arguments, errors at the user's line);
# those that only compute a new tensor are pure.
_PURE = {"global_view", "shared_tensor", "register_tensor", "load_global", "load_shared", "dot", "cast", "view",
         "reshape", "squeeze", "unsqueeze", "transpose", "repeat", "where", "clip", "maximum", "minimum", "sum", "max",
         "min", "any", "all", *_UNARY}
for _name, _fn in list(vars(Script).items()):
    if not _name.startswith("_") and inspect.isfunction(_fn):
        setattr(Script, _name, _instruction(_fn, _name in _PURE))


def static_range(*args):
    """A loop that runs in Python while tracing (unrolled into the IR)."""
    for a in args:
        if isinstance(a, (Expr, TensorBase, Unusable)):
            _fail(f"static_range: its bounds must be Python ints (it runs while tracing), got {_describe(a)}; "
                  "a loop over run-time bounds is `for ... in range(...)`")
    try:
        return range(*args)
    except TypeError as e:
        _fail(f"static_range: {e}")
