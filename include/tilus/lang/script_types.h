// The C++ Script's value types (part of tilus/lang/script.h, which includes it): dtype tags,
// runtime scalars and pointers, tensor handles, the options structs of the instruction methods,
// loop ranges and branch chains.
#pragma once

#include <cxxabi.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "tilus/ir/layout.h"
#include "tilus/lang/builder.h"

namespace tilus {

using Loc = std::source_location;

// --- dtype tags ---------------------------------------------------------------------------
#define TILUS_DTYPE_TAG(tag, value) \
  struct tag {                      \
    static constexpr DataType dtype = dtypes::value; \
  };
TILUS_DTYPE_TAG(boolean_t, boolean)
TILUS_DTYPE_TAG(i8, int8)
TILUS_DTYPE_TAG(i16, int16)
TILUS_DTYPE_TAG(i32, int32)
TILUS_DTYPE_TAG(i64, int64)
TILUS_DTYPE_TAG(u8, uint8)
TILUS_DTYPE_TAG(u16, uint16)
TILUS_DTYPE_TAG(u32, uint32)
TILUS_DTYPE_TAG(u64, uint64)
TILUS_DTYPE_TAG(f16, float16)
TILUS_DTYPE_TAG(bf16, bfloat16)
TILUS_DTYPE_TAG(f32, float32)
TILUS_DTYPE_TAG(f64, float64)
TILUS_DTYPE_TAG(f8e4m3, float8_e4m3)
TILUS_DTYPE_TAG(f8e5m2, float8_e5m2)
TILUS_DTYPE_TAG(i4, int4)
TILUS_DTYPE_TAG(u4, uint4)
TILUS_DTYPE_TAG(f6e3m2, float6_e3m2)
TILUS_DTYPE_TAG(f4e2m1, float4_e2m1)
#undef TILUS_DTYPE_TAG

// The dtype a tag names (void: an untyped pointer, viewed with any dtype).
template <class T>
struct tag_dtype {
  static constexpr DataType value = T::dtype;
};
template <>
struct tag_dtype<void> {
  static constexpr DataType value = dtypes::void_t;
};

// A runtime scalar parameter of dtype T::dtype.
template <class T>
struct Scalar : Expr {
  using Tag = T;
  Scalar() = default;
  explicit Scalar(const Expr& e) : Expr(e) {}
};
using Bool = Scalar<boolean_t>;
using Int32 = Scalar<i32>;
using Int64 = Scalar<i64>;
using UInt32 = Scalar<u32>;
using UInt64 = Scalar<u64>;
using Float16 = Scalar<f16>;
using Float32 = Scalar<f32>;
using Float64 = Scalar<f64>;

// A pointer parameter to elements of T::dtype (Ptr<void>: untyped; global_view gives the
// dtype).
template <class T>
struct Ptr : Expr {
  using Tag = T;
  Ptr() = default;
  explicit Ptr(const Expr& e) : Expr(e) {}
};

class Script;

// --- tensor handles -------------------------------------------------------------------------
class TensorHandle {
 public:
  TensorHandle() = default;
  explicit TensorHandle(Tensor t) : t_(std::move(t)) {}
  const Tensor& tensor() const { return t_; }
  bool bound() const { return t_.defined(); }
  DataType dtype() const { return t_.dtype(); }
  int rank() const { return t_.rank(); }
  const std::vector<Expr>& shape() const { return t_.shape(); }

