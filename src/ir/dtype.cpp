#include "tilus/ir/dtype.h"

#include <fmt/format.h>

#include <cmath>
#include <cctype>
#include <cstring>
#include <limits>

#include "tilus/ir/error.h"

namespace tilus {

DataType DataType::make_subbyte_float(int exponent, int mantissa) {
  int bits = 1 + exponent + mantissa;
  if (exponent < 1 || mantissa < 0 || bits < 3 || bits > 7)
    throw CompileError(fmt::format("no sub-byte float with {} exponent and {} mantissa bits: sub-byte floats "
                                   "have 3 to 7 bits (1 sign + exponent >= 1 + mantissa)",
                                   exponent, mantissa));
  return make_float(bits, exponent, mantissa, FloatStyle::Finite);
}

DataType DataType::pointee() const {
  if (!is_pointer()) throw InternalError("pointee() of non-pointer type " + name());
  DataType t = *this;
  t.pointer_depth_ -= 1;
  return t;
}

std::string DataType::name() const {
  std::string base;
  switch (kind_) {
    case TypeKind::Void: base = "void"; break;
    case TypeKind::Bool: base = "bool"; break;
    case TypeKind::Int: base = fmt::format("int{}", bits_); break;
    case TypeKind::UInt: base = fmt::format("uint{}", bits_); break;
    case TypeKind::Float:
      if (bits_ == 16 && exponent_ == 5 && mantissa_ == 10) base = "float16";
      else if (bits_ == 16 && exponent_ == 8 && mantissa_ == 7) base = "bfloat16";
      else if (bits_ == 32 && exponent_ == 8 && mantissa_ == 23) base = "float32";
      else if (bits_ == 64 && exponent_ == 11 && mantissa_ == 52) base = "float64";
      else if (bits_ == 32 && exponent_ == 8 && mantissa_ == 10) base = "tfloat32";
      else base = fmt::format("float{}_e{}m{}", bits_, exponent_, mantissa_);
      break;
  }
  for (int i = 0; i < pointer_depth_; ++i) base += "*";
  return base;
}

std::optional<DataType> DataType::from_name(std::string_view name) {
  int depth = 0;
  while (!name.empty() && (name.back() == '*' || name.back() == ' ')) {
    if (name.back() == '*') ++depth;
    name.remove_suffix(1);
  }
  while (!name.empty() && name.front() == '~') {  // Python's ~float16 spelling
    ++depth;
    name.remove_prefix(1);
  }
  auto with_depth = [&](DataType t) {
    for (int i = 0; i < depth; ++i) t = t.pointer_to();
    return std::optional<DataType>(t);
  };
  std::string n(name);
  struct Alias {
    const char* name;
    DataType type;
  };
  static const Alias aliases[] = {
      {"bool", dtypes::boolean},        {"boolean", dtypes::boolean},     {"void", dtypes::void_t},
      {"float16", dtypes::float16},     {"f16", dtypes::float16},         {"half", dtypes::float16},
      {"bfloat16", dtypes::bfloat16},   {"bf16", dtypes::bfloat16},       {"float32", dtypes::float32},
      {"f32", dtypes::float32},         {"float", dtypes::float32},       {"float64", dtypes::float64},
      {"f64", dtypes::float64},         {"double", dtypes::float64},      {"tfloat32", dtypes::tfloat32},
      {"tf32", dtypes::tfloat32},       {"float8_e4m3", dtypes::float8_e4m3}, {"float8_e4m3fn", dtypes::float8_e4m3},
      {"f8e4m3", dtypes::float8_e4m3},  {"float8_e5m2", dtypes::float8_e5m2}, {"f8e5m2", dtypes::float8_e5m2},
  };
  for (auto& a : aliases)
    if (n == a.name) return with_depth(a.type);
  // A decimal number of at most 4 digits (longer ones are no valid width and would overflow).
  auto parse_int = [](const std::string& s, size_t pos, int& out, size_t& end) {
    if (pos >= s.size() || !std::isdigit(static_cast<unsigned char>(s[pos]))) return false;
    out = 0;
    size_t start = pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (pos - start >= 4) return false;
      out = out * 10 + (s[pos++] - '0');
    }
    end = pos;
    return true;
  };
  int v = 0;
  size_t end = 0;
  for (const char* prefix : {"int", "i", "uint", "u"}) {
    size_t len = std::strlen(prefix);
    if (n.compare(0, len, prefix) == 0 && parse_int(n, len, v, end) && end == n.size()) {
      bool is_unsigned = prefix[0] == 'u';
      if (!(v >= 1 && v <= 8) && v != 16 && v != 32 && v != 64) return std::nullopt;
      return with_depth(is_unsigned ? DataType::make_uint(v) : DataType::make_int(v));
    }
  }
  // float<bits>_e<E>m<M> / f<bits>e<E>m<M>
  for (const char* prefix : {"float", "f"}) {
    size_t len = std::strlen(prefix);
    int bits = 0, e = 0, m = 0;
    if (n.compare(0, len, prefix) != 0 || !parse_int(n, len, bits, end)) continue;
    size_t p = end;
    if (p < n.size() && n[p] == '_') ++p;
    if (p >= n.size() || n[p] != 'e' || !parse_int(n, p + 1, e, end)) continue;
    p = end;
    if (p >= n.size() || n[p] != 'm' || !parse_int(n, p + 1, m, end) || end != n.size()) continue;
    if (bits != 1 + e + m) return std::nullopt;
    if (bits == 8 && e == 4 && m == 3) return with_depth(dtypes::float8_e4m3);
    if (bits == 8 && e == 5 && m == 2) return with_depth(dtypes::float8_e5m2);
    if (bits >= 3 && bits <= 7 && e >= 1) return with_depth(DataType::make_subbyte_float(e, m));
    return std::nullopt;
  }
  return std::nullopt;
}

