// Tests of the tile IR data types: names and parsing, integer and float ranges, float
// encoding and decoding (against hand-written tables, the compiler's own conversions and
// brute-force searches over every code of the small formats), bit packing and promotion.
//
// Expected values are computed here from the format definitions, never by calling the
// implementation's helpers:
//   bias = 2^(e-1) - 1; a code is sign | exponent field | mantissa field;
//   exponent field 0:  (-1)^s * 2^(1-bias) * (mantissa / 2^m)       (subnormal)
//   otherwise:         (-1)^s * 2^(E-bias) * (1 + mantissa / 2^m)    (normal)
//   IEEE: the all-ones exponent is inf (mantissa 0) or NaN; FiniteNaN: only the all-ones
//   exponent with the all-ones mantissa is NaN; Finite: every code is a number.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tilus/ir/dtype.h"
#include "tilus/ir/error.h"

namespace tilus {

void PrintTo(const DataType& t, std::ostream* os) { *os << t.name(); }

namespace {

using dtypes::bfloat16;
using dtypes::float16;
using dtypes::float32;
using dtypes::float64;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every named constant with its canonical name.
struct Named {
  DataType type;
  const char* name;
};
const std::vector<Named>& all_constants() {
  static const std::vector<Named> v = {
      {dtypes::boolean, "bool"},         {dtypes::int8, "int8"},
      {dtypes::int16, "int16"},          {dtypes::int32, "int32"},
      {dtypes::int64, "int64"},          {dtypes::uint8, "uint8"},
      {dtypes::uint16, "uint16"},        {dtypes::uint32, "uint32"},
      {dtypes::uint64, "uint64"},        {dtypes::int1, "int1"},
      {dtypes::int2, "int2"},            {dtypes::int3, "int3"},
      {dtypes::int4, "int4"},            {dtypes::int5, "int5"},
      {dtypes::int6, "int6"},            {dtypes::int7, "int7"},
      {dtypes::uint1, "uint1"},          {dtypes::uint2, "uint2"},
      {dtypes::uint3, "uint3"},          {dtypes::uint4, "uint4"},
      {dtypes::uint5, "uint5"},          {dtypes::uint6, "uint6"},
      {dtypes::uint7, "uint7"},          {dtypes::float16, "float16"},
      {dtypes::bfloat16, "bfloat16"},    {dtypes::float32, "float32"},
      {dtypes::float64, "float64"},      {dtypes::tfloat32, "tfloat32"},
      {dtypes::float8_e4m3, "float8_e4m3"}, {dtypes::float8_e5m2, "float8_e5m2"},
      {dtypes::float7_e3m3, "float7_e3m3"}, {dtypes::float6_e3m2, "float6_e3m2"},
      {dtypes::float6_e2m3, "float6_e2m3"}, {dtypes::float5_e2m2, "float5_e2m2"},
      {dtypes::float4_e2m1, "float4_e2m1"}, {dtypes::float3_e1m1, "float3_e1m1"},
      {dtypes::void_t, "void"},
  };
  return v;
}

// Every float format of at most 8 bits: the named ones and every sub-byte split.
std::vector<DataType> small_floats() {
  std::vector<DataType> v = {dtypes::float8_e4m3, dtypes::float8_e5m2, dtypes::float7_e3m3,
                             dtypes::float6_e3m2, dtypes::float6_e2m3, dtypes::float5_e2m2,
                             dtypes::float4_e2m1, dtypes::float3_e1m1};
  for (int bits = 3; bits <= 7; ++bits)
    for (int e = 1; e <= bits - 1; ++e) {
      DataType t = DataType::make_subbyte_float(e, bits - 1 - e);
      if (std::find(v.begin(), v.end(), t) == v.end()) v.push_back(t);
    }
  return v;
}

// The test's own decoder, written from the format definition (see the top of the file).
double ref_decode(const DataType& t, uint64_t code) {
  const int e = t.exponent_bits(), m = t.mantissa_bits();
  const uint64_t man_count = uint64_t(1) << m;
  const uint64_t exp_count = uint64_t(1) << e;
  const uint64_t man = code % man_count;
  const uint64_t ex = (code / man_count) % exp_count;
  const bool negative = (code / man_count / exp_count) % 2 == 1;
  const double bias = std::pow(2.0, e - 1) - 1;
  const bool top = ex == exp_count - 1;
  double v;
  if (t.float_style() == FloatStyle::IEEE && top)
    v = man == 0 ? kInf : kNaN;
  else if (t.float_style() == FloatStyle::FiniteNaN && top && man == man_count - 1)
    v = kNaN;
  else if (ex == 0)
    v = std::pow(2.0, 1 - bias) * (double(man) / double(man_count));
  else
    v = std::pow(2.0, double(ex) - bias) * (1.0 + double(man) / double(man_count));
  return negative ? -v : v;
}

uint64_t sign_bit(const DataType& t) { return uint64_t(1) << (t.bits() - 1); }

// Exact equality that also tells -0 from +0 and lets NaN equal NaN.
bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Brute-force rounding of a non-NaN x into a small float format. Returns the acceptable
// codes: one, or two for an exact tie in a format without mantissa bits (where "ties to
// even mantissa" does not pick one).
std::vector<uint64_t> ref_encode(const DataType& t, double x) {
  const bool negative = std::signbit(x);
  const double a = std::fabs(x);
  const uint64_t sbit = negative ? sign_bit(t) : 0;
  // Scan every non-negative code: the largest finite value, the value below it, the
  // infinity code, and the neighbours of a.
  double maxv = -1, second = -1;
  uint64_t max_code = 0, inf_code = 0;
  bool has_inf = false;
  double lo = -1, hi = kInf;
  uint64_t lo_code = 0, hi_code = 0;
  for (uint64_t c = 0; c < sign_bit(t); ++c) {
    double v = ref_decode(t, c);
    if (std::isnan(v)) continue;
    if (std::isinf(v)) {
      has_inf = true;
      inf_code = c;
      continue;
    }
    if (v > maxv) {
      second = maxv;
      maxv = v;
      max_code = c;
    } else if (v > second) {
      second = v;
    }
    if (v <= a && v > lo) lo = v, lo_code = c;
    if (v >= a && v < hi) hi = v, hi_code = c;
  }
  if (a > maxv) {
    if (has_inf) {
      // IEEE: round as if the exponent range were unbounded; max has an odd (all-ones)
      // mantissa, so the tie at max + ulp/2 goes up to infinity.
      double threshold = maxv + (maxv - second) / 2;
      if (a >= threshold) return {sbit | inf_code};
    }
    return {sbit | max_code};
  }
  if (lo == a) return {sbit | lo_code};
  double mid = (lo + hi) / 2;  // exact: lo and hi have a few significant bits
  if (a < mid) return {sbit | lo_code};
  if (a > mid) return {sbit | hi_code};
  if (t.mantissa_bits() == 0) return {sbit | lo_code, sbit | hi_code};
  return {sbit | ((lo_code % 2 == 0) ? lo_code : hi_code)};
}

double log_uniform(std::mt19937_64& rng, double lo_exp, double hi_exp) {
  return std::exp2(std::uniform_real_distribution<double>(lo_exp, hi_exp)(rng));
}

// ---------------------------------------------------------------------------------------
// Names and parsing
// ---------------------------------------------------------------------------------------

TEST(DTypeName, CanonicalNames) {
  for (const auto& n : all_constants()) EXPECT_EQ(n.type.name(), n.name);
}

TEST(DTypeName, EveryConstantRoundTrips) {
  for (const auto& n : all_constants()) {
    auto parsed = DataType::from_name(n.type.name());
    ASSERT_TRUE(parsed.has_value()) << n.name;
    EXPECT_EQ(*parsed, n.type) << n.name;
    // And as a pointer, one and two levels deep.
    for (int depth = 1; depth <= 2; ++depth) {
      DataType p = n.type;
      for (int i = 0; i < depth; ++i) p = p.pointer_to();
      auto pp = DataType::from_name(p.name());
      ASSERT_TRUE(pp.has_value()) << p.name();
      EXPECT_EQ(*pp, p);
      EXPECT_EQ(pp->pointer_depth(), depth);
    }
  }
}

TEST(DTypeName, EverySubbyteFloatSplitRoundTrips) {
  for (const auto& t : small_floats()) {
    auto parsed = DataType::from_name(t.name());
    ASSERT_TRUE(parsed.has_value()) << t.name();
    EXPECT_EQ(*parsed, t);
  }
}

TEST(DTypeName, PointerNames) {
  EXPECT_EQ(float16.pointer_to().name(), "float16*");
  EXPECT_EQ(dtypes::int4.pointer_to().pointer_to().name(), "int4**");
  EXPECT_EQ(dtypes::float6_e3m2.pointer_to().name(), "float6_e3m2*");
  EXPECT_EQ(dtypes::void_t.pointer_to().name(), "void*");
}

TEST(DTypeName, Aliases) {
  struct Case {
    const char* name;
    DataType expected;
  };
  const Case cases[] = {
      {"f16", float16},
      {"half", float16},
      {"bf16", bfloat16},
      {"f32", float32},
      {"float", float32},
      {"f64", float64},
      {"double", float64},
      {"tf32", dtypes::tfloat32},
      {"tfloat32", dtypes::tfloat32},
      {"float8_e4m3", dtypes::float8_e4m3},
      {"float8_e4m3fn", dtypes::float8_e4m3},
      {"f8e4m3", dtypes::float8_e4m3},
      {"float8_e5m2", dtypes::float8_e5m2},
      {"f8e5m2", dtypes::float8_e5m2},
      {"float16*", float16.pointer_to()},
      {"float16 *", float16.pointer_to()},
      {"~float16", float16.pointer_to()},
      {"~~int8", dtypes::int8.pointer_to().pointer_to()},
      {"int4", dtypes::int4},
      {"i4", dtypes::int4},
      {"i32", dtypes::int32},
      {"uint3", dtypes::uint3},
      {"u3", dtypes::uint3},
      {"u64", dtypes::uint64},
      {"int1", dtypes::int1},
      {"uint8", dtypes::uint8},
      {"bool", dtypes::boolean},
      {"boolean", dtypes::boolean},
      {"void", dtypes::void_t},
      {"float6_e3m2", dtypes::float6_e3m2},
      {"f6e3m2", dtypes::float6_e3m2},
      {"float6_e2m3", dtypes::float6_e2m3},
      {"f6e2m3", dtypes::float6_e2m3},
      {"float4_e2m1", dtypes::float4_e2m1},
      {"f4e2m1", dtypes::float4_e2m1},
      {"float3_e1m1", dtypes::float3_e1m1},
      {"float7_e6m0", DataType::make_subbyte_float(6, 0)},
      {"float5_e1m3", DataType::make_subbyte_float(1, 3)},
  };
  for (const auto& c : cases) {
    auto parsed = DataType::from_name(c.name);
    ASSERT_TRUE(parsed.has_value()) << c.name;
    EXPECT_EQ(*parsed, c.expected) << c.name;
  }
  // The parsed sub-byte floats have the Finite style, e4m3 is FiniteNaN, e5m2 IEEE.
  EXPECT_EQ(DataType::from_name("float6_e3m2")->float_style(), FloatStyle::Finite);
  EXPECT_EQ(DataType::from_name("float8_e4m3fn")->float_style(), FloatStyle::FiniteNaN);
  EXPECT_EQ(DataType::from_name("float8_e5m2")->float_style(), FloatStyle::IEEE);
}

TEST(DTypeName, InvalidNames) {
  for (const char* name :
       {"", "*", "~", "float6_e3m3", "int9", "uint9", "int0", "uint0", "int128", "int12", "float9_e4m4",
        "float8_e3m4", "f8e6m1", "float2_e1m0", "float3_e0m2", "float8_e7m0", "float16x", "floatx", "int",
        "uint", "int4x", "xint4", "float6_e3", "float6_e3m", "float6e", "bfloat", "float6_e3m2_", "f",
        // Widths that wrap around a 32- or 64-bit integer to a valid one (2^32 + 4, 2^32 + 8, 2^64 + 8).
        "int4294967300", "uint4294967304", "i4294967300", "int18446744073709551624", "float4294967302_e2m3",
        "float6_e4294967298m3", "float6_e2m4294967299", "int00000000008"}) {
    EXPECT_FALSE(DataType::from_name(name).has_value()) << '"' << name << '"';
  }
}

TEST(DTypeName, MakeSubbyteFloat) {
  EXPECT_EQ(DataType::make_subbyte_float(2, 1), dtypes::float4_e2m1);
  EXPECT_EQ(DataType::make_subbyte_float(3, 2), dtypes::float6_e3m2);
  EXPECT_EQ(DataType::make_subbyte_float(2, 3), dtypes::float6_e2m3);
  EXPECT_EQ(DataType::make_subbyte_float(1, 1), dtypes::float3_e1m1);
  DataType t = DataType::make_subbyte_float(4, 2);
  EXPECT_EQ(t.bits(), 7);
  EXPECT_EQ(t.exponent_bits(), 4);
  EXPECT_EQ(t.mantissa_bits(), 2);
  EXPECT_EQ(t.float_style(), FloatStyle::Finite);
  EXPECT_TRUE(t.is_float());
  EXPECT_TRUE(t.is_subbyte());
  const std::pair<int, int> bad[] = {{0, 2}, {0, 6}, {1, 0}, {4, 3}, {7, 0}, {5, 5}, {-1, 5}, {2, -1}, {0, 0}};
  for (auto [e, m] : bad) EXPECT_THROW(DataType::make_subbyte_float(e, m), CompileError) << e << "," << m;
}

// ---------------------------------------------------------------------------------------
// Predicates and pointers
// ---------------------------------------------------------------------------------------

TEST(DTypePredicates, SubbyteAndBits) {
  EXPECT_TRUE(dtypes::int4.is_subbyte());
  EXPECT_TRUE(dtypes::uint1.is_subbyte());
  EXPECT_TRUE(dtypes::int7.is_subbyte());
  EXPECT_TRUE(dtypes::float6_e3m2.is_subbyte());
  EXPECT_TRUE(dtypes::float4_e2m1.is_subbyte());
  EXPECT_FALSE(dtypes::boolean.is_subbyte());
  EXPECT_EQ(dtypes::boolean.bits(), 8);
  EXPECT_FALSE(dtypes::int8.is_subbyte());
  EXPECT_FALSE(dtypes::float8_e4m3.is_subbyte());
  EXPECT_FALSE(dtypes::void_t.is_subbyte());
  EXPECT_FALSE(dtypes::int4.pointer_to().is_subbyte());
  EXPECT_EQ(dtypes::int4.bits(), 4);
  EXPECT_EQ(dtypes::float6_e2m3.bits(), 6);
  EXPECT_EQ(dtypes::tfloat32.bits(), 32);
  EXPECT_EQ(float64.bits(), 64);
}

TEST(DTypePredicates, Kinds) {
  EXPECT_TRUE(dtypes::int8.is_int() && dtypes::int8.is_integer() && dtypes::int8.is_signed());
  EXPECT_TRUE(dtypes::uint8.is_uint() && dtypes::uint8.is_integer() && !dtypes::uint8.is_signed());
  EXPECT_TRUE(float16.is_float() && float16.is_signed() && float16.is_numeric());
  EXPECT_FALSE(dtypes::boolean.is_numeric());
  EXPECT_TRUE(dtypes::boolean.is_bool());
  EXPECT_TRUE(dtypes::void_t.is_void());
  EXPECT_FALSE(dtypes::void_t.is_numeric());
  EXPECT_TRUE(dtypes::int3.is_numeric());
}

TEST(DTypePointer, PointerToAndPointee) {
  DataType p = float16.pointer_to();
  EXPECT_TRUE(p.is_pointer());
  EXPECT_EQ(p.pointer_depth(), 1);
  EXPECT_EQ(p.bits(), 64);
  EXPECT_FALSE(p.is_float());
  EXPECT_FALSE(p.is_numeric());
  EXPECT_FALSE(p.is_void());
  EXPECT_NE(p, float16);
  EXPECT_EQ(p.pointee(), float16);
  DataType pp = p.pointer_to();
  EXPECT_EQ(pp.pointer_depth(), 2);
  EXPECT_EQ(pp.bits(), 64);
  EXPECT_EQ(pp.pointee(), p);
  EXPECT_EQ(pp.pointee().pointee(), float16);
  EXPECT_EQ(dtypes::int4.pointer_to().bits(), 64);
  EXPECT_EQ(dtypes::boolean.pointer_to().bits(), 64);
  EXPECT_TRUE(dtypes::void_t.pointer_to().is_pointer());
  EXPECT_FALSE(dtypes::void_t.pointer_to().is_void());
  EXPECT_THROW(float16.pointee(), InternalError);
  EXPECT_THROW(dtypes::void_t.pointee(), InternalError);
  // Distinct pointee types give distinct pointer types.
  EXPECT_NE(float16.pointer_to(), bfloat16.pointer_to());
  EXPECT_NE(dtypes::int8.pointer_to(), dtypes::uint8.pointer_to());
}

// ---------------------------------------------------------------------------------------
// Integer ranges
// ---------------------------------------------------------------------------------------

TEST(DTypeRange, IntegerLimits) {
  struct Case {
    DataType type;
    int64_t min;
    uint64_t max;
  };
  const Case cases[] = {
      {dtypes::int1, -1, 0},
      {dtypes::int2, -2, 1},
      {dtypes::int3, -4, 3},
      {dtypes::int4, -8, 7},
      {dtypes::int5, -16, 15},
      {dtypes::int6, -32, 31},
      {dtypes::int7, -64, 63},
      {dtypes::int8, -128, 127},
      {dtypes::int16, -32768, 32767},
      {dtypes::int32, -2147483648LL, 2147483647ULL},
      {dtypes::int64, INT64_MIN, 9223372036854775807ULL},
      {dtypes::uint1, 0, 1},
      {dtypes::uint2, 0, 3},
      {dtypes::uint3, 0, 7},
      {dtypes::uint4, 0, 15},
      {dtypes::uint5, 0, 31},
      {dtypes::uint6, 0, 63},
      {dtypes::uint7, 0, 127},
      {dtypes::uint8, 0, 255},
      {dtypes::uint16, 0, 65535},
      {dtypes::uint32, 0, 4294967295ULL},
      {dtypes::uint64, 0, 18446744073709551615ULL},
      {dtypes::boolean, 0, 1},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.type.int_min(), c.min) << c.type.name();
    EXPECT_EQ(c.type.int_max(), c.max) << c.type.name();
    EXPECT_EQ(c.type.min_value(), double(c.min)) << c.type.name();
    EXPECT_EQ(c.type.max_value(), double(c.max)) << c.type.name();
  }
  EXPECT_EQ(dtypes::int64.int_min(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(dtypes::uint64.int_max(), std::numeric_limits<uint64_t>::max());
}

TEST(DTypeRange, ParsedWidthsMatchConstants) {
  // Every width from_name accepts gives the limits of a two's complement / unsigned number.
  for (int w : {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64}) {
    auto s = DataType::from_name("int" + std::to_string(w));
    auto u = DataType::from_name("uint" + std::to_string(w));
    ASSERT_TRUE(s && u) << w;
    EXPECT_EQ(s->bits(), w);
    EXPECT_EQ(u->bits(), w);
    // Count by repeated doubling rather than shifts.
    long double half = 1;
    for (int i = 1; i < w; ++i) half *= 2;
    EXPECT_EQ((long double)s->int_min(), -half) << w;
    EXPECT_EQ((long double)s->int_max(), half - 1) << w;
    EXPECT_EQ(u->int_min(), 0) << w;
    EXPECT_EQ((long double)u->int_max(), 2 * half - 1) << w;
  }
}

TEST(DTypeRange, NonIntegersThrow) {
  EXPECT_THROW(float16.int_min(), InternalError);
  EXPECT_THROW(float16.int_max(), InternalError);
  EXPECT_THROW(float16.pointer_to().int_max(), InternalError);
  EXPECT_THROW(dtypes::void_t.int_min(), InternalError);
  EXPECT_THROW(dtypes::int8.float_max(), InternalError);
  EXPECT_THROW(dtypes::int8.float_min_normal(), InternalError);
  EXPECT_THROW(dtypes::boolean.float_min_subnormal(), InternalError);
  EXPECT_THROW(dtypes::int32.decode_float(0), InternalError);
  EXPECT_THROW(dtypes::int32.encode_float(1.0), InternalError);
  EXPECT_THROW(dtypes::void_t.max_value(), InternalError);
  EXPECT_THROW(float16.pointer_to().min_value(), InternalError);
}

// ---------------------------------------------------------------------------------------
// Float ranges (hand-computed)
// ---------------------------------------------------------------------------------------

TEST(DTypeRange, FloatLimits) {
  struct Case {
    DataType type;
    double max, min_normal, min_subnormal;
  };
  const Case cases[] = {
      // 2^15 * (2 - 2^-10), 2^-14, 2^-24
      {float16, 65504.0, 0x1p-14, 0x1p-24},
      // 2^127 * (2 - 2^-7), 2^-126, 2^-133
      {bfloat16, 3.3895313892515355e38, 0x1p-126, 0x1p-133},
      {float32, double(std::numeric_limits<float>::max()), double(std::numeric_limits<float>::min()),
       double(std::numeric_limits<float>::denorm_min())},
      {float64, std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
       std::numeric_limits<double>::denorm_min()},
      // tf32: float32's exponent with 10 mantissa bits: 2^127 * (2 - 2^-10), 2^-126, 2^-136
      {dtypes::tfloat32, 0x1.ffcp127, 0x1p-126, 0x1p-136},
      // e4m3 (bias 7): 2^8 * 1.75 (mantissa 111 at the top exponent is NaN)
      {dtypes::float8_e4m3, 448.0, 0x1p-6, 0x1p-9},
      // e5m2 (bias 15): 2^15 * 1.75
      {dtypes::float8_e5m2, 57344.0, 0x1p-14, 0x1p-16},
      // e3m3 (bias 3): 2^4 * 1.875
      {dtypes::float7_e3m3, 30.0, 0.25, 0.03125},
      // e3m2 (bias 3): 2^4 * 1.75
      {dtypes::float6_e3m2, 28.0, 0.25, 0.0625},
      // e2m3 (bias 1): 2^2 * 1.875
      {dtypes::float6_e2m3, 7.5, 1.0, 0.125},
      // e2m2 (bias 1): 2^2 * 1.75
      {dtypes::float5_e2m2, 7.0, 1.0, 0.25},
      // e2m1 (bias 1): 2^2 * 1.5
      {dtypes::float4_e2m1, 6.0, 1.0, 0.5},
      // e1m1 (bias 0): 2^1 * 1.5; values {0, 1, 2, 3}
      {dtypes::float3_e1m1, 3.0, 2.0, 1.0},
      // e4m2 (bias 7): 2^8 * 1.75
      {DataType::make_subbyte_float(4, 2), 448.0, 0x1p-6, 0x1p-8},
      // e6m0 (bias 31): 2^32, no subnormals: the smallest positive value is 2^-30
      {DataType::make_subbyte_float(6, 0), 0x1p32, 0x1p-30, 0x1p-30},
      // e1m5 (bias 0): 2^1 * (2 - 2^-5)
      {DataType::make_subbyte_float(1, 5), 3.9375, 2.0, 0.0625},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.type.float_max(), c.max) << c.type.name();
    EXPECT_EQ(c.type.float_min_normal(), c.min_normal) << c.type.name();
    EXPECT_EQ(c.type.float_min_subnormal(), c.min_subnormal) << c.type.name();
    EXPECT_EQ(c.type.max_value(), c.max) << c.type.name();
    EXPECT_EQ(c.type.min_value(), -c.max) << c.type.name();
  }
}

TEST(DTypeRange, SmallFloatLimitsAgreeWithCodes) {
  // The limits equal the largest / smallest values found among the decoded codes.
  for (const auto& t : small_floats()) {
    double maxv = 0, min_pos = kInf, min_normal = kInf;
    for (uint64_t c = 0; c < sign_bit(t); ++c) {
      double v = ref_decode(t, c);
      if (std::isnan(v) || std::isinf(v)) continue;
      maxv = std::max(maxv, v);
      if (v > 0) min_pos = std::min(min_pos, v);
      uint64_t exp_field = (c >> t.mantissa_bits()) & ((uint64_t(1) << t.exponent_bits()) - 1);
      if (exp_field != 0 && v > 0) min_normal = std::min(min_normal, v);
    }
    EXPECT_EQ(t.float_max(), maxv) << t.name();
    EXPECT_EQ(t.float_min_subnormal(), min_pos) << t.name();
    EXPECT_EQ(t.float_min_normal(), min_normal) << t.name();
  }
}

// ---------------------------------------------------------------------------------------
// Decoding tables
// ---------------------------------------------------------------------------------------

TEST(DTypeDecode, Float4E2M1Table) {
  const double positive[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint64_t c = 0; c < 8; ++c) {
    EXPECT_TRUE(same_double(dtypes::float4_e2m1.decode_float(c), positive[c])) << c;
    EXPECT_TRUE(same_double(dtypes::float4_e2m1.decode_float(c | 8), -positive[c])) << c;
    EXPECT_EQ(dtypes::float4_e2m1.encode_float(positive[c]), c);
    EXPECT_EQ(dtypes::float4_e2m1.encode_float(-positive[c]), c | 8);
  }
}

TEST(DTypeDecode, Float3E1M1Table) {
  const double positive[] = {0, 1, 2, 3};
  for (uint64_t c = 0; c < 4; ++c) {
    EXPECT_TRUE(same_double(dtypes::float3_e1m1.decode_float(c), positive[c])) << c;
    EXPECT_TRUE(same_double(dtypes::float3_e1m1.decode_float(c | 4), -positive[c])) << c;
  }
}

TEST(DTypeDecode, Float5E2M2Table) {
  const double positive[] = {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7};
  for (uint64_t c = 0; c < 16; ++c) EXPECT_EQ(dtypes::float5_e2m2.decode_float(c), positive[c]) << c;
}

TEST(DTypeDecode, SpotValues) {
  struct Case {
    DataType type;
    uint64_t code;
    double value;
  };
  const Case cases[] = {
      {dtypes::float6_e2m3, 0x01, 0.125},
      {dtypes::float6_e2m3, 0x07, 0.875},
      {dtypes::float6_e2m3, 0x08, 1.0},
      {dtypes::float6_e2m3, 0x0F, 1.875},
      {dtypes::float6_e2m3, 0x10, 2.0},
      {dtypes::float6_e2m3, 0x1F, 7.5},
      {dtypes::float6_e2m3, 0x3F, -7.5},
      {dtypes::float6_e2m3, 0x20, -0.0},
      {dtypes::float6_e3m2, 0x01, 0.0625},
      {dtypes::float6_e3m2, 0x03, 0.1875},
      {dtypes::float6_e3m2, 0x04, 0.25},
      {dtypes::float6_e3m2, 0x0C, 1.0},
      {dtypes::float6_e3m2, 0x1C, 16.0},
      {dtypes::float6_e3m2, 0x1E, 24.0},
      {dtypes::float6_e3m2, 0x1F, 28.0},
      {dtypes::float6_e3m2, 0x3F, -28.0},
      {dtypes::float7_e3m3, 0x18, 1.0},
      {dtypes::float7_e3m3, 0x3F, 30.0},
      {dtypes::float8_e4m3, 0x00, 0.0},
      {dtypes::float8_e4m3, 0x80, -0.0},
      {dtypes::float8_e4m3, 0x01, 0x1p-9},
      {dtypes::float8_e4m3, 0x07, 7 * 0x1p-9},
      {dtypes::float8_e4m3, 0x08, 0x1p-6},
      {dtypes::float8_e4m3, 0x38, 1.0},
      {dtypes::float8_e4m3, 0x40, 2.0},
      {dtypes::float8_e4m3, 0x77, 240.0},
      {dtypes::float8_e4m3, 0x78, 256.0},
      {dtypes::float8_e4m3, 0x7E, 448.0},
      {dtypes::float8_e4m3, 0xFE, -448.0},
      {dtypes::float8_e4m3, 0x7F, kNaN},
      {dtypes::float8_e4m3, 0xFF, kNaN},
      {dtypes::float8_e5m2, 0x01, 0x1p-16},
      {dtypes::float8_e5m2, 0x04, 0x1p-14},
      {dtypes::float8_e5m2, 0x3C, 1.0},
      {dtypes::float8_e5m2, 0x7B, 57344.0},
      {dtypes::float8_e5m2, 0x7C, kInf},
      {dtypes::float8_e5m2, 0xFC, -kInf},
      {dtypes::float8_e5m2, 0x7D, kNaN},
      {dtypes::float8_e5m2, 0x7E, kNaN},
      {dtypes::float8_e5m2, 0x7F, kNaN},
      {dtypes::float8_e5m2, 0xFF, kNaN},
      {float16, 0x3C00, 1.0},
      {float16, 0xC000, -2.0},
      {float16, 0x7BFF, 65504.0},
      {float16, 0x0001, 0x1p-24},
      {float16, 0x0400, 0x1p-14},
      {float16, 0x3555, 0x1.554p-2},
      {float16, 0x7C00, kInf},
      {float16, 0xFC00, -kInf},
      {float16, 0x7E00, kNaN},
      {float16, 0x8000, -0.0},
      {bfloat16, 0x3F80, 1.0},
      {bfloat16, 0x7F7F, 3.3895313892515355e38},
      {bfloat16, 0x0001, 0x1p-133},
      {bfloat16, 0x7F80, kInf},
      {bfloat16, 0x7FC0, kNaN},
      {float32, 0x3F800000, 1.0},
      {float32, 0x00000001, 0x1p-149},
      {float32, 0x7F800000, kInf},
      {float64, 0x3FF0000000000000ULL, 1.0},
      {float64, 0x0000000000000001ULL, 0x1p-1074},
      {float64, 0xFFF0000000000000ULL, -kInf},
      {float64, 0x7FF8000000000000ULL, kNaN},
      {dtypes::tfloat32, 0x3F800000, 1.0},
      {dtypes::tfloat32, 0x3F802000, 1.0 + 0x1p-10},
      {dtypes::tfloat32, 0x3F801FFF, 1.0},  // the low 13 bits are not part of a tf32
      {dtypes::tfloat32, 0x00002000, 0x1p-136},
      {dtypes::tfloat32, 0x7F800000, kInf},
  };
  for (const auto& c : cases)
    EXPECT_TRUE(same_double(c.type.decode_float(c.code), c.value))
        << c.type.name() << " code " << c.code << " gives " << c.type.decode_float(c.code) << ", expected " << c.value;
}

TEST(DTypeDecode, SmallFormatsMatchReferenceDecoder) {
  for (const auto& t : small_floats())
    for (uint64_t c = 0; c < (uint64_t(1) << t.bits()); ++c)
      EXPECT_TRUE(same_double(t.decode_float(c), ref_decode(t, c))) << t.name() << " code " << c;
}

TEST(DTypeDecode, HighBitsAboveTheCodeAreIgnored) {
  EXPECT_EQ(dtypes::float4_e2m1.decode_float(0xF3), 1.5);
  EXPECT_EQ(dtypes::float6_e3m2.decode_float(0x40 | 0x0C), 1.0);
  EXPECT_EQ(float16.decode_float(0xABCD3C00ULL), 1.0);
}

TEST(DTypeDecode, SmallFormatsStructure) {
  for (const auto& t : small_floats()) {
    SCOPED_TRACE(t.name());
    const uint64_t sbit = sign_bit(t);
    int nan_count = 0, inf_count = 0;
    double prev = -kInf;
    for (uint64_t c = 0; c < sbit; ++c) {
      double v = t.decode_float(c);
      double n = t.decode_float(c | sbit);
      // Sign symmetry.
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(n)) << c;
        ++nan_count;
        continue;
      }
      EXPECT_TRUE(same_double(n, -v)) << c;
      EXPECT_FALSE(std::signbit(v)) << c;
      if (std::isinf(v)) ++inf_count;
      // Positive codes in increasing order (NaN codes come last).
      EXPECT_GT(v, prev) << c;
      EXPECT_EQ(nan_count, 0) << "a number after a NaN code at " << c;
      prev = v;
    }
    switch (t.float_style()) {
      case FloatStyle::IEEE:
        EXPECT_EQ(inf_count, 1);
        EXPECT_EQ(nan_count, (1 << t.mantissa_bits()) - 1);
        break;
      case FloatStyle::FiniteNaN:
        EXPECT_EQ(inf_count, 0);
        EXPECT_EQ(nan_count, 1);
        EXPECT_TRUE(std::isnan(t.decode_float(sbit - 1)));  // S.1111.111
        break;
      case FloatStyle::Finite:
        EXPECT_EQ(inf_count, 0);
        EXPECT_EQ(nan_count, 0);
        break;
    }
    EXPECT_TRUE(same_double(t.decode_float(0), 0.0));
    EXPECT_TRUE(same_double(t.decode_float(sbit), -0.0));
  }
}

