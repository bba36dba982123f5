"""tilus.Script: kernels as Python classes, traced into the tile IR by the C++ core."""
import os
import sys
import threading

from . import _C
from ._C import CompileError, Expr

_tracing = threading.local()


# --- source locations ------------------------------------------------------------------------

def _here(depth=2):
    """(file, line) of the caller `depth` frames up: the user's line of an instruction call."""
    f = sys._getframe(depth)
    return (f.f_code.co_filename, f.f_lineno)


def _where(loc):
    return f"{loc[0]}:{loc[1]}: " if loc and loc[0] else ""


def _fail(msg, depth=3):
    raise CompileError(_where(_here(depth)) + msg)


def _builder(what="a tilus instruction"):
    b = getattr(_tracing, "builder", None)
    if b is None:
        raise CompileError(f"{what} can only be used while a Script is traced (inside its __call__)")
    return b


# --- values ------------------------------------------------------------------------------------

def _is_symbolic(v):
    return isinstance(v, (Expr, TensorBase))


class TensorBase:
    __slots__ = ("t", "depth")

    def __init__(self, t):
        self.t = t
        b = getattr(_tracing, "builder", None)
        self.depth = b.depth() if b is not None else 0

    @property
    def dtype(self):
        return self.t.dtype

    @property
    def shape(self):
        return self.t.shape

    def __repr__(self):
        return self.t.type_str()

    def __bool__(self):
        _fail(f"a tensor ({self.t.type_str()}) has no truth value while tracing")


class Region:
    """A box of a global or shared tensor (offsets, extents), or its head element (extents [])."""
    __slots__ = ("tensor", "offsets", "extents")

    def __init__(self, tensor, offsets, extents):
        self.tensor, self.offsets, self.extents = tensor, list(offsets), list(extents)


def _index_region(t, key, loc):
    """t[a:b, c, ...] as a Region; integer / expression indices fix a dim (extent 1)."""
    if not isinstance(key, tuple):
        key = (key,)
    shape = t.shape
    if len(key) > len(shape):
        raise CompileError(f"{_where(loc)}{len(key)} indices for {t.t.type_str()}")
    offsets, extents = [], []
    for d, k in enumerate(key):
        if isinstance(k, slice):
            if k.step not in (None, 1):
                raise CompileError(f"{_where(loc)}slices of tilus tensors take no step (dim {d})")
            lo = 0 if k.start is None else k.start
            hi = shape[d] if k.stop is None else k.stop
            offsets.append(lo)
            extents.append(hi - lo)
        else:
            offsets.append(k)
            extents.append(1)
    for d in range(len(key), len(shape)):
        offsets.append(0)
        extents.append(shape[d])
    return Region(t, offsets, extents)


class GlobalTensor(TensorBase):
    __slots__ = ()

    def __getitem__(self, key):
        return _index_region(self, key, _here())


class SharedTensor(TensorBase):
    __slots__ = ()

    def __getitem__(self, key):
        loc = _here()
        keys = key if isinstance(key, tuple) else (key,)
        if all(not isinstance(k, slice) for k in keys) and len(keys) < len(self.shape):
            return SharedTensor(_builder().index_shared(self.t, list(keys), loc))
        return _index_region(self, key, loc)


def _binary(op, a, b, loc):
    x = a.t if isinstance(a, RegisterTensor) else a
    y = b.t if isinstance(b, RegisterTensor) else b
    return RegisterTensor(_builder().binary(op, x, y, loc))


class RegisterTensor(TensorBase):
    __slots__ = ()

    def to(self, dtype):
        return RegisterTensor(_builder().cast(self.t, dtype, _here()))

    def transpose(self):
        return RegisterTensor(_builder().transpose(self.t, _here()))

    @property
    def T(self):
        return RegisterTensor(_builder().transpose(self.t, _here()))

    def __neg__(self):
        return RegisterTensor(_builder().unary("neg", self.t, _here()))

    def __invert__(self):
        return RegisterTensor(_builder().unary("not" if self.dtype.is_bool else "bitnot", self.t, _here()))

    def __abs__(self):
        return RegisterTensor(_builder().unary("abs", self.t, _here()))

    __hash__ = object.__hash__


def _def_op(name, op, reflected=True):
    def fwd(self, other):
        return _binary(op, self, other, _here())

    def rev(self, other):
        return _binary(op, other, self, _here())

    setattr(RegisterTensor, f"__{name}__", fwd)
    if reflected:
        setattr(RegisterTensor, f"__r{name}__", rev)


for _name, _op in [("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"),
                   ("mod", "floor_mod"), ("and", "&"), ("or", "|"), ("xor", "^"), ("lshift", "<<"),
                   ("rshift", ">>")]:
    _def_op(_name, _op)
