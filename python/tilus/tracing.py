"""The tracing state of a thread and the values a traced Script body handles (tensors and
regions), shared by the Script methods (script.py), the helpers of the normalized body
(transform.py) and the tracer entry point (launch.py). It imports no other tilus module."""
import contextlib
import sys
import threading

from ._C import CompileError

_tracing = threading.local()


@contextlib.contextmanager
def tracing(builder):
    """Instruction calls of this thread go to `builder` until the block ends (an outer trace
    is restored after it)."""
    saved = dict(_tracing.__dict__)
    _tracing.builder, _tracing.bound, _tracing.mutables, _tracing.keep = builder, {}, set(), []
    try:
        yield builder
    finally:
        _tracing.__dict__.clear()
        _tracing.__dict__.update(saved)


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
