#include "tilus/lang/script.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tilus {

namespace detail {

namespace {
thread_local Builder* current = nullptr;
}

Builder* current_builder() { return current; }
void set_current_builder(Builder* b) { current = b; }

std::vector<std::string> split_param_names(const char* names) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    size_t b = cur.find_first_not_of(" \t\n"), e = cur.find_last_not_of(" \t\n");
    out.push_back(b == std::string::npos ? "" : cur.substr(b, e - b + 1));
    cur.clear();
  };
  for (const char* p = names; *p; ++p) {
    if (*p == ',') flush();
    else cur += *p;
  }
  flush();
  if (out.size() == 1 && out[0].empty()) out.clear();
  return out;
}

std::string demangle_script_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  // Drop namespaces and template arguments: "ns::Matmul<2>" -> "Matmul".
  size_t lt = name.find('<');
  if (lt != std::string::npos) name = name.substr(0, lt);
  size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name;
}

std::string const_to_string(const ConstValue& v) {
  if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (auto b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return "'" + std::get<std::string>(v) + "'";
}

void missing_constant(const std::string& kernel, const std::string& name, const char* type, SourceLoc loc) {
  throw CompileError(fmt::format("{}: parameter '{}' is a compile-time constant; trace() needs its value "
                                 "(pass {{{{\"{}\", value}}}})",
                                 kernel, name, name),
                     loc);
}

void wrong_constant(const std::string& kernel, const std::string& name, const char* type, const ConstValue& v,
                    SourceLoc loc) {
  throw CompileError(fmt::format("{}: compile-time parameter '{}' needs {}, got {}", kernel, name, type,
                                 const_to_string(v)),
                     loc);
}

}  // namespace detail

namespace {
Builder& active(const char* what) {
  Builder* b = detail::current_builder();
  if (!b) throw CompileError(fmt::format("{} used outside of a trace (tensor handles only live while tracing)", what));
  return *b;
}
}  // namespace

// --- handles ---------------------------------------------------------------------------------

CopyRegionArg::CopyRegionArg(const GlobalTensor& t) : region{t.tensor(), {}, {}} {}
CopyRegionArg::CopyRegionArg(const SharedTensor& t) : region{t.tensor(), {}, {}} {}
CopyRegionArg::CopyRegionArg(const RegisterTensor& t) : region{t.tensor(), {}, {}} {}

SharedTensor SharedTensor::operator[](const IndexArg& i) const {
  return SharedTensor(active("shared tensor indexing").index_shared(t_, {i.value}, i.loc));
}

SharedTensor SharedTensor::slice(std::vector<Expr> offsets, std::vector<int> dims, std::vector<int64_t> shape,
                                 Loc loc) const {
  return SharedTensor(active("SharedTensor.slice")
                          .slice_shared(t_, std::move(offsets), std::move(dims), std::move(shape), SourceLoc::from(loc)));
}
SharedTensor SharedTensor::permute(std::vector<int> dims, Loc loc) const {
  return SharedTensor(active("SharedTensor.permute").permute_shared(t_, std::move(dims), SourceLoc::from(loc)));
}
SharedTensor SharedTensor::transpose(Loc loc) const {
  return SharedTensor(active("SharedTensor.transpose").permute_shared(t_, {1, 0}, SourceLoc::from(loc)));
}

RegisterTensor& RegisterTensor::operator=(const RegisterTensor& other) {
  if (this == &other) return *this;
  if (!t_.defined() || !other.t_.defined() || t_.same_as(other.t_)) {
    t_ = other.t_;
    return *this;
  }
  Builder& b = active("assignment to a register tensor");
  b.assign_tensor(t_, other.t_, b.last_loc());
  return *this;
}

RegisterTensor RegisterTensor::to(DataType dtype, Loc loc) const {
  return RegisterTensor(active("to()").cast(t_, dtype, SourceLoc::from(loc)));
}

RegisterTensor RegisterTensor::transpose(Loc loc) const {
  return RegisterTensor(active("transpose()").transpose(t_, SourceLoc::from(loc)));
}

namespace {
RegisterTensor binary_op(BinaryOp op, const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(
      active("a tensor operator").binary(op, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}
}  // namespace

RegisterTensor operator+(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Add, a, b); }
RegisterTensor operator-(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Sub, a, b); }
RegisterTensor operator*(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Mul, a, b); }
RegisterTensor operator/(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Div, a, b); }
RegisterTensor operator%(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Mod, a, b); }
RegisterTensor operator&(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitAnd, a, b); }
RegisterTensor operator|(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitOr, a, b); }
RegisterTensor operator^(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::BitXor, a, b); }
RegisterTensor operator<<(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Shl, a, b); }
RegisterTensor operator>>(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Shr, a, b); }
RegisterTensor operator<(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Lt, a, b); }
RegisterTensor operator<=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Le, a, b); }
RegisterTensor operator>(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Gt, a, b); }
RegisterTensor operator>=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Ge, a, b); }
RegisterTensor operator==(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Eq, a, b); }
RegisterTensor operator!=(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Ne, a, b); }
RegisterTensor operator&&(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::And, a, b); }
RegisterTensor operator||(const TensorOperand& a, const TensorOperand& b) { return binary_op(BinaryOp::Or, a, b); }

