// The C++ Script's thread-level builtins (seed 004): barriers, register budgets, per-thread
// indices, shuffles, explicit-width global accesses.
#include "script_util.h"

namespace tilus {

using namespace script_detail;

// --- thread-level builtins ----------------------------------------------------------------------

void Script::Cluster::sync(Loc loc) const {
  Builder* b = detail::current_builder();
  if (!b) throw CompileError("cluster.sync was called outside of tilus::trace()", SourceLoc::from(loc));
  b->cluster_sync(SourceLoc::from(loc));
}

void Script::sync_threads(std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, Loc loc) {
  builder().sync_threads(barrier_id, arrive_count, SourceLoc::from(loc));
}
void Script::named_barrier_arrive(int64_t barrier_id, int64_t arrive_count, Loc loc) {
  builder().named_barrier_arrive(barrier_id, arrive_count, SourceLoc::from(loc));
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
