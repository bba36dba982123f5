// The C++ Script's asynchronous families: tma_copy and seed 004's mbarrier, fence and TMA store
// builtins, the atomics and scatters, and the groups self.mbarrier / tma / wgmma / fence.
#include "script_util.h"

namespace tilus {

using namespace script_detail;

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
void WgmmaGroup::mma(const SharedTensor& a, const SharedTensor& b, const RegisterTensor& d, bool enable_input_d,
                     Loc loc) const {
  script->builder().wgmma_mma(a.tensor(), b.tensor(), d.tensor(), SourceLoc::from(loc), enable_input_d);
}
void WgmmaGroup::mma(const RegisterTensor& a, const SharedTensor& b, const RegisterTensor& d, bool enable_input_d,
                     Loc loc) const {
  script->builder().wgmma_mma(a.tensor(), b.tensor(), d.tensor(), SourceLoc::from(loc), enable_input_d);
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

}  // namespace tilus