TEST(DTypeDecode, EncodeDecodeRoundTripsEveryCode) {
  for (const auto& t : small_floats()) {
    for (uint64_t c = 0; c < (uint64_t(1) << t.bits()); ++c) {
      double v = t.decode_float(c);
      if (std::isnan(v)) continue;
      EXPECT_EQ(t.encode_float(v), c) << t.name() << " code " << c << " value " << v;
    }
  }
  for (uint64_t c = 0; c < 0x10000; ++c) {
    for (const auto& t : {float16, bfloat16}) {
      double v = t.decode_float(c);
      if (std::isnan(v)) continue;
      EXPECT_EQ(t.encode_float(v), c) << t.name() << " code " << c;
    }
  }
  EXPECT_EQ(dtypes::float8_e4m3.encode_float(-0.0), 0x80u);
  EXPECT_EQ(dtypes::float4_e2m1.encode_float(-0.0), 0x8u);
  EXPECT_EQ(dtypes::float4_e2m1.encode_float(0.0), 0x0u);
  EXPECT_EQ(float16.encode_float(-0.0), 0x8000u);
}

// ---------------------------------------------------------------------------------------
// Encoding: rounding, overflow, NaN
// ---------------------------------------------------------------------------------------

void check_encode(const DataType& t, double x) {
  auto expected = ref_encode(t, x);
  uint64_t got = t.encode_float(x);
  bool ok = std::find(expected.begin(), expected.end(), got) != expected.end();
  EXPECT_TRUE(ok) << t.name() << ": encode(" << std::hexfloat << x << std::defaultfloat << " = " << x << ") gave code "
                  << got << " (" << t.decode_float(got) << "), expected code " << expected[0] << " ("
                  << t.decode_float(expected[0]) << ")";
}

