"""The tracing state of a thread and the values a traced Script body handles (tensors and
regions), shared by the Script methods (script.py), the helpers of the normalized body
(transform_runtime.py) and the tracer entry point (launch.py). It imports no other tilus module."""
import contextlib
import os
import re
import sys
import threading
from typing import TYPE_CHECKING, List, NoReturn, Union

from ._C import CompileError, DataType, Expr

_tracing = threading.local()
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class TilusWarning(UserWarning):
    """A program tilus accepts but that probably does not do what was meant (for example the
    discarded result of an instruction that only computes)."""


@contextlib.contextmanager
def tracing(builder):
    """Instruction calls of this thread go to `builder` until the block ends (an outer trace
    is restored after it)."""
    saved = dict(_tracing.__dict__)
    _tracing.builder, _tracing.bound, _tracing.mutables, _tracing.keep = builder, {}, set(), []
    _tracing.named = set()  # ids of the tensors bound to a name (see transform_runtime._Runtime.rebind)
    _tracing.scopes = {}  # id of a kernel variable -> the scope path it was declared in
    try:
        yield builder
    finally:
        _tracing.__dict__.clear()
        _tracing.__dict__.update(saved)


# --- source locations ------------------------------------------------------------------------

def _user_frame(f):
    """The innermost frame at or above `f` that is not tilus' own: the user's code."""
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back
    return f


def _here():
    """(file, line) of the user's code that called into tilus: the line of an instruction call."""
    f = _user_frame(sys._getframe(1))
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)


def _raised_at(tb):
    """(file, line) of the innermost user frame of a traceback, or None."""
    at = None
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
            at = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return at


def _describe(x):
    """A value as an error message shows it: tensors with their type, scalars with their dtype."""
    if isinstance(x, TensorBase):
        return x.t.type_str()
    if isinstance(x, Region):
        return f"a region of {x.tensor.t.type_str()}"
    if isinstance(x, Expr):
        return f"{x!r} ({x.dtype!r})"
    text = repr(x)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(x).__name__} {text}"


def _where(loc):
    return f"{loc[0]}:{loc[1]}: " if loc and loc[0] else ""


_LOCATED = re.compile(r"^.+?:\d+: ")


def _located(message):
    """Whether an error message starts with a file:line."""
    return _LOCATED.match(message) is not None


def _fail(msg) -> NoReturn:
    raise CompileError(_where(_here()) + msg)


def _declare_kernel_variable(b, name, dtype, init, loc, outside=False):
    """A mutable scalar of the kernel (assigned, not rebound, when its name is assigned again);
    `outside`: declared before the innermost open scope."""
    var = (b.declare_outside if outside else b.declare)(name, dtype, init, loc)
    path = tuple(b.scope_path())
    _tracing.scopes[id(var)] = path[:-1] if outside else path  # where the variable is visible
    _tracing.mutables.add(id(var))
    _tracing.keep.append(var)
    return var


def _set_attribute(obj, name, value):
    """``obj.name = value`` in a traced body, for a Script or a tilus.Class instance: an attribute
    holding a kernel variable is assigned (an IR assignment, the attribute keeps the variable); one
    holding a register tensor bound outside the current loop or branch has the tensor assigned
    into it; anything else is stored."""
    b = getattr(_tracing, "builder", None)
    if b is None:
        object.__setattr__(obj, name, value)
        return
    old = obj.__dict__.get(name, _NOTHING)
    depths = _tracing.__dict__.setdefault("attribute_depths", {})
    key = (id(obj), name)
    loc = _here()
    if isinstance(value, Unusable):
        raise value.error()
    if value is old:
        return
    if isinstance(old, Expr) and id(old) in _tracing.mutables:
        if isinstance(value, TensorBase):
            raise CompileError(f"{_where(loc)}cannot assign a tensor to the kernel variable '{name}'")
        b.assign(old, value, loc)
        return
    depth = b.depth()
    if key in depths and depth > depths[key]:  # reassigned inside a loop or branch deeper than its binding
        if isinstance(old, RegisterTensor) and isinstance(value, RegisterTensor):
            if not old.t.same_as(value.t):
                b.assign_tensor(old.t, value.t, loc)
            return
        if isinstance(old, (Expr, TensorBase)) or isinstance(value, (Expr, TensorBase)):
            raise CompileError(f"{_where(loc)}attribute '{name}' was set outside this loop or branch to "
                               f"{_describe(old)}; to change it while the kernel runs make it a kernel variable "
                               f"where it is first set: self.{name}: int32 = ...")
    depths[key] = depth
    object.__setattr__(obj, name, value)