for _name, _op in [("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!=")]:
    _def_op(_name, _op, reflected=False)


def _tensor(x, what, loc, cls=RegisterTensor):
    if isinstance(x, cls):
        return x.t
    want = {RegisterTensor: "a register tensor", SharedTensor: "a shared tensor", GlobalTensor: "a global tensor"}[cls]
    got = x.t.type_str() if isinstance(x, TensorBase) else type(x).__name__
    raise CompileError(f"{_where(loc)}{what}: expects {want}, got {got}")


def _ints(xs, what, loc):
    if xs is None:
        return []
    if isinstance(xs, (int, Expr)):
        xs = [xs]
    out = []
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, int):
            raise CompileError(f"{_where(loc)}{what} must be Python ints, got {x!r}")
        out.append(x)
    return out


def _exprs(xs, what, loc):
    if xs is None:
        return []
    if isinstance(xs, (int, Expr)):
        return [xs]
    try:
        return list(xs)
    except TypeError:
        raise CompileError(f"{_where(loc)}{what} must be a list of indices, got {xs!r}") from None


class Attrs:
    """self.attrs.blocks / .warps / .cluster: handed to the tracer as soon as they are set."""

    def __init__(self):
        object.__setattr__(self, "_values", {})

    def __setattr__(self, name, value):
        loc = _here()
        if name not in ("blocks", "warps", "cluster"):
            raise CompileError(f"{_where(loc)}unknown kernel attribute '{name}' (blocks, warps, cluster)")
        self._values[name] = value
        b = getattr(_tracing, "builder", None)
        if b is None:
            return
        if name == "blocks":
            blocks = list(value) if isinstance(value, (list, tuple)) else [value]
            b.set_blocks(blocks, loc)
        elif name == "warps":
            if not isinstance(value, int) or isinstance(value, bool):
                raise CompileError(f"{_where(loc)}attrs.warps must be a Python int, got {value!r}")
            b.set_warps(value, loc)
        else:
            b.set_cluster(list(value), loc)

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


# --- the runtime helpers of the normalized body (transform.py) ----------------------------------

class _Unbound:
    def __repr__(self):
        return "<unbound>"


def _named(b, name, value, loc):
    """A symbolic scalar bound to a Python name becomes a named `let` (computed once, shown by
    name in the IR); everything else is bound as is."""
    if isinstance(value, Expr) and not isinstance(value, _C.Var) and not value.is_const():
        return b.let(name, value, loc)
    return value


class _Runtime:
    UNBOUND = _Unbound()

    @staticmethod
    def symbolic(v):
        if isinstance(v, TensorBase):
            raise CompileError(f"{_where(_here())}a tensor ({v.t.type_str()}) used as a condition; "
                               "reduce it to a scalar first")
        return isinstance(v, Expr)

    @staticmethod
    def loop(script, name, line, *args, unroll=None):
        loc = (_here()[0], line)
        if not 1 <= len(args) <= 3:
            raise CompileError(f"{_where(loc)}range takes 1 to 3 arguments, got {len(args)}")
        begin, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        for v in (begin, end, step):
            if isinstance(v, float) or (isinstance(v, Expr) and not (v.dtype.is_integer)):
                raise CompileError(f"{_where(loc)}range bounds must be integers, got {v!r}")
        u = 0 if unroll is None else (-1 if unroll is True else int(unroll))
        b = _builder()
        var = b.begin_for(name, begin, end, step, u, loc)
        yield var
        b.end_for()

    @staticmethod
    def begin_if(script, cond, line):
        _builder().begin_if(cond, (_here()[0], line))

    @staticmethod
    def begin_else(script, line):
        _builder().begin_else((_here()[0], line))

    @staticmethod
    def begin_while(script, cond, line):
        _builder().begin_while(cond, (_here()[0], line))

    @staticmethod
    def end(script, what):
        b = _builder()
        {"if": b.end_if, "else": b.end_else, "while": b.end_while}[what]()

    @staticmethod
    def brk(script, line):
        _builder().emit_break((_here()[0], line))

    @staticmethod
    def cont(script, line):
        _builder().emit_continue((_here()[0], line))

    @staticmethod
    def python_jump_error(word, line):
        raise CompileError(f"{_here()[0]}:{line}: `{word}` of a Python loop under a condition that is only known "
                           "when the kernel runs; use an IR loop (range) or a Python condition")

    @staticmethod
    def rebind(script, name, old, value, line, mutable):
        b = _builder()
        depth = b.depth()
        bound = _tracing.bound
        loc = (_here()[0], line)
        if old is _Runtime.UNBOUND or name not in bound:
            bound[name] = depth
            if isinstance(value, Expr) and id(value) in _tracing.mutables:
                return value  # self.declare(...) already made it a kernel variable
            if mutable and isinstance(value, Expr):
                var = b.declare(name, value.dtype, value, loc)
                _tracing.mutables.add(id(var))
                _tracing.keep.append(var)
                return var
            return _named(b, name, value, loc)
        if isinstance(old, Expr) and id(old) in _tracing.mutables:
            if isinstance(value, TensorBase):
                raise CompileError(f"{_where(loc)}cannot assign a tensor to scalar variable '{name}'")
            b.assign(old, value, loc)
            return old
        if depth <= bound[name]:
            bound[name] = depth
            return _named(b, name, value, loc)
        # Reassigned inside an IR loop or branch deeper than where it was bound.
        if isinstance(old, RegisterTensor) and isinstance(value, RegisterTensor):
            if old.t.same_as(value.t):
                return old
            b.assign_tensor(old.t, value.t, loc)
            return old
        if isinstance(old, TensorBase) or isinstance(value, TensorBase):
            raise CompileError(f"{_where(loc)}'{name}' is rebound inside a loop or branch to a different kind of "
                               f"value ({old!r} -> {value!r})")
        raise CompileError(
            f"{_where(loc)}'{name}' was bound outside this loop or branch to {old!r}, a value fixed when the kernel is "
            f"traced; to change it at run time make it a kernel variable: {name} = self.declare({name!r}, int32, ...)")