TEST(DTypeEncode, BruteForceRoundingRandom) {
  std::mt19937_64 rng(20240601);
  for (const auto& t : small_floats()) {
    SCOPED_TRACE(t.name());
    const double maxv = t.float_max();
    const double lo_exp = std::log2(t.float_min_subnormal()) - 3;
    const double hi_exp = std::log2(maxv) + 2;
    std::uniform_real_distribution<double> uni(-1.5 * maxv, 1.5 * maxv);
    for (int i = 0; i < 3000; ++i) {
      check_encode(t, uni(rng));
      double mag = log_uniform(rng, lo_exp, hi_exp);
      check_encode(t, (rng() & 1) ? -mag : mag);
    }
  }
}

TEST(DTypeEncode, BruteForceRoundingMidpoints) {
  for (const auto& t : small_floats()) {
    SCOPED_TRACE(t.name());
    std::vector<double> values;
    for (uint64_t c = 0; c < sign_bit(t); ++c) {
      double v = ref_decode(t, c);
      if (std::isfinite(v)) values.push_back(v);
    }
    std::sort(values.begin(), values.end());
    // Exact midpoints between neighbours, and the doubles just beside them.
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      double mid = (values[i] + values[i + 1]) / 2;
      for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf), values[i]}) {
        check_encode(t, x);
        check_encode(t, -x);
      }
    }
    // Beyond the largest value: half an ulp above it, and far away.
    double top = values.back(), below = values[values.size() - 2];
    for (double x : {top + (top - below) / 2, std::nextafter(top + (top - below) / 2, 0.0),
                     std::nextafter(top + (top - below) / 2, kInf), top * 1.25, top * 2, top * 1e6, 1e300, kInf}) {
      check_encode(t, x);
      check_encode(t, -x);
    }
    // Far below the smallest value.
    for (double x : {0.0, 1e-300, t.float_min_subnormal() / 2, t.float_min_subnormal() / 3,
                     std::nextafter(t.float_min_subnormal() / 2, kInf), 0x1p-1074}) {
      check_encode(t, x);
      check_encode(t, -x);
    }
  }
}