_NOTHING = object()


def _builder(what="a tilus instruction"):
    b = getattr(_tracing, "builder", None)
    if b is None:
        raise CompileError(f"{what} can only be used while a Script is traced (inside its __call__)")
    return b


def _dtype(x, what, loc):
    """`x` as a data type; a clear error for anything else (names as strings included)."""
    if isinstance(x, DataType):
        return x
    hint = f" (write tilus.{x} or tilus.dtype({x!r}))" if isinstance(x, str) else ""
    raise CompileError(f"{_where(loc)}{what} must be a tilus data type (tilus.float16, tilus.int32, ...), got "
                       f"{_describe(x)}{hint}")


def _is_scalar(x):
    """A value an instruction takes as a scalar operand: a Python or numpy number, or an Expr."""
    if isinstance(x, (bool, int, float, Expr)):
        return True
    return not isinstance(x, (str, bytes, TensorBase, Region, Unusable)) and (
        hasattr(x, "__index__") or hasattr(x, "__float__"))


# --- values ------------------------------------------------------------------------------------

class Unusable:
    """The value of a name that cannot be used where it stands: bound only in one branch of a
    symbolic `if`, or only inside an IR loop, and used after it. Any use is a CompileError."""
    __slots__ = ("name", "why")

    def __init__(self, name, why):
        self.name, self.why = name, why

    def error(self):
        """The CompileError that a use of this name raises."""
        return CompileError(f"{_where(_here())}'{self.name}' {self.why}")

    def __repr__(self):
        return f"<'{self.name}': unusable here>"

    def _use(self, *args, **kw):
        raise self.error()

    __bool__ = __index__ = __int__ = __float__ = __iter__ = __len__ = __call__ = __getitem__ = _use
    __str__ = __format__ = _use
    __neg__ = __pos__ = __invert__ = __abs__ = _use
    __hash__ = object.__hash__


for _name in ["add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "lshift", "rshift", "pow",
              "matmul"]:
    setattr(Unusable, f"__{_name}__", Unusable._use)
    setattr(Unusable, f"__r{_name}__", Unusable._use)
for _name in ["lt", "le", "gt", "ge"]:
    setattr(Unusable, f"__{_name}__", Unusable._use)


class TensorBase:
    """A tensor of a traced Script body: the base of GlobalTensor, SharedTensor and RegisterTensor."""
    __slots__ = {"t": "the core's tensor (tilus._C.Tensor) this value stands for",
                 "depth": "the tracer's scope depth where the tensor was made"}

    def __init__(self, t):
        self.t = t
        b = getattr(_tracing, "builder", None)
        self.depth = b.depth() if b is not None else 0

    @property
    def dtype(self) -> DataType:
        """The element data type (tilus.float16, ...)."""
        return self.t.dtype

    @property
    def shape(self) -> List[Union[int, Expr]]:
        """The extents, a list: Python ints, or kernel scalars (Expr) for a global tensor's dynamic dims."""
        return self.t.shape

    def __repr__(self):
        return self.t.type_str()

    def __bool__(self):
        _fail(f"a tensor ({self.t.type_str()}) has no truth value while tracing")