# --- the Script base class ----------------------------------------------------------------------

class Script:
    """Base class of tilus kernels (see docs/python.md).

    Subclasses take hyperparameters in ``__init__`` and define the kernel body as ``__call__``;
    calling an instance launches the kernel (compiling it on the first call for each
    specialization).
    """

    def __init__(self):
        self.attrs = Attrs()
        self.blockIdx = _BlockIdx()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        body = cls.__dict__.get("__call__")
        if body is None:
            return
        cls._tilus_body = body
        from .launch import launch as _launch

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
        if dtype is None:
            if not isinstance(ptr, Expr) or not ptr.dtype.is_pointer:
                raise CompileError(f"{_where(loc)}global_view: needs dtype= for {ptr!r}")
            dtype = ptr.dtype.pointee
        name = ptr.name if isinstance(ptr, _C.Var) else "g"
        return GlobalTensor(_builder().global_view(ptr, dtype, _exprs(shape, "shape", loc),
                                                   _exprs(strides, "strides", loc), loc, name))

    def shared_tensor(self, *, dtype, shape):
        loc = _here()
        return SharedTensor(_builder().shared_tensor(dtype, _ints(shape, "shared_tensor shape", loc), loc))

    def free_shared(self, t):
        loc = _here()
        _builder().free_shared(_tensor(t, "free_shared", loc, SharedTensor), loc)

    def register_tensor(self, *, dtype, shape, init=None):
        loc = _here()
        return RegisterTensor(_builder().register_tensor(dtype, _ints(shape, "register_tensor shape", loc), init, loc))

    def declare(self, name, dtype, init):
        """A mutable scalar kernel variable (assign to it with `=` anywhere)."""
        loc = _here()
        var = _builder().declare(name, dtype, init, loc)
        _tracing.mutables.add(id(var))
        _tracing.keep.append(var)
        return var

    # --- memory ----------------------------------------------------------------------------------
    def load_global(self, src, *, offsets, shape=None, dims=None, out=None):
        loc = _here()
        g = _tensor(src, "load_global", loc, GlobalTensor)
        if shape is None:
            raise CompileError(f"{_where(loc)}load_global: shape= is required")
        t = RegisterTensor(_builder().load_global(g, _exprs(offsets, "offsets", loc), _ints(shape, "shape", loc),
                                                  _ints(dims, "dims", loc), loc))
        return self._into(out, t, loc)

    def store_global(self, dst, src, *, offsets, dims=None):
        loc = _here()
        _builder().store_global(_tensor(dst, "store_global", loc, GlobalTensor), _tensor(src, "store_global", loc),
                                _exprs(offsets, "offsets", loc), _ints(dims, "dims", loc), loc)

    def load_shared(self, src, *, out=None):
        loc = _here()
        t = RegisterTensor(_builder().load_shared(_tensor(src, "load_shared", loc, SharedTensor), loc))
        return self._into(out, t, loc)

    def store_shared(self, dst, src):
        loc = _here()
        _builder().store_shared(_tensor(dst, "store_shared", loc, SharedTensor), _tensor(src, "store_shared", loc), loc)

    def copy_async(self, src, dst, *, offsets, dims=None, evict=None, check_bounds=True):
        loc = _here()
        _builder().copy_async(_tensor(src, "copy_async", loc, GlobalTensor), _tensor(dst, "copy_async", loc, SharedTensor),
                              _exprs(offsets, "offsets", loc), _ints(dims, "dims", loc), evict, bool(check_bounds), loc)

    def copy_async_commit_group(self):
        _builder().copy_async_commit_group(_here())

    def copy_async_wait_group(self, n):
        _builder().copy_async_wait_group(n, _here())

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

    def copy(self, src, dst, *, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None,
             loop_layout=None):
        self._copy(src, dst, coalesced_width, disable_tma, eviction_policy, annotations, loop_layout, False, _here())

    def async_copy(self, src, dst, *, coalesced_width=None, annotations=None, loop_layout=None):
        self._copy(src, dst, coalesced_width, False, None, annotations, loop_layout, True, _here())

    # --- compute ---------------------------------------------------------------------------------
    def _into(self, out, t, loc):
        if out is None:
            return t
        _builder().assign_tensor(_tensor(out, "out=", loc), t.t, loc)
        return out

    def dot(self, a, b, c=None, *, out=None, acc_dtype=None):
        loc = _here()
        ta, tb = _tensor(a, "dot", loc), _tensor(b, "dot", loc)
        tc = None if c is None else _tensor(c, "dot", loc)
        return self._into(out, RegisterTensor(_builder().dot(ta, tb, tc, acc_dtype, loc)), loc)

    def cast(self, x, dtype):
        loc = _here()
        return RegisterTensor(_builder().cast(_tensor(x, "cast", loc), dtype, loc))

    def view(self, x, *, dtype=None, layout=None):
        loc = _here()
        return RegisterTensor(_builder().view(_tensor(x, "view", loc), dtype, layout, loc))

    def reshape(self, x, shape):
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "reshape", loc), list(shape), loc))

    def squeeze(self, x, dims):
        loc = _here()
        return RegisterTensor(_builder().squeeze(_tensor(x, "squeeze", loc), _ints(dims, "dims", loc), loc))

    def unsqueeze(self, x, dims):
        loc = _here()
        return RegisterTensor(_builder().unsqueeze(_tensor(x, "unsqueeze", loc), _ints(dims, "dims", loc), loc))

    def transpose(self, x):
        loc = _here()
        return RegisterTensor(_builder().transpose(_tensor(x, "transpose", loc), loc))

    def repeat(self, x, repeats):
        loc = _here()
        return RegisterTensor(_builder().repeat(_tensor(x, "repeat", loc), _ints(repeats, "repeats", loc), loc))

    def where(self, cond, x, y):
        loc = _here()
        xs = x.t if isinstance(x, RegisterTensor) else x
        ys = y.t if isinstance(y, RegisterTensor) else y
        return RegisterTensor(_builder().where(_tensor(cond, "where", loc), xs, ys, loc))

    def clip(self, x, lo, hi):
        loc = _here()
        return RegisterTensor(_builder().clip(_tensor(x, "clip", loc), lo, hi, loc))

    def maximum(self, a, b):
        return _binary("max", a, b, _here())

    def minimum(self, a, b):
        return _binary("min", a, b, _here())

    def _reduce(self, op, x, dims, dim, keepdim, loc):
        if dim is not None:
            dims = [dim] if isinstance(dim, int) else list(dim)
        return RegisterTensor(_builder().reduce(op, _tensor(x, op, loc), None if dims is None else _ints(dims, "dims", loc),
                                                bool(keepdim), loc))

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
        _builder().printf(fmt, list(args), _here())

    def assume(self, cond):
        _builder().assume(cond, _here())

    def annotate_layout(self, t, layout):
        loc = _here()
        _builder().annotate_layout(_tensor(t, "annotate_layout", loc), layout, loc)

    # --- control flow ----------------------------------------------------------------------------
    def range(self, *args, unroll=None):
        _fail("self.range(...) is only valid as the iterable of a `for` loop in __call__")

    def thread_group(self, thread_begin, num_threads):
        return _ThreadGroup("thread_group", thread_begin, num_threads, _here())

    def single_thread(self):
        return _ThreadGroup("single_thread", 0, 1, _here())

    def single_warp(self, warp=0):
        return _ThreadGroup("single_warp", warp * 32, 32, _here())

    def warp_group(self, warp_begin, num_warps):
        return _ThreadGroup("warp_group", warp_begin * 32, num_warps * 32, _here())


def _unary_method(op):
    def method(self, x):
        loc = _here()
        return RegisterTensor(_builder().unary(op, _tensor(x, op, loc), loc))

    method.__name__ = op
    return method


for _op in ["abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "round", "square", "floor",
            "ceil"]:
    setattr(Script, _op, _unary_method(_op))


def static_range(*args):
    """A loop that runs in Python while tracing (unrolled into the IR)."""
    return range(*args)


def env_flag(name):
    v = os.environ.get(name, "")
    return v not in ("", "0", "false", "False")