namespace {
RegisterTensor unary_op(const char* op, const TensorOperand& a) {
  if (!a.tensor.bound()) throw CompileError(fmt::format("{}: needs a register tensor operand", op), a.loc);
  return RegisterTensor(active("a tensor operator").unary(op, a.tensor.tensor(), a.loc));
}
}  // namespace

RegisterTensor operator-(const TensorOperand& a) { return unary_op("neg", a); }
RegisterTensor operator~(const TensorOperand& a) { return unary_op("bitnot", a); }
RegisterTensor operator!(const TensorOperand& a) { return unary_op("not", a); }

ScalarVar& ScalarVar::assign(const Expr& value) {
  Builder& b = active("assignment to a scalar variable");
  b.assign(*this, value, b.last_loc());
  return *this;
}

ScalarVar& ScalarVar::assign_from(const TensorOperand& value) {
  if (value.tensor.bound())
    throw CompileError(fmt::format("cannot assign a register tensor to scalar variable '{}'", name()), value.loc);
  active("assignment to a scalar variable").assign(*this, value.scalar, value.loc);
  return *this;
}

// --- loops and branches ------------------------------------------------------------------------

LoopRange::LoopRange(Builder* b, Expr begin, Expr end, Expr step, RangeOptions opts, SourceLoc loc)
    : b_(b), begin_(std::move(begin)), end_(std::move(end)), step_(std::move(step)), opts_(std::move(opts)),
      loc_(std::move(loc)), exceptions_(std::uncaught_exceptions()) {}

LoopRange::Iterator LoopRange::begin() {
  if (!opened_) {
    LoopPipeline p;
    p.num_stages = opts_.num_stages;
    p.warp_specialize = opts_.warp_specialize;
    p.persistent = opts_.persistent;
    var_ = b_->begin_for(opts_.name, begin_, end_, step_, opts_.unroll, loc_, p);
    opened_ = true;
  }
  return Iterator(this);
}

LoopRange::Iterator& LoopRange::Iterator::operator++() {
  r_->close();
  return *this;
}

void LoopRange::close() {
  if (opened_ && !closed_) {
    closed_ = true;
    b_->end_for();
  }
}

LoopRange::~LoopRange() noexcept(false) {
  // A C++ `break` or `return` inside the body leaves the loop without ++: close it here,
  // unless an exception is on its way out (the trace is abandoned then).
  if (std::uncaught_exceptions() > exceptions_) return;
  close();
}

IfChain& IfChain::else_if(const Expr& cond, const std::function<void()>& body, Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  b_->begin_else(where);
  b_->begin_if(cond, where);
  body();
  b_->end_if();
  b_->end_else();
  return *this;
}

void IfChain::else_(const std::function<void()>& body, Loc loc) {
  b_->begin_else(SourceLoc::from(loc));
  body();
  b_->end_else();
}

// --- Script ------------------------------------------------------------------------------------

Builder& Script::builder() const {
  if (!builder_) throw CompileError("a Script instruction was called outside of tilus::trace()");
  // attrs are plain members: hand their values to the builder as soon as they change.
  const_cast<Script*>(this)->apply_attrs();
  return *builder_;
}

void Script::apply_attrs() {
  if (!builder_) return;
  SourceLoc loc = builder_->last_loc();
  if (attrs.blocks.size() != applied_.blocks.size() ||
      !std::equal(attrs.blocks.begin(), attrs.blocks.end(), applied_.blocks.begin(),
                  [](const Expr& a, const Expr& b) { return a.same_as(b); })) {
    builder_->set_blocks(attrs.blocks, loc);
    applied_.blocks = attrs.blocks;
  }
  if (attrs.warps != applied_.warps) {
    builder_->set_warps(attrs.warps, loc);
    applied_.warps = attrs.warps;
  }
  if (attrs.cluster_blocks != applied_.cluster_blocks) {
    builder_->set_cluster(attrs.cluster_blocks, loc);
    applied_.cluster_blocks = attrs.cluster_blocks;
  }
}

GlobalTensor Script::global_view_impl(const Expr& ptr, DataType dtype, std::vector<Expr> shape,
                                      std::vector<Expr> strides, Loc loc) {
  return GlobalTensor(builder().global_view(ptr, dtype, std::move(shape), std::move(strides), SourceLoc::from(loc),
                                            ptr.as<VarNode>() ? ptr.as<VarNode>()->name : "g"));
}

GlobalTensor Script::global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean, Loc loc) {
  return GlobalTensor(builder().global_tensor(dtype, std::move(shape), requires_clean, SourceLoc::from(loc)));
}

Expr Script::item_ptr(const SharedTensor& s, std::vector<Expr> indices, Loc loc) {
  return builder().item_ptr(s.tensor(), std::move(indices), SourceLoc::from(loc));
}
Expr Script::item_ptr(const GlobalTensor& g, std::vector<Expr> indices, Loc loc) {
  return builder().item_ptr(g.tensor(), std::move(indices), SourceLoc::from(loc));
}

void Script::lock_semaphore(const Expr& semaphore, const Expr& value, Loc loc) {
  builder().semaphore(SemaphoreOp::Lock, semaphore, value, SourceLoc::from(loc));
}