int64_t DataType::int_min() const {
  if (is_bool() || is_uint()) return 0;
  if (!is_int()) throw InternalError("int_min() of non-integer type " + name());
  if (bits_ >= 64) return std::numeric_limits<int64_t>::min();
  return -(int64_t(1) << (bits_ - 1));
}

uint64_t DataType::int_max() const {
  if (is_bool()) return 1;
  if (!is_integer()) throw InternalError("int_max() of non-integer type " + name());
  int b = is_int() ? bits_ - 1 : bits_;
  if (b >= 64) return std::numeric_limits<uint64_t>::max();
  return (uint64_t(1) << b) - 1;
}

namespace {
int exponent_bias(const DataType& t) { return (1 << (t.exponent_bits() - 1)) - 1; }
// The highest biased exponent that encodes finite numbers.
int max_biased_exponent(const DataType& t) {
  int all_ones = (1 << t.exponent_bits()) - 1;
  return t.float_style() == FloatStyle::IEEE ? all_ones - 1 : all_ones;
}
// Mantissa of the largest finite number at the highest exponent.
uint64_t max_mantissa(const DataType& t) {
  uint64_t all = (uint64_t(1) << t.mantissa_bits()) - 1;
  return t.float_style() == FloatStyle::FiniteNaN ? all - 1 : all;  // S.1111.111 is NaN
}
// Bits of the encoded (sign, exponent, mantissa) pattern.
int pattern_bits(const DataType& t) { return 1 + t.exponent_bits() + t.mantissa_bits(); }
}  // namespace

double DataType::float_max() const {
  if (!is_float()) throw InternalError("float_max() of non-float type " + name());
  int e = max_biased_exponent(*this) - exponent_bias(*this);
  double frac = 1.0 + double(max_mantissa(*this)) / double(uint64_t(1) << mantissa_);
  return std::ldexp(frac, e);
}

double DataType::float_min_normal() const {
  if (!is_float()) throw InternalError("float_min_normal() of non-float type " + name());
  return std::ldexp(1.0, 1 - exponent_bias(*this));
}

double DataType::float_min_subnormal() const {
  if (!is_float()) throw InternalError("float_min_subnormal() of non-float type " + name());
  return std::ldexp(1.0, 1 - exponent_bias(*this) - mantissa_);
}

double DataType::min_value() const {
  if (is_float()) return -float_max();
  if (is_integer() || is_bool()) return double(int_min());
  throw InternalError("min_value() of non-numeric type " + name());
}

double DataType::max_value() const {
  if (is_float()) return float_max();
  if (is_integer() || is_bool()) return double(int_max());
  throw InternalError("max_value() of non-numeric type " + name());
}

