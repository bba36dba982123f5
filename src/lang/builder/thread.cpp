// The tracer entries of the thread-level instructions: barriers, semaphores, register budgets, per-
// thread indices, shuffles, printf, assume.
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

void Builder::semaphore(SemaphoreOp op, Expr semaphore, Expr value, SourceLoc loc) {
  auto i = make_inst<SemaphoreInst>(loc);
  i->op = op;
  i->semaphore = std::move(semaphore);
  i->value = std::move(value);
  // The verifier (run by emit) checks the operands; an integer of another width is converted.
  if (i->value.defined() && i->value.dtype().is_integer() && i->value.dtype() != dtypes::int32)
    i->value = tilus::cast(i->value, dtypes::int32);
  emit(i);
}

void Builder::sync(SourceLoc loc) { emit(make_inst<SyncInst>(loc)); }

int64_t Builder::group_threads(const char* what, const SourceLoc& loc) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
    if (it->kind == Scope::ThreadGroup) return it->num_threads;
  if (!warps_set_)
    throw CompileError(fmt::format("{}: the block's threads are not known yet: set attrs.warps before it", what), loc);
  return kernel_.num_threads();
}

int64_t Builder::group_begin() const {
  int64_t begin = 0;
  for (auto& sc : scopes_)
    if (sc.kind == Scope::ThreadGroup) begin += sc.thread_begin;
  return begin;
}

void Builder::sync_threads(std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, SourceLoc loc) {
  if (!barrier_id) {
    if (arrive_count)
      throw CompileError(fmt::format("sync_threads: arrive_count={} needs a barrier_id (a named barrier, 1 to 15)",
                                     *arrive_count),
                         loc);
    return sync(loc);
  }
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Named;
  i->barrier_id = *barrier_id;
  i->arrive_count = arrive_count ? *arrive_count : group_threads("sync_threads", loc);
  emit(i);
}

void Builder::named_barrier_arrive(int64_t barrier_id, int64_t arrive_count, SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::NamedArrive;
  i->barrier_id = barrier_id;
  i->arrive_count = arrive_count;
  emit(i);
}

void Builder::sync_warp(Expr mask, SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Warp;
  if (mask.defined()) i->mask = mask.dtype().is_integer() ? tilus::cast(mask, dtypes::uint32) : mask;
  emit(i);
}

void Builder::cluster_sync(SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Cluster;
  emit(i);
}

void Builder::sync_grid(SourceLoc loc) {
  auto i = make_inst<SyncInst>(loc);
  i->scope = SyncScope::Grid;
  emit(i);
}

void Builder::set_max_nreg(int64_t reg_count, bool is_inc, SourceLoc loc) {
  auto i = make_inst<SetMaxNRegInst>(loc);
  i->reg_count = reg_count;
  i->is_inc = is_inc;
  emit(i);
}

Tensor Builder::thread_index(const std::string& op, int64_t warp_size, int64_t warps_per_group, int64_t thread_extent,
                             SourceLoc loc) {
  int64_t n = group_threads(op.c_str(), loc);
  auto i = make_inst<ThreadIndexInst>(loc);
  i->op = op;
  i->warp_size = warp_size;
  i->warps_per_group = warps_per_group;
  i->thread_extent = thread_extent;
  DataType dt = op == "shuffle_elect" ? dtypes::boolean : dtypes::int32;
  std::string name = op.rfind("get_", 0) == 0 ? op.substr(4) : op;
  i->out = Tensor::reg(name, dt, {n}, spatial({n}));
  return emit_with_output(i);
}

Tensor Builder::shuffle(const std::string& op, const Tensor& value, Expr lane, Expr mask, int64_t width,
                        SourceLoc loc) {
  if (!value.defined() || !value.is_register())
    throw CompileError(fmt::format("{}: value must be a register tensor or a scalar, got {}", op, type_of(value)), loc);
  auto i = make_inst<ShuffleInst>(loc);
  i->op = op;
  i->value = value;
  i->lane = lane.defined() && lane.dtype().is_integer() ? tilus::cast(lane, dtypes::int32) : lane;
  if (mask.defined()) i->mask = mask.dtype().is_integer() ? tilus::cast(mask, dtypes::uint32) : mask;
  i->width = width;
  i->out = Tensor::reg("shfl", value.dtype(), static_dims(value));
  return emit_with_output(i);
}

void Builder::printf(std::string format, std::vector<Expr> args, SourceLoc loc) {
  auto i = make_inst<PrintfInst>(loc);
  i->format = std::move(format);
  i->args = std::move(args);
  emit(i);
}

void Builder::assume(Expr cond, SourceLoc loc) {
  auto i = make_inst<AssumeInst>(loc);
  i->cond = std::move(cond);
  emit(i);
}

}  // namespace tilus