TEST(DTypeEncode, OverflowPerStyle) {
  // IEEE e5m2: max 57344, the next binade step is 8192, so 61440 is the rounding threshold.
  const DataType e5m2 = dtypes::float8_e5m2;
  EXPECT_EQ(e5m2.encode_float(57344.0), 0x7Bu);
  EXPECT_EQ(e5m2.encode_float(61439.0), 0x7Bu);
  EXPECT_EQ(e5m2.encode_float(61440.0), 0x7Cu);
  EXPECT_EQ(e5m2.encode_float(1e6), 0x7Cu);
  EXPECT_EQ(e5m2.encode_float(-1e6), 0xFCu);
  EXPECT_EQ(e5m2.encode_float(kInf), 0x7Cu);
  EXPECT_EQ(e5m2.encode_float(-kInf), 0xFCu);
  // IEEE float16: 65520 is the threshold.
  EXPECT_EQ(float16.encode_float(65519.0), 0x7BFFu);
  EXPECT_EQ(float16.encode_float(65520.0), 0x7C00u);
  EXPECT_EQ(float16.encode_float(-65520.0), 0xFC00u);
  // FiniteNaN e4m3 saturates, never reaching the NaN code.
  const DataType e4m3 = dtypes::float8_e4m3;
  EXPECT_EQ(e4m3.encode_float(448.0), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(464.0), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(470.0), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(480.0), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(1000.0), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(-1000.0), 0xFEu);
  EXPECT_EQ(e4m3.encode_float(kInf), 0x7Eu);
  EXPECT_EQ(e4m3.encode_float(-kInf), 0xFEu);
  // Finite formats saturate.
  EXPECT_EQ(dtypes::float6_e3m2.encode_float(100.0), 0x1Fu);
  EXPECT_EQ(dtypes::float6_e3m2.encode_float(-kInf), 0x3Fu);
  EXPECT_EQ(dtypes::float4_e2m1.encode_float(7.0), 0x7u);
  EXPECT_EQ(dtypes::float4_e2m1.encode_float(1e30), 0x7u);
  EXPECT_EQ(dtypes::float4_e2m1.encode_float(-1e30), 0xFu);
  EXPECT_EQ(dtypes::float6_e2m3.encode_float(8.0), 0x1Fu);
}

