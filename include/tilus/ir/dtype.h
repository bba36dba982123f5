// Data types of the tile IR.
//
// Scalars: bool; int8-64 and uint8-64; sub-byte int1-int7 and uint1-uint7; float16, bfloat16,
// float32, float64, tf32; float8 e4m3 / e5m2; sub-byte floats of 3-7 bits with any
// (exponent, mantissa) split. Pointers are a scalar type with `pointer_depth() > 0`.
//
// Sub-byte data is densely bit-packed, little-endian: element i occupies bits
// [i*bits, (i+1)*bits) of the byte stream, in registers, shared and global memory alike.
//
// Float styles:
//   IEEE       float16, bfloat16, float32, float64, tf32, float8_e5m2: infinities and NaNs.
//   FiniteNaN  float8_e4m3 ("fn"): no infinities; S.1111.111 is NaN; max 448.
//   Finite     sub-byte floats (OCP MX style: float6_e3m2, float6_e2m3, float4_e2m1, ...):
//              no infinities and no NaN; every encoding is a finite number.
// Conversion into FiniteNaN and Finite types saturates to +-max; NaN becomes NaN where the
// type has one and +max where it has none (the PTX .satfinite convention).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tilus {

enum class TypeKind : uint8_t { Void, Bool, Int, UInt, Float };
enum class FloatStyle : uint8_t { IEEE, FiniteNaN, Finite };

class DataType {
 public:
  constexpr DataType() = default;

  static constexpr DataType make_bool() { return DataType(TypeKind::Bool, 8, 0, 0, FloatStyle::IEEE); }
  static constexpr DataType make_int(int bits) { return DataType(TypeKind::Int, bits, 0, 0, FloatStyle::IEEE); }
  static constexpr DataType make_uint(int bits) { return DataType(TypeKind::UInt, bits, 0, 0, FloatStyle::IEEE); }
  // A float with `exponent` and `mantissa` bits, stored in `bits` bits (bits >= 1 + e + m).
  static constexpr DataType make_float(int bits, int exponent, int mantissa, FloatStyle style) {
    return DataType(TypeKind::Float, bits, exponent, mantissa, style);
  }
  // A sub-byte float (3-7 bits) of the Finite style: bits = 1 + exponent + mantissa.
  // Throws CompileError for an impossible split.
  static DataType make_subbyte_float(int exponent, int mantissa);
  static constexpr DataType make_void() { return DataType(TypeKind::Void, 0, 0, 0, FloatStyle::IEEE); }

  // Parses names such as "float16", "bf16", "int4", "uint3", "float6_e3m2", "float8_e4m3",
  // "tf32", "bool", "float16*" (pointer). Returns nullopt for an unknown name.
  static std::optional<DataType> from_name(std::string_view name);

  constexpr TypeKind kind() const { return kind_; }
  // Storage bits of one element (64 for a pointer).
  constexpr int bits() const { return pointer_depth_ > 0 ? 64 : bits_; }
  constexpr int exponent_bits() const { return exponent_; }
  constexpr int mantissa_bits() const { return mantissa_; }
  constexpr FloatStyle float_style() const { return style_; }
  constexpr int pointer_depth() const { return pointer_depth_; }

  constexpr bool is_pointer() const { return pointer_depth_ > 0; }
  constexpr bool is_void() const { return !is_pointer() && kind_ == TypeKind::Void; }
  constexpr bool is_bool() const { return !is_pointer() && kind_ == TypeKind::Bool; }
  constexpr bool is_int() const { return !is_pointer() && kind_ == TypeKind::Int; }
  constexpr bool is_uint() const { return !is_pointer() && kind_ == TypeKind::UInt; }
  constexpr bool is_integer() const { return is_int() || is_uint(); }
  constexpr bool is_float() const { return !is_pointer() && kind_ == TypeKind::Float; }
  // Numbers: integers and floats (not bool, pointers or void).
  constexpr bool is_numeric() const { return is_integer() || is_float(); }
  constexpr bool is_signed() const { return is_int() || is_float(); }
  constexpr bool is_subbyte() const { return !is_pointer() && kind_ != TypeKind::Void && bits_ < 8; }

  // Pointer to this type / the type this pointer points to.
  constexpr DataType pointer_to() const {
    DataType t = *this;
    t.pointer_depth_ += 1;
    return t;
  }
  DataType pointee() const;

  // Canonical name: "float16", "int4", "float6_e3m2", "float16*", ...
  std::string name() const;

  // --- ranges -------------------------------------------------------------------------
  // Integers: exact limits. Throws InternalError for non-integers.
  int64_t int_min() const;
  uint64_t int_max() const;
  // Floats: largest finite value, smallest positive normal, smallest positive subnormal.
  double float_max() const;
  double float_min_normal() const;
  double float_min_subnormal() const;
  // Lowest / highest representable value as double, for any numeric or bool type.
  double min_value() const;
  double max_value() const;

