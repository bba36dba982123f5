"""tilus.Script: kernels as Python classes, traced into the tile IR by the C++ core."""
from . import _C
from .launch import launch as _launch
from ._C import CompileError, Expr
from .tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, _binary, _builder, _fail, _here,
                      _tracing, _where)


# --- argument helpers of the Script methods ------------------------------------------------------

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
            blocks = list(value) if isinstance(value, (list, tuple)) else [value]
            b.set_blocks(blocks, loc)
        elif name == "warps":
            if not isinstance(value, int) or isinstance(value, bool):
                raise CompileError(f"{_where(loc)}attrs.warps must be a Python int, got {value!r}")
            b.set_warps(value, loc)
        else:
            b.set_cluster(list(value) if isinstance(value, (list, tuple)) else [value], loc)

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