TEST(DTypeEncode, NaN) {
  for (double nan : {kNaN, -kNaN}) {
    EXPECT_EQ(dtypes::float8_e4m3.encode_float(nan) & 0x7F, 0x7Fu);
    EXPECT_TRUE(std::isnan(ref_decode(dtypes::float8_e5m2, dtypes::float8_e5m2.encode_float(nan))));
    EXPECT_TRUE(std::isnan(ref_decode(float16, float16.encode_float(nan))));
    EXPECT_TRUE(std::isnan(ref_decode(bfloat16, bfloat16.encode_float(nan))));
    EXPECT_TRUE(std::isnan(float32.decode_float(float32.encode_float(nan))));
    EXPECT_TRUE(std::isnan(float64.decode_float(float64.encode_float(nan))));
    EXPECT_TRUE(std::isnan(dtypes::tfloat32.decode_float(dtypes::tfloat32.encode_float(nan))));
    EXPECT_EQ(dtypes::tfloat32.encode_float(nan) & 0x1FFF, 0u);
    // Finite formats have no NaN: +max.
    EXPECT_EQ(dtypes::float4_e2m1.encode_float(nan), 0x7u);
    EXPECT_EQ(dtypes::float6_e3m2.encode_float(nan), 0x1Fu);
    EXPECT_EQ(dtypes::float6_e2m3.encode_float(nan), 0x1Fu);
    for (const auto& t : small_floats()) {
      uint64_t c = t.encode_float(nan);
      EXPECT_LT(c, uint64_t(1) << t.bits()) << t.name();
      if (t.float_style() == FloatStyle::Finite)
        EXPECT_EQ(ref_decode(t, c), t.float_max()) << t.name();
      else
        EXPECT_TRUE(std::isnan(ref_decode(t, c))) << t.name();
    }
  }
}

