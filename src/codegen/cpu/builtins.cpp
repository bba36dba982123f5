// The thread-level builtins (seed 004) on the CPU, in tile terms: barriers inside one block
// and setmaxnreg change nothing a block computes (its tile instructions run in order), except
// named barriers that several thread groups meet at (their arrivals are counted); the
// per-thread indices fill their tile with every thread's value; a shuffle moves the slots of
// value's layout between the threads the lanes name (as the GPU does, register by register);
// ldg / stg move their vector like a load or store of the region, guarded by `pred` only.
#include <fmt/format.h>

#include "emitter.h"

namespace tilus::cpu {

std::pair<llvm::ArrayType*, llvm::GlobalVariable*> Emitter::table(const std::vector<int32_t>& values,
                                                                  const char* name) {
  auto* at = llvm::ArrayType::get(b.getInt32Ty(), std::max<size_t>(1, values.size()));
  std::vector<llvm::Constant*> cs;
  for (int32_t x : values) cs.push_back(b.getInt32(x));
  if (cs.empty()) cs.push_back(b.getInt32(0));
  auto* g = new llvm::GlobalVariable(module, at, true, llvm::GlobalValue::PrivateLinkage,
                                     llvm::ConstantArray::get(at, cs), name);
  return {at, g};
}

void Emitter::emit_builtin(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::Sync: {
      auto& i = static_cast<const SyncInst&>(inst);
      if (i.scope == SyncScope::Grid)
        fail(inst, "sync_grid needs every block resident at once; the CPU backend runs blocks in batches");
      int64_t cluster = kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2];
      // The blocks of a cluster run together (as fibers): each arrives, and waits for the others.
      if (i.scope == SyncScope::Cluster && cluster > 1) service(kServiceClusterSync, i64(0), i64(-1));
      // Named barriers count arrivals as the GPU does, so thread groups that take turns at them
      // (running as fibers) wait for each other; one met by the group alone completes at once.
      if (i.scope == SyncScope::Named || i.scope == SyncScope::NamedArrive) {
        int64_t threads = group_threads(inst);
        int64_t wait = i.scope == SyncScope::Named;
        if (wait && i.arrive_count == threads) return;  // the group's own barrier: in order already
        int32_t site = int32_t(sites.size());
        sites.push_back(CpuAccessSite{inst.display_name(), inst.loc, fmt::format("barrier_id {}", i.barrier_id), -1,
                                      std::string()});
        service(kServiceNamedBarrier, i64(i.barrier_id | wait << 4 | i.arrive_count << 8 | threads << 32),
                i64(site));
      }
      return;  // otherwise inside one block: its tile instructions already run in order
    }
    case InstKind::SetMaxNReg: return;  // a register budget: nothing to compute
    case InstKind::Semaphore: {
      // The block's threads run as one: it spins or stores once.
      auto& i = static_cast<const SemaphoreInst&>(inst);
      int32_t site = int32_t(sites.size());
      sites.push_back(CpuAccessSite{inst.display_name(), inst.loc, to_string(i.semaphore), -1, std::string()});
      Expr ptr = facts.simplify(i.semaphore), value = facts.simplify(i.value);
      auto* ty = llvm::FunctionType::get(
          b.getVoidTy(), {b.getInt8PtrTy(), b.getInt32Ty(), b.getInt8PtrTy(), b.getInt32Ty(), b.getInt32Ty()}, false);
      llvm::Type* fp = llvm::PointerType::getUnqual(ty);
      llvm::Value* field = b.CreateConstGEP1_64(b.getInt8Ty(), b.CreateBitCast(block_ctx, b.getInt8PtrTy()),
                                                offsetof(CpuBlockContext, semaphore));
      llvm::Value* fn_ptr = b.CreateLoad(fp, b.CreateBitCast(field, llvm::PointerType::getUnqual(fp)));
      b.CreateCall(ty, fn_ptr,
                   {b.CreateBitCast(block_ctx, b.getInt8PtrTy()),
                    b.getInt32(i.op == SemaphoreOp::Lock ? kSemaphoreLock : kSemaphoreRelease),
                    b.CreateBitCast(expr(ptr), b.getInt8PtrTy()), convert(expr(value), value.dtype(), dtypes::int32),
                    b.getInt32(site)});
      return;
    }
    case InstKind::Item: {
      auto& i = static_cast<const ItemInst&>(inst);
      values_[i.var.operator->()] = load_reg(i.x, i32(0));
      return;
    }
    case InstKind::SharedItemPtr: {
      auto& i = static_cast<const SharedItemPtrInst&>(inst);
      const SharedView& view = facts.shared(inst, i.x);
      if (!view.planned) fail(inst, "the shared tensor has no planned offset; run the pass pipeline first");
      Expr offset = shared_offset(view, std::vector<Expr>(i.x.rank(), int_const(0)));
      int64_t eb = i.x.dtype().storage_bytes(1);
      llvm::Value* bytes = b.CreateMul(b.CreateSExt(expr(simplify(offset)), b.getInt64Ty()), b.getInt64(eb));
      values_[i.var.operator->()] = b.CreateGEP(b.getInt8Ty(), shared_side(view).base, bytes);
      return;
    }
    case InstKind::ThreadIndex: {
      auto& i = static_cast<const ThreadIndexInst&>(inst);
      int64_t n = i.out.num_elements();
      declare_reg(i.out);
      loop(i32(n), [&](llvm::Value* t) {
        llvm::Value* thread = b.CreateAdd(t, i32(group_begin()));  // in the block
        llvm::Value* v;
        if (i.op == "get_lane_idx") v = b.CreateSRem(thread, i32(i.warp_size));
        else if (i.op == "get_warp_idx_sync" || i.op == "get_warp_idx") v = b.CreateSDiv(thread, i32(i.warp_size));
        else if (i.op == "get_warp_group_idx") v = b.CreateSDiv(thread, i32(i.warp_size * i.warps_per_group));
        else if (i.thread_extent == 0) v = b.CreateICmpEQ(t, i32(0));
        else v = b.CreateICmpEQ(b.CreateSRem(t, i32(i.thread_extent)), i32(0));
        store_reg(i.out, t, v);
      });
      return;
    }
    case InstKind::Shuffle: {
      auto& i = static_cast<const ShuffleInst&>(inst);
      const RegisterLayout& l = i.value->layout;
      if (!l.defined()) fail(inst, "the value has no layout; run the pass pipeline first");
      Expr lane_e = facts.simplify(i.lane);
      std::optional<int64_t> constant_lane;
      if (lane_e.is_int_const()) constant_lane = lane_e.int_value();
      if (std::string why = shuffle_replica_problem(i, constant_lane); !why.empty()) fail(inst, why);
      // elem[t * slots + s]: the tile element (row-major) slot s of thread t holds.
      int64_t threads = l.num_threads(), slots = l.local_size();
      auto shape = i.value.static_shape();
      std::vector<int32_t> elem(threads * slots);
      for (int64_t t = 0; t < threads; ++t)
        for (int64_t s = 0; s < slots; ++s) {
          int64_t e = 0;
          auto idx = l.map(t, s);
          for (size_t d = 0; d < idx.size(); ++d) e = e * shape[d] + idx[d];
          elem[t * slots + s] = int32_t(e);
        }
      auto [elem_t, elem_g] = table(elem, "shuffle_elem");
      auto at = [&, elem_t = elem_t, elem_g = elem_g](llvm::Value* k) {
        return b.CreateLoad(b.getInt32Ty(), b.CreateInBoundsGEP(elem_t, elem_g, {b.getInt32(0), k}));
      };
      declare_reg(i.out);
      llvm::Value* bval = b.CreateAnd(convert(expr(lane_e), lane_e.dtype(), dtypes::int32), i32(31));
      int64_t w = i.width;
      loop(i32(threads), [&](llvm::Value* t) {
        llvm::Value* lane = b.CreateSRem(t, i32(32));
        llvm::Value* first = b.CreateAnd(lane, i32(~(w - 1)));
        llvm::Value* last = b.CreateAdd(first, i32(w - 1));
        llvm::Value* src;
        if (i.op == "shfl_xor" || i.op == "shfl_down") {
          llvm::Value* j = i.op == "shfl_xor" ? b.CreateXor(lane, bval) : b.CreateAdd(lane, bval);
          src = b.CreateSelect(b.CreateICmpSGT(j, last), lane, j);
        } else if (i.op == "shfl_up") {
          llvm::Value* j = b.CreateSub(lane, bval);
          src = b.CreateSelect(b.CreateICmpSLT(j, first), lane, j);
        } else {
          src = b.CreateAdd(first, b.CreateAnd(bval, i32(w - 1)));
        }
        llvm::Value* src_thread = b.CreateAdd(b.CreateSub(t, lane), src);
        loop(i32(slots), [&](llvm::Value* s) {
          llvm::Value* to = at(b.CreateAdd(b.CreateMul(t, i32(slots)), s));
          llvm::Value* from = at(b.CreateAdd(b.CreateMul(src_thread, i32(slots)), s));
          store_reg(i.out, to, load_reg(i.value, from));
        });
      });
      return;
    }
    case InstKind::LoadGlobalVector: {
      auto& i = static_cast<const LoadGlobalVectorInst&>(inst);
      declare_reg(i.out);
      Side mem = region_side(inst, i.src, i.out.rank());
      llvm::Value* p = i.pred.defined() ? expr(i.pred) : b.getInt1(true);
      if_then(
          p, [&] { register_access(inst, true, i.out, mem); },
          [&] {
            loop(i32(i.out.num_elements()), [&](llvm::Value* e) { store_reg(i.out, e, constant(i.out.dtype(), 0)); });
          });
      return;
    }
    case InstKind::StoreGlobalVector: {
      auto& i = static_cast<const StoreGlobalVectorInst&>(inst);
      Side mem = region_side(inst, i.dst, i.value.rank());
      llvm::Value* p = i.pred.defined() ? expr(i.pred) : b.getInt1(true);
      if_then(p, [&] { register_access(inst, false, i.value, mem); });
      return;
    }
    default: fail(inst, "not a thread-level builtin");
  }
}

}  // namespace tilus::cpu
