// Global and shared memory on the CPU: views, loads, stores, cp.async and copy. Every access
// walks its tile element by element with the address maps the CUDA emitter uses
// (ir/facts.h); out-of-bounds loads read zero and out-of-bounds stores are skipped, and in
// checked mode an access that no predicate guards is checked against the tensor's shape and
// the extent of the parameter it came from, and a shared tile at a run-time offset against
// its allocation (before it is touched).
#include <fmt/format.h>

#include "emitter.h"

namespace tilus::cpu {

namespace {

bool is_true(const Expr& e) { return e.as<BoolImmNode>() && e.as<BoolImmNode>()->value; }

}  // namespace

Side Emitter::global_side(const Tensor& g, const GlobalAccess& access) {
  const GlobalRec& rec = global(g);
  Side s;
  s.dtype = g.dtype();
  s.offset = [access](const std::vector<Expr>& tile) { return global_offset(access, tile); };
  s.predicate = [access](const std::vector<Expr>& tile) { return global_predicate(access, tile); };
  s.base = rec.base;
  s.global = &rec;
  s.access = access;
  return s;
}

Side Emitter::shared_side(const SharedView& view) {
  if (!view.planned) throw InternalError("a shared tensor has no planned offset; run the pass pipeline first");
  Side s;
  s.dtype = view.root.dtype();
  s.offset = [view](const std::vector<Expr>& tile) { return shared_offset(view, tile); };
  s.predicate = [](const std::vector<Expr>&) { return bool_const(true); };
  s.base = b.CreateConstGEP1_64(b.getInt8Ty(), shared_base, uint64_t(view.base_bytes));
  s.shared = view;
  return s;
}

Side Emitter::region_side(const InstNode& inst, const CopyRegion& r, int tile_rank) {
  if (r.tensor.is_global()) return global_side(r.tensor, facts.global_region(inst, r, tile_rank));
  return shared_side(facts.shared_region(inst, r, tile_rank));
}

llvm::Value* Emitter::check_access(const InstNode& inst, const Side& side, const std::vector<Expr>& tile, llvm::Value* pred) {
  if (!options.checked || !side.global) return nullptr;
  const GlobalAccess& g = side.access;
  auto idx = global_index(g, tile);
  int rank = int(idx.size());
  // Unmasked dims must be in range; masked (checked) ones are guarded by the predicate.
  llvm::Value* failing = b.getInt32(-1);
  for (int d = rank - 1; d >= 0; --d) {
    if (std::find(g.checked.begin(), g.checked.end(), d) != g.checked.end()) continue;
    llvm::Value* v = convert(expr(idx[d]), idx[d].dtype(), dtypes::int64);
    llvm::Value* n = convert(expr(g.shape[d]), g.shape[d].dtype(), dtypes::int64);
    llvm::Value* bad = b.CreateOr(b.CreateICmpSLT(v, b.getInt64(0)), b.CreateICmpSGE(v, n));
    failing = b.CreateSelect(bad, b.getInt32(d), failing);
  }
  llvm::Value* ok = b.CreateICmpEQ(failing, b.getInt32(-1));
  // The element's bytes must lie within what the parameter's pointer may address.
  llvm::Value* byte_off = b.getInt64(0);
  const GlobalRec& rec = *side.global;
  if (rec.param >= 0) {
    llvm::Value* off = convert(expr(side.offset(tile)), dtypes::int64, dtypes::int64);
    int64_t eb = std::max<int64_t>(1, side.dtype.bits() / 8);
    llvm::Value* base_delta = b.CreateSub(b.CreatePtrToInt(rec.base, b.getInt64Ty()), b.CreatePtrToInt(rec.param_base, b.getInt64Ty()));
    llvm::Value* end = nullptr;
    if (side.dtype.is_subbyte()) {  // packed: the bytes holding the element's bits
      llvm::Value* bit = b.CreateMul(off, b.getInt64(side.dtype.bits()));
      byte_off = b.CreateAdd(base_delta, b.CreateAShr(bit, 3));
      end = b.CreateAdd(base_delta, b.CreateAShr(b.CreateAdd(bit, b.getInt64(side.dtype.bits() + 7)), 3));
    } else {
      byte_off = b.CreateAdd(base_delta, b.CreateMul(off, b.getInt64(eb)));
      end = b.CreateAdd(byte_off, b.getInt64(eb));
    }
    // ctx->extents[param]
    llvm::Type* i64p = llvm::PointerType::getUnqual(b.getInt64Ty());
    llvm::Value* fields = b.CreateBitCast(block_ctx, llvm::PointerType::getUnqual(i64p));
    llvm::Value* extents = b.CreateLoad(i64p, b.CreateConstGEP1_64(i64p, fields, 1));
    llvm::Value* extent = b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), extents, uint64_t(rec.param)));
    llvm::Value* known = b.CreateICmpSGE(extent, b.getInt64(0));
    llvm::Value* outside = b.CreateOr(b.CreateICmpSLT(byte_off, b.getInt64(0)),
                                      b.CreateICmpSGT(end, extent));
    ok = b.CreateAnd(ok, b.CreateNot(b.CreateAnd(known, outside)));
  }
  int32_t site = int32_t(sites.size());
  sites.push_back({inst.display_name(), inst.loc, rec.type_str, rec.param,
                   rec.param >= 0 ? facts.pointer_var(rec.param).name() : std::string()});
  // Elements the predicate masks are never accessed: only the others are checked.
  if_then(b.CreateAnd(pred, b.CreateNot(ok)), [&] {
    std::vector<llvm::Value*> index;
    for (int d = 0; d < rank; ++d) index.push_back(convert(expr(idx[d]), idx[d].dtype(), dtypes::int64));
    report(site, failing, index, byte_off);
  });
  return ok;
}

