"""Computations on register tiles: dot, elementwise operations, reductions, scans, random numbers."""

from typing import Any, Optional

from .. import _C
from .._C import CompileError, DataType, Expr
from ..tracing import RegisterTensor, _binary, _builder, _describe, _dtype, _here, _where
from ._args import _Dims, _Int, _Operand, _Scalar, _bool, _int, _ints, _operand, _scalar, _tensor


class ComputeInstructions:
    """Computations on register tiles: dot, elementwise, reductions, scans, random numbers. A mixin of
    ``tilus.Script``."""

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

    def add(self, lhs: _Operand, rhs: _Operand, out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """``lhs + rhs`` elementwise (register tensors or scalars; numpy broadcasting); with ``out``
        the result is written into it (returned)."""
        loc = _here()
        return self._into(out, _binary("+", lhs, rhs, loc), loc, "add")

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

    def gelu(self, x: RegisterTensor, approximate: str = "none") -> RegisterTensor:
        """The GELU of each element of ``x`` (a float register tensor), as torch's
        ``torch.nn.functional.gelu``: ``approximate="none"``: ``x / 2 * (1 + erf(x / sqrt(2)))``;
        ``approximate="tanh"``: ``x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``. 16-bit
        floats are computed in float32."""
        loc = _here()
        return RegisterTensor(_builder().gelu(_tensor(x, "gelu", loc), approximate, loc))

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


# The elementwise math methods and their docstrings.
_UNARY = {
    "abs": "The absolute value of each element of ``x`` (a numeric register tensor).",
    "exp": "``e ** x`` elementwise, for a float register tensor ``x``.",
    "exp2": "``2 ** x`` elementwise, for a float register tensor ``x``.",
    "log": "The natural logarithm of each element of ``x`` (a float register tensor).",
    "log2": "The base-2 logarithm of each element of ``x`` (a float register tensor).",
    "sqrt": "The square root of each element of ``x`` (a float register tensor).",
    "rsqrt": "``1 / sqrt(x)`` elementwise, for a float register tensor ``x``.",
    "rcp": "``1 / x`` elementwise, approximate, for a float register tensor ``x``: float32 is one ``rcp.approx.ftz`` on "
           "the GPU (within 1 ulp, results below 2^-126 flushed to 0, also on the CPU backend), not the IEEE division.",
    "sin": "The sine of each element of ``x`` (a float register tensor, radians).",
    "cos": "The cosine of each element of ``x`` (a float register tensor, radians).",
    "tanh": "The hyperbolic tangent of each element of ``x`` (a float register tensor).",
    "round": "Each element of ``x`` (a float register tensor) rounded to the nearest integer, ties to even.",
    "square": "``x * x`` elementwise, for a numeric register tensor ``x``.",
    "floor": "Each element of ``x`` (a float register tensor) rounded down to an integer.",
    "ceil": "Each element of ``x`` (a float register tensor) rounded up to an integer.",
    "erf": "The error function of each element of ``x`` (a float register tensor; torch's ``erf``).",
    "sigmoid": "``1 / (1 + exp(-x))`` elementwise, for a float register tensor ``x`` (torch's ``sigmoid``; 16-bit "
               "floats are computed in float32).",
}


def _unary_method(op):
    def method(self, x: RegisterTensor) -> RegisterTensor:
        loc = _here()
        return RegisterTensor(_builder().unary(op, _tensor(x, op, loc), loc))

    method.__name__ = op
    method.__qualname__ = f"Script.{op}"
    method.__doc__ = _UNARY[op]
    return method
