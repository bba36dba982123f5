// mbarriers, TMA groups and proxy fences on the CPU. A block runs its tile instructions in
// order, so TMA copies complete when issued (memory.cpp) and the proxy fences and store
// groups have nothing to order; mbarriers keep real phase counters in their 8 shared bytes
// (the runtime's CpuBlockContext::mbarrier), and a wait on a phase that has not completed,
// which nothing left in the block could complete, is reported with its line instead of hanging.
#include <cstddef>

#include <fmt/format.h>

#include "emitter.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"

namespace tilus::cpu {

int64_t Emitter::group_threads(const InstNode& inst) {
  if (group_threads_.empty()) {
    struct Walk : StmtVisitor {
      std::unordered_map<const InstNode*, int64_t>* out;
      std::vector<int64_t> threads;
      void visit_inst(const InstNode& i) override { (*out)[&i] = threads.back(); }
      void visit_thread_group(const ThreadGroupStmtNode& n) override {
        threads.push_back(n.num_threads);
        StmtVisitor::visit_thread_group(n);
        threads.pop_back();
      }
    } w;
    w.out = &group_threads_;
    w.threads.push_back(kernel.num_threads());
    w.visit(kernel.body);
    group_threads_[nullptr] = 0;  // walked
  }
  auto it = group_threads_.find(&inst);
  return it == group_threads_.end() ? kernel.num_threads() : it->second;
}

llvm::Value* Emitter::barrier_ptr(const InstNode& inst, const Tensor& barrier) {
  const SharedView& view = facts.shared(inst, barrier);
  Expr off = facts.simplify(shared_offset(view, std::vector<Expr>(size_t(barrier.rank()), int_const(0))));
  llvm::Value* bytes = b.CreateAdd(i64(view.base_bytes), b.CreateMul(convert(expr(off), off.dtype(), dtypes::int64), i64(8)));
  return b.CreateGEP(b.getInt8Ty(), shared_base, bytes);
}

void Emitter::mbarrier_op(int32_t op, llvm::Value* barrier, llvm::Value* value, int32_t site) {
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), {b.getInt8PtrTy(), b.getInt32Ty(), b.getInt8PtrTy(), b.getInt64Ty(), b.getInt32Ty()}, false);
  llvm::Type* fp = llvm::PointerType::getUnqual(ty);
  llvm::Value* field = b.CreateConstGEP1_64(b.getInt8Ty(), b.CreateBitCast(block_ctx, b.getInt8PtrTy()),
                                            offsetof(CpuBlockContext, mbarrier));
  llvm::Value* fn = b.CreateLoad(fp, b.CreateBitCast(field, llvm::PointerType::getUnqual(fp)));
  b.CreateCall(ty, fn, {b.CreateBitCast(block_ctx, b.getInt8PtrTy()), b.getInt32(op), b.CreateBitCast(barrier, b.getInt8PtrTy()), value, b.getInt32(site)});
}

void Emitter::emit_async_proxy(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::MbarrierInit: {
      auto& i = static_cast<const MbarrierInitInst&>(inst);
      llvm::Value* base = barrier_ptr(inst, i.barriers);
      for (size_t k = 0; k < i.counts.size(); ++k) {
        Expr c = facts.simplify(i.counts[k]);
        mbarrier_op(kMbarrierInit, b.CreateConstGEP1_64(b.getInt8Ty(), base, 8 * k), convert(expr(c), c.dtype(), dtypes::int64));
      }
      return;
    }
    case InstKind::Mbarrier: {
      auto& i = static_cast<const MbarrierInst&>(inst);
      // Every thread of the group does it: arrivals and expectations scale with the group.
      llvm::Value* bar = barrier_ptr(inst, i.barrier);
      llvm::Value* value;
      if (i.value_tensor.defined()) {
        value = convert(load_reg(i.value_tensor, b.getInt32(0)), i.value_tensor.dtype(), dtypes::int64);
      } else {
        Expr v = facts.simplify(i.value);
        value = convert(expr(v), v.dtype(), dtypes::int64);
      }
      llvm::Value* threads = i64(group_threads(inst));
      if (i.cta_id.defined() && kernel.cluster != std::array<int64_t, 3>{1, 1, 1})
        fail(inst, "an arrival on a peer block's barrier needs the blocks of a cluster to run together; the CPU "
                   "backend runs blocks one at a time");
      switch (i.op) {
        case MbarrierOp::Arrive:
          mbarrier_op(kMbarrierArrive, bar, b.CreateMul(value, threads));
          return;
        case MbarrierOp::CpAsyncArrive:  // cp.async copies have landed when issued here
          mbarrier_op(kMbarrierArrive, bar, threads);
          return;
        case MbarrierOp::ArriveExpectTx:
          mbarrier_op(kMbarrierExpectTx, bar, b.CreateMul(value, threads));
          mbarrier_op(kMbarrierArrive, bar, threads);
          return;
        case MbarrierOp::ExpectTx: mbarrier_op(kMbarrierExpectTx, bar, b.CreateMul(value, threads)); return;
        case MbarrierOp::Wait: {
          CpuAccessSite site{inst.display_name(), inst.loc, i.barrier.type_str(), -1, std::string()};
          site.barrier_wait = true;
          int32_t id = int32_t(sites.size());
          sites.push_back(site);
          mbarrier_op(kMbarrierWait, bar, b.CreateAnd(value, i64(1)), id);
          return;
        }
      }
      return;
    }
    case InstKind::TmaCommitGroup:
    case InstKind::TmaWaitGroup:
    case InstKind::FenceProxyAsync: return;  // stores complete when issued; one proxy
    case InstKind::Defined: {
      auto& i = static_cast<const DefinedInst&>(inst);
      if (i.definition->name == "tcgen05_mma_arrive") {  // tcgen05 operations complete when issued here
        mbarrier_op(kMbarrierArrive, barrier_ptr(inst, i.tensor("mbar")), i64(group_threads(inst)));
        return;
      }
      fail(inst, "not an mbarrier, TMA or fence instruction");
    }
    default: fail(inst, "not an mbarrier, TMA or fence instruction");
  }
}

}  // namespace tilus::cpu