void Emitter::report(int32_t site, llvm::Value* dim, const std::vector<llvm::Value*>& index, llvm::Value* byte_offset) {
  int rank = int(index.size());
  llvm::Value* buf = alloca_in_entry(b.getInt64Ty(), std::max(rank, 1), "bad_index");
  for (int d = 0; d < rank; ++d) b.CreateStore(index[d], b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), buf, d));
  llvm::Type* i8p = b.getInt8PtrTy();
  auto* report_ty = llvm::FunctionType::get(
      b.getVoidTy(), {i8p, b.getInt32Ty(), b.getInt32Ty(), llvm::PointerType::getUnqual(b.getInt64Ty()), b.getInt32Ty(), b.getInt64Ty()},
      false);
  llvm::Type* fp = llvm::PointerType::getUnqual(report_ty);
  llvm::Value* fn_ptr = b.CreateLoad(fp, b.CreateBitCast(block_ctx, llvm::PointerType::getUnqual(fp)));
  b.CreateCall(report_ty, fn_ptr, {block_ctx, b.getInt32(site), dim, buf, b.getInt32(rank), byte_offset});
}

void Emitter::guard_shared(const InstNode& inst, std::initializer_list<const Side*> sides,
                           const std::vector<int64_t>& shape, const std::function<void()>& access) {
  // Side by side: the access runs only when no check fails, so an overrun never touches the
  // block's buffer; the first failing dim is reported. Always, not only in checked mode: one
  // comparison per tile access at a run-time offset (docs/cpu.md, "Checked mode", measures it),
  // against a corrupted heap or a segfault where users debug.
  std::vector<const Side*> todo(sides);
  std::function<void(size_t)> next = [&](size_t i) {
    if (i == todo.size()) return access();
    const Side* side = todo[i];
    auto checks = side->shared ? facts.shared_bounds(*side->shared, shape) : std::vector<SharedBoundsCheck>{};
    if (checks.empty()) return next(i + 1);
    const SharedView& view = *side->shared;
    CpuAccessSite site{inst.display_name(), inst.loc, view.root.type_str(), -1, std::string()};
    site.shared = true;
    site.root_shape = view.root.static_shape();
    site.tile_extents.assign(site.root_shape.size(), 1);
    for (const SharedBoundsCheck& c : checks) site.tile_extents[c.dim] = c.extent;
    int32_t id = int32_t(sites.size());
    sites.push_back(site);
    llvm::Value* ok = b.getInt1(true);
    llvm::Value* dim = b.getInt32(-1);
    for (auto c = checks.rbegin(); c != checks.rend(); ++c) {
      llvm::Value* in = expr(c->ok);
      dim = b.CreateSelect(in, dim, b.getInt32(c->dim));
      ok = b.CreateAnd(ok, in);
    }
    if_then(ok, [&] { next(i + 1); }, [&] {
      std::vector<llvm::Value*> index;
      for (const Expr& o : view.offsets) index.push_back(convert(expr(o), o.dtype(), dtypes::int64));
      report(id, dim, index, b.getInt64(0));
    });
  };
  next(0);
}

