// The C++ Script API.
//
//   struct VectorAdd : tilus::Script {
//     static constexpr const char* param_names = "n, a, b, c";
//     int64_t block = 256;
//     void operator()(Int32 n, Ptr<f32> a, Ptr<f32> b, Ptr<f32> c) {
//       attrs.blocks = {cdiv(n, block)};
//       attrs.warps = 4;
//       ...
//     }
//   };
//   tilus::Program p = tilus::trace(VectorAdd{});
//
// Hyperparameters are members; the body is operator(). Its parameters are runtime scalars
// (Int32, Float32, ...), pointers (Ptr<f16>, ...) or compile-time constants (plain int,
// int64_t, double, bool: values given to trace()). C++ cannot see parameter names, so a
// Script names them in `param_names` (otherwise arg0, arg1, ...).
//
// Every instruction method records its caller's file and line (std::source_location).
// Tensor handles are references to IR tensors: copying a handle aliases; assigning to a
// RegisterTensor handle that is already bound records an `assign` into that tensor (so
// `acc = dot(a, b, acc)` inside a loop updates the accumulator, as in Tilus). Scalars are
// immutable Exprs; a mutable scalar is made with declare() and changed with assign() or
// its operator=.
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

// --- Script ---------------------------------------------------------------------------------
using ConstValue = std::variant<int64_t, double, bool, std::string>;
using Constants = std::map<std::string, ConstValue>;

// Traces a Script into a Program with one kernel. `constants` gives the values of the
// compile-time parameters by name.
template <class K>
Program trace(K script, const Constants& constants = {}, Loc loc = Loc::current());

class Script;

// A barrier of another block of the cluster (cluster.map_shared_addr(bars[i], rank), NVIDIA
// Tilus's name): arrivals on it (mbarrier.arrive, arrive_and_expect_tx, mbarrier_arrive) reach
// the barrier at `barrier`'s offset in block `rank`.
struct MappedBarrier {
  SharedTensor barrier;
  Expr rank;
};

// self.mbarrier.* (NVIDIA Tilus's names): mbarriers in shared memory. A barrier is one
// element of the tensor alloc() returns (`b[i]`; a one-barrier tensor may be passed whole).
struct MbarrierGroup {
  Script* script;
  // The initial phases of a producer / consumer pipeline (wait(b, phase) with these first).
  static constexpr int producer_initial_phase = 1;
  static constexpr int consumer_initial_phase = 0;
  SharedTensor alloc(std::vector<Expr> counts, Loc loc = Loc::current()) const;
  void arrive(const SharedTensor& barrier, const Expr& count = 1, MbarrierOptions opts = {},
              Loc loc = Loc::current()) const;
  void arrive_and_expect_tx(const SharedTensor& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                            Loc loc = Loc::current()) const;
  void expect_tx(const SharedTensor& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                 Loc loc = Loc::current()) const;
  // The same on a peer block's barrier (cluster.map_shared_addr).
  void arrive(const MappedBarrier& barrier, const Expr& count = 1, MbarrierOptions opts = {},
              Loc loc = Loc::current()) const;
  void arrive_and_expect_tx(const MappedBarrier& barrier, const Expr& transaction_bytes, MbarrierOptions opts = {},
                            Loc loc = Loc::current()) const;
  // Arrive on the barrier at the same offset in block `cta_id` of the cluster; `scope` "cta"
  // (release at block scope, the default) or "cluster" (the thread's earlier writes become
  // visible to the peer's waiters).
  void arrive_remote(const SharedTensor& barrier, const Expr& cta_id, const Expr& count = 1,
                     const std::string& scope = "cta", Loc loc = Loc::current()) const;
  // NVIDIA Tilus's arrive_and_expect_tx_remote: arrive on the barrier at the same offset in block
  // `target_rank` of the cluster and add `transaction_bytes` to its phase's expected bytes
  // (opts.scope: Tilus's default is "cluster").
  void arrive_and_expect_tx_remote(const SharedTensor& barrier, const Expr& transaction_bytes, const Expr& target_rank,
                                   MbarrierOptions opts = {.scope = "cluster"}, Loc loc = Loc::current()) const;
  void wait(const SharedTensor& barrier, const Expr& phase, MbarrierOptions opts = {}, Loc loc = Loc::current()) const;
  // The phase kept in a one-element register tensor.
  void wait(const SharedTensor& barrier, const RegisterTensor& phase, MbarrierOptions opts = {},
            Loc loc = Loc::current()) const;
};

