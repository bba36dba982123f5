// The thread-level builtins (seed 004): named barriers, __syncwarp, cluster and grid barriers,
// setmaxnreg, per-thread indices as tiles, warp shuffles, and explicit-width ldg / stg.
#include "emitter.h"

namespace tilus::cuda {

uint32_t Emitter::group_lanes() const {
  const ThreadScope& s = scope();
  if (s.threads >= 32) return 0xffffffffu;
  return ((1u << s.threads) - 1) << (s.begin % 32);
}

void Emitter::emit_builtin(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::Sync: {
      auto& i = static_cast<const SyncInst&>(inst);
      switch (i.scope) {
        case SyncScope::Group: emit_barrier(inst); return;
        case SyncScope::Named: linef("tilus::named_barrier({}, {});", i.barrier_id, i.arrive_count); return;
        case SyncScope::NamedArrive:
          linef("tilus::named_barrier_arrive({}, {});", i.barrier_id, i.arrive_count);
          return;
        case SyncScope::Warp:
          if (i.mask.defined()) linef("__syncwarp({});", expr(simplify(i.mask)));
          else linef("__syncwarp({:#x}u);", group_lanes());
          return;
        case SyncScope::Cluster:
          // Without clusters (a cluster of one block) before sm_90: the block's barrier.
          if (target.sm >= 90) line("tilus::cluster_sync();");
          else line("__syncthreads();");
          return;
        case SyncScope::Grid:
          cooperative_ = true;
          line("tilus::grid_sync();");
          return;
      }
      return;
    }
    case InstKind::SetMaxNReg: {
      auto& i = static_cast<const SetMaxNRegInst&>(inst);
      if (target.sm < 90 || target.arch.back() != 'a')
        fail(inst, fmt::format("setmaxnreg needs an architecture-specific sm_90a (or newer 'a') target, not {}",
                               target.arch));
      linef("tilus::setmaxnreg_{}<{}>();", i.is_inc ? "inc" : "dec", i.reg_count);
      return;
    }
    case InstKind::Semaphore: {
      // One thread spins or stores; the group's barrier orders the others around it.
      auto& i = static_cast<const SemaphoreInst&>(inst);
      std::string ptr = expr(simplify(i.semaphore)), value = expr(simplify(i.value));
      if (i.op == SemaphoreOp::Release) emit_barrier(inst);
      open(fmt::format("if ({})", elected()));
      linef("tilus::semaphore_{}({}, {});", i.op == SemaphoreOp::Lock ? "wait" : "release", ptr, value);
      close();
      if (i.op == SemaphoreOp::Lock) emit_barrier(inst);
      return;
    }
    case InstKind::Item: {
      auto& i = static_cast<const ItemInst&>(inst);
      std::string v = fresh(i.var.name());
      linef("const {} {} = {}[0];", ctype(i.var.dtype()), v, reg(i.x));
      var_names_[i.var.get()] = v;
      return;
    }
    case InstKind::SharedItemPtr: {
      auto& i = static_cast<const SharedItemPtrInst&>(inst);
      const SharedView& view = facts_.shared(inst, i.x);
      if (!view.planned) fail(inst, "the shared tensor has no planned offset; run the pass pipeline first");
      std::string v = fresh(i.var.name());
      linef("{}* const {} = reinterpret_cast<{}*>(tilus_smem + {}) + ({});", ctype(i.x.dtype()), v,
            ctype(i.x.dtype()), view.base_bytes,
            expr(simplify(shared_offset(view, std::vector<Expr>(i.x.rank(), int_const(0))))));
      var_names_[i.var.get()] = v;
      return;
    }
    case InstKind::ThreadIndex: {
      // spatial(n): thread t of the group holds element t in its only slot.
      auto& i = static_cast<const ThreadIndexInst&>(inst);
      std::string out = declare_reg(i.out);
      std::string value;
      if (i.op == "get_lane_idx") value = fmt::format("tid % {}", i.warp_size);
      else if (i.op == "get_warp_idx_sync" || i.op == "get_warp_idx") value = fmt::format("tid / {}", i.warp_size);
      else if (i.op == "get_warp_group_idx") value = fmt::format("tid / {}", i.warp_size * i.warps_per_group);
      else if (i.thread_extent == 0) value = fmt::format("{} == 0", expr(scope().thread));
      else value = fmt::format("{} % {} == 0", expr(scope().thread), i.thread_extent);
      linef("{}[0] = {};", out, value);
      return;
    }
    case InstKind::Shuffle: {
      // Slot s of thread t reads slot s of the source thread: the same register of another lane.
      auto& i = static_cast<const ShuffleInst&>(inst);
      Expr lane = simplify(i.lane);
      std::optional<int64_t> b;
      if (lane.is_int_const()) b = lane.int_value();
      if (std::string why = shuffle_replica_problem(i, b); !why.empty()) fail(inst, why);
      const std::string& in = reg(i.value);
      std::string out = declare_reg(i.out);
      std::string mask = i.mask.defined() ? expr(simplify(i.mask)) : fmt::format("{:#x}u", group_lanes());
      std::string l = fresh("lane");
      linef("const int32_t {} = {};", l, expr(lane));
      const char* fn = i.op == "shfl_xor" ? "shfl_xor_sync" : i.op == "shfl_down" ? "shfl_down_sync"
                                          : i.op == "shfl_up" ? "shfl_up_sync" : "shfl_idx_sync";
      for (int64_t s = 0; s < i.out->layout.local_size(); ++s)
        linef("{}[{}] = tilus::{}({}, {}[{}], {}, {});", out, s, fn, mask, in, s, l, i.width);
      return;
    }
    case InstKind::LoadGlobalVector:
    case InstKind::StoreGlobalVector: {
      bool load = inst.kind() == InstKind::LoadGlobalVector;
      auto* ld = load ? static_cast<const LoadGlobalVectorInst*>(&inst) : nullptr;
      auto* st = load ? nullptr : static_cast<const StoreGlobalVectorInst*>(&inst);
      const CopyRegion& r = load ? ld->src : st->dst;
      int64_t bits = load ? ld->bits : st->bits;
      const Expr& pred = load ? ld->pred : st->pred;
      // Every thread moves the whole vector, which starts at the region's first element.
      GlobalAccess g = facts().global_region(inst, r, r.tensor.rank());
      std::vector<Expr> start(g.offsets.size(), int_const(0));
      std::string addr = fmt::format("({} + {})", global_ptr(r.tensor), expr(simplify(global_offset(g, start))));
      std::string p = pred.defined() ? expr(simplify(pred)) : "true";
      if (load) {
        std::string out = declare_reg(ld->out);
        linef("tilus::ldg<{}>({}, {}, {});", bits / 8, out, addr, p);
      } else {
        linef("tilus::stg<{}>({}, {}, {});", bits / 8, addr, reg(st->value), p);
      }
      return;
    }
    default: fail(inst, "not a thread-level builtin");
  }
}

}  // namespace tilus::cuda