void Script::release_semaphore(const Expr& semaphore, const Expr& value, Loc loc) {
  builder().semaphore(SemaphoreOp::Release, semaphore, value, SourceLoc::from(loc));
}

SharedTensor Script::shared_tensor(DataType dtype, std::vector<int64_t> shape, Loc loc) {
  return SharedTensor(builder().shared_tensor(dtype, std::move(shape), SourceLoc::from(loc)));
}

void Script::free_shared(const SharedTensor& t, Loc loc) { builder().free_shared(t.tensor(), SourceLoc::from(loc)); }
SharedTensor Script::reshape_shared(const SharedTensor& tensor, std::vector<int64_t> shape, Loc loc) {
  return SharedTensor(builder().reshape_shared(tensor.tensor(), std::move(shape), SourceLoc::from(loc)));
}

RegisterTensor Script::register_tensor(DataType dtype, std::vector<int64_t> shape, Init init, Loc loc) {
  if (init.fn) return RegisterTensor(builder().register_tensor(dtype, std::move(shape), init.fn, SourceLoc::from(loc)));
  return RegisterTensor(builder().register_tensor(dtype, std::move(shape), init.scalar, SourceLoc::from(loc)));
}

namespace {
RegisterTensor into(Builder& b, const RegisterTensor& out, const Tensor& value, const SourceLoc& loc) {
  if (!out.bound()) return RegisterTensor(value);
  b.assign_tensor(out.tensor(), value, loc);
  return out;
}
}  // namespace

RegisterTensor Script::load_global(const GlobalTensor& src, LoadGlobalOptions opts, Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  Tensor t = builder().load_global(src.tensor(), std::move(opts.offsets), std::move(opts.shape), std::move(opts.dims), where);
  return into(builder(), opts.out, t, where);
}

void Script::store_global(const GlobalTensor& dst, const RegisterTensor& src, StoreGlobalOptions opts, Loc loc) {
  builder().store_global(dst.tensor(), src.tensor(), std::move(opts.offsets), std::move(opts.dims), SourceLoc::from(loc));
}

RegisterTensor Script::load_shared(const SharedTensor& src, Loc loc) {
  return RegisterTensor(builder().load_shared(src.tensor(), SourceLoc::from(loc)));
}

void Script::store_shared(const SharedTensor& dst, const RegisterTensor& src, Loc loc) {
  builder().store_shared(dst.tensor(), src.tensor(), SourceLoc::from(loc));
}

void Script::copy_async(const GlobalTensor& src, const SharedTensor& dst, CopyAsyncOptions opts, Loc loc) {
  builder().copy_async(src.tensor(), dst.tensor(), std::move(opts.offsets), std::move(opts.dims), opts.evict,
                       opts.check_bounds, SourceLoc::from(loc));
}

void Script::copy_async_commit_group(Loc loc) { builder().copy_async_commit_group(SourceLoc::from(loc)); }
void Script::copy_async_wait_group(int64_t n, Loc loc) { builder().copy_async_wait_group(n, SourceLoc::from(loc)); }
void Script::copy_async_wait_all(Loc loc) { builder().copy_async_wait_all(SourceLoc::from(loc)); }

void Script::copy(const CopyRegionArg& src, const CopyRegionArg& dst, CopyOptions opts, Loc loc) {
  CopyArgs args{opts.coalesced_width, opts.disable_tma, opts.eviction_policy, opts.annotations, opts.loop_layout};
  builder().copy(src.region, dst.region, args, SourceLoc::from(loc));
}

void Script::async_copy(const CopyRegionArg& src, const CopyRegionArg& dst, AsyncCopyOptions opts, Loc loc) {
  CopyArgs args{.coalesced_width = opts.coalesced_width, .annotations = opts.annotations,
                .loop_layout = opts.loop_layout, .api = CopyApi::AsyncCopy};
  builder().copy(src.region, dst.region, args, SourceLoc::from(loc));
}

namespace {
Tensor barrier_of(const SharedTensor& b) { return b.bound() ? b.tensor() : Tensor(); }
std::string sem_or(const MbarrierOptions& o, const char* dflt) { return o.sem.empty() ? dflt : o.sem; }
}  // namespace

void Script::tma_copy(const CopyRegionArg& src, const CopyRegionArg& dst, TmaCopyOptions opts, Loc loc) {
  CopyArgs args{.eviction_policy = opts.eviction_policy, .annotations = opts.annotations, .api = CopyApi::TmaCopy,
                .barrier = opts.barrier.bound() ? opts.barrier.tensor() : Tensor()};
  builder().copy(src.region, dst.region, args, SourceLoc::from(loc));
}