 protected:
  Tensor t_;
};

class GlobalTensor;
class SharedTensor;
class RegisterTensor;

// A source or destination of copy(): a whole tensor, a box (offsets + extents), or a head
// element (offsets only: the region starting there, extents taken from the other side).
struct CopyRegionArg {
  CopyRegion region;
  CopyRegionArg(const GlobalTensor& t);
  CopyRegionArg(const SharedTensor& t);
  CopyRegionArg(const RegisterTensor& t);
  explicit CopyRegionArg(CopyRegion r) : region(std::move(r)) {}
};

class GlobalTensor : public TensorHandle {
 public:
  using TensorHandle::TensorHandle;
  // The box [offsets, offsets + extents) for copy().
  CopyRegionArg region(std::vector<Expr> offsets, std::vector<Expr> extents) const {
    return CopyRegionArg(CopyRegion{t_, std::move(offsets), std::move(extents)});
  }
  // The head element at `index` (copy()'s region sugar).
  CopyRegionArg at(std::vector<Expr> index) const { return CopyRegionArg(CopyRegion{t_, std::move(index), {}}); }
};

// An index for SharedTensor::operator[] that records where it was written.
struct IndexArg {
  Expr value;
  SourceLoc loc;
  IndexArg(const Expr& e, Loc l = Loc::current()) : value(e), loc(SourceLoc::from(l)) {}
  IndexArg(int v, Loc l = Loc::current()) : value(v), loc(SourceLoc::from(l)) {}
  IndexArg(int64_t v, Loc l = Loc::current()) : value(v), loc(SourceLoc::from(l)) {}
};

class SharedTensor : public TensorHandle {
 public:
  using TensorHandle::TensorHandle;
  // sa[i]: the sub-tensor with the leading dim fixed at i (a view).
  SharedTensor operator[](const IndexArg& i) const;
  CopyRegionArg region(std::vector<Expr> offsets, std::vector<Expr> extents) const {
    return CopyRegionArg(CopyRegion{t_, std::move(offsets), std::move(extents)});
  }
  CopyRegionArg at(std::vector<Expr> index) const { return CopyRegionArg(CopyRegion{t_, std::move(index), {}}); }
  // A view with the dims reordered (view dim k is dim dims[k]); transpose() of a rank-2 tile.
  SharedTensor permute(std::vector<int> dims, Loc loc = Loc::current()) const;
  // The view of the sub-tensor of `shape` at `offsets` (one per dim of this tensor); view dim k
  // is dim dims[k] (NVIDIA Tilus's slice_shared(tensor, offsets, slice_dims, slice_shape)).
  SharedTensor slice(std::vector<Expr> offsets, std::vector<int> dims, std::vector<int64_t> shape,
                     Loc loc = Loc::current()) const;
  SharedTensor transpose(Loc loc = Loc::current()) const;
};

class RegisterTensor : public TensorHandle {
 public:
  RegisterTensor() = default;
  explicit RegisterTensor(Tensor t) : TensorHandle(std::move(t)) {}
  RegisterTensor(const RegisterTensor&) = default;
  // Binds an unbound handle; records `assign` into the tensor of a bound one.
  RegisterTensor& operator=(const RegisterTensor& other);