void Emitter::guard_tma_start(const CopyInst& i, const std::function<void()>& copy) {
  const CopyRegion& g = i.src.tensor.is_global() ? i.src : i.dst;
  DataType dt = g.tensor.dtype();
  TmaStartCheck st = facts.tma_start(g.offsets.back(), dt);
  if (st.aligned == true) return copy();
  int param = facts.global(i, g.tensor).param;
  CpuAccessSite site{i.display_name(), i.loc, g.tensor.type_str(), param,
                     param >= 0 ? facts.pointer_var(param).name() : std::string()};
  site.tma_multiple = st.multiple;
  site.dtype = dt.name();
  int32_t id = int32_t(sites.size());
  sites.push_back(site);
  if_then(expr(st.ok), copy, [&] {
    std::vector<llvm::Value*> index;
    for (const Expr& o : g.offsets) index.push_back(convert(expr(o), o.dtype(), dtypes::int64));
    report(id, b.getInt32(int32_t(g.offsets.size()) - 1), index, b.getInt64(0));
  });
}

void Emitter::each_element(const InstNode& inst, const Side& mem, const std::vector<int64_t>& shape,
                           const std::function<void(const std::vector<Expr>&, llvm::Value*, llvm::Value*)>& body,
                           const std::function<void(llvm::Value*)>& prepare) {
  guard_shared(inst, {&mem}, shape, [&] { tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
    auto tile = bind_index(idx);
    llvm::Value* lin = linear(idx, shape);
    if (prepare) prepare(lin);
    Expr pred_e = mem.predicate(tile);
    llvm::Value* pred = is_true(pred_e) ? b.getInt1(true) : expr(pred_e);
    llvm::Value* ok = check_access(inst, mem, tile, pred);
    body(tile, lin, ok ? b.CreateAnd(pred, ok) : pred);
    unbind(tile);
  }); });
}

void Emitter::register_access(const InstNode& inst, bool load, const Tensor& r, const Side& mem, const Expr& fill) {
  llvm::Value* outside = load && fill.defined() ? expr(fill) : (load ? constant(r.dtype(), 0) : nullptr);
  each_element(inst, mem, r.static_shape(), [&](const std::vector<Expr>& tile, llvm::Value* lin, llvm::Value* cond) {
    if (load) {
      if_then(
          cond,
          [&] {
            llvm::Value* v = load_memory(mem.base, expr(mem.offset(tile)), mem.dtype);
            store_reg(r, lin, convert(v, mem.dtype, r.dtype()));
          },
          [&] { store_reg(r, lin, outside); });
    } else {
      if_then(cond, [&] {
        llvm::Value* v = convert(load_reg(r, lin), r.dtype(), mem.dtype);
        store_memory(mem.base, expr(mem.offset(tile)), mem.dtype, v);
      });
    }
  });
}