void Script::mbarrier_wait_parity(const SharedTensor& barrier, const Expr& parity, Loc loc) {
  mbarrier.wait(barrier, parity, {}, loc);
}
void Script::mbarrier_arrive(const SharedTensor& barrier, Loc loc) { mbarrier.arrive(barrier, 1, {}, loc); }
void Script::mbarrier_arrive(const SharedTensor& barrier, const Expr& cta_id, Loc loc) {
  mbarrier.arrive_remote(barrier, cta_id, 1, "cta", loc);
}
void Script::mbarrier_arrive(const MappedBarrier& barrier, Loc loc) {
  mbarrier.arrive_remote(barrier.barrier, barrier.rank, 1, "cta", loc);
}
void Script::mbarrier_expect_tx(const SharedTensor& barrier, const Expr& tx, Loc loc) {
  mbarrier.expect_tx(barrier, tx, {}, loc);
}
void Script::cp_async_barrier_noinc(const SharedTensor& barrier, Loc loc) {
  builder().mbarrier(MbarrierOp::CpAsyncArrive, barrier_of(barrier), 1, "release", "cta", Expr(), SourceLoc::from(loc));
}
void Script::barrier_wait(const SharedTensor& barrier, const Expr& parity, Loc loc) {
  mbarrier.wait(barrier, parity, {}, loc);
}
void Script::barrier_arrive(const SharedTensor& barrier, Loc loc) { mbarrier.arrive(barrier, 1, {}, loc); }
void Script::fence_proxy_async(Loc loc) { fence.proxy_async("shared", loc); }
void Script::tma_store_arrive(Loc loc) { tma.commit_group(loc); }
void Script::c2d_im2col(const GlobalTensor& img, const SharedTensor& col, const Expr& nhw_step, const Expr& c_step,
                        int64_t kernel, int64_t stride, int64_t dilation, int64_t pad,
                        std::optional<std::string> eviction_policy, const SharedTensor& barrier, Loc loc) {
  builder().c2d_im2col(img.tensor(), col.tensor(), nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy,
                       SourceLoc::from(loc), barrier_of(barrier));
}
void Script::tma_store_wait(Loc loc) { tma.wait_group(0, true, loc); }

namespace {
RegisterTensor atomic_of(Script* s, AtomicOp op, const Tensor& dst, const RegisterTensor& compare,
                         const RegisterTensor& values, AtomicOptions& opts, Loc loc) {
  if (opts.scope.empty()) opts.scope = dst.defined() && dst.is_shared() ? "cta" : "gpu";
  return RegisterTensor(s->builder().atomic(op, dst, values.tensor(), compare.bound() ? compare.tensor() : Tensor(),
                                            opts.offsets, opts.dims, opts.sem, opts.scope, SourceLoc::from(loc)));
}
}  // namespace

#define TILUS_ATOMIC_DEFS(space, TensorT)                                                                        \
  RegisterTensor AtomicGroup::space##_add(const TensorT& dst, const RegisterTensor& values, AtomicOptions opts,   \
                                          Loc loc) const {                                                       \
    return atomic_of(script, AtomicOp::Add, dst.tensor(), RegisterTensor(), values, opts, loc);                  \
  }                                                                                                              \
  RegisterTensor AtomicGroup::space##_sub(const TensorT& dst, const RegisterTensor& values, AtomicOptions opts,   \
                                          Loc loc) const {                                                       \
    return atomic_of(script, AtomicOp::Sub, dst.tensor(), RegisterTensor(), values, opts, loc);                  \
  }                                                                                                              \
  RegisterTensor AtomicGroup::space##_min(const TensorT& dst, const RegisterTensor& values, AtomicOptions opts,   \
                                          Loc loc) const {                                                       \
    return atomic_of(script, AtomicOp::Min, dst.tensor(), RegisterTensor(), values, opts, loc);                  \
  }                                                                                                              \
  RegisterTensor AtomicGroup::space##_max(const TensorT& dst, const RegisterTensor& values, AtomicOptions opts,   \
                                          Loc loc) const {                                                       \
    return atomic_of(script, AtomicOp::Max, dst.tensor(), RegisterTensor(), values, opts, loc);                  \
  }                                                                                                              \
  RegisterTensor AtomicGroup::space##_exch(const TensorT& dst, const RegisterTensor& values, AtomicOptions opts,  \
                                           Loc loc) const {                                                      \
    return atomic_of(script, AtomicOp::Exch, dst.tensor(), RegisterTensor(), values, opts, loc);                 \
  }                                                                                                              \
  RegisterTensor AtomicGroup::space##_cas(const TensorT& dst, const RegisterTensor& compare,                     \
                                          const RegisterTensor& values, AtomicOptions opts, Loc loc) const {     \
    return atomic_of(script, AtomicOp::Cas, dst.tensor(), compare, values, opts, loc);                           \
  }
TILUS_ATOMIC_DEFS(global, GlobalTensor)
TILUS_ATOMIC_DEFS(shared, SharedTensor)
#undef TILUS_ATOMIC_DEFS

#define TILUS_ATOMIC_SCATTER_DEF(space, TensorT, op, Op)                                                       \
  RegisterTensor AtomicGroup::space##_scatter_##op(const TensorT& dst, int dim, const RegisterTensor& indices,  \
                                                   const RegisterTensor& values, AtomicOptions opts,            \
                                                   Loc loc) const {                                             \
    if (opts.scope.empty()) opts.scope = #space == std::string("shared") ? "cta" : "gpu";                       \
    return RegisterTensor(script->builder().atomic_scatter(AtomicOp::Op, false, dst.tensor(), dim,              \
                                                           indices.tensor(), values.tensor(), opts.sem,         \
                                                           opts.scope, SourceLoc::from(loc)));                  \
  }
