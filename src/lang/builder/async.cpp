// The tracer entries of the asynchronous families: mbarriers, TMA tiles and groups, proxy fences,
// wgmma, and the definition-driven instructions.
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

Tensor Builder::mbarrier_alloc(std::vector<Expr> counts, SourceLoc loc) {
  if (counts.empty()) throw CompileError("mbarrier.alloc: counts must name at least one barrier", loc);
  Tensor barriers = shared_tensor(dtypes::uint64, {int64_t(counts.size())}, loc, "barriers");
  auto i = make_inst<MbarrierInitInst>(loc);
  i->barriers = barriers;
  for (auto& c : counts) i->counts.push_back(simplify(c));
  emit(i);
  return barriers;
}

void Builder::mbarrier(MbarrierOp op, const Tensor& barrier, Expr value, const std::string& sem,
                       const std::string& scope, Expr cta_id, SourceLoc loc) {
  auto i = make_inst<MbarrierInst>(loc);
  i->op = op;
  i->barrier = barrier;
  i->value = value.defined() ? simplify(value) : value;
  i->sem = sem;
  i->scope = scope;
  i->cta_id = cta_id;
  emit(i);
}

void Builder::defined(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, Expr>>& scalars,
                      const std::vector<std::pair<std::string, std::string>>& attrs, SourceLoc loc) {
  auto i = make_defined(name, tensors, scalars, attrs, std::move(loc));
  for (auto& e : i->scalars)
    if (e.defined()) e = simplify(e);
  emit(i);
}

void Builder::mbarrier_wait(const Tensor& barrier, const Tensor& phase, const std::string& sem,
                            const std::string& scope, SourceLoc loc) {
  auto i = make_inst<MbarrierInst>(loc);
  i->op = MbarrierOp::Wait;
  i->barrier = barrier;
  i->value_tensor = phase;
  i->sem = sem;
  i->scope = scope;
  emit(i);
}

void Builder::tma_copy_tile(const Tensor& global, const Tensor& shared, std::vector<Expr> offsets,
                            std::vector<int> dims, const Tensor& barrier, bool load, SourceLoc loc,
                            Expr multicast_mask, Expr cache_policy, int64_t cta_group, Expr barrier_rank) {
  const char* name = load ? "tma.global_to_shared" : "tma.shared_to_global";
  if (cta_group != 1 && cta_group != 2)
    throw CompileError(fmt::format("{}: cta_group must be 1 or 2, got {}", name, cta_group), loc);
  if (barrier_rank.defined() && cta_group != 2)
    throw CompileError(fmt::format("{}: the mbarrier is another block's (cluster.map_shared_addr): a TMA load completes "
                                   "on a peer's barrier only with cta_group=2 (the pair's barrier)",
                                   name),
                       loc);
  if (!global.defined() || !global.is_global() || !shared.defined() || !shared.is_shared())
    throw CompileError(fmt::format("{}: expected a global and a shared tensor, got {} and {}", name, type_of(global),
                                   type_of(shared)),
                       loc);
  std::vector<int> d = dims.empty() ? default_dims(global, size_t(shared.rank())) : normalize_dims(dims, global, name, loc);
  if (d.size() != size_t(shared.rank()))
    throw CompileError(fmt::format("{}: dims {} name {} global dims for the {} dims of {}", name, fmt::format("[{}]", fmt::join(d, ", ")), d.size(),
                                   shared.rank(), type_of(shared)),
                       loc);
  if (offsets.size() != size_t(global.rank()))
    throw CompileError(fmt::format("{}: offsets {} need one per dim of {}", name, shape_str(offsets), type_of(global)),
                       loc);
  // The box: the shared tile's extents on `dims` (in increasing order: TMA cannot transpose),
  // 1 elsewhere; a CopyRegion of the global tensor against the whole shared tensor, whose
  // extents pair right-aligned once the leading 1s are dropped.
  for (size_t k = 1; k < d.size(); ++k)
    if (d[k] <= d[k - 1])
      throw CompileError(fmt::format("{}: dims {} must increase (the TMA box keeps the global tensor's dim order)",
                                     name, fmt::format("[{}]", fmt::join(d, ", "))),
                         loc);
  for (size_t k = 0; k + 1 < d.size(); ++k)
    for (int g = d[k] + 1; g < d[k + 1]; ++g)
      throw CompileError(fmt::format("{}: dims {} skip global dim {} between two tile dims; the tile's dims must be "
                                     "consecutive global dims",
                                     name, fmt::format("[{}]", fmt::join(d, ", ")), g),
                         loc);
  CopyRegion g;
  g.tensor = global;
  g.offsets = std::move(offsets);
  for (int k = 0; k < global.rank(); ++k) g.extents.push_back(int_const(1));
  for (size_t k = 0; k < d.size(); ++k) g.extents[d[k]] = int_const(shared.static_shape()[k]);
  // The regions pair right-aligned, so the tile must end at the last global dim.
  if (!d.empty() && d.back() != global.rank() - 1)
    throw CompileError(fmt::format("{}: dims {} must end at the last global dim ({}) for a TMA box", name,
                                   fmt::format("[{}]", fmt::join(d, ", ")), global.rank() - 1),
                       loc);
  CopyRegion s;
  s.tensor = shared;
  complete_region(s);
  auto i = make_inst<CopyInst>(loc);
  i->api = load ? CopyApi::TmaGlobalToShared : CopyApi::TmaSharedToGlobal;
  i->use_tma = true;
  i->barrier = barrier;
  i->multicast_mask = std::move(multicast_mask);
  i->cta_group = cta_group;
  if (barrier_rank.defined()) {
    check_index(barrier_rank, "the barrier's block (target_rank)", loc, name);
    i->barrier_rank = simplify(barrier_rank);
  }
  // Integers of any width name the policy's 64 bits (a Python int past 2^63 arrives negative).
  i->cache_policy = cache_policy.defined() && cache_policy.dtype().is_integer() ? simplify(tilus::cast(cache_policy, dtypes::uint64))
                                                                               : cache_policy;
  i->src = load ? g : s;
  i->dst = load ? s : g;
  emit(i);
}

void Builder::tma_commit_group(SourceLoc loc) { emit(make_inst<TmaCommitGroupInst>(loc)); }

void Builder::tma_wait_group(int64_t n, bool read, SourceLoc loc) {
  auto i = make_inst<TmaWaitGroupInst>(loc);
  i->n = n;
  i->read = read;
  emit(i);
}

void Builder::fence_proxy_async(const std::string& space, SourceLoc loc) {
  auto i = make_inst<FenceProxyAsyncInst>(loc);
  i->space = space;
  emit(i);
}

void Builder::wgmma_fence(SourceLoc loc) { emit(make_inst<WgmmaFenceInst>(loc)); }

void Builder::wgmma_mma(const Tensor& a, const Tensor& b, const Tensor& d, SourceLoc loc, bool enable_input_d) {
  auto i = make_inst<WgmmaMmaInst>(loc);
  i->a = a;
  i->b = b;
  i->d = d;
  i->enable_input_d = enable_input_d;
  emit(i);
}

void Builder::wgmma_commit_group(SourceLoc loc) { emit(make_inst<WgmmaCommitGroupInst>(loc)); }

void Builder::wgmma_wait_group(int64_t n, SourceLoc loc) {
  auto i = make_inst<WgmmaWaitGroupInst>(loc);
  i->n = n;
  emit(i);
}

}  // namespace tilus