double DataType::decode_float(uint64_t bits) const {
  if (!is_float()) throw InternalError("decode_float() of non-float type " + name());
  int pb = pattern_bits(*this);
  uint64_t p = bits >> (bits_ - pb);  // tf32 keeps its pattern in the high bits
  p &= (pb >= 64) ? ~uint64_t(0) : ((uint64_t(1) << pb) - 1);
  bool sign = (p >> (pb - 1)) & 1;
  uint64_t exp = (p >> mantissa_) & ((uint64_t(1) << exponent_) - 1);
  uint64_t man = p & ((uint64_t(1) << mantissa_) - 1);
  uint64_t all_ones = (uint64_t(1) << exponent_) - 1;
  double v;
  if (style_ == FloatStyle::IEEE && exp == all_ones) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (style_ == FloatStyle::FiniteNaN && exp == all_ones && man == (uint64_t(1) << mantissa_) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(double(man), 1 - exponent_bias(*this) - mantissa_);
  } else {
    v = std::ldexp(double((uint64_t(1) << mantissa_) | man), int(exp) - exponent_bias(*this) - mantissa_);
  }
  return sign ? -v : v;
}

uint64_t DataType::encode_float(double value) const {
  if (!is_float()) throw InternalError("encode_float() of non-float type " + name());
  int pb = pattern_bits(*this);
  int shift = bits_ - pb;
  uint64_t exp_all = (uint64_t(1) << exponent_) - 1;
  auto finish = [&](bool sign, uint64_t exp, uint64_t man) {
    uint64_t p = (uint64_t(sign) << (pb - 1)) | (exp << mantissa_) | man;
    return p << shift;
  };
  bool sign = std::signbit(value);
  double a = std::fabs(value);
  if (std::isnan(value)) {
    switch (style_) {
      case FloatStyle::IEEE: return finish(false, exp_all, uint64_t(1) << (mantissa_ > 0 ? mantissa_ - 1 : 0));
      case FloatStyle::FiniteNaN: return finish(false, exp_all, (uint64_t(1) << mantissa_) - 1);
      case FloatStyle::Finite: return finish(false, uint64_t(max_biased_exponent(*this)), max_mantissa(*this));
    }
  }
  int bias = exponent_bias(*this);
  int max_exp = max_biased_exponent(*this);
  auto overflow = [&]() {
    if (style_ == FloatStyle::IEEE) return finish(sign, exp_all, 0);
    return finish(sign, uint64_t(max_exp), max_mantissa(*this));
  };
  if (std::isinf(value)) return overflow();
  if (a == 0.0) return finish(sign, 0, 0);
  // Scale to an integer number of units of the smallest subnormal, then round half to even.
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int unbiased = e - 1;
  int min_normal_exp = 1 - bias;
  int quantum_exp = (unbiased < min_normal_exp ? min_normal_exp : unbiased) - mantissa_;
  double scaled = std::ldexp(a, -quantum_exp);  // exact, < 2^(m+1)
  // Round half to even explicitly, whatever the floating-point environment's rounding mode.
  double whole = std::floor(scaled);
  double frac = scaled - whole;  // exact
  uint64_t q = uint64_t(whole);
  if (frac > 0.5 || (frac == 0.5 && (q & 1))) q += 1;
  // q holds the significand in units of 2^quantum_exp; it may have carried into 2^(m+1).
  uint64_t biased;
  uint64_t man;
  if (unbiased < min_normal_exp) {
    if (q >> mantissa_) {  // rounded up to the smallest normal
      biased = 1;
      man = q & ((uint64_t(1) << mantissa_) - 1);
    } else {
      biased = 0;
      man = q;
    }
  } else {
    int exp = unbiased;
    if (q >> (mantissa_ + 1)) {
      q >>= 1;
      exp += 1;
    }
    biased = uint64_t(exp + bias);
    man = q & ((uint64_t(1) << mantissa_) - 1);
  }
  if (int64_t(biased) > max_exp || (int64_t(biased) == max_exp && man > max_mantissa(*this))) return overflow();
  return finish(sign, biased, man);
}