#define TILUS_ATOMIC_SCATTER_DEFS(space, TensorT)       \
  TILUS_ATOMIC_SCATTER_DEF(space, TensorT, add, Add)    \
  TILUS_ATOMIC_SCATTER_DEF(space, TensorT, sub, Sub)    \
  TILUS_ATOMIC_SCATTER_DEF(space, TensorT, min, Min)    \
  TILUS_ATOMIC_SCATTER_DEF(space, TensorT, max, Max)
TILUS_ATOMIC_SCATTER_DEFS(global, GlobalTensor)
TILUS_ATOMIC_SCATTER_DEFS(shared, SharedTensor)
#undef TILUS_ATOMIC_SCATTER_DEFS
#undef TILUS_ATOMIC_SCATTER_DEF

void Script::store_global_scatter(const GlobalTensor& dst, int dim, const RegisterTensor& indices,
                                  const RegisterTensor& values, Loc loc) {
  builder().atomic_scatter(AtomicOp::Exch, true, dst.tensor(), dim, indices.tensor(), values.tensor(), "relaxed", "gpu",
                           SourceLoc::from(loc));
}
void Script::store_shared_scatter(const SharedTensor& dst, int dim, const RegisterTensor& indices,
                                  const RegisterTensor& values, Loc loc) {
  builder().atomic_scatter(AtomicOp::Exch, true, dst.tensor(), dim, indices.tensor(), values.tensor(), "relaxed", "cta",
                           SourceLoc::from(loc));
}

SharedTensor MbarrierGroup::alloc(std::vector<Expr> counts, Loc loc) const {
  return SharedTensor(script->builder().mbarrier_alloc(std::move(counts), SourceLoc::from(loc)));
}
void MbarrierGroup::arrive(const SharedTensor& barrier, const Expr& count, MbarrierOptions opts, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::Arrive, barrier_of(barrier), count, sem_or(opts, "release"), opts.scope,
                             Expr(), SourceLoc::from(loc));
}
void MbarrierGroup::arrive_and_expect_tx(const SharedTensor& barrier, const Expr& bytes, MbarrierOptions opts,
                                         Loc loc) const {
  script->builder().mbarrier(MbarrierOp::ArriveExpectTx, barrier_of(barrier), bytes, sem_or(opts, "release"),
                             opts.scope, Expr(), SourceLoc::from(loc));
}
void MbarrierGroup::arrive_and_expect_tx_remote(const SharedTensor& barrier, const Expr& bytes,
                                                const Expr& target_rank, MbarrierOptions opts, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::ArriveExpectTx, barrier_of(barrier), bytes, sem_or(opts, "release"),
                             opts.scope, target_rank, SourceLoc::from(loc));
}
void MbarrierGroup::expect_tx(const SharedTensor& barrier, const Expr& bytes, MbarrierOptions opts, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::ExpectTx, barrier_of(barrier), bytes, sem_or(opts, "relaxed"), opts.scope,
                             Expr(), SourceLoc::from(loc));
}
void MbarrierGroup::arrive(const MappedBarrier& barrier, const Expr& count, MbarrierOptions opts, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::Arrive, barrier_of(barrier.barrier), count, sem_or(opts, "release"),
                             opts.scope, barrier.rank, SourceLoc::from(loc));
}
void MbarrierGroup::arrive_and_expect_tx(const MappedBarrier& barrier, const Expr& bytes, MbarrierOptions opts,
                                         Loc loc) const {
  arrive_and_expect_tx_remote(barrier.barrier, bytes, barrier.rank, opts, loc);
}
void MbarrierGroup::arrive_remote(const SharedTensor& barrier, const Expr& cta_id, const Expr& count,
                                  const std::string& scope, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::Arrive, barrier_of(barrier), count, "release", scope, cta_id,
                             SourceLoc::from(loc));
}
void MbarrierGroup::wait(const SharedTensor& barrier, const Expr& phase, MbarrierOptions opts, Loc loc) const {
  script->builder().mbarrier(MbarrierOp::Wait, barrier_of(barrier), phase, sem_or(opts, "acquire"), opts.scope, Expr(),
                             SourceLoc::from(loc));
}

void MbarrierGroup::wait(const SharedTensor& barrier, const RegisterTensor& phase, MbarrierOptions opts,
                         Loc loc) const {
  script->builder().mbarrier_wait(barrier_of(barrier), phase.tensor(), sem_or(opts, "acquire"), opts.scope,
                                  SourceLoc::from(loc));
}

