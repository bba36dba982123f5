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

#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>

#include "tilus/lang/script_groups.h"
#include "tilus/lang/script_types.h"


namespace tilus {

// --- Script ---------------------------------------------------------------------------------
using ConstValue = std::variant<int64_t, double, bool, std::string>;
using Constants = std::map<std::string, ConstValue>;

// Traces a Script into a Program with one kernel. `constants` gives the values of the
// compile-time parameters by name.
template <class K>
Program trace(K script, const Constants& constants = {}, Loc loc = Loc::current());

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
    // Blocks each SM must be able to hold at once (__launch_bounds__'s second argument, so
    // ptxas caps the registers a thread); 0: ptxas chooses.
    int64_t min_blocks = 0;
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
  // Seed 004: every thread arrives once on `mbar` when the tcgen05 operations it issued before
  // have completed (tcgen05.commit; sm_100a). A definition-driven instruction (inst_def.h).
  void tcgen05_mma_arrive(const SharedTensor& mbar, Loc loc = Loc::current()) {
    builder().defined("tcgen05_mma_arrive", {{"mbar", mbar.bound() ? mbar.tensor() : Tensor()}}, {}, {},
                      SourceLoc::from(loc));
  }
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
  RegisterTensor log2(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("log2", x, loc); }
  RegisterTensor tanh(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("tanh", x, loc); }
  RegisterTensor floor(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("floor", x, loc); }
  RegisterTensor ceil(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("ceil", x, loc); }
  RegisterTensor erf(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("erf", x, loc); }
  RegisterTensor sigmoid(const RegisterTensor& x, Loc loc = Loc::current()) { return unary("sigmoid", x, loc); }
  // torch's gelu: approximate "none" (erf) or "tanh".
  RegisterTensor gelu(const RegisterTensor& x, const std::string& approximate = "none", Loc loc = Loc::current());
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
  // bar.arrive barrier_id, arrive_count: the current group's threads count towards the named
  // barrier and go on; other threads wait at it with sync_threads(barrier_id, arrive_count).
  void named_barrier_arrive(int64_t barrier_id, int64_t arrive_count, Loc loc = Loc::current());
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