std::vector<uint8_t> pack_bits(const std::vector<uint64_t>& codes, int bits) {
  std::vector<uint8_t> out((codes.size() * bits + 7) / 8, 0);
  if (bits % 8 == 0) {  // whole bytes: little-endian byte by byte
    size_t nb = bits / 8;
    for (size_t i = 0; i < codes.size(); ++i)
      for (size_t b = 0; b < nb; ++b) out[i * nb + b] = uint8_t(codes[i] >> (8 * b));
    return out;
  }
  // Other widths (sub-byte types): a bit accumulator flushed a byte at a time.
  if (bits < 1 || bits > 56) throw InternalError(fmt::format("pack_bits: {}-bit codes", bits));
  uint64_t mask = (uint64_t(1) << bits) - 1, acc = 0;
  int held = 0;
  size_t o = 0;
  for (uint64_t c : codes) {
    acc |= (c & mask) << held;
    for (held += bits; held >= 8; held -= 8, acc >>= 8) out[o++] = uint8_t(acc);
  }
  if (held > 0) out[o] = uint8_t(acc);
  return out;
}

std::vector<uint64_t> unpack_bits(const std::vector<uint8_t>& bytes, int bits, int64_t n) {
  if (int64_t(bytes.size()) * 8 < n * bits)
    throw InternalError(fmt::format("unpack_bits: {} bytes hold fewer than {} elements of {} bits", bytes.size(), n, bits));
  std::vector<uint64_t> out(n, 0);
  if (bits % 8 == 0) {
    size_t nb = bits / 8;
    for (int64_t i = 0; i < n; ++i)
      for (size_t b = 0; b < nb; ++b) out[i] |= uint64_t(bytes[i * nb + b]) << (8 * b);
    return out;
  }
  if (bits < 1 || bits > 56) throw InternalError(fmt::format("unpack_bits: {}-bit codes", bits));
  uint64_t mask = (uint64_t(1) << bits) - 1, acc = 0;
  int held = 0;
  size_t in = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (; held < bits; held += 8) acc |= uint64_t(bytes[in++]) << held;
    out[size_t(i)] = acc & mask;
    acc >>= bits;
    held -= bits;
  }
  return out;
}

namespace {
// Rank in the promotion lattice: bool < integers (by width, signed after unsigned of the
// same width) < floats.
int rank(const DataType& t) {
  if (t.is_bool()) return 0;
  if (t.is_integer()) return 10 + t.bits() * 2 + (t.is_int() ? 1 : 0);
  if (t.is_float()) return 1000 + t.bits() * 4 + (t.exponent_bits() > 5 ? 1 : 0) + (t == dtypes::tfloat32 ? -1 : 0);
  return -1;
}

// Whether float type `to` represents every value of float type `from` exactly (infinities
// and NaN included). With at least as many mantissa bits, a range reaching as high and a
// smallest subnormal as small, every normal and subnormal value of `from` lies on `to`'s grid.
bool float_holds(const DataType& to, const DataType& from) {
  if (from.float_style() == FloatStyle::IEEE && to.float_style() != FloatStyle::IEEE) return false;  // inf
  if (from.float_style() == FloatStyle::FiniteNaN && to.float_style() == FloatStyle::Finite) return false;  // NaN
  return from.mantissa_bits() <= to.mantissa_bits() && from.float_max() <= to.float_max() &&
         from.float_min_subnormal() >= to.float_min_subnormal();
}
}  // namespace

DataType promote(const DataType& a, const DataType& b) {
  if (a == b) return a;  // also the same pointer type (e.g. both arms of a select)
  if (a.is_pointer() || b.is_pointer() || a.is_void() || b.is_void())
    throw CompileError(fmt::format("no common type for {} and {}", a.name(), b.name()));
  if (a.is_float() && b.is_float()) {
    // The operand type that holds the other exactly; otherwise the narrowest of float16,
    // float32, float64 that holds both (float16 + bfloat16 -> float32, e4m3 + e5m2 -> float16).
    bool a_holds_b = float_holds(a, b), b_holds_a = float_holds(b, a);
    if (a_holds_b && b_holds_a) return rank(a) >= rank(b) ? a : b;
    if (a_holds_b) return a;
    if (b_holds_a) return b;
    for (const DataType& t : {dtypes::float16, dtypes::float32, dtypes::float64})
      if (float_holds(t, a) && float_holds(t, b)) return t;
    return dtypes::float64;
  }
  // A float beats any integer or bool; otherwise the wider integer, signed on a tie.
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace tilus