// self.tma.*: bulk tensor copies (sm_90).
struct TmaGroup {
  Script* script;
  void global_to_shared(const GlobalTensor& src, const SharedTensor& dst, TmaTileOptions opts,
                        const SharedTensor& mbarrier, Loc loc = Loc::current()) const;
  void shared_to_global(const SharedTensor& src, const GlobalTensor& dst, TmaTileOptions opts,
                        Loc loc = Loc::current()) const;
  void commit_group(Loc loc = Loc::current()) const;
  void wait_group(int64_t n, bool read = false, Loc loc = Loc::current()) const;
};

// self.wgmma.* (NVIDIA Tilus's names; sm_90a): warp-group matrix multiply-accumulate.
// mma(a, b, d): d += a @ b with a [m, k] and b [k, n] shared and K-major (b typically a
// transposed [n, k] tile), d a float32 register tensor; asynchronous until a wait_group
// covers its commit group.
struct WgmmaGroup {
  Script* script;
  void fence(Loc loc = Loc::current()) const;
  void mma(const SharedTensor& a, const SharedTensor& b, const RegisterTensor& d, Loc loc = Loc::current()) const;
  // a in registers (float16 / bfloat16): its layout becomes the wgmma A-fragment layout.
  void mma(const RegisterTensor& a, const SharedTensor& b, const RegisterTensor& d, Loc loc = Loc::current()) const;
  void commit_group(Loc loc = Loc::current()) const;
  void wait_group(int64_t n, Loc loc = Loc::current()) const;
};

// self.atomic.* (NVIDIA Tilus's names): element-wise atomic read-modify-write of a global tile
// (opts.offsets / dims as store_global) or a whole shared tensor; each returns the elements'
// previous values (docs/instructions.md).
struct AtomicGroup {
  Script* script;
#define TILUS_ATOMIC_METHODS(space, Tensor)                                                                     \
  RegisterTensor space##_add(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_sub(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_min(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_max(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},           \
                             Loc loc = Loc::current()) const;                                                   \
  RegisterTensor space##_exch(const Tensor& dst, const RegisterTensor& values, AtomicOptions opts = {},          \
                              Loc loc = Loc::current()) const;                                                  \
  RegisterTensor space##_cas(const Tensor& dst, const RegisterTensor& compare, const RegisterTensor& values,     \
                             AtomicOptions opts = {}, Loc loc = Loc::current()) const;
  TILUS_ATOMIC_METHODS(global, GlobalTensor)
  TILUS_ATOMIC_METHODS(shared, SharedTensor)
#undef TILUS_ATOMIC_METHODS
  // Scatter forms: element k of values to dst at k's coordinates, along `dim` at indices[k]
  // (Builder::atomic_scatter); opts.offsets / dims are not taken.
#define TILUS_ATOMIC_SCATTER(space, Tensor, op)                                                               \
  RegisterTensor space##_scatter_##op(const Tensor& dst, int dim, const RegisterTensor& indices,               \
                                      const RegisterTensor& values, AtomicOptions opts = {},                   \
                                      Loc loc = Loc::current()) const;
#define TILUS_ATOMIC_SCATTERS(space, Tensor) \
  TILUS_ATOMIC_SCATTER(space, Tensor, add)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, sub)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, min)   \
  TILUS_ATOMIC_SCATTER(space, Tensor, max)
  TILUS_ATOMIC_SCATTERS(global, GlobalTensor)
  TILUS_ATOMIC_SCATTERS(shared, SharedTensor)
#undef TILUS_ATOMIC_SCATTERS
#undef TILUS_ATOMIC_SCATTER
};