void TmaGroup::global_to_shared(const GlobalTensor& src, const SharedTensor& dst, TmaTileOptions opts,
                                const SharedTensor& mbarrier, Loc loc) const {
  script->builder().tma_copy_tile(src.tensor(), dst.tensor(), std::move(opts.offsets), std::move(opts.dims),
                                  barrier_of(mbarrier), true, SourceLoc::from(loc), std::move(opts.multicast_mask),
                                  std::move(opts.cache_policy));
}
void TmaGroup::shared_to_global(const SharedTensor& src, const GlobalTensor& dst, TmaTileOptions opts, Loc loc) const {
  script->builder().tma_copy_tile(dst.tensor(), src.tensor(), std::move(opts.offsets), std::move(opts.dims), Tensor(),
                                  false, SourceLoc::from(loc), std::move(opts.multicast_mask), std::move(opts.cache_policy));
}
void TmaGroup::commit_group(Loc loc) const { script->builder().tma_commit_group(SourceLoc::from(loc)); }
void TmaGroup::wait_group(int64_t n, bool read, Loc loc) const {
  script->builder().tma_wait_group(n, read, SourceLoc::from(loc));
}
void WgmmaGroup::fence(Loc loc) const { script->builder().wgmma_fence(SourceLoc::from(loc)); }
void WgmmaGroup::mma(const SharedTensor& a, const SharedTensor& b, const RegisterTensor& d, Loc loc) const {
  script->builder().wgmma_mma(a.tensor(), b.tensor(), d.tensor(), SourceLoc::from(loc));
}
void WgmmaGroup::mma(const RegisterTensor& a, const SharedTensor& b, const RegisterTensor& d, Loc loc) const {
  script->builder().wgmma_mma(a.tensor(), b.tensor(), d.tensor(), SourceLoc::from(loc));
}
void WgmmaGroup::commit_group(Loc loc) const { script->builder().wgmma_commit_group(SourceLoc::from(loc)); }
void WgmmaGroup::wait_group(int64_t n, Loc loc) const { script->builder().wgmma_wait_group(n, SourceLoc::from(loc)); }
void Script::warpgroup_arrive(Loc loc) { wgmma.fence(loc); }
void Script::warpgroup_commit_batch(Loc loc) { wgmma.commit_group(loc); }
void Script::warpgroup_wait(int64_t num_mma, Loc loc) { wgmma.wait_group(num_mma, loc); }
void Script::wait_wgmma(int64_t id, Loc loc) { wgmma.wait_group(id, loc); }

void FenceGroup::proxy_async(const std::string& space, Loc loc) const {
  script->builder().fence_proxy_async(space, SourceLoc::from(loc));
}

RegisterTensor Script::dot(const RegisterTensor& a, const RegisterTensor& b, const RegisterTensor& c, DotOptions opts,
                           Loc loc) {
  SourceLoc where = SourceLoc::from(loc);
  Tensor d = c.bound() ? builder().dot(a.tensor(), b.tensor(), c.tensor(), where)
                       : builder().dot(a.tensor(), b.tensor(), opts.acc_dtype, where);
  return into(builder(), opts.out, d, where);
}

RegisterTensor Script::cast(const RegisterTensor& x, DataType dtype, Loc loc) {
  return RegisterTensor(builder().cast(x.tensor(), dtype, SourceLoc::from(loc)));
}

RegisterTensor Script::view(const RegisterTensor& x, ViewOptions opts, Loc loc) {
  return RegisterTensor(builder().view(x.tensor(), opts.dtype, opts.layout, SourceLoc::from(loc)));
}

RegisterTensor Script::reshape(const RegisterTensor& x, std::vector<int64_t> shape, Loc loc) {
  return RegisterTensor(builder().reshape(x.tensor(), std::move(shape), SourceLoc::from(loc)));
}

Expr Script::item(const RegisterTensor& x, Loc loc) { return Expr(builder().item(x.tensor(), SourceLoc::from(loc))); }

RegisterTensor Script::squeeze(const RegisterTensor& x, std::vector<int> dims, Loc loc) {
  return RegisterTensor(builder().squeeze(x.tensor(), std::move(dims), SourceLoc::from(loc)));
}

RegisterTensor Script::unsqueeze(const RegisterTensor& x, std::vector<int> dims, Loc loc) {
  return RegisterTensor(builder().unsqueeze(x.tensor(), std::move(dims), SourceLoc::from(loc)));
}

RegisterTensor Script::transpose(const RegisterTensor& x, Loc loc) {
  return RegisterTensor(builder().transpose(x.tensor(), SourceLoc::from(loc)));
}

RegisterTensor Script::repeat(const RegisterTensor& x, std::vector<int64_t> repeats, Loc loc) {
  return RegisterTensor(builder().repeat(x.tensor(), std::move(repeats), SourceLoc::from(loc)));
}

RegisterTensor Script::where(const TensorOperand& cond, const TensorOperand& x, const TensorOperand& y) {
  return RegisterTensor(builder().where(cond.tensor.tensor(), x.tensor.tensor(), x.scalar, y.tensor.tensor(), y.scalar,
                                        cond.loc));
}

RegisterTensor Script::unary(const char* op, const RegisterTensor& x, Loc loc) {
  return RegisterTensor(builder().unary(op, x.tensor(), SourceLoc::from(loc)));
}

RegisterTensor Script::clip(const RegisterTensor& x, const Expr& lo, const Expr& hi, Loc loc) {
  return RegisterTensor(builder().clip(x.tensor(), lo, hi, SourceLoc::from(loc)));
}

RegisterTensor Script::maximum(const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(builder().binary(BinaryOp::Max, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}

RegisterTensor Script::minimum(const TensorOperand& a, const TensorOperand& b) {
  return RegisterTensor(builder().binary(BinaryOp::Min, a.tensor.tensor(), a.scalar, b.tensor.tensor(), b.scalar, a.loc));
}

RegisterTensor Script::reduce(ReduceOp op, const RegisterTensor& x, const ReduceOptions& opts, Loc loc) {
  return RegisterTensor(builder().reduce(op, x.tensor(), opts.dims, opts.keepdim, SourceLoc::from(loc)));
}

RegisterTensor Script::sum(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Sum, x, opts, loc); }
RegisterTensor Script::max(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Max, x, opts, loc); }
RegisterTensor Script::min(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Min, x, opts, loc); }
RegisterTensor Script::any(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::Any, x, opts, loc); }
RegisterTensor Script::all(const RegisterTensor& x, ReduceOptions opts, Loc loc) { return reduce(ReduceOp::All, x, opts, loc); }