  RegisterTensor to(DataType dtype, Loc loc = Loc::current()) const;
  RegisterTensor transpose(Loc loc = Loc::current()) const;
};

// An operand of a tensor operator: a register tensor or a scalar. Its constructors record
// where the operator was written.
struct TensorOperand {
  RegisterTensor tensor;
  Expr scalar;
  SourceLoc loc;
  TensorOperand(const RegisterTensor& t, Loc l = Loc::current()) : tensor(t), loc(SourceLoc::from(l)) {}
  TensorOperand(const Expr& e, Loc l = Loc::current()) : scalar(e), loc(SourceLoc::from(l)) {}
  TensorOperand(int v, Loc l = Loc::current()) : scalar(v), loc(SourceLoc::from(l)) {}
  TensorOperand(int64_t v, Loc l = Loc::current()) : scalar(v), loc(SourceLoc::from(l)) {}
  TensorOperand(float v, Loc l = Loc::current()) : scalar(v), loc(SourceLoc::from(l)) {}
  TensorOperand(double v, Loc l = Loc::current()) : scalar(v), loc(SourceLoc::from(l)) {}
  TensorOperand(bool v, Loc l = Loc::current()) : scalar(v), loc(SourceLoc::from(l)) {}
};

RegisterTensor operator+(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator-(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator*(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator/(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator%(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator&(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator|(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator^(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator<<(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator>>(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator<(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator<=(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator>(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator>=(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator==(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator!=(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator&&(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator||(const TensorOperand& a, const TensorOperand& b);
RegisterTensor operator-(const TensorOperand& a);
RegisterTensor operator~(const TensorOperand& a);
RegisterTensor operator!(const TensorOperand& a);

// A mutable scalar (made by Script::declare). Assigning records an assignment statement.
class ScalarVar : public Var {
 public:
  ScalarVar() = default;
  explicit ScalarVar(const Var& v) : Var(v) {}
  ScalarVar(const ScalarVar&) = default;
  ScalarVar& operator=(const ScalarVar& other) { return assign(other); }
  ScalarVar& operator=(const TensorOperand& value) { return assign_from(value); }

 private:
  ScalarVar& assign(const Expr& value);
  ScalarVar& assign_from(const TensorOperand& value);
};

// --- options structs (keyword arguments) --------------------------------------------------
struct GlobalViewOptions {
  std::optional<DataType> dtype;  // default: the pointer's element type
  std::vector<Expr> strides;      // default: row-major
};
struct LoadGlobalOptions {
  std::vector<Expr> offsets;
  std::vector<int64_t> shape;
  std::vector<int> dims;  // default: the trailing dims of the global tensor
  RegisterTensor out;     // write into this tensor instead of a new one
  Expr other;             // the value of the elements outside the global tensor (default: zero)
};
struct StoreGlobalOptions {
  std::vector<Expr> offsets;
  std::vector<int> dims;
};
struct CopyAsyncOptions {
  std::vector<Expr> offsets;
  std::vector<int> dims;
  std::optional<std::string> evict;  // "evict_normal" | "evict_first" | "evict_last"
  bool check_bounds = true;
};
struct CopyOptions {
  std::optional<int64_t> coalesced_width;
  bool disable_tma = false;
  std::optional<std::string> eviction_policy;
  std::map<std::string, std::string> annotations;
  RegisterLayout loop_layout;
};
struct AsyncCopyOptions {
  std::optional<int64_t> coalesced_width;
  std::map<std::string, std::string> annotations;
  RegisterLayout loop_layout;
};
struct TmaCopyOptions {
  SharedTensor barrier;  // the mbarrier of a load's transaction (required for loads)
  std::optional<std::string> eviction_policy;
  std::map<std::string, std::string> annotations;
};
struct TmaTileOptions {
  std::vector<Expr> offsets;  // one per global dim
  std::vector<int> dims;      // the global dim of each shared dim (default: the trailing ones)
  Expr multicast_mask;        // global_to_shared: the cluster's blocks (bit i: rank i) that receive the box
  Expr cache_policy;          // a raw 64-bit L2 cache policy (createpolicy's), for the .L2::cache_hint form
};
struct AtomicOptions {
  std::string sem = "relaxed";  // "relaxed" | "acquire" | "release" | "acq_rel"
  std::string scope;            // "cta" | "cluster" | "gpu" | "sys" (default: "gpu" global, "cta" shared)
  std::vector<Expr> offsets;    // a global dst's tile (default: all zero)
  std::vector<int> dims;        // as store_global's
};
struct MbarrierOptions {
  std::string sem;             // default: "release" for arrivals, "acquire" for waits
  std::string scope = "cta";   // "cta" | "cluster"
};
struct DotOptions {
  RegisterTensor out;
  std::optional<DataType> acc_dtype;  // when c is not given (default float32 / int32)
};
struct ViewOptions {
  std::optional<DataType> dtype;
  RegisterLayout layout;
};
struct ReduceOptions {
  std::optional<std::vector<int>> dims;  // default: all dims
  bool keepdim = false;
};
struct RangeOptions {
  Unroll unroll;
  std::string name = "i";
  // Software pipelining (the pipeline_loops pass; Python's num_stages / warp_specialize /
  // persistent): a ring of num_stages stages (0 or 1: the loop as written).
  int64_t num_stages = 0;
  bool warp_specialize = false;
  bool persistent = false;
  // A persistent ring's epilogue: "" (the pass chooses), "tma" or "registers" (LoopPipeline).
  std::string epilogue;
};

// The initial value of register_tensor(): nothing, a scalar, or a function of the indices.
struct Init {
  Expr scalar;
  std::function<Expr(const std::vector<Var>&)> fn;
  Init() = default;
  Init(const Expr& e) : scalar(e) {}
  Init(int v) : scalar(v) {}
  Init(double v) : scalar(v) {}
  Init(float v) : scalar(v) {}
  Init(bool v) : scalar(v) {}
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<Expr, F, const std::vector<Var>&>>>
  Init(F f) : fn(std::move(f)) {}
};

// A format string for Script::printf that records where it was written.
struct FormatString {
  std::string text;
  SourceLoc loc;
  FormatString(const char* s, Loc l = Loc::current()) : text(s), loc(SourceLoc::from(l)) {}
  FormatString(std::string s, Loc l = Loc::current()) : text(std::move(s)), loc(SourceLoc::from(l)) {}
};

// The loop object of `for (Expr i : range(...))`: the body is traced once, with a symbolic
// loop variable, into an IR for loop.
class LoopRange {
 public:
  LoopRange(Builder* b, Expr begin, Expr end, Expr step, RangeOptions opts, SourceLoc loc);
  LoopRange(const LoopRange&) = delete;
  ~LoopRange() noexcept(false);
  struct Sentinel {};
  class Iterator {
   public:
    explicit Iterator(LoopRange* r) : r_(r) {}
    Var operator*() const { return r_->var_; }
    Iterator& operator++();
    bool operator!=(Sentinel) const { return !r_->closed_; }

   private:
    LoopRange* r_;
  };
  Iterator begin();
  Sentinel end() { return {}; }

 private:
  void close();
  Builder* b_;
  Expr begin_, end_, step_;
  RangeOptions opts_;
  SourceLoc loc_;
  Var var_;
  bool opened_ = false, closed_ = false;
  int exceptions_ = 0;
};

// if_(cond, then).else_if(cond, body).else_(body)
class IfChain {
 public:
  IfChain(Builder* b) : b_(b) {}
  IfChain& else_if(const Expr& cond, const std::function<void()>& body, Loc loc = Loc::current());
  void else_(const std::function<void()>& body, Loc loc = Loc::current());

 private:
  Builder* b_;
};

}  // namespace tilus