// self.fence.*: proxy fences.
struct FenceGroup {
  Script* script;
  void proxy_async(const std::string& space = "shared", Loc loc = Loc::current()) const;
};

class Script {
 public:
  Script() = default;
  virtual ~Script() = default;
  // The instruction groups point at their own Script, never at the one copied from.
  Script(const Script& o) : attrs(o.attrs), builder_(o.builder_), applied_(o.applied_) {}
  Script& operator=(const Script& o) {
    attrs = o.attrs;
    builder_ = o.builder_;
    applied_ = o.applied_;
    return *this;
  }

  MbarrierGroup mbarrier{this};
  TmaGroup tma{this};
  FenceGroup fence{this};
  WgmmaGroup wgmma{this};
  AtomicGroup atomic{this};

  struct Attributes {
    std::vector<Expr> blocks;
    int64_t warps = 0;
    // Thread-block cluster shape (Hopper), 1 to 3 dimensions; empty: no clusters (1x1x1).
    std::vector<int64_t> cluster_blocks;
  } attrs;

  struct Dim3 {
    Expr x, y, z;
  };
  const Dim3 blockIdx{builtin::block_idx(0), builtin::block_idx(1), builtin::block_idx(2)};

  // Thread-block cluster instructions, under NVIDIA Tilus's names (self.cluster.*).
  struct Cluster {
    // barrier.cluster.arrive + wait: every thread of every block of the cluster.
    void sync(Loc loc = Loc::current()) const;
    // The block's index in its cluster (%cluster_ctaid), the cluster's shape (attrs.cluster_blocks)
    // and the block's rank in it (%cluster_ctarank); int32 scalars.
    const Dim3 blockIdx{builtin::cluster_block_idx(0), builtin::cluster_block_idx(1), builtin::cluster_block_idx(2)};
    const Dim3 clusterDim{builtin::cluster_dim(0), builtin::cluster_dim(1), builtin::cluster_dim(2)};
    const Expr blockRank{builtin::cluster_block_rank()};
    // `barrier` (bars[i]) as the barrier at its offset in block `target_rank` of the cluster,
    // for mbarrier.arrive / arrive_and_expect_tx / mbarrier_arrive (mapa.shared::cluster).
    MappedBarrier map_shared_addr(const SharedTensor& barrier, const Expr& target_rank) const {
      return {barrier, target_rank};
    }
  };
  const Cluster cluster{};