RegisterTensor Script::scan(const RegisterTensor& x, int dim, const std::string& op, bool exclusive, Loc loc) {
  return RegisterTensor(builder().scan(op, x.tensor(), dim, exclusive, SourceLoc::from(loc)));
}

void Script::sync(Loc loc) { builder().sync(SourceLoc::from(loc)); }

// --- thread-level builtins ----------------------------------------------------------------------

void Script::Cluster::sync(Loc loc) const {
  Builder* b = detail::current_builder();
  if (!b) throw CompileError("cluster.sync was called outside of tilus::trace()", SourceLoc::from(loc));
  b->cluster_sync(SourceLoc::from(loc));
}

void Script::sync_threads(std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, Loc loc) {
  builder().sync_threads(barrier_id, arrive_count, SourceLoc::from(loc));
}
void Script::sync_warp(const Expr& mask, Loc loc) { builder().sync_warp(mask, SourceLoc::from(loc)); }
void Script::sync_grid(Loc loc) { builder().sync_grid(SourceLoc::from(loc)); }
void Script::sync_global(Loc loc) { builder().sync_grid(SourceLoc::from(loc)); }
void Script::set_max_nreg(int64_t reg_count, bool is_inc, Loc loc) {
  builder().set_max_nreg(reg_count, is_inc, SourceLoc::from(loc));
}
void Script::inc_max_nreg(int64_t reg_count, Loc loc) { builder().set_max_nreg(reg_count, true, SourceLoc::from(loc)); }
void Script::dec_max_nreg(int64_t reg_count, Loc loc) { builder().set_max_nreg(reg_count, false, SourceLoc::from(loc)); }

RegisterTensor Script::get_lane_idx(std::optional<int64_t> warp_size, Loc loc) {
  return RegisterTensor(builder().thread_index("get_lane_idx", warp_size.value_or(32), 4, 0, SourceLoc::from(loc)));
}
RegisterTensor Script::get_warp_idx_sync(std::optional<int64_t> warp_size, Loc loc) {
  return RegisterTensor(builder().thread_index("get_warp_idx_sync", warp_size.value_or(32), 4, 0, SourceLoc::from(loc)));
}
RegisterTensor Script::get_warp_idx(std::optional<int64_t> warp_size, Loc loc) {
  return RegisterTensor(builder().thread_index("get_warp_idx", warp_size.value_or(32), 4, 0, SourceLoc::from(loc)));
}
RegisterTensor Script::get_warp_group_idx(std::optional<int64_t> warp_size, std::optional<int64_t> warps_per_group,
                                          Loc loc) {
  return RegisterTensor(builder().thread_index("get_warp_group_idx", warp_size.value_or(32),
                                               warps_per_group.value_or(4), 0, SourceLoc::from(loc)));
}
RegisterTensor Script::shuffle_elect(int64_t thread_extent, Loc loc) {
  return RegisterTensor(builder().thread_index("shuffle_elect", 32, 4, thread_extent, SourceLoc::from(loc)));
}

RegisterTensor Script::shfl_xor(const RegisterTensor& value, const Expr& offset, Loc loc) {
  return RegisterTensor(builder().shuffle("shfl_xor", value.tensor(), offset, Expr(), 32, SourceLoc::from(loc)));
}
RegisterTensor Script::shfl_down(const RegisterTensor& value, const Expr& offset, Loc loc) {
  return RegisterTensor(builder().shuffle("shfl_down", value.tensor(), offset, Expr(), 32, SourceLoc::from(loc)));
}
RegisterTensor Script::shfl_up(const RegisterTensor& value, const Expr& offset, Loc loc) {
  return RegisterTensor(builder().shuffle("shfl_up", value.tensor(), offset, Expr(), 32, SourceLoc::from(loc)));
}
RegisterTensor Script::shfl_sync(const Expr& mask, const RegisterTensor& value, const Expr& srcLane,
                                 std::optional<int64_t> width, Loc loc) {
  return RegisterTensor(
      builder().shuffle("shfl_sync", value.tensor(), srcLane, mask, width.value_or(32), SourceLoc::from(loc)));
}
// A block-uniform scalar holds the same value in every thread: any shuffle of it is itself.
Expr Script::shfl_xor(const Expr& value, const Expr&, Loc) { return value; }
Expr Script::shfl_down(const Expr& value, const Expr&, Loc) { return value; }
Expr Script::shfl_up(const Expr& value, const Expr&, Loc) { return value; }
Expr Script::shfl_sync(const Expr&, const Expr& value, const Expr&, std::optional<int64_t>, Loc) { return value; }

