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

The documentation ships with the package: docs/python.md (the Python front end),
docs/instructions.md, docs/gpu.md, ... are in the folder docs/ beside this file
(``os.path.join(os.path.dirname(tilus.__file__), "docs")``); every docs/ page that help() names
is there. tilus.testing.do_bench times a function, tilus.visualize_layout draws a register
layout.
"""
import typing as _typing

from . import _C
from ._C import ArgumentError, CompileError, CpuCheckError, DataType, Error, Expr, InternalError, Var
from ._C import replicated
from .tuning import autotune, autotune_report
from .launch import compiled_kernels, trace
from .script import Dim3, GlobalTensor, Region, RegisterTensor, Script, SharedTensor, static_range
from .tracing import TilusWarning, _describe, _dtype, _here, _is_scalar, _scalars, _where
from .visualize import visualize_layout
from .classes import Class, Pipeline
from .target import get_current_target
from .tensor import Tensor, empty, from_torch, full, ones, rand, randint, randn, view_torch, zeros
from . import aot, option, target, testing, utils
from .utils import cdiv
from ._C import RegisterLayout, SharedLayout

__version__ = _C.__version__

# data types: tilus.float16, tilus.int4, tilus.float6_e3m2, ...; ~dtype is a pointer type. One
# assignment each, so that IDEs and type checkers see them.
boolean = DataType.from_name("bool")
int8 = DataType.from_name("int8")
int16 = DataType.from_name("int16")
int32 = DataType.from_name("int32")
int64 = DataType.from_name("int64")
uint8 = DataType.from_name("uint8")
uint16 = DataType.from_name("uint16")
uint32 = DataType.from_name("uint32")
uint64 = DataType.from_name("uint64")
float16 = DataType.from_name("float16")
bfloat16 = DataType.from_name("bfloat16")
float32 = DataType.from_name("float32")
float64 = DataType.from_name("float64")
tfloat32 = DataType.from_name("tf32")
float8_e4m3 = DataType.from_name("float8_e4m3")
float8_e5m2 = DataType.from_name("float8_e5m2")
float7_e3m3 = DataType.from_name("float7_e3m3")
float6_e3m2 = DataType.from_name("float6_e3m2")
float6_e2m3 = DataType.from_name("float6_e2m3")
float5_e2m2 = DataType.from_name("float5_e2m2")
float4_e2m1 = DataType.from_name("float4_e2m1")
float3_e1m1 = DataType.from_name("float3_e1m1")
int1 = DataType.from_name("int1")
int2 = DataType.from_name("int2")
int3 = DataType.from_name("int3")
int4 = DataType.from_name("int4")
int5 = DataType.from_name("int5")
int6 = DataType.from_name("int6")
int7 = DataType.from_name("int7")
uint1 = DataType.from_name("uint1")
uint2 = DataType.from_name("uint2")
uint3 = DataType.from_name("uint3")
uint4 = DataType.from_name("uint4")
uint5 = DataType.from_name("uint5")
uint6 = DataType.from_name("uint6")
uint7 = DataType.from_name("uint7")
float5_e3m1 = DataType.from_name("float5_e3m1")
float6_e4m1 = DataType.from_name("float6_e4m1")
float7_e2m4 = DataType.from_name("float7_e2m4")
float7_e4m2 = DataType.from_name("float7_e4m2")
float7_e5m1 = DataType.from_name("float7_e5m1")

#: The untyped pointer type (``void*``): a parameter annotated ``void_p`` takes an array of any
#: dtype; ``global_view(p, dtype=..., shape=...)`` names the dtype it is read as.
void_p = ~DataType.from_name("void")

# NVIDIA Tilus's names for the same types (the same objects), so its kernels read unchanged.
f16, bf16, f32, f64 = float16, bfloat16, float32, float64
i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
i1, i2, i3, i4, i5, i6, i7 = int1, int2, int3, int4, int5, int6, int7
u1, u2, u3, u4, u5, u6, u7 = uint1, uint2, uint3, uint4, uint5, uint6, uint7
int1b, int2b, int3b, int4b, int5b, int6b, int7b = int1, int2, int3, int4, int5, int6, int7
uint1b, uint2b, uint3b, uint4b, uint5b, uint6b, uint7b = uint1, uint2, uint3, uint4, uint5, uint6, uint7
f8e4m3, f8e5m2 = float8_e4m3, float8_e5m2
f7e2m4, f7e3m3, f7e4m2, f7e5m1 = float7_e2m4, float7_e3m3, float7_e4m2, float7_e5m1
f6e2m3, f6e3m2, f6e4m1 = float6_e2m3, float6_e3m2, float6_e4m1
f5e2m2, f5e3m1, f4e2m1, f3e1m1 = float5_e2m2, float5_e3m1, float4_e2m1, float3_e1m1


from .layouts import column_local, column_spatial, local, spatial  # noqa: E402



# annotations of the scalar functions (each checks its operands itself)
_Int = _typing.Union[int, Expr]            # a Python int or an integer kernel scalar
_Bool = _typing.Union[bool, Expr]          # a Python bool or a bool kernel scalar
_Scalar = _typing.Union[int, float, Expr]  # a Python number (bool included) or a kernel scalar


def dtype(name: str) -> DataType:
    """The data type of a name ("float16", "bf16", "int4", "float6_e3m2", ...)."""
    return DataType.from_name(name)


def logical_and(a: _Bool, b: _Bool) -> Expr:
    """``a and b`` of boolean scalars (Python's ``and`` needs a Python bool; ``a & b`` works too)."""
    _scalars("logical_and", a, b)
    return _C.logical_and(a, b)


def logical_or(a: _Bool, b: _Bool) -> Expr:
    """``a or b`` of boolean scalars (Python's ``or`` needs a Python bool; ``a | b`` works too)."""
    _scalars("logical_or", a, b)
    return _C.logical_or(a, b)


def logical_not(a: _Bool) -> Expr:
    """``not a`` of a boolean scalar (Python's ``not`` needs a Python bool; ``~a`` works too)."""
    _scalars("logical_not", a)
    return _C.logical_not(a)


def cast(x: _Scalar, dtype: DataType) -> Expr:
    """The scalar ``x`` (a Python number or tilus expression) converted to ``dtype``."""
    _scalars("cast", x)
    return _C.cast(x, _dtype(dtype, "tilus.cast: dtype", _here()))


def select(cond: _Bool, a: _Scalar, b: _Scalar) -> Expr:
    """``a`` where the boolean scalar ``cond`` holds, else ``b`` (scalars; for tensors use
    ``Script.where``)."""
    _scalars("select", cond, a, b)
    return _C.select(cond, a, b)


def gpu_available() -> bool:
    """True when a CUDA GPU and its driver can be used (kernels of CUDA arrays run there)."""
    return _C.gpu_available()


def cpu_backend_available() -> bool:
    """True when tilus was built with LLVM: kernels of host arrays (numpy) run on the CPU."""
    return _C.cpu_backend_available()


# tilus.min / tilus.max are the scalar minimum / maximum of expressions, as in the C++ API
def min(a: _Scalar, b: _Scalar) -> _Scalar:  # noqa: A001
    """The smaller of two scalars (Python numbers or tilus expressions): a Python number when
    both are Python numbers, else a kernel expression."""
    _scalars("min", a, b)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return a if a <= b else b
    return _C.min(a, b)


def max(a: _Scalar, b: _Scalar) -> _Scalar:  # noqa: A001
    """The larger of two scalars (Python numbers or tilus expressions): a Python number when
    both are Python numbers, else a kernel expression."""
    _scalars("max", a, b)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return a if a >= b else b
    return _C.max(a, b)