llvm::Value* Emitter::atomic_element(const AtomicInst& i, llvm::Value* base, llvm::Value* offset, llvm::Value* v,
                                     llvm::Value* compare) {
  DataType t = i.values.dtype();
  llvm::Type* mt = memory_type(t);
  llvm::IntegerType* it = b.getIntNTy(t.bits());
  llvm::Align align(t.bits() / 8);
  llvm::Value* p = b.CreateGEP(mt, b.CreateBitCast(base, llvm::PointerType::getUnqual(mt)), offset);
  llvm::Value* ip = b.CreateBitCast(p, llvm::PointerType::getUnqual(it));
  auto to_bits = [&](llvm::Value* x) { return x->getType()->isIntegerTy() ? x : b.CreateBitCast(x, it); };
  auto from_bits = [&](llvm::Value* x) { return mt->isIntegerTy() ? x : b.CreateBitCast(x, mt); };
  using llvm::AtomicOrdering;
  AtomicOrdering success = i.sem == "acquire" ? AtomicOrdering::Acquire
                           : i.sem == "release" ? AtomicOrdering::Release
                           : i.sem == "acq_rel" ? AtomicOrdering::AcquireRelease
                                                : AtomicOrdering::Monotonic;
  AtomicOrdering failure =
      i.sem == "acquire" || i.sem == "acq_rel" ? AtomicOrdering::Acquire : AtomicOrdering::Monotonic;
  llvm::LoadInst* first = b.CreateAlignedLoad(it, ip, align);
  first->setAtomic(AtomicOrdering::Monotonic);
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx, "atomic", fn);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "atomic_done", fn);
  b.CreateBr(loop);
  b.SetInsertPoint(loop);
  llvm::PHINode* cur = b.CreatePHI(it, 2);
  cur->addIncoming(first, pre);
  llvm::Value* old = from_bits(cur);
  llvm::Value* next = nullptr;
  bool is_signed = t.is_int();
  switch (i.op) {
    case AtomicOp::Add:
    case AtomicOp::Sub:
      if (t.is_float()) {
        llvm::Value *x = widen(old, t), *y = widen(v, t);
        next = narrow(i.op == AtomicOp::Add ? b.CreateFAdd(x, y) : b.CreateFSub(x, y), t);
      } else {
        next = i.op == AtomicOp::Add ? b.CreateAdd(old, v) : b.CreateSub(old, v);
      }
      break;
    case AtomicOp::Min:
      next = b.CreateSelect(is_signed ? b.CreateICmpSLT(v, old) : b.CreateICmpULT(v, old), v, old);
      break;
    case AtomicOp::Max:
      next = b.CreateSelect(is_signed ? b.CreateICmpSGT(v, old) : b.CreateICmpUGT(v, old), v, old);
      break;
    case AtomicOp::Exch: next = v; break;
    case AtomicOp::Cas: next = b.CreateSelect(b.CreateICmpEQ(cur, to_bits(compare)), v, old); break;
  }
  llvm::Value* x = b.CreateAtomicCmpXchg(ip, cur, to_bits(next), align, success, failure);
  cur->addIncoming(b.CreateExtractValue(x, 0), b.GetInsertBlock());
  b.CreateCondBr(b.CreateExtractValue(x, 1), done, loop);
  b.SetInsertPoint(done);
  return old;
}

void Emitter::transfer(const InstNode& inst, const Side& src, const Side& dst, const std::vector<int64_t>& shape) {
  guard_shared(inst, {&src, &dst}, shape, [&] { tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
    auto tile = bind_index(idx);
    Expr sp = src.predicate(tile), dp = dst.predicate(tile);
    llvm::Value* dcond = is_true(dp) ? b.getInt1(true) : expr(dp);
    if (llvm::Value* ok = check_access(inst, dst, tile, dcond)) dcond = b.CreateAnd(dcond, ok);
    if_then(dcond, [&] {
      llvm::Value* scond = is_true(sp) ? b.getInt1(true) : expr(sp);
      if (llvm::Value* ok = check_access(inst, src, tile, scond)) scond = b.CreateAnd(scond, ok);
      llvm::Value* slot = alloca_in_entry(memory_type(src.dtype), 1, "elem");
      b.CreateStore(b.CreateZExt(constant(src.dtype, 0), memory_type(src.dtype)), slot);
      if_then(scond, [&] {
        llvm::Value* v = load_memory(src.base, expr(src.offset(tile)), src.dtype);
        if (src.dtype.is_bool()) v = b.CreateZExt(v, b.getInt8Ty());
        b.CreateStore(v, slot);
      });
      llvm::Value* v = load_memory(slot, b.getInt64(0), src.dtype);
      store_memory(dst.base, expr(dst.offset(tile)), dst.dtype, convert(v, src.dtype, dst.dtype));
    });
    unbind(tile);
  }); });
}