TEST(DTypeEncode, ExplicitRounding) {
  // float4_e2m1 {0, 0.5, 1, 1.5, 2, 3, 4, 6}: ties go to the even code.
  const DataType f4 = dtypes::float4_e2m1;
  EXPECT_EQ(f4.encode_float(0.25), 0x0u);   // tie 0 / 0.5 -> 0
  EXPECT_EQ(f4.encode_float(0.26), 0x1u);
  EXPECT_EQ(f4.encode_float(0.75), 0x2u);   // tie 0.5 / 1 -> 1 (code 2)
  EXPECT_EQ(f4.encode_float(1.25), 0x2u);   // tie 1 / 1.5 -> 1
  EXPECT_EQ(f4.encode_float(1.75), 0x4u);   // tie 1.5 / 2 -> 2
  EXPECT_EQ(f4.encode_float(2.5), 0x4u);    // tie 2 / 3 -> 2
  EXPECT_EQ(f4.encode_float(3.5), 0x6u);    // tie 3 / 4 -> 4
  EXPECT_EQ(f4.encode_float(5.0), 0x6u);    // tie 4 / 6 -> 4
  EXPECT_EQ(f4.encode_float(5.01), 0x7u);
  EXPECT_EQ(f4.encode_float(-5.0), 0xEu);
  EXPECT_EQ(f4.encode_float(-0.1), 0x8u);   // rounds to -0
  // float16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9.
  EXPECT_EQ(float16.encode_float(1.0 + 0x1p-11), 0x3C00u);
  EXPECT_EQ(float16.encode_float(1.0 + 3 * 0x1p-11), 0x3C02u);
  // Subnormal float16: 2^-25 is a tie between 0 and 2^-24 -> 0; 3 * 2^-25 -> 2 * 2^-24.
  EXPECT_EQ(float16.encode_float(0x1p-25), 0x0000u);
  EXPECT_EQ(float16.encode_float(3 * 0x1p-25), 0x0002u);
  // Rounding up from the largest subnormal into the smallest normal.
  EXPECT_EQ(float16.encode_float(0x1p-14 - 0x1p-26), 0x0400u);
  EXPECT_EQ(dtypes::float8_e4m3.encode_float(0x1p-6 - 0x1p-11), 0x08u);
  // Rounding up into the next binade: 2 - 2^-12 -> 2.
  EXPECT_EQ(float16.encode_float(2.0 - 0x1p-12), 0x4000u);
  // e4m3 0.1 = 2^-4 * 1.6 lies between 2^-4 * 1.5 and 2^-4 * 1.625 = 0.1015625 (exponent
  // field 3, mantissa 101).
  EXPECT_EQ(dtypes::float8_e4m3.encode_float(0.1), 0x1Du);
}

TEST(DTypeEncode, IndependentOfTheRoundingMode) {
  // encode_float rounds to nearest even whatever rounding mode the caller has set.
  struct Case {
    DataType type;
    double value;
    uint64_t code;
  };
  const Case cases[] = {
      {float16, 1.0 + 0x1p-11, 0x3C00},        // tie -> even (down)
      {float16, 1.0 + 3 * 0x1p-11, 0x3C02},    // tie -> even (up)
      {float16, 1.0 + 0x1p-12, 0x3C00},        // below the midpoint
      {float16, -(1.0 + 0x1p-12), 0xBC00},
      {float16, 1.0 + 0x1.8p-11, 0x3C01},      // above the midpoint
      {dtypes::float4_e2m1, 2.4, 0x4},
      {dtypes::float4_e2m1, -2.6, 0xD},
      {dtypes::float8_e4m3, 0.1, 0x1D},
      {dtypes::tfloat32, 1.0 + 0x1p-12, 0x3F800000},
  };
  const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO, FE_TONEAREST};
  for (int mode : modes) {
    std::vector<uint64_t> got;
    ASSERT_EQ(std::fesetround(mode), 0);
    for (const auto& c : cases) got.push_back(c.type.encode_float(c.value));
    std::fesetround(FE_TONEAREST);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], cases[i].code) << "mode " << mode << " " << cases[i].type.name() << " " << cases[i].value;
  }
}

// ---------------------------------------------------------------------------------------
// Standard formats against the compiler's conversions
// ---------------------------------------------------------------------------------------

uint16_t half_bits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}
_Float16 half_from_bits(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, sizeof h);
  return h;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
double double_from_bits(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

TEST(DTypeFloat16, DecodeEveryCodeMatchesCompiler) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    double expected = double(half_from_bits(uint16_t(c)));
    EXPECT_TRUE(same_double(float16.decode_float(c), expected)) << c;
  }
}

TEST(DTypeFloat16, EncodeMatchesCompiler) {
  std::mt19937_64 rng(7);
  auto check = [](double x) {
    _Float16 h = static_cast<_Float16>(x);
    if (std::isnan(x)) return;
    EXPECT_EQ(float16.encode_float(x), half_bits(h)) << std::hexfloat << x;
  };
  for (int i = 0; i < 200000; ++i) {
    double mag = log_uniform(rng, -30, 17);  // subnormals, normals and overflow
    check((rng() & 1) ? -mag : mag);
  }
  // Random double bit patterns in the float16 range (all mantissa bits random).
  for (int i = 0; i < 100000; ++i) {
    uint64_t exp = 1023 - 28 + rng() % 46;
    uint64_t bits = (rng() & 0x800FFFFFFFFFFFFFULL) | (exp << 52);
    check(double_from_bits(bits));
  }
  // Midpoints between neighbouring float16 values and the doubles beside them.
  for (uint32_t c = 0; c < 0x7BFF; ++c) {
    double a = double(half_from_bits(uint16_t(c))), b = double(half_from_bits(uint16_t(c + 1)));
    double mid = (a + b) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) {
      check(x);
      check(-x);
    }
  }
  for (double x : {0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e5, kInf, -kInf, 1e-300, 0x1p-1074}) check(x);
}

TEST(DTypeBFloat16, DecodeEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    double expected = double(float_from_bits(c << 16));
    EXPECT_TRUE(same_double(bfloat16.decode_float(c), expected)) << c;
  }
}

// Round-to-nearest-even of a float32 pattern to its high 16 bits (non-NaN input).
uint32_t bf16_round(uint32_t u) {
  uint32_t low = u & 0xFFFF, high = u >> 16;
  if (low > 0x8000 || (low == 0x8000 && (high & 1))) high += 1;  // carries into the exponent
  return high;
}

