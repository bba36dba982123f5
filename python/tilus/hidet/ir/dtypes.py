"""``tilus.hidet.ir.dtypes``: every data type under its tilus and NVIDIA Tilus names (the same
objects as ``tilus.float16``, ``tilus.f16``, ``tilus.int4b``, ...)."""
from ... import (
    boolean, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32,
    float64, tfloat32, float8_e4m3, float8_e5m2, float7_e3m3, float6_e3m2, float6_e2m3,
    float5_e2m2, float4_e2m1, float3_e1m1, int1, int2, int3, int4, int5, int6, int7, uint1, uint2,
    uint3, uint4, uint5, uint6, uint7, float5_e3m1, float6_e4m1, float7_e2m4, float7_e4m2,
    float7_e5m1, f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, i1, i2, i3, i4, i5, i6,
    i7, u1, u2, u3, u4, u5, u6, u7, int1b, int2b, int3b, int4b, int5b, int6b, int7b, uint1b,
    uint2b, uint3b, uint4b, uint5b, uint6b, uint7b, f8e4m3, f8e5m2, f7e2m4, f7e3m3, f7e4m2, f7e5m1,
    f6e2m3, f6e3m2, f6e4m1, f5e2m2, f5e3m1, f4e2m1, f3e1m1,
)

__all__ = [
    "boolean", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "tfloat32", "float8_e4m3", "float8_e5m2", "float7_e3m3",
    "float6_e3m2", "float6_e2m3", "float5_e2m2", "float4_e2m1", "float3_e1m1", "int1", "int2",
    "int3", "int4", "int5", "int6", "int7", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6",
    "uint7", "float5_e3m1", "float6_e4m1", "float7_e2m4", "float7_e4m2", "float7_e5m1", "f16",
    "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i1", "i2", "i3",
    "i4", "i5", "i6", "i7", "u1", "u2", "u3", "u4", "u5", "u6", "u7", "int1b", "int2b", "int3b",
    "int4b", "int5b", "int6b", "int7b", "uint1b", "uint2b", "uint3b", "uint4b", "uint5b", "uint6b",
    "uint7b", "f8e4m3", "f8e5m2", "f7e2m4", "f7e3m3", "f7e4m2", "f7e5m1", "f6e2m3", "f6e3m2",
    "f6e4m1", "f5e2m2", "f5e3m1", "f4e2m1", "f3e1m1",
]