  // --- tensors -----------------------------------------------------------------------------
  template <class T>
  GlobalTensor global_view(const Ptr<T>& ptr, std::vector<Expr> shape, GlobalViewOptions opts = {},
                           Loc loc = Loc::current()) {
    if (!opts.dtype && tag_dtype<T>::value.is_void())
      throw CompileError("global_view of a Ptr<void> needs .dtype", SourceLoc::from(loc));
    return global_view_impl(ptr, opts.dtype ? *opts.dtype : tag_dtype<T>::value, std::move(shape),
                            std::move(opts.strides), loc);
  }
  GlobalTensor global_view(const Expr& ptr, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides = {},
                           Loc loc = Loc::current()) {
    return global_view_impl(ptr, dtype, std::move(shape), std::move(strides), loc);
  }
  // Global memory the runtime provides at every launch (NVIDIA Tilus's global_tensor): a
  // row-major tensor whose shape may use only the parameters. requires_clean: zero at the
  // first launch, and every launch must leave it zero.
  GlobalTensor global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean,
                             Loc loc = Loc::current());
  // The address of g[indices...] (Tilus's g[i, j].item_ptr()).
  Expr item_ptr(const GlobalTensor& g, std::vector<Expr> indices, Loc loc = Loc::current());
  // The generic address of s[indices...] (all of s's dims; none: its first element), Tilus's
  // SharedTensor.item_ptr(). Accesses through it are the kernel's own: no pass sees them.
  Expr item_ptr(const SharedTensor& s, std::vector<Expr> indices = {}, Loc loc = Loc::current());
  // The group waits until the int32 at `semaphore` holds `value` / stores `value` there after
  // the group's earlier writes (NVIDIA Tilus's names).
  void lock_semaphore(const Expr& semaphore, const Expr& value, Loc loc = Loc::current());
  void release_semaphore(const Expr& semaphore, const Expr& value, Loc loc = Loc::current());
  SharedTensor shared_tensor(DataType dtype, std::vector<int64_t> shape, Loc loc = Loc::current());
  void free_shared(const SharedTensor& t, Loc loc = Loc::current());
  // The same bytes under another shape with as many elements, both row-major (NVIDIA Tilus's
  // reshape_shared): a view of a shared_tensor allocation (or of a reshape of one).
  SharedTensor reshape_shared(const SharedTensor& tensor, std::vector<int64_t> shape, Loc loc = Loc::current());
  RegisterTensor register_tensor(DataType dtype, std::vector<int64_t> shape, Init init = {}, Loc loc = Loc::current());

  // --- memory ------------------------------------------------------------------------------
  RegisterTensor load_global(const GlobalTensor& src, LoadGlobalOptions opts, Loc loc = Loc::current());
  void store_global(const GlobalTensor& dst, const RegisterTensor& src, StoreGlobalOptions opts,
                    Loc loc = Loc::current());
  // dst[..., indices[k], ...] = values[k] (not atomic; NVIDIA Tilus's store_*_scatter).
  void store_global_scatter(const GlobalTensor& dst, int dim, const RegisterTensor& indices,
                            const RegisterTensor& values, Loc loc = Loc::current());
  void store_shared_scatter(const SharedTensor& dst, int dim, const RegisterTensor& indices,
                            const RegisterTensor& values, Loc loc = Loc::current());
  RegisterTensor load_shared(const SharedTensor& src, Loc loc = Loc::current());
  void store_shared(const SharedTensor& dst, const RegisterTensor& src, Loc loc = Loc::current());
  void copy_async(const GlobalTensor& src, const SharedTensor& dst, CopyAsyncOptions opts, Loc loc = Loc::current());
  void copy_async_commit_group(Loc loc = Loc::current());
  void copy_async_wait_group(int64_t n, Loc loc = Loc::current());
  void copy_async_wait_all(Loc loc = Loc::current());
  void copy(const CopyRegionArg& src, const CopyRegionArg& dst, CopyOptions opts = {}, Loc loc = Loc::current());
  // cp.async global -> shared plus a commit; no wait is added: the kernel waits itself.
  void async_copy(const CopyRegionArg& src, const CopyRegionArg& dst, AsyncCopyOptions opts = {},
                  Loc loc = Loc::current());
  // Seed 000/004 names (TileLang): split-phase TMA and its synchronization.
  // tma_copy: arrive-and-expect-tx on opts.barrier + TMA load (or a TMA store); no wait.
  void tma_copy(const CopyRegionArg& src, const CopyRegionArg& dst, TmaCopyOptions opts, Loc loc = Loc::current());
  void mbarrier_wait_parity(const SharedTensor& barrier, const Expr& parity, Loc loc = Loc::current());
  void mbarrier_arrive(const SharedTensor& barrier, Loc loc = Loc::current());
  void mbarrier_arrive(const SharedTensor& barrier, const Expr& cta_id, Loc loc = Loc::current());
  void mbarrier_arrive(const MappedBarrier& barrier, Loc loc = Loc::current());
  void mbarrier_expect_tx(const SharedTensor& barrier, const Expr& tx, Loc loc = Loc::current());
  // Every thread arrives once on `barrier` when its earlier cp.async copies have landed
  // (cp.async.mbarrier.arrive.noinc: the arrival counts toward the expected count).
  void cp_async_barrier_noinc(const SharedTensor& barrier, Loc loc = Loc::current());
  void barrier_wait(const SharedTensor& barrier, const Expr& parity, Loc loc = Loc::current());
  void barrier_arrive(const SharedTensor& barrier, Loc loc = Loc::current());
  void fence_proxy_async(Loc loc = Loc::current());
  // Seed 004's warpgroup builtins: wgmma.fence, commit_group and wait_group.
  void warpgroup_arrive(Loc loc = Loc::current());
  void warpgroup_commit_batch(Loc loc = Loc::current());
  void warpgroup_wait(int64_t num_mma, Loc loc = Loc::current());
  void wait_wgmma(int64_t id, Loc loc = Loc::current());
  void tma_store_arrive(Loc loc = Loc::current());
  // The [bm, bk] tile (nhw_step, c_step) of the im2col matrix of the NHWC image `img` into
  // `col` (docs/instructions.md).
  // With `barrier`: split-phase, as tma_copy (TMA im2col, sm_90; the kernel waits on it).
  void c2d_im2col(const GlobalTensor& img, const SharedTensor& col, const Expr& nhw_step, const Expr& c_step,
                  int64_t kernel, int64_t stride, int64_t dilation, int64_t pad,
                  std::optional<std::string> eviction_policy = std::nullopt, const SharedTensor& barrier = {},
                  Loc loc = Loc::current());
  void tma_store_wait(Loc loc = Loc::current());

  // --- compute -----------------------------------------------------------------------------
  RegisterTensor dot(const RegisterTensor& a, const RegisterTensor& b, const RegisterTensor& c = {},
                     DotOptions opts = {}, Loc loc = Loc::current());
  RegisterTensor cast(const RegisterTensor& x, DataType dtype, Loc loc = Loc::current());
  RegisterTensor view(const RegisterTensor& x, ViewOptions opts, Loc loc = Loc::current());
  RegisterTensor reshape(const RegisterTensor& x, std::vector<int64_t> shape, Loc loc = Loc::current());
  RegisterTensor squeeze(const RegisterTensor& x, std::vector<int> dims, Loc loc = Loc::current());
  // The one element of x as a scalar (every thread of the group holds it; NVIDIA Tilus's .item()).
  Expr item(const RegisterTensor& x, Loc loc = Loc::current());
  RegisterTensor unsqueeze(const RegisterTensor& x, std::vector<int> dims, Loc loc = Loc::current());
  RegisterTensor transpose(const RegisterTensor& x, Loc loc = Loc::current());
  RegisterTensor repeat(const RegisterTensor& x, std::vector<int64_t> repeats, Loc loc = Loc::current());
  RegisterTensor where(const TensorOperand& cond, const TensorOperand& x, const TensorOperand& y);
  RegisterTensor abs(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("abs", x, loc); }
  RegisterTensor exp(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("exp", x, loc); }
  RegisterTensor exp2(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("exp2", x, loc); }
  RegisterTensor log(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("log", x, loc); }
  RegisterTensor sqrt(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("sqrt", x, loc); }
  RegisterTensor rsqrt(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("rsqrt", x, loc); }
  RegisterTensor sin(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("sin", x, loc); }
  RegisterTensor cos(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("cos", x, loc); }
  RegisterTensor round(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("round", x, loc); }
  RegisterTensor square(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("square", x, loc); }
  RegisterTensor clip(const RegisterTensor& x, const Expr& lo, const Expr& hi, Loc loc = Loc::current());
  RegisterTensor maximum(const TensorOperand& a, const TensorOperand& b);
  RegisterTensor minimum(const TensorOperand& a, const TensorOperand& b);
  RegisterTensor sum(const RegisterTensor& x, ReduceOptions opts = {}, Loc loc = Loc::current());
  RegisterTensor max(const RegisterTensor& x, ReduceOptions opts = {}, Loc loc = Loc::current());
  RegisterTensor min(const RegisterTensor& x, ReduceOptions opts = {}, Loc loc = Loc::current());
  RegisterTensor any(const RegisterTensor& x, ReduceOptions opts = {}, Loc loc = Loc::current());
  RegisterTensor all(const RegisterTensor& x, ReduceOptions opts = {}, Loc loc = Loc::current());
  // Prefix scans along `dim` (NVIDIA Tilus's scan / cumsum / cumprod; Builder::scan): op "add",
  // "mul", "max", "min", "and", "or", "xor"; inclusive unless `exclusive`.
  RegisterTensor scan(const RegisterTensor& x, int dim, const std::string& op, bool exclusive = false,
                      Loc loc = Loc::current());
  RegisterTensor cumsum(const RegisterTensor& x, int dim, bool exclusive = false, Loc loc = Loc::current()) {
    return scan(x, dim, "add", exclusive, loc);
  }
  RegisterTensor cumprod(const RegisterTensor& x, int dim, bool exclusive = false, Loc loc = Loc::current()) {
    return scan(x, dim, "mul", exclusive, loc);
  }

  // --- synchronization, debugging, hints -----------------------------------------------------
  void sync(Loc loc = Loc::current());
  template <class... Args>
  void printf(const FormatString& fmt, const Args&... args) {
    printf_impl(fmt, {Expr(args)...});
  }
  void assume(const Expr& cond, Loc loc = Loc::current());
  void annotate_layout(const RegisterTensor& t, const RegisterLayout& layout, Loc loc = Loc::current());
  void annotate_layout(const SharedTensor& t, const SharedLayout& layout, Loc loc = Loc::current());

  // --- thread-level builtins (seed 004; docs/instructions.md) --------------------------------
  // No barrier_id: sync(). A barrier_id (1..15): bar.sync barrier_id, arrive_count (default:
  // the current thread group's threads).
  void sync_threads(std::optional<int64_t> barrier_id = std::nullopt, std::optional<int64_t> arrive_count = std::nullopt,
                    Loc loc = Loc::current());
  // __syncwarp(mask); no mask: the current group's lanes.
  void sync_warp(const Expr& mask = Expr(), Loc loc = Loc::current());
  // A barrier of the whole grid (a cooperative launch; not on the CPU backend).
  void sync_grid(Loc loc = Loc::current());
  void sync_global(Loc loc = Loc::current());
  // setmaxnreg.inc / .dec (sm_90a) in a warp-group-aligned thread group.
  void set_max_nreg(int64_t reg_count, bool is_inc, Loc loc = Loc::current());
  void inc_max_nreg(int64_t reg_count, Loc loc = Loc::current());
  void dec_max_nreg(int64_t reg_count, Loc loc = Loc::current());
  // One element per thread of the current group (int32; shuffle_elect: bool).
  RegisterTensor get_lane_idx(std::optional<int64_t> warp_size = std::nullopt, Loc loc = Loc::current());
  RegisterTensor get_warp_idx_sync(std::optional<int64_t> warp_size = std::nullopt, Loc loc = Loc::current());
  RegisterTensor get_warp_idx(std::optional<int64_t> warp_size = std::nullopt, Loc loc = Loc::current());
  RegisterTensor get_warp_group_idx(std::optional<int64_t> warp_size = std::nullopt,
                                    std::optional<int64_t> warps_per_group = std::nullopt, Loc loc = Loc::current());
  RegisterTensor shuffle_elect(int64_t thread_extent, Loc loc = Loc::current());
  // Warp shuffles of a register tensor's slots; a (block-uniform) scalar is the same in every
  // thread and comes back unchanged.
  RegisterTensor shfl_xor(const RegisterTensor& value, const Expr& offset, Loc loc = Loc::current());
  RegisterTensor shfl_down(const RegisterTensor& value, const Expr& offset, Loc loc = Loc::current());
  RegisterTensor shfl_up(const RegisterTensor& value, const Expr& offset, Loc loc = Loc::current());
  RegisterTensor shfl_sync(const Expr& mask, const RegisterTensor& value, const Expr& srcLane,
                           std::optional<int64_t> width = std::nullopt, Loc loc = Loc::current());
  Expr shfl_xor(const Expr& value, const Expr& offset, Loc loc = Loc::current());
  Expr shfl_down(const Expr& value, const Expr& offset, Loc loc = Loc::current());
  Expr shfl_up(const Expr& value, const Expr& offset, Loc loc = Loc::current());
  Expr shfl_sync(const Expr& mask, const Expr& value, const Expr& srcLane, std::optional<int64_t> width = std::nullopt,
                 Loc loc = Loc::current());
  // Explicit-width global loads / stores of one vector every thread of the group holds
  // (`src` / `dst`: a global tensor, region or head element of exactly N / 8 bytes).
  RegisterTensor ldg32(const CopyRegionArg& src, const Expr& pred = Expr(), Loc loc = Loc::current());
  RegisterTensor ldg64(const CopyRegionArg& src, const Expr& pred = Expr(), Loc loc = Loc::current());
  RegisterTensor ldg128(const CopyRegionArg& src, const Expr& pred = Expr(), Loc loc = Loc::current());
  RegisterTensor ldg256(const CopyRegionArg& src, const Expr& pred = Expr(), Loc loc = Loc::current());
  void stg32(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred = Expr(), Loc loc = Loc::current());
  void stg64(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred = Expr(), Loc loc = Loc::current());
  void stg128(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred = Expr(), Loc loc = Loc::current());
  void stg256(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred = Expr(), Loc loc = Loc::current());
  // The seed's name of break_().
  void loop_break(Loc loc = Loc::current());

  // --- control flow --------------------------------------------------------------------------
  LoopRange range(const Expr& end, RangeOptions opts = {}, Loc loc = Loc::current());
  LoopRange range(const Expr& begin, const Expr& end, RangeOptions opts = {}, Loc loc = Loc::current());
  LoopRange range(const Expr& begin, const Expr& end, const Expr& step, RangeOptions opts = {},
                  Loc loc = Loc::current());
  IfChain if_(const Expr& cond, const std::function<void()>& then, Loc loc = Loc::current());
  void while_(const Expr& cond, const std::function<void()>& body, Loc loc = Loc::current());
  void break_(Loc loc = Loc::current());
  void continue_(Loc loc = Loc::current());
  // The threads that run it leave the kernel (NVIDIA Tilus's `return` under a run-time condition).
  void return_(Loc loc = Loc::current());
  void thread_group(int64_t thread_begin, int64_t num_threads, const std::function<void()>& body,
                    Loc loc = Loc::current());
  void single_thread(const std::function<void()>& body, Loc loc = Loc::current());
  void single_warp(int64_t warp, const std::function<void()>& body, Loc loc = Loc::current());
  void warp_group(int64_t warp_begin, int64_t num_warps, const std::function<void()>& body, Loc loc = Loc::current());
  // Named immutable scalar (a let binding) and mutable scalar.
  Expr let(const std::string& name, const Expr& value, Loc loc = Loc::current());
  ScalarVar declare(const std::string& name, DataType dtype, const Expr& init, Loc loc = Loc::current());
  void assign(const ScalarVar& var, const Expr& value, Loc loc = Loc::current());

  // The builder of the trace in progress (tracing only).
  Builder& builder() const;

 private:
  template <class K>
  friend Program trace(K script, const Constants& constants, Loc loc);
  GlobalTensor global_view_impl(const Expr& ptr, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides,
                                Loc loc);
  RegisterTensor unary(const char* op, const RegisterTensor& x, Loc loc);
  RegisterTensor reduce(ReduceOp op, const RegisterTensor& x, const ReduceOptions& opts, Loc loc);
  void printf_impl(const FormatString& fmt, std::vector<Expr> args);
  void apply_attrs();

  Builder* builder_ = nullptr;
  Attributes applied_;
};