void Emitter::emit_memory(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::GlobalView: {
      auto& i = static_cast<const GlobalViewInst&>(inst);
      GlobalRec rec;
      rec.base = convert(expr(i.ptr), i.ptr.dtype(), i.ptr.dtype());
      rec.param = facts.pointer_param(i.ptr);
      if (rec.param >= 0) rec.param_base = expr(facts.pointer_var(rec.param));
      rec.type_str = i.out.type_str();
      globals[i.out.get()] = rec;
      return;
    }
    case InstKind::AllocateShared:
    case InstKind::FreeShared:
    case InstKind::SliceShared:
    case InstKind::ReshapeShared: return;  // address maps: the facts
    case InstKind::WgmmaMma: {
      // d += a @ b at once: the shared operands through register copies of the whole tiles (a
      // may be in registers already); d zeroed first where its values are not an input.
      auto& i = static_cast<const WgmmaMmaInst&>(inst);
      if (!i.enable_input_d)
        loop(i32(i.d.num_elements()), [&](llvm::Value* e) { store_reg(i.d, e, constant(i.d.dtype(), 0)); });
      Tensor a = i.a;
      if (i.a.is_shared()) {
        a = Tensor::reg("wgmma_a", i.a.dtype(), i.a.static_shape());
        scratch_tensors_.push_back(a);
        declare_reg(a);
        register_access(inst, true, a, shared_side(facts.shared(i, i.a)));
      }
      Tensor bt = Tensor::reg("wgmma_b", i.b.dtype(), i.b.static_shape());
      scratch_tensors_.push_back(bt);
      declare_reg(bt);
      register_access(inst, true, bt, shared_side(facts.shared(i, i.b)));
      matmul_accumulate(a, bt, i.d);
      return;
    }
    case InstKind::LoadGlobal: {
      auto& i = static_cast<const LoadGlobalInst&>(inst);
      declare_reg(i.out);
      register_access(inst, true, i.out, global_side(i.src, facts.tile(i, i.src, i.offsets, i.dims, i.checked_dims)),
                      i.other);
      return;
    }
    case InstKind::StoreGlobal: {
      auto& i = static_cast<const StoreGlobalInst&>(inst);
      register_access(inst, false, i.src, global_side(i.dst, facts.tile(i, i.dst, i.offsets, i.dims, i.checked_dims)));
      return;
    }
    case InstKind::Atomic: {
      // Each element once (the GPU's primary replica); out of bounds: skipped, old value 0.
      auto& i = static_cast<const AtomicInst&>(inst);
      declare_reg(i.out);
      Side mem = i.dst.is_global() ? global_side(i.dst, facts.tile(i, i.dst, i.offsets, i.dims, i.checked_dims))
                                   : shared_side(facts.shared(i, i.dst));
      DataType t = i.values.dtype();
      std::function<void(llvm::Value*)> prepare;
      if (i.scatter()) {
        // The element's coordinate along the scatter dim is its index; outside dst: skipped.
        Var index("scatter_index", dtypes::int64, VarRole::Local);
        int dim = i.scatter_dim;
        Expr in_bounds = i.scatter_in_bounds(index);
        Side plain = mem;
        mem.offset = [plain, dim, index](const std::vector<Expr>& tile) {
          std::vector<Expr> at = tile;
          at[size_t(dim)] = index;
          return plain.offset(at);
        };
        mem.predicate = [plain, dim, index, in_bounds](const std::vector<Expr>& tile) {
          std::vector<Expr> at = tile;
          at[size_t(dim)] = index;
          return logical_and(plain.predicate(at), in_bounds);
        };
        prepare = [this, &i, index](llvm::Value* lin) {
          values_[index.operator->()] = convert(load_reg(i.indices, lin), i.indices.dtype(), dtypes::int64);
        };
      }
      each_element(
          inst, mem, i.values.static_shape(),
          [&](const std::vector<Expr>& tile, llvm::Value* lin, llvm::Value* cond) {
            store_reg(i.out, lin, constant(t, 0));
            if_then(cond, [&] {
              if (i.store) {
                store_memory(mem.base, expr(mem.offset(tile)), mem.dtype, convert(load_reg(i.values, lin), t, mem.dtype));
                return;
              }
              llvm::Value* cmp = i.compare.defined() ? load_reg(i.compare, lin) : nullptr;
              store_reg(i.out, lin, atomic_element(i, mem.base, expr(mem.offset(tile)), load_reg(i.values, lin), cmp));
            });
          },
          prepare);
      return;
    }
    case InstKind::LoadShared: {
      auto& i = static_cast<const LoadSharedInst&>(inst);
      declare_reg(i.out);
      register_access(inst, true, i.out, shared_side(facts.shared(i, i.src)));
      return;
    }
    case InstKind::StoreShared: {
      auto& i = static_cast<const StoreSharedInst&>(inst);
      register_access(inst, false, i.src, shared_side(facts.shared(i, i.dst)));
      return;
    }
    case InstKind::CopyAsync: {
      auto& i = static_cast<const CopyAsyncInst&>(inst);
      Side g = global_side(i.src, facts.tile(i, i.src, i.offsets, i.dims, i.checked_dims));
      transfer(inst, g, shared_side(facts.shared(i, i.dst)), i.dst.static_shape());
      return;
    }
    case InstKind::Im2col: {
      // The gather's own predicate keeps it inside the image (checked mode has nothing to add).
      auto& i = static_cast<const Im2colInst&>(inst);
      GlobalAccess g = facts.global(i, i.img);
      Side src = global_side(i.img, g);
      src.offset = [&i, g](const std::vector<Expr>& tile) { return im2col_map(i, g, tile).offset; };
      src.predicate = [&i, g](const std::vector<Expr>& tile) { return im2col_map(i, g, tile).predicate; };
      src.global = nullptr;
      // Split-phase: the arrival with the tile's bytes, the gathers, then the bytes complete.
      llvm::Value* bar = i.barrier.defined() ? barrier_ptr(inst, i.barrier) : nullptr;
      int64_t bytes = i.col.dtype().storage_bytes(i.col.num_elements());
      if (bar) {
        mbarrier_op(kMbarrierExpectTx, bar, i64(bytes));
        mbarrier_op(kMbarrierArrive, bar, i64(1));
      }
      transfer(inst, src, shared_side(facts.shared(i, i.col)), i.col.static_shape());
      if (bar) mbarrier_op(kMbarrierCompleteTx, bar, i64(bytes));
      return;
    }
    case InstKind::Copy: {
      auto& i = static_cast<const CopyInst&>(inst);
      if (i.src.tensor.is_register() || i.dst.tensor.is_register()) {
        if (i.src.tensor.is_register() && i.dst.tensor.is_register())
          fail(inst, "a copy between two register tensors is an assignment; use assign");
        bool load = i.dst.tensor.is_register();
        const CopyRegion& mem = load ? i.src : i.dst;
        const Tensor& r = load ? i.dst.tensor : i.src.tensor;
        if (load) declare_reg(r);
        register_access(inst, load, r, region_side(inst, mem, r.rank()));
        return;
      }
      // Memory to memory over the destination's extents; the source's broadcast dims stay at
      // their offsets (region_dims).
      std::vector<int64_t> shape;
      for (auto& e : i.dst.extents) {
        if (!e.is_int_const()) fail(inst, "a memory-to-memory copy needs constant extents");
        shape.push_back(e.int_value());
      }
      int rank = int(shape.size());
      // TMA loads complete their bytes on their mbarrier (tma_copy arrives there first, with
      // its expectation); synchronous ones need no barrier here.
      const Lowering& low = inst.lowering;
      llvm::Value* bar = nullptr;
      int64_t bytes = i.dst.tensor.dtype().storage_bytes(1);
      for (int64_t e : shape) bytes *= e;
      if (low.op == MachineOp::TmaLoad && i.barrier.defined()) {
        bar = barrier_ptr(inst, i.barrier);
        if (i.api == CopyApi::TmaCopy) {
          mbarrier_op(kMbarrierExpectTx, bar, i64(bytes));
          mbarrier_op(kMbarrierArrive, bar, i64(1));
        }
      }
      Side src = region_side(inst, i.src, rank), dst = region_side(inst, i.dst, rank);
      // Every TMA box, a multicast one included, must start 16-byte aligned (guard_tma_start).
      auto move = [&](const Side& to) {
        auto copy = [&] { transfer(inst, src, to, shape); };
        if (low.op == MachineOp::TmaLoad || low.op == MachineOp::TmaStore) guard_tma_start(i, copy);
        else copy();
      };
      bool cluster = kernel.cluster != std::array<int64_t, 3>{1, 1, 1};
      if (i.multicast_mask.defined() && cluster) {
        // Every block of the mask receives the box at the same offset and completes the bytes on
        // its barrier at the same offset (the blocks of a cluster run together here).
        Expr m = facts.simplify(i.multicast_mask);
        llvm::Value* mask = convert(expr(m), m.dtype(), dtypes::int64);
        int64_t size = kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2];
        loop(i32(size), [&](llvm::Value* r) {
          llvm::Value* in = b.CreateICmpNE(b.CreateAnd(b.CreateLShr(mask, b.CreateZExt(r, b.getInt64Ty())), i64(1)), i64(0));
          if_then(in, [&] {
            Side to = dst;
            to.base = peer_address(dst.base, r);
            move(to);
            if (bar) mbarrier_op(kMbarrierCompleteTx, peer_address(bar, r), i64(bytes));
          });
        });
        return;
      }
      move(dst);
      if (bar && i.barrier_rank.defined()) {
        // cta_group=2: the bytes complete on the pair's barrier in block barrier_rank.
        Expr r = facts.simplify(i.barrier_rank);
        bar = peer_address(bar, convert(expr(r), r.dtype(), dtypes::int64));
      }
      if (bar) mbarrier_op(kMbarrierCompleteTx, bar, i64(bytes));
      return;
    }
    default: fail(inst, "not a memory instruction");
  }
}

}  // namespace tilus::cpu