class Region:
    """A box of a global or shared tensor (offsets, extents), or its head element (extents []).

    ``g[a:b, c:d]`` makes one (an integer index fixes a dim with extent 1); it is an operand of
    ``Script.copy`` and ``Script.async_copy``.
    """
    __slots__ = {"tensor": "the GlobalTensor or SharedTensor the region is a box of",
                 "offsets": "where the box starts, one per dim of the tensor (ints or kernel scalars)",
                 "extents": "the box's extent in each dim (ints or kernel scalars); [] for the head element"}

    def __init__(self, tensor, offsets, extents):
        self.tensor, self.offsets, self.extents = tensor, list(offsets), list(extents)

    def item(self):
        """The element ``g[i, j, ...]`` of a global tensor as a kernel scalar (NVIDIA Tilus's
        ``.item()``): every thread of the group loads it (zero where it is out of bounds)."""
        loc = _here()
        self._one_global_element("item()", "an item", loc)
        b = _builder("item()")
        x = b.load_global(self.tensor.t, self.offsets, [1] * len(self.extents), [], loc)
        return b.item(x, loc)

    def item_ptr(self):
        """The address of the element ``g[i, j, ...]`` of a global tensor (NVIDIA Tilus's
        ``.item_ptr()``), a pointer such as ``lock_semaphore`` takes; of a shared tensor's element
        ``s[i, j]``, its generic address (as ``SharedTensor.item_ptr()``)."""
        loc = _here()
        if isinstance(self.tensor, SharedTensor) and all(isinstance(e, int) and e == 1 for e in self.extents):
            return _builder("item_ptr()").item_ptr(self.tensor.t, self.offsets, loc)
        self._one_global_element("item_ptr()", "an address", loc)
        return _builder("item_ptr()").item_ptr(self.tensor.t, self.offsets, loc)

    def _one_global_element(self, what, has, loc):
        if not isinstance(self.tensor, GlobalTensor):
            raise CompileError(f"{_where(loc)}{what}: only an element of a global tensor has {has} here, "
                               f"got a region of {self.tensor.t.type_str()}")
        if any(not (isinstance(e, int) and e == 1) for e in self.extents):
            raise CompileError(f"{_where(loc)}{what}: the region of {self.tensor.t.type_str()} has extents "
                               f"{self.extents}; index every dim (g[i, j]) for one element")


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
    """A tensor in global memory (``Script.global_view``): dynamic shape, strides in elements.

    ``g[a:b, c:d]`` (slices without a step; integer or scalar indices fix a dim) is a Region
    for ``Script.copy`` / ``Script.async_copy``; whole tiles are read and written with
    ``Script.load_global`` / ``store_global`` / ``copy_async``. A slice's extent is
    ``stop - start``, simplified (``g[i0:i0 + 16]`` has extent 16).
    """
    __slots__ = ()

    def __getitem__(self, key):
        """The Region ``g[a:b, c, ...]`` (slices and indices; missing trailing dims are whole)."""
        return _index_region(self, key, _here())


class SharedTensor(TensorBase):
    """A tensor in shared memory (``Script.shared_tensor``): static shape, shared layout.

    ``s[i]`` (integer or scalar indices, fewer than its rank) is the sub-tensor with the leading
    dims fixed, a view; ``s[a:b, c:d]`` is a Region for ``Script.copy``.
    """
    __slots__ = ()

    @property
    def nbytes(self) -> int:
        """The bytes the tensor's elements occupy (bit-packed for sub-byte types): what a TMA copy of
        it transfers (``mbarrier.arrive_and_expect_tx(bar, s.nbytes)``)."""
        n = 1
        for d in self.shape:
            n *= d
        return self.dtype.storage_bytes(n)

    def __getitem__(self, key):
        """``s[i]``: the shared sub-tensor with the leading dims fixed (a view); with slices, a Region."""
        loc = _here()
        keys = key if isinstance(key, tuple) else (key,)
        if all(not isinstance(k, slice) for k in keys) and len(keys) < len(self.shape):
            return SharedTensor(_builder().index_shared(self.t, list(keys), loc))
        return _index_region(self, key, loc)

    def item_ptr(self):
        """The generic address of this tensor's first element, a pointer to its dtype (NVIDIA
        Tilus's ``SharedTensor.item_ptr()``; ``s[i].item_ptr()`` for another element). What is
        read or written through it is the kernel's own: no pass sees those accesses (order them
        with ``sync()``)."""
        loc = _here()
        return _builder("item_ptr()").item_ptr(self.t, [], loc)

    def permute(self, dims) -> "SharedTensor":
        """A view of this tensor with its dims reordered: view dim k is dim ``dims[k]``."""
        return SharedTensor(_builder().permute_shared(self.t, [int(d) for d in dims], _here()))

    def transpose(self) -> "SharedTensor":
        """The transposed view of this rank-2 tensor (``permute([1, 0])``): what ``wgmma.mma`` takes as
        ``b`` for a tile stored [n, k]."""
        return SharedTensor(_builder().permute_shared(self.t, [1, 0], _here()))

    @property
    def T(self) -> "SharedTensor":
        """The transposed view, as ``transpose()``."""
        return SharedTensor(_builder().permute_shared(self.t, [1, 0], _here()))

    def tolist(self) -> list:
        """The elements of this rank-1 tensor as a list (``s[0]``, ``s[1]``, ...): the barriers of an
        ``mbarrier.alloc`` one by one (``a, b = self.mbarrier.alloc([1, 1]).tolist()``)."""
        loc = _here()
        if len(self.shape) != 1:
            raise CompileError(f"{_where(loc)}tolist(): a rank-1 shared tensor has a list of elements, got "
                               f"{self.t.type_str()}")
        return [Region(self, [i], [1]) for i in range(self.shape[0])]