// --- tracing ---------------------------------------------------------------------------------

namespace detail {
std::vector<std::string> split_param_names(const char* names);
std::string demangle_script_name(const char* mangled);
std::string const_to_string(const ConstValue& v);
[[noreturn]] void missing_constant(const std::string& kernel, const std::string& name, const char* type, SourceLoc loc);
[[noreturn]] void wrong_constant(const std::string& kernel, const std::string& name, const char* type,
                                 const ConstValue& v, SourceLoc loc);
// The builder of the trace in progress on this thread (for operators on handles).
Builder* current_builder();
void set_current_builder(Builder* b);

template <class T>
struct is_scalar_param : std::false_type {};
template <class T>
struct is_scalar_param<Scalar<T>> : std::true_type {};
template <class T>
struct is_ptr_param : std::false_type {};
template <class T>
struct is_ptr_param<Ptr<T>> : std::true_type {};

template <class T>
struct member_signature;
template <class C, class... Args>
struct member_signature<void (C::*)(Args...)> {
  using args = std::tuple<std::decay_t<Args>...>;
};

template <class P>
P make_param(Builder& b, const std::string& kernel, const std::string& name, const Constants& constants,
             SourceLoc loc) {
  if constexpr (is_scalar_param<P>::value) {
    return P(b.add_param(name, P::Tag::dtype, loc));
  } else if constexpr (is_ptr_param<P>::value) {
    return P(b.add_param(name, tag_dtype<typename P::Tag>::value.pointer_to(), loc));
  } else {
    static_assert(std::is_arithmetic_v<P> || std::is_same_v<P, std::string>,
                  "Script parameters are Scalar<T>, Ptr<T>, arithmetic constants or std::string");
    auto it = constants.find(name);
    if (it == constants.end()) missing_constant(kernel, name, typeid(P).name(), loc);
    const ConstValue& v = it->second;
    P value{};
    if constexpr (std::is_same_v<P, bool>) {
      if (auto p = std::get_if<bool>(&v)) value = *p;
      else if (auto i = std::get_if<int64_t>(&v)) value = *i != 0;
      else wrong_constant(kernel, name, "bool", v, loc);
    } else if constexpr (std::is_integral_v<P>) {
      if (auto i = std::get_if<int64_t>(&v)) value = static_cast<P>(*i);
      else wrong_constant(kernel, name, "an integer", v, loc);
    } else if constexpr (std::is_floating_point_v<P>) {
      if (auto d = std::get_if<double>(&v)) value = static_cast<P>(*d);
      else if (auto i = std::get_if<int64_t>(&v)) value = static_cast<P>(*i);
      else wrong_constant(kernel, name, "a number", v, loc);
    } else {
      if (auto s = std::get_if<std::string>(&v)) value = *s;
      else wrong_constant(kernel, name, "a string", v, loc);
    }
    b.add_constant(name, const_to_string(v));
    return value;
  }
}

struct BuilderScope {
  Builder* previous;
  explicit BuilderScope(Builder* b) : previous(current_builder()) { set_current_builder(b); }
  ~BuilderScope() { set_current_builder(previous); }
};
}  // namespace detail