TEST(DTypeBFloat16, EncodeMatchesFloat32Rounding) {
  std::mt19937_64 rng(11);
  auto check = [](uint32_t u) {
    float f = float_from_bits(u);
    if (std::isnan(f)) return;
    EXPECT_EQ(bfloat16.encode_float(double(f)), bf16_round(u)) << std::hexfloat << f;
  };
  for (int i = 0; i < 300000; ++i) check(uint32_t(rng()));
  // Exact ties and their neighbours, all exponents.
  for (int i = 0; i < 50000; ++i) {
    uint32_t u = (uint32_t(rng()) & 0xFFFF0000u) | 0x8000u;
    check(u);
    check(u + 1);
    check(u - 1);
  }
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0x7F800000u, 0xFF800000u,
                     0x00000001u, 0x00008000u, 0x00018000u, 0x3F808000u, 0x3F818000u})
    check(u);
}

TEST(DTypeFloat32, EncodeIsTheBitPattern) {
  std::mt19937_64 rng(13);
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = uint32_t(rng());
    float f = float_from_bits(u);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float32.encode_float(double(f)), u) << std::hexfloat << f;
    EXPECT_TRUE(same_double(float32.decode_float(u), double(f))) << u;
  }
  // Doubles round like the compiler's double -> float conversion.
  for (int i = 0; i < 300000; ++i) {
    uint64_t exp = 1023 - 160 + rng() % 300;  // subnormal floats to overflow
    double d = double_from_bits((rng() & 0x800FFFFFFFFFFFFFULL) | (exp << 52));
    EXPECT_EQ(float32.encode_float(d), float_bits(float(d))) << std::hexfloat << d;
  }
  for (double d : {0x1p-150, 0x1.8p-150, 0x1p-149, 0x1.fffffefffffffp127, 0x1.ffffffp127, 1e39, 1e-50})
    EXPECT_EQ(float32.encode_float(d), float_bits(float(d))) << std::hexfloat << d;
  EXPECT_EQ(float32.encode_float(-0.0), 0x80000000u);
}

TEST(DTypeFloat64, EncodeIsTheBitPattern) {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 300000; ++i) {
    uint64_t u = rng();
    if (i % 4 == 0) u &= 0x800FFFFFFFFFFFFFULL;  // subnormals
    double d = double_from_bits(u);
    if (std::isnan(d)) continue;
    EXPECT_EQ(float64.encode_float(d), u) << std::hexfloat << d;
    EXPECT_TRUE(same_double(float64.decode_float(u), d));
  }
  EXPECT_EQ(float64.encode_float(std::numeric_limits<double>::max()), 0x7FEFFFFFFFFFFFFFULL);
  EXPECT_EQ(float64.encode_float(kInf), 0x7FF0000000000000ULL);
}

TEST(DTypeTFloat32, HighNineteenBits) {
  const DataType tf32 = dtypes::tfloat32;
  EXPECT_EQ(tf32.encode_float(1.0), 0x3F800000u);
  EXPECT_EQ(tf32.encode_float(-2.0), 0xC0000000u);
  EXPECT_EQ(tf32.encode_float(1.0 + 0x1p-10), 0x3F802000u);
  EXPECT_EQ(tf32.encode_float(1.0 + 0x1p-11), 0x3F800000u);       // tie -> even
  EXPECT_EQ(tf32.encode_float(1.0 + 3 * 0x1p-11), 0x3F804000u);   // tie -> even
  EXPECT_EQ(tf32.encode_float(kInf), 0x7F800000u);
  std::mt19937_64 rng(19);
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = uint32_t(rng());
    if (i % 3 == 0) u = (u & 0xFFFFE000u) | 0x1000u;  // exact ties
    float f = float_from_bits(u);
    if (std::isnan(f)) continue;
    // Round to nearest even at bit 13 of the float32 pattern.
    uint32_t low = u & 0x1FFF, high = u >> 13;
    if (low > 0x1000 || (low == 0x1000 && (high & 1))) high += 1;
    uint32_t expected = high << 13;
    uint64_t got = tf32.encode_float(double(f));
    EXPECT_EQ(got & 0x1FFF, 0u);
    EXPECT_EQ(got, expected) << std::hexfloat << f;
    EXPECT_TRUE(same_double(tf32.decode_float(got), double(float_from_bits(expected)))) << std::hexfloat << f;
  }
}

// ---------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------

TEST(DTypePacking, ExplicitLittleEndianExamples) {
  EXPECT_EQ(pack_bits({0x1, 0x2, 0x3}, 4), (std::vector<uint8_t>{0x21, 0x03}));
  // 3-bit codes 101, 011, 110 occupy bits 0-2, 3-5 and 6-8.
  EXPECT_EQ(pack_bits({0b101, 0b011, 0b110}, 3), (std::vector<uint8_t>{0x9D, 0x01}));
  EXPECT_EQ(pack_bits({1, 0, 1, 1, 0, 0, 0, 1, 1}, 1), (std::vector<uint8_t>{0x8D, 0x01}));
  EXPECT_EQ(pack_bits({0x3F, 0x00, 0x2A}, 6), (std::vector<uint8_t>{0x3F, 0xA0, 0x02}));
  EXPECT_EQ(pack_bits({0x1234, 0xABCD}, 16), (std::vector<uint8_t>{0x34, 0x12, 0xCD, 0xAB}));
  EXPECT_EQ(pack_bits({0x12345678}, 32), (std::vector<uint8_t>{0x78, 0x56, 0x34, 0x12}));
  EXPECT_EQ(pack_bits({0x5, 0x6, 0x7, 0x4}, 2), (std::vector<uint8_t>{0x39}));  // only the low bits count
  EXPECT_EQ(pack_bits({0xFF}, 4), (std::vector<uint8_t>{0x0F}));
  EXPECT_EQ(pack_bits({}, 4), (std::vector<uint8_t>{}));
  EXPECT_EQ(unpack_bits({0x21, 0x03}, 4, 3), (std::vector<uint64_t>{0x1, 0x2, 0x3}));
  EXPECT_EQ(unpack_bits({0x9D, 0x01}, 3, 3), (std::vector<uint64_t>{0b101, 0b011, 0b110}));
  EXPECT_EQ(unpack_bits({0x3F, 0xA0, 0x02}, 6, 3), (std::vector<uint64_t>{0x3F, 0x00, 0x2A}));
  EXPECT_EQ(unpack_bits({0x21, 0x03}, 4, 2), (std::vector<uint64_t>{0x1, 0x2}));  // fewer than the bytes hold
  EXPECT_EQ(unpack_bits({}, 5, 0), (std::vector<uint64_t>{}));
}

TEST(DTypePacking, RoundTripRandom) {
  std::mt19937_64 rng(23);
  for (int bits : {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64}) {
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 9, 13, 31, 33, 101, 1000}) {
      std::vector<uint64_t> codes(n);
      for (auto& c : codes) c = bits == 64 ? rng() : rng() % (uint64_t(1) << bits);
      auto bytes = pack_bits(codes, bits);
      // ceil(n * bits / 8) bytes.
      int64_t total_bits = n * bits;
      EXPECT_EQ(int64_t(bytes.size()), total_bits / 8 + (total_bits % 8 != 0 ? 1 : 0)) << bits << " " << n;
      EXPECT_EQ(unpack_bits(bytes, bits, n), codes) << bits << " " << n;
      // Every bit sits where the little-endian rule puts it.
      for (int64_t i = 0; i < n; ++i)
        for (int b = 0; b < bits; ++b) {
          int64_t pos = i * bits + b;
          ASSERT_EQ((bytes[pos / 8] >> (pos % 8)) & 1, int((codes[i] >> b) & 1)) << bits << " " << i << " " << b;
        }
      // The unused high bits of the last byte are zero.
      if (total_bits % 8 != 0) {
        EXPECT_EQ(bytes.back() >> (total_bits % 8), 0);
      }
    }
  }
}