  // --- float encoding -----------------------------------------------------------------
  // Bit pattern (in the low bits()) -> value. NaN patterns decode to NaN.
  double decode_float(uint64_t bits) const;
  // Value -> bit pattern, round to nearest even, overflow per the float style (see top).
  uint64_t encode_float(double value) const;

  // --- packing ------------------------------------------------------------------------
  // Bytes occupied by n densely packed elements.
  int64_t storage_bytes(int64_t n) const { return (n * bits() + 7) / 8; }

  constexpr bool operator==(const DataType& o) const {
    return kind_ == o.kind_ && bits_ == o.bits_ && exponent_ == o.exponent_ && mantissa_ == o.mantissa_ &&
           style_ == o.style_ && pointer_depth_ == o.pointer_depth_;
  }
  constexpr bool operator!=(const DataType& o) const { return !(*this == o); }

 private:
  constexpr DataType(TypeKind kind, int bits, int exponent, int mantissa, FloatStyle style)
      : kind_(kind), bits_(static_cast<uint8_t>(bits)), exponent_(static_cast<uint8_t>(exponent)),
        mantissa_(static_cast<uint8_t>(mantissa)), style_(style) {}

  TypeKind kind_ = TypeKind::Void;
  uint8_t bits_ = 0;
  uint8_t exponent_ = 0;
  uint8_t mantissa_ = 0;
  FloatStyle style_ = FloatStyle::IEEE;
  uint8_t pointer_depth_ = 0;
};

// Packs the low `bits` bits of each code into a little-endian byte stream.
std::vector<uint8_t> pack_bits(const std::vector<uint64_t>& codes, int bits);
// Inverse of pack_bits: n codes of `bits` bits each.
std::vector<uint64_t> unpack_bits(const std::vector<uint8_t>& bytes, int bits, int64_t n);

namespace dtypes {
inline constexpr DataType boolean = DataType::make_bool();
inline constexpr DataType int8 = DataType::make_int(8);
inline constexpr DataType int16 = DataType::make_int(16);
inline constexpr DataType int32 = DataType::make_int(32);
inline constexpr DataType int64 = DataType::make_int(64);
inline constexpr DataType uint8 = DataType::make_uint(8);
inline constexpr DataType uint16 = DataType::make_uint(16);
inline constexpr DataType uint32 = DataType::make_uint(32);
inline constexpr DataType uint64 = DataType::make_uint(64);
inline constexpr DataType int1 = DataType::make_int(1);
inline constexpr DataType int2 = DataType::make_int(2);
inline constexpr DataType int3 = DataType::make_int(3);
inline constexpr DataType int4 = DataType::make_int(4);
inline constexpr DataType int5 = DataType::make_int(5);
inline constexpr DataType int6 = DataType::make_int(6);
inline constexpr DataType int7 = DataType::make_int(7);
inline constexpr DataType uint1 = DataType::make_uint(1);
inline constexpr DataType uint2 = DataType::make_uint(2);
inline constexpr DataType uint3 = DataType::make_uint(3);
inline constexpr DataType uint4 = DataType::make_uint(4);
inline constexpr DataType uint5 = DataType::make_uint(5);
inline constexpr DataType uint6 = DataType::make_uint(6);
inline constexpr DataType uint7 = DataType::make_uint(7);
inline constexpr DataType float16 = DataType::make_float(16, 5, 10, FloatStyle::IEEE);
inline constexpr DataType bfloat16 = DataType::make_float(16, 8, 7, FloatStyle::IEEE);
inline constexpr DataType float32 = DataType::make_float(32, 8, 23, FloatStyle::IEEE);
inline constexpr DataType float64 = DataType::make_float(64, 11, 52, FloatStyle::IEEE);
inline constexpr DataType tfloat32 = DataType::make_float(32, 8, 10, FloatStyle::IEEE);
inline constexpr DataType float8_e4m3 = DataType::make_float(8, 4, 3, FloatStyle::FiniteNaN);
inline constexpr DataType float8_e5m2 = DataType::make_float(8, 5, 2, FloatStyle::IEEE);
inline constexpr DataType float7_e3m3 = DataType::make_float(7, 3, 3, FloatStyle::Finite);
inline constexpr DataType float6_e3m2 = DataType::make_float(6, 3, 2, FloatStyle::Finite);
inline constexpr DataType float6_e2m3 = DataType::make_float(6, 2, 3, FloatStyle::Finite);
inline constexpr DataType float5_e2m2 = DataType::make_float(5, 2, 2, FloatStyle::Finite);
inline constexpr DataType float4_e2m1 = DataType::make_float(4, 2, 1, FloatStyle::Finite);
inline constexpr DataType float3_e1m1 = DataType::make_float(3, 1, 1, FloatStyle::Finite);
inline constexpr DataType void_t = DataType::make_void();
}  // namespace dtypes

// The common type two operands of a binary operation are converted to.
DataType promote(const DataType& a, const DataType& b);

}  // namespace tilus
