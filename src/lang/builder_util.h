// The tracer's shared helpers (internal to src/lang): the builder's files include it.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "tilus/ir/inst_def.h"
#include "tilus/ir/simplify.h"
#include "tilus/ir/verifier.h"
#include "tilus/lang/builder.h"

namespace tilus::builder_detail {

inline std::string type_of(const Tensor& t) { return t.defined() ? t.type_str() : std::string("<none>"); }

inline int normalize_dim(int dim, int rank) { return dim < 0 ? dim + rank : dim; }

// The static shape of a tensor, or empty when a dim is dynamic (hand-built IR); the
// verifier reports the problem with the instruction's location.
inline std::vector<int64_t> static_dims(const Tensor& t) {
  std::vector<int64_t> s;
  if (!t.defined()) return s;
  for (auto& d : t.shape()) {
    if (!d.is_int_const()) return {};
    s.push_back(d.int_value());
  }
  return s;
}

// Normalizes negative dims (Python's: -1 is the last); dims out of range and duplicates
// (after normalization) are reported with the dims as the user wrote them.
inline std::vector<int> normalize_dims(const std::vector<int>& dims, const Tensor& x, const char* inst, const SourceLoc& loc) {
  std::vector<int> out;
  int rank = x.defined() ? x.rank() : 0;
  for (int d : dims) {
    if (x.defined() && (d < -rank || d >= rank))
      throw CompileError(fmt::format("{}: dims [{}]: dim {} is out of range for {} (rank {}), where dims are 0 to {} "
                                     "or, from the end, -1 to -{}",
                                     inst, fmt::join(dims, ", "), d, type_of(x), rank, rank - 1, rank),
                         loc);
    int n = normalize_dim(d, rank);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw CompileError(fmt::format("{}: dim {} appears twice in dims [{}] of {}", inst, n, fmt::join(dims, ", "),
                                     type_of(x)),
                         loc);
    out.push_back(n);
  }
  return out;
}

// A static shape as the user gave it: positive dims that fit the IR's 32-bit extents.
inline void check_static_shape(const std::vector<int64_t>& shape, const char* inst, const SourceLoc& loc) {
  for (auto d : shape) {
    if (d <= 0) throw CompileError(fmt::format("{}: shape {} must have positive dims", inst, shape_str(shape)), loc);
    if (d > std::numeric_limits<int32_t>::max())
      throw CompileError(fmt::format("{}: shape {} has a dim larger than {}", inst, shape_str(shape),
                                     std::numeric_limits<int32_t>::max()),
                         loc);
  }
}

inline bool is_math_op(const std::string& op) {
  static const char* ops[] = {"exp",  "exp2",  "log",   "log2", "sqrt", "rsqrt",   "sin",  "cos",
                              "round", "tanh", "floor", "ceil", "erf",  "sigmoid", "gelu", "gelu_tanh", "rcp"};
  return std::any_of(std::begin(ops), std::end(ops), [&](const char* o) { return op == o; });
}

// A scalar operand next to a tensor of dtype t takes t's type when that loses no
// category (int literal next to a float tensor, etc.); a float scalar next to an integer
// tensor promotes the result to float.
inline Expr adopt_scalar(const Expr& s, DataType t) {
  if (!s.defined() || s.dtype() == t) return s;
  if (t.is_float() && (s.dtype().is_integer() || s.dtype().is_bool() || s.dtype().is_float())) return cast(s, t);
  if (t.is_integer() && (s.dtype().is_integer() || s.dtype().is_bool())) return cast(s, t);
  if (t.is_bool() && s.dtype().is_bool()) return s;
  return s;
}

inline std::vector<int> default_dims(const Tensor& global, size_t tile_rank) {
  std::vector<int> dims;
  int r = global.defined() ? global.rank() : 0;
  for (int d = std::max<int>(0, r - int(tile_rank)); d < r; ++d) dims.push_back(d);
  return dims;
}

// Fills in a region's offsets and extents: a whole tensor when both are missing.
inline void complete_region(CopyRegion& r) {
  if (r.offsets.empty() && r.extents.empty()) {
    for (int d = 0; d < r.tensor.rank(); ++d) r.offsets.push_back(int_const(0));
    r.extents = r.tensor.shape();
  }
}

// An instruction that writes `dst` from `src` (store_shared, assign).
template <class T>
std::shared_ptr<T> dst_src_inst(const Tensor& dst, const Tensor& src, SourceLoc loc) {
  auto i = make_inst<T>(std::move(loc));
  i->dst = dst;
  i->src = src;
  return i;
}

}  // namespace tilus::builder_detail