TEST(DTypePacking, StorageBytes) {
  EXPECT_EQ(dtypes::int4.storage_bytes(0), 0);
  EXPECT_EQ(dtypes::int4.storage_bytes(1), 1);
  EXPECT_EQ(dtypes::int4.storage_bytes(2), 1);
  EXPECT_EQ(dtypes::int4.storage_bytes(3), 2);
  EXPECT_EQ(dtypes::int3.storage_bytes(1), 1);
  EXPECT_EQ(dtypes::int3.storage_bytes(3), 2);
  EXPECT_EQ(dtypes::int3.storage_bytes(8), 3);
  EXPECT_EQ(dtypes::uint1.storage_bytes(8), 1);
  EXPECT_EQ(dtypes::uint1.storage_bytes(9), 2);
  EXPECT_EQ(dtypes::float6_e3m2.storage_bytes(4), 3);
  EXPECT_EQ(dtypes::float6_e3m2.storage_bytes(5), 4);
  EXPECT_EQ(dtypes::float7_e3m3.storage_bytes(8), 7);
  EXPECT_EQ(dtypes::float16.storage_bytes(3), 6);
  EXPECT_EQ(dtypes::boolean.storage_bytes(3), 3);
  EXPECT_EQ(dtypes::float16.pointer_to().storage_bytes(2), 16);
  EXPECT_EQ(dtypes::int4.storage_bytes(1000001), 500001);
  for (int bits = 1; bits <= 7; ++bits) {
    DataType t = DataType::make_uint(bits);
    for (int64_t n = 0; n < 100; ++n) {
      int64_t expected = 0;
      while (expected * 8 < n * bits) ++expected;  // the smallest byte count that holds them
      EXPECT_EQ(t.storage_bytes(n), expected) << bits << " " << n;
      EXPECT_EQ(int64_t(pack_bits(std::vector<uint64_t>(n, 1), bits).size()), expected);
    }
  }
}

TEST(DTypePacking, UnpackTooFewBytesThrows) {
  EXPECT_THROW(unpack_bits({0x00}, 3, 3), InternalError);        // 9 bits from 8
  EXPECT_THROW(unpack_bits({}, 1, 1), InternalError);
  EXPECT_THROW(unpack_bits({0x00, 0x00, 0x00}, 16, 2), InternalError);
  EXPECT_NO_THROW(unpack_bits({0x00, 0x00}, 3, 5));              // 15 bits from 16
  EXPECT_NO_THROW(unpack_bits({0x00, 0x00, 0x00, 0x00}, 16, 2));
}

// ---------------------------------------------------------------------------------------
// Promotion
// ---------------------------------------------------------------------------------------

void expect_promote(const DataType& a, const DataType& b, const DataType& expected) {
  EXPECT_EQ(promote(a, b), expected) << a.name() << " + " << b.name();
  EXPECT_EQ(promote(b, a), expected) << b.name() << " + " << a.name();
}

TEST(DTypePromote, Integers) {
  expect_promote(dtypes::int32, dtypes::int64, dtypes::int64);
  expect_promote(dtypes::int8, dtypes::int16, dtypes::int16);
  expect_promote(dtypes::int4, dtypes::int8, dtypes::int8);
  expect_promote(dtypes::uint8, dtypes::uint32, dtypes::uint32);
  // Same width, signed and unsigned: the signed type.
  expect_promote(dtypes::uint8, dtypes::int8, dtypes::int8);
  expect_promote(dtypes::uint32, dtypes::int32, dtypes::int32);
  expect_promote(dtypes::uint64, dtypes::int64, dtypes::int64);
  expect_promote(dtypes::uint4, dtypes::int4, dtypes::int4);
  // Different widths: the wider type.
  expect_promote(dtypes::uint8, dtypes::int16, dtypes::int16);
  expect_promote(dtypes::int8, dtypes::uint16, dtypes::uint16);
  expect_promote(dtypes::int32, dtypes::uint64, dtypes::uint64);
  // bool joins anything.
  expect_promote(dtypes::boolean, dtypes::int8, dtypes::int8);
  expect_promote(dtypes::boolean, dtypes::uint1, dtypes::uint1);
  expect_promote(dtypes::boolean, dtypes::boolean, dtypes::boolean);
  expect_promote(dtypes::int32, dtypes::int32, dtypes::int32);
}

TEST(DTypePromote, Floats) {
  expect_promote(dtypes::int32, float16, float16);
  expect_promote(dtypes::int64, float16, float16);
  expect_promote(dtypes::uint8, bfloat16, bfloat16);
  expect_promote(dtypes::int8, dtypes::float8_e4m3, dtypes::float8_e4m3);
  expect_promote(dtypes::boolean, float32, float32);
  expect_promote(dtypes::int64, dtypes::float4_e2m1, dtypes::float4_e2m1);
  expect_promote(float16, bfloat16, float32);
  expect_promote(float16, float32, float32);
  expect_promote(bfloat16, float32, float32);
  expect_promote(float32, float64, float64);
  expect_promote(float16, float64, float64);
  expect_promote(dtypes::tfloat32, float32, float32);
  expect_promote(dtypes::float8_e4m3, float16, float16);
  expect_promote(dtypes::float8_e5m2, float16, float16);
  expect_promote(dtypes::float8_e5m2, bfloat16, bfloat16);
  expect_promote(dtypes::float6_e3m2, float16, float16);
  expect_promote(dtypes::float4_e2m1, float32, float32);
  expect_promote(float16, float16, float16);
}

// Whether every finite value of small float `a` is a value of `b` (by decoding every code of
// `a` and re-encoding it in b).
bool holds_exactly(const DataType& b, const DataType& a) {
  for (uint64_t c = 0; c < (uint64_t(1) << a.bits()); ++c) {
    double v = ref_decode(a, c);
    if (!std::isfinite(v)) continue;
    if (b.decode_float(b.encode_float(v)) != v) return false;
  }
  return true;
}

TEST(DTypePromote, FloatsHoldBothOperandsExactly) {
  // Two small floats promote to a type that holds every value of both, consistently
  // whether or not they have the same width.
  expect_promote(dtypes::float8_e4m3, dtypes::float8_e5m2, float16);
  expect_promote(dtypes::float6_e3m2, dtypes::float6_e2m3, float16);
  expect_promote(dtypes::float6_e3m2, dtypes::float4_e2m1, dtypes::float6_e3m2);
  // A sub-byte float with a wide exponent does not fit in float16.
  DataType e5m1 = DataType::make_subbyte_float(5, 1);  // max 1.5 * 2^16
  expect_promote(e5m1, float16, float32);
  DataType e6m0 = DataType::make_subbyte_float(6, 0);  // max 2^32
  expect_promote(e6m0, dtypes::float4_e2m1, float32);
  std::vector<DataType> types = small_floats();
  for (const auto& t : {float16, bfloat16, float32, dtypes::tfloat32}) types.push_back(t);
  for (const auto& a : types)
    for (const auto& b : types) {
      DataType p = promote(a, b);
      ASSERT_TRUE(p.is_float()) << a.name() << " + " << b.name();
      EXPECT_EQ(p, promote(b, a)) << a.name() << " + " << b.name();
      if (a.bits() <= 8) {
        EXPECT_TRUE(holds_exactly(p, a)) << a.name() << " + " << b.name() << " -> " << p.name();
      }
      if (b.bits() <= 8) {
        EXPECT_TRUE(holds_exactly(p, b)) << a.name() << " + " << b.name() << " -> " << p.name();
      }
      // Never a type wider than needed among the standard ones: two formats of at most
      // 8 bits never need more than float32.
      if (a.bits() <= 8 && b.bits() <= 8) {
        EXPECT_LE(p.bits(), 32) << a.name() << " + " << b.name();
      }
    }
}

TEST(DTypePromote, PointersAndVoidThrow) {
  DataType p = float16.pointer_to();
  EXPECT_EQ(promote(p, p), p);  // identical types need no conversion
  EXPECT_THROW(promote(p, float16), CompileError);
  EXPECT_THROW(promote(float16, p), CompileError);
  EXPECT_THROW(promote(p, dtypes::int32), CompileError);
  EXPECT_THROW(promote(dtypes::int64, p), CompileError);
  EXPECT_THROW(promote(p, float32.pointer_to()), CompileError);
  EXPECT_THROW(promote(dtypes::void_t, dtypes::int32), CompileError);
  EXPECT_THROW(promote(dtypes::int32, dtypes::void_t), CompileError);
}

}  // namespace
}  // namespace tilus