RegisterTensor Script::ldg32(const CopyRegionArg& src, const Expr& pred, Loc loc) {
  return RegisterTensor(builder().ldg(32, src.region, pred, SourceLoc::from(loc)));
}
RegisterTensor Script::ldg64(const CopyRegionArg& src, const Expr& pred, Loc loc) {
  return RegisterTensor(builder().ldg(64, src.region, pred, SourceLoc::from(loc)));
}
RegisterTensor Script::ldg128(const CopyRegionArg& src, const Expr& pred, Loc loc) {
  return RegisterTensor(builder().ldg(128, src.region, pred, SourceLoc::from(loc)));
}
RegisterTensor Script::ldg256(const CopyRegionArg& src, const Expr& pred, Loc loc) {
  return RegisterTensor(builder().ldg(256, src.region, pred, SourceLoc::from(loc)));
}
void Script::stg32(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred, Loc loc) {
  builder().stg(32, dst.region, value.tensor(), pred, SourceLoc::from(loc));
}
void Script::stg64(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred, Loc loc) {
  builder().stg(64, dst.region, value.tensor(), pred, SourceLoc::from(loc));
}
void Script::stg128(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred, Loc loc) {
  builder().stg(128, dst.region, value.tensor(), pred, SourceLoc::from(loc));
}
void Script::stg256(const CopyRegionArg& dst, const RegisterTensor& value, const Expr& pred, Loc loc) {
  builder().stg(256, dst.region, value.tensor(), pred, SourceLoc::from(loc));
}
void Script::loop_break(Loc loc) { builder().emit_break(SourceLoc::from(loc), "loop_break"); }

void Script::printf_impl(const FormatString& fmt, std::vector<Expr> args) {
  builder().printf(fmt.text, std::move(args), fmt.loc);
}

void Script::assume(const Expr& cond, Loc loc) { builder().assume(cond, SourceLoc::from(loc)); }

void Script::annotate_layout(const RegisterTensor& t, const RegisterLayout& layout, Loc loc) {
  builder().annotate_layout(t.tensor(), layout, SourceLoc::from(loc));
}

void Script::annotate_layout(const SharedTensor& t, const SharedLayout& layout, Loc loc) {
  builder().annotate_shared_layout(t.tensor(), layout, SourceLoc::from(loc));
}

LoopRange Script::range(const Expr& end, RangeOptions opts, Loc loc) {
  return LoopRange(&builder(), int_const(0, end.dtype().is_integer() ? end.dtype() : dtypes::int32), end, 1,
                   std::move(opts), SourceLoc::from(loc));
}

LoopRange Script::range(const Expr& begin, const Expr& end, RangeOptions opts, Loc loc) {
  return LoopRange(&builder(), begin, end, 1, std::move(opts), SourceLoc::from(loc));
}

LoopRange Script::range(const Expr& begin, const Expr& end, const Expr& step, RangeOptions opts, Loc loc) {
  return LoopRange(&builder(), begin, end, step, std::move(opts), SourceLoc::from(loc));
}

IfChain Script::if_(const Expr& cond, const std::function<void()>& then, Loc loc) {
  Builder& b = builder();
  b.begin_if(cond, SourceLoc::from(loc));
  then();
  b.end_if();
  return IfChain(&b);
}

void Script::while_(const Expr& cond, const std::function<void()>& body, Loc loc) {
  Builder& b = builder();
  b.begin_while(cond, SourceLoc::from(loc));
  body();
  b.end_while();
}

void Script::break_(Loc loc) { builder().emit_break(SourceLoc::from(loc)); }
void Script::continue_(Loc loc) { builder().emit_continue(SourceLoc::from(loc)); }
void Script::return_(Loc loc) { builder().emit_return(SourceLoc::from(loc)); }

void Script::thread_group(int64_t thread_begin, int64_t num_threads, const std::function<void()>& body, Loc loc) {
  Builder& b = builder();
  b.begin_thread_group(ThreadGroupKind::ThreadGroup, thread_begin, num_threads, SourceLoc::from(loc));
  body();
  b.end_thread_group();
}

void Script::single_thread(const std::function<void()>& body, Loc loc) {
  Builder& b = builder();
  b.begin_thread_group(ThreadGroupKind::SingleThread, 0, 1, SourceLoc::from(loc));
  body();
  b.end_thread_group();
}

void Script::single_warp(int64_t warp, const std::function<void()>& body, Loc loc) {
  Builder& b = builder();
  b.begin_thread_group(ThreadGroupKind::SingleWarp, warp * 32, 32, SourceLoc::from(loc));
  body();
  b.end_thread_group();
}

void Script::warp_group(int64_t warp_begin, int64_t num_warps, const std::function<void()>& body, Loc loc) {
  Builder& b = builder();
  b.begin_thread_group(ThreadGroupKind::WarpGroup, warp_begin * 32, num_warps * 32, SourceLoc::from(loc));
  body();
  b.end_thread_group();
}

Expr Script::let(const std::string& name, const Expr& value, Loc loc) {
  return builder().let(name, value, SourceLoc::from(loc));
}

ScalarVar Script::declare(const std::string& name, DataType dtype, const Expr& init, Loc loc) {
  return ScalarVar(builder().declare(name, dtype, init, SourceLoc::from(loc)));
}

void Script::assign(const ScalarVar& var, const Expr& value, Loc loc) {
  builder().assign(var, value, SourceLoc::from(loc));
}

}  // namespace tilus