class TMemoryTensor(TensorBase):
    """A tensor in Blackwell's tensor memory (``self.tcgen05.alloc``): static shape [lanes, columns...],
    dim 0 over the block's tensor-memory lanes (32, 64 or 128), the others over its 32-bit columns.

    ``t[:, i, :]`` (an index or a scalar fixes a column dim; the lane dim stays whole) is the
    sub-tensor at that index, a view (``tcgen05.slice``); ``self.tcgen05.load`` / ``store`` move a
    rank-2 one to and from registers.
    """
    __slots__ = ()

    def __getitem__(self, key):
        """``t[:, i, ...]``: the view with the indexed dims fixed (whole slices ``:`` keep a dim)."""
        loc = _here()
        keys = key if isinstance(key, tuple) else (key,)
        indices = []
        for d, k in enumerate(keys):
            if isinstance(k, slice):
                if k != slice(None):
                    raise CompileError(f"{_where(loc)}indexing {self.t.type_str()}: dim {d} takes ':' or an index; "
                                       "slice a range with tcgen05.slice(t, offsets, dims, shape)")
                indices.append(None)
            else:
                indices.append(k)
        return TMemoryTensor(_builder().tcgen05_index(self.t, indices, loc))


def _binary(op, a, b, loc):
    for v in (a, b):
        if isinstance(v, Unusable):
            raise v.error()
        if not isinstance(v, RegisterTensor) and not _is_scalar(v):
            raise CompileError(f"{_where(loc)}{_OP_NAMES.get(op, op)}: operands must be register tensors or scalars, "
                               f"got {_describe(a)} and {_describe(b)}")
    x = a.t if isinstance(a, RegisterTensor) else a
    y = b.t if isinstance(b, RegisterTensor) else b
    return RegisterTensor(_builder().binary(op, x, y, loc))


