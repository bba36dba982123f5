"""tilus: a tile-level GPU kernel compiler (Python front end over the C++ core).

    import tilus
    from tilus import float16, float32, int32

    class VectorAdd(tilus.Script):
        def __init__(self, block=1024):
            super().__init__()
            self.block = block

        def __call__(self, n: int32, a: ~float32, b: ~float32, c: ~float32):
            self.attrs.blocks = [tilus.cdiv(n, self.block)]
            self.attrs.warps = 4
            ...

    VectorAdd()(n, a, b, c)     # torch / cupy / numpy arrays (numpy: the CPU backend)
    print(VectorAdd().source(n, a, b, c))   # the CUDA source of that call; also .ptx, .sass, .ir

See docs/python.md; tilus.testing.do_bench times a function, tilus.visualize_layout draws a
register layout.
"""
from . import _C
from ._C import ArgumentError, CompileError, CpuCheckError, DataType, Error, Expr, InternalError, Var
from ._C import column_local, column_spatial, local, replicated, spatial
from .tuning import autotune, autotune_report
from .launch import compiled_kernels, trace
from .script import GlobalTensor, Region, RegisterTensor, Script, SharedTensor, static_range
from .tracing import TilusWarning, _describe, _dtype, _here, _is_scalar, _where
from .visualize import visualize_layout
from . import testing

__version__ = _C.__version__

# data types: tilus.float16, tilus.int4, tilus.float6_e3m2, ...; ~dtype is a pointer type
_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
           "float32", "float64", "tfloat32", "float8_e4m3", "float8_e5m2", "float7_e3m3", "float6_e3m2",
           "float6_e2m3", "float5_e2m2", "float4_e2m1", "float3_e1m1"]
_DTYPES += [f"int{i}" for i in range(1, 8)] + [f"uint{i}" for i in range(1, 8)]
for _n in _DTYPES:
    globals()["boolean" if _n == "bool" else _n] = DataType.from_name("tf32" if _n == "tfloat32" else _n)


def dtype(name):
    """The data type of a name ("float16", "bf16", "int4", "float6_e3m2", ...)."""
    return DataType.from_name(name)


def _scalars(what, *xs):
    """Checks the operands of a scalar function (tilus.cdiv, ...) as the Script methods do."""
    for x in xs:
        if not _is_scalar(x):
            loc = _here()
            raise CompileError(f"{_where(loc)}tilus.{what}: expects scalars (numbers or kernel scalars), got "
                               f"{', '.join(_describe(v) for v in xs)}")


def cdiv(a, b):
    """ceil(a / b) for non-negative integers (Python ints or tilus expressions)."""
    _scalars("cdiv", a, b)
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return _C.cdiv(a, b)


def logical_and(a, b):
    """``a and b`` of boolean scalars (Python's ``and`` needs a Python bool; ``a & b`` works too)."""
    _scalars("logical_and", a, b)
    return _C.logical_and(a, b)


def logical_or(a, b):
    """``a or b`` of boolean scalars (Python's ``or`` needs a Python bool; ``a | b`` works too)."""
    _scalars("logical_or", a, b)
    return _C.logical_or(a, b)


def logical_not(a):
    """``not a`` of a boolean scalar (Python's ``not`` needs a Python bool; ``~a`` works too)."""
    _scalars("logical_not", a)
    return _C.logical_not(a)


def cast(x, dtype):
    """The scalar ``x`` (a Python number or tilus expression) converted to ``dtype``."""
    _scalars("cast", x)
    return _C.cast(x, _dtype(dtype, "tilus.cast: dtype", _here()))


def select(cond, a, b):
    """``a`` where the boolean scalar ``cond`` holds, else ``b`` (scalars; for tensors use
    ``Script.where``)."""
    _scalars("select", cond, a, b)
    return _C.select(cond, a, b)


def gpu_available():
    """True when a CUDA GPU and its driver can be used (kernels of CUDA arrays run there)."""
    return _C.gpu_available()


def cpu_backend_available():
    """True when tilus was built with LLVM: kernels of host arrays (numpy) run on the CPU."""
    return _C.cpu_backend_available()


def min(a, b):  # noqa: A001 - tilus.min is the scalar minimum of expressions, as in the C++ API
    """The smaller of two scalars (Python numbers or tilus expressions)."""
    _scalars("min", a, b)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return a if a <= b else b
    return _C.min(a, b)


def max(a, b):  # noqa: A001
    """The larger of two scalars (Python numbers or tilus expressions)."""
    _scalars("max", a, b)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return a if a >= b else b
    return _C.max(a, b)
