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

llvm::Value* Emitter::service(int32_t op, llvm::Value* a, llvm::Value* bv, llvm::Value* p) {
  llvm::Type* i8p = b.getInt8PtrTy();
  auto* ty = llvm::FunctionType::get(b.getInt64Ty(), {i8p, b.getInt32Ty(), b.getInt64Ty(), b.getInt64Ty(), i8p}, false);
  llvm::Type* fp = llvm::PointerType::getUnqual(ty);
  llvm::Value* field = b.CreateConstGEP1_64(b.getInt8Ty(), b.CreateBitCast(block_ctx, i8p), offsetof(CpuBlockContext, service));
  llvm::Value* fn_ptr = b.CreateLoad(fp, b.CreateBitCast(field, llvm::PointerType::getUnqual(fp)));
  return b.CreateCall(ty, fn_ptr,
                      {b.CreateBitCast(block_ctx, i8p), b.getInt32(op), b.CreateSExtOrTrunc(a, b.getInt64Ty()),
                       b.CreateSExtOrTrunc(bv, b.getInt64Ty()), p ? b.CreateBitCast(p, i8p) : llvm::Constant::getNullValue(i8p)});
}

llvm::Value* Emitter::peer_shared(llvm::Value* rank) {
  return b.CreateIntToPtr(service(kServicePeerShared, rank, i64(0)), b.getInt8PtrTy());
}

llvm::Value* Emitter::peer_address(llvm::Value* ptr, llvm::Value* rank) {
  llvm::Value* offset = b.CreatePtrDiff(b.getInt8Ty(), ptr, shared_base);
  return b.CreateGEP(b.getInt8Ty(), peer_shared(rank), offset);
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
      // An arrival on block cta_id's barrier at the same offset (the blocks of a cluster run
      // together here).
      if (i.cta_id.defined()) {
        Expr r = facts.simplify(i.cta_id);
        bar = peer_address(bar, convert(expr(r), r.dtype(), dtypes::int64));
      }
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
    case InstKind::ClcQuery: {
      // The response as the runtime writes it: int32 {canceled, x, y, z}.
      auto& i = static_cast<const ClcQueryInst&>(inst);
      const SharedView& view = facts.shared(inst, i.response);
      Expr off = facts.simplify(shared_offset(view, std::vector<Expr>(size_t(i.response.rank()), int_const(0))));
      llvm::Value* bytes = b.CreateAdd(i64(view.base_bytes), b.CreateMul(convert(expr(off), off.dtype(), dtypes::int64),
                                                                         i64(i.response.dtype().storage_bytes(1))));
      llvm::Value* p = b.CreateBitCast(b.CreateGEP(b.getInt8Ty(), shared_base, bytes), llvm::PointerType::getUnqual(b.getInt32Ty()));
      auto word = [&](int k) { return b.CreateAlignedLoad(b.getInt32Ty(), b.CreateConstGEP1_64(b.getInt32Ty(), p, k), llvm::Align(4)); };
      values_[i.is_canceled.operator->()] = b.CreateICmpNE(word(0), b.getInt32(0));
      values_[i.x.operator->()] = word(1);
      values_[i.y.operator->()] = word(2);
      values_[i.z.operator->()] = word(3);
      return;
    }
    case InstKind::Defined: {
      auto& i = static_cast<const DefinedInst&>(inst);
      if (i.definition->name == "clc.try_cancel") {
        // Issued once by the group: the runtime cancels the next cluster that has not started, writes
        // the response and completes its 16 bytes on the barrier (of every block, multicast).
        const Tensor& r = i.tensor("response");
        const SharedView& view = facts.shared(inst, r);
        Expr off = facts.simplify(shared_offset(view, std::vector<Expr>(size_t(r.rank()), int_const(0))));
        llvm::Value* bytes = b.CreateAdd(i64(view.base_bytes), b.CreateMul(convert(expr(off), off.dtype(), dtypes::int64),
                                                                           i64(r.dtype().storage_bytes(1))));
        llvm::Value* resp = b.CreateGEP(b.getInt8Ty(), shared_base, bytes);
        llvm::Value* bar = barrier_ptr(inst, i.tensor("mbarrier"));
        service(kServiceClcTryCancel, b.CreatePtrToInt(bar, b.getInt64Ty()), i64(i.attr("multicast") == "true"), resp);
        return;
      }
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