class RegisterTensor(TensorBase):
    """A tile in the registers of the block's threads: static shape, register layout (inferred).

    Operators ``+ - * / // % & | ^ << >>``, comparisons (bool tensors) and unary ``- ~ abs()``
    work elementwise with numpy broadcasting; a Python scalar next to a tensor takes the
    tensor's dtype. ``//`` and ``%`` round toward negative infinity (as in Python); ``/`` of
    integers truncates (as in C).
    """
    __slots__ = ()

    def item(self):
        """The one element of this tensor as a kernel scalar (NVIDIA Tilus's ``.item()``); every
        thread of the group holds it."""
        loc = _here()
        return _builder("item()").item(self.t, loc)

    def to(self, dtype: DataType) -> "RegisterTensor":
        """This tensor converted elementwise to ``dtype`` (``Script.cast``)."""
        loc = _here()
        return RegisterTensor(_builder().cast(self.t, _dtype(dtype, ".to()", loc), loc))

    def transpose(self) -> "RegisterTensor":
        """The transpose of this rank-2 tensor (``Script.transpose``)."""
        return RegisterTensor(_builder().transpose(self.t, _here()))

    def squeeze(self, dim) -> "RegisterTensor":
        """This tensor without its dims ``dim`` (an int or a list; each of extent 1), as
        ``Script.squeeze`` (NVIDIA Tilus's tensor method)."""
        return self._reshaped("squeeze", dim)

    def unsqueeze(self, dim) -> "RegisterTensor":
        """This tensor with dims of extent 1 inserted at ``dim`` (an int or a list), as
        ``Script.unsqueeze`` (NVIDIA Tilus's tensor method)."""
        return self._reshaped("unsqueeze", dim)

    def _reshaped(self, what, dim):
        loc = _here()
        dims = [dim] if isinstance(dim, int) and not isinstance(dim, bool) else dim
        if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise CompileError(f"{_where(loc)}{what}: dim must be an int or a list of ints, got {dim!r}")
        return RegisterTensor(getattr(_builder(), what)(self.t, list(dims), loc))

    @property
    def T(self) -> "RegisterTensor":
        """The transpose of this rank-2 tensor, as ``transpose()``."""
        return RegisterTensor(_builder().transpose(self.t, _here()))

    def _element_mask(self, key, loc):
        """A bool tensor of this shape, true at the element ``key`` names (one index per dim)."""
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) != len(self.shape) or not all(_is_scalar(k) and not isinstance(k, float) for k in keys):
            raise CompileError(f"{_where(loc)}indexing {_describe(self)}: one integer index per dim (a Python int or "
                               f"an integer kernel scalar), got {key!r}; a register tensor has no views or slices")
        mask = None
        for d, k in enumerate(keys):
            axis = RegisterTensor(_builder().register_tensor(DataType.from_name("int32"), list(self.shape),
                                                             lambda *ix, d=d: ix[d], loc))
            m = _binary("==", axis, k, loc)
            mask = m if mask is None else _binary("&", mask, m, loc)
        return mask

    def __getitem__(self, key):
        """``r[i, j]`` (one index per dim, ints or kernel scalars): that element as a rank-0 register
        tensor every thread of the group holds (NVIDIA Tilus keeps pipeline phases this way:
        ``mbarrier.wait(bar, phase=phases[stage])``). Computed as a masked reduction, so the index
        may be anything at run time."""
        loc = _here()
        mask = self._element_mask(key, loc)
        zero = False if self.dtype.is_bool() else 0
        picked = RegisterTensor(_builder().where(mask.t, self.t, zero, loc))
        return RegisterTensor(_builder().reduce("any" if self.dtype.is_bool() else "sum", picked.t, None, False, loc))

    def __setitem__(self, key, value):
        """``r[i, j] = v`` (``r[i] ^= 1`` too): writes ``v`` (a scalar or a one-element tensor) into that
        element; the others keep their values."""
        loc = _here()
        mask = self._element_mask(key, loc)
        v = value.t if isinstance(value, RegisterTensor) else value
        if isinstance(value, RegisterTensor) and value.dtype != self.dtype:
            v = _builder().cast(value.t, self.dtype, loc)
        _builder().assign_tensor(self.t, _builder().where(mask.t, v, self.t, loc), loc)

    def __neg__(self):
        return RegisterTensor(_builder().unary("neg", self.t, _here()))

    def __invert__(self):
        return RegisterTensor(_builder().unary("not" if self.dtype.is_bool() else "bitnot", self.t, _here()))

    def __abs__(self):
        return RegisterTensor(_builder().unary("abs", self.t, _here()))

    __hash__ = object.__hash__

    if TYPE_CHECKING:
        # The binary operators _def_op sets below, as type checkers and IDEs see them.
        def __add__(self, other: Union["RegisterTensor", float, Expr]) -> "RegisterTensor": ...
        __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __add__
        __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __and__ = __rand__ = __or__ = __ror__ = __add__
        __xor__ = __rxor__ = __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __add__
        __lt__ = __le__ = __gt__ = __ge__ = __add__
        __eq__ = __ne__ = __add__  # type: ignore[assignment]


def _def_op(name, op, reflected=True):
    def fwd(self, other):
        return _binary(op, self, other, _here())

    def rev(self, other):
        return _binary(op, other, self, _here())

    setattr(RegisterTensor, f"__{name}__", fwd)
    if reflected:
        setattr(RegisterTensor, f"__r{name}__", rev)


_ARITHMETIC = [("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"), ("mod", "floor_mod"),
               ("and", "&"), ("or", "|"), ("xor", "^"), ("lshift", "<<"), ("rshift", ">>")]
_COMPARISONS = [("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!=")]
_OP_NAMES = {"floor_mod": "%", "max": "maximum", "min": "minimum"}
for _name, _op in _ARITHMETIC:
    _def_op(_name, _op)
for _name, _op in _COMPARISONS:
    _def_op(_name, _op, reflected=False)


def _not_in_registers(name, op):
    def fail(self, *other):
        raise CompileError(f"{_where(_here())}{_OP_NAMES.get(op, op)}: arithmetic takes register tensors, got "
                           f"{self.t.type_str()} (load it into registers first: self.load_global / self.load_shared)")

    for cls in (GlobalTensor, SharedTensor):
        setattr(cls, f"__{name}__", fail)
        if name not in ("lt", "le", "gt", "ge"):
            setattr(cls, f"__r{name}__", fail)


for _name, _op in _ARITHMETIC + _COMPARISONS[:4]:
    _not_in_registers(_name, _op)


def _scalars(what, *xs):
    """Checks the operands of a scalar function (tilus.cdiv, ...) as the Script methods do."""
    for x in xs:
        if not _is_scalar(x):
            loc = _here()
            raise CompileError(f"{_where(loc)}tilus.{what}: expects scalars (numbers or kernel scalars), got "
                               f"{', '.join(_describe(v) for v in xs)}")