template <class K>
Program trace(K script, const Constants& constants, Loc loc) {
  static_assert(std::is_base_of_v<Script, K>, "trace() needs a class derived from tilus::Script");
  std::string name;
  if constexpr (requires { K::kernel_name; }) name = K::kernel_name;
  else name = detail::demangle_script_name(typeid(K).name());
  using Args = typename detail::member_signature<decltype(&K::operator())>::args;
  std::vector<std::string> names;
  if constexpr (requires { K::param_names; }) names = detail::split_param_names(K::param_names);
  SourceLoc where = SourceLoc::from(loc);
  constexpr size_t n = std::tuple_size_v<Args>;
  if (!names.empty() && names.size() != n)
    throw CompileError(name + ": param_names lists " + std::to_string(names.size()) + " names but operator() has " +
                           std::to_string(n) + " parameters",
                       where);
  for (size_t i = names.size(); i < n; ++i) names.push_back("arg" + std::to_string(i));
  for (auto& [key, value] : constants) {
    bool known = false;
    for (auto& nm : names) known |= nm == key;
    if (!known) throw CompileError(name + ": trace() got a value for '" + key + "', which is not a parameter", where);
  }
  Builder builder(name, where);
  detail::BuilderScope scope(&builder);
  script.builder_ = &builder;
  Args args = [&]<size_t... I>(std::index_sequence<I...>) {
    return Args{detail::make_param<std::tuple_element_t<I, Args>>(builder, name, names[I], constants, where)...};
  }(std::make_index_sequence<n>{});
  std::apply([&](auto&... a) { script(a...); }, args);
  script.apply_attrs();
  script.builder_ = nullptr;
  return builder.finish();
}

}  // namespace tilus
