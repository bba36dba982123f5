// Thread-level instructions: barriers, register budgets, per-thread indices, shuffles, semaphores.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_sync(const SyncInst& i) {
  if (i.scope == SyncScope::Named || i.scope == SyncScope::NamedArrive) {
    if (i.barrier_id < 1 || i.barrier_id > 15)
      fail(i, fmt::format("barrier_id {} is not a named barrier: use 1 to 15 (0 is the block's barrier, "
                          "__syncthreads)",
                          i.barrier_id));
    if (i.arrive_count < 32 || i.arrive_count % 32 != 0)
      fail(i, fmt::format("arrive_count {} (barrier_id {}) must be a positive multiple of 32 (whole warps arrive)",
                          i.arrive_count, i.barrier_id));
  }
  if (i.mask.defined() && !(i.mask.dtype().is_integer()))
    fail(i, fmt::format("mask must be an integer lane mask, got {} of type {}", expr_str(i.mask), dtype_str(i.mask)));
}

void check_set_max_nreg(const SetMaxNRegInst& i) {
  if (i.reg_count < 24 || i.reg_count > 256 || i.reg_count % 8 != 0)
    fail(i, fmt::format("reg_count {} must be a multiple of 8 from 24 to 256 (setmaxnreg)", i.reg_count));
}

const char* const kThreadIndexOps[] = {"get_lane_idx", "get_warp_idx_sync", "get_warp_idx", "get_warp_group_idx",
                                       "shuffle_elect"};

void check_thread_index(const ThreadIndexInst& i) {
  if (std::none_of(std::begin(kThreadIndexOps), std::end(kThreadIndexOps), [&](const char* o) { return i.op == o; }))
    fail(i, fmt::format("unknown thread index '{}'", i.op));
  if (i.warp_size < 1) fail(i, fmt::format("warp_size {} must be positive", i.warp_size));
  if (i.warps_per_group < 1) fail(i, fmt::format("warps_per_group {} must be positive", i.warps_per_group));
  if (i.thread_extent < 0) fail(i, fmt::format("thread_extent {} must be 0 (the whole group) or positive", i.thread_extent));
  DataType want = i.op == "shuffle_elect" ? dtypes::boolean : dtypes::int32;
  if (i.out.rank() != 1 || i.out.dtype() != want)
    fail(i, fmt::format("out must be a rank-1 {} tensor (one element per thread), got {}", want.name(), ty(i.out)));
}

void check_shuffle(const ShuffleInst& i) {
  static const char* ops[] = {"shfl_xor", "shfl_down", "shfl_up", "shfl_sync"};
  if (std::none_of(std::begin(ops), std::end(ops), [&](const char* o) { return i.op == o; }))
    fail(i, fmt::format("unknown shuffle '{}'", i.op));
  const char* lane_name = i.op == "shfl_sync" ? "srcLane" : "offset";
  if (!is_integer_expr(i.lane))
    fail(i, fmt::format("{} must be an integer scalar, got {} of type {} (value {})", lane_name, expr_str(i.lane),
                        dtype_str(i.lane), ty(i.value)));
  if (i.lane.is_int_const() && (i.lane.int_value() < 0 || i.lane.int_value() > 31))
    fail(i, fmt::format("{} {} must be a lane from 0 to 31 (value {})", lane_name, i.lane.int_value(), ty(i.value)));
  if (i.mask.defined() && !i.mask.dtype().is_integer())
    fail(i, fmt::format("mask must be an integer lane mask, got {} of type {}", expr_str(i.mask), dtype_str(i.mask)));
  if (!is_pow2(i.width) || i.width > 32)
    fail(i, fmt::format("width {} must be a power of two from 1 to 32 (value {})", i.width, ty(i.value)));
  if (i.value.dtype().is_subbyte() || i.value.dtype().bits() > 64)
    fail(i, fmt::format("value {} must have an element type of 8 to 64 bits", ty(i.value)));
  expect_same_dtype(i, "out", i.out, "value", i.value);
  expect_same_shape(i, "out", i.out, "value", i.value);
}

void check_semaphore(const SemaphoreInst& i) {
  if (!i.semaphore.defined() || !i.semaphore.dtype().is_pointer() ||
      i.semaphore.dtype().pointee() != dtypes::int32)
    fail(i, fmt::format("the semaphore must be the address of an int32 in global memory (~int32, such as "
                        "g[i, j].item_ptr() of an int32 global_tensor), got {} of type {}",
                        expr_str(i.semaphore), dtype_str(i.semaphore)));
  if (!i.value.defined() || !i.value.dtype().is_integer())
    fail(i, fmt::format("value must be an integer (the semaphore is int32), got {} of type {}", expr_str(i.value),
                        dtype_str(i.value)));
}

}  // namespace

void insts::add_thread(std::vector<InstDef>& d) {
  using verify_detail::hook;
  auto sync = hook(check_sync);
  d.push_back({.name = "sync", .kind = InstKind::Sync, .variant = int(SyncScope::Group), .emit = EmitFamily::Barrier,
               .traits = {.role = SyncRole::Barrier}, .summary = "a barrier of the current thread group",
               .verify = sync});
  d.push_back({.name = "sync_threads", .kind = InstKind::Sync, .variant = int(SyncScope::Named),
               .emit = EmitFamily::Builtin, .traits = {.role = SyncRole::Barrier},
               .summary = "a named barrier of arrive_count threads", .verify = sync});
  // The signal half of a named barrier: no wait, so the barrier pass does not count it (no role).
  d.push_back({.name = "named_barrier_arrive", .kind = InstKind::Sync, .variant = int(SyncScope::NamedArrive),
               .emit = EmitFamily::Builtin,
               .summary = "arrives at a named barrier of arrive_count threads without waiting (bar.arrive)",
               .verify = sync});
  d.push_back({.name = "sync_warp", .kind = InstKind::Sync, .variant = int(SyncScope::Warp),
               .emit = EmitFamily::Builtin, .traits = {.role = SyncRole::Barrier}, .summary = "__syncwarp(mask)",
               .verify = sync});
  d.push_back({.name = "cluster.sync", .group = "cluster", .kind = InstKind::Sync, .variant = int(SyncScope::Cluster),
               .emit = EmitFamily::Builtin, .traits = {.role = SyncRole::Barrier, .min_sm = 90},
               .summary = "a barrier of every thread of the cluster", .verify = sync});
  d.push_back({.name = "sync_grid", .kind = InstKind::Sync, .variant = int(SyncScope::Grid),
               .emit = EmitFamily::Builtin, .traits = {.role = SyncRole::Barrier},
               .summary = "a barrier of every thread of the grid (a cooperative launch)", .verify = sync});
  d.push_back({.name = "set_max_nreg", .kind = InstKind::SetMaxNReg, .emit = EmitFamily::Builtin,
               .traits = {.min_sm = 90}, .summary = "the warp group's register budget (inc_max_nreg / dec_max_nreg)",
               .attrs = {{"reg_count", AttrType::Int, ""}}, .verify = hook(check_set_max_nreg)});
  d.push_back({.name = "get_lane_idx", .kind = InstKind::ThreadIndex, .emit = EmitFamily::Builtin,
               .summary = "per-thread indices as tiles (get_lane_idx, get_warp_idx(_sync), get_warp_group_idx, shuffle_elect)",
               .verify = hook(check_thread_index)});
  d.push_back({.name = "shfl_xor", .kind = InstKind::Shuffle, .emit = EmitFamily::Builtin,
               .summary = "warp shuffles of a register tensor (shfl_xor, shfl_down, shfl_up, shfl_sync)",
               .verify = hook(check_shuffle)});
  d.push_back({.name = "lock_semaphore", .kind = InstKind::Semaphore, .emit = EmitFamily::Builtin,
               .summary = "lock_semaphore / release_semaphore on a global int32", .verify = hook(check_semaphore)});

}

}  // namespace tilus
