// tcgen05 on the CPU: a block's tensor memory is an array of 128 lanes x 512 32-bit columns
// (CpuBlockContext::tmem), allocated by column as the GPU allocates it (the runtime's
// kServiceTmemAlloc: the lowest free aligned run, an error for a block that leaves columns
// allocated). A tensor-memory tensor is its allocation's address, (lane << 16) | column, plus its
// view's offsets (KernelFacts::tmem). tcgen05.mma and tcgen05.cp complete when issued (a block's
// instructions run in order); tcgen05.commit then arrives once on its mbarrier, and the waits of
// loads and stores have nothing to wait for. With cta_group=2 the instruction of the pair's block
// of even rank computes both blocks' rows from both blocks' shared operands.
#include <fmt/format.h>

#include "emitter.h"

namespace tilus::cpu {

namespace {

// The IR scalar v + c (int32).
Expr plus(const Expr& v, int64_t c) { return c == 0 ? v : v + Expr(c); }

}  // namespace

llvm::Value* Emitter::tmem_element(const InstNode& inst, const Tensor& t, const std::vector<Expr>& tile,
                                   llvm::Value* tmem) {
  const TmemView& v = facts.tmem(inst, t);
  llvm::Value* slot = block_storage(v.root.get(), b.getInt32Ty());
  if (!slot) fail(inst, fmt::format("the tensor-memory tensor {} is used before its tcgen05.alloc", t.type_str()));
  if (!tmem) {
    llvm::Value* field = b.CreateConstGEP1_64(b.getInt8Ty(), b.CreateBitCast(block_ctx, b.getInt8PtrTy()),
                                              offsetof(CpuBlockContext, tmem));
    tmem = b.CreateLoad(b.getInt8PtrTy(), b.CreateBitCast(field, llvm::PointerType::getUnqual(b.getInt8PtrTy())));
  }
  llvm::Value* addr = b.CreateLoad(b.getInt32Ty(), slot);
  Expr bits = v.col_bits;
  for (size_t d = 1; d < tile.size() && d < v.col_strides_bits.size(); ++d)
    bits = bits + tile[d] * Expr(v.col_strides_bits[d]);
  bits = facts.simplify(bits);
  llvm::Value* lane = b.CreateAdd(b.CreateLShr(addr, 16), convert(expr(facts.simplify(plus(tile[0], v.lane_offset))),
                                                                  tile[0].dtype(), dtypes::int32));
  llvm::Value* byte = b.CreateAdd(b.CreateMul(b.CreateZExt(lane, b.getInt64Ty()), i64(kCpuTmemLaneBytes)),
                                  b.CreateMul(b.CreateZExt(b.CreateAnd(addr, b.getInt32(0xffff)), b.getInt64Ty()), i64(4)));
  byte = b.CreateAdd(byte, b.CreateSDiv(convert(expr(bits), bits.dtype(), dtypes::int64), i64(8)));
  return b.CreateGEP(b.getInt8Ty(), tmem, byte);
}

void Emitter::tmem_registers(const InstNode& inst, const Tensor& t, const Tensor& regs, bool load, llvm::Value* tmem,
                             int64_t col0) {
  auto shape = regs.static_shape();
  DataType dt = t.dtype();
  tile_loop(shape, [&](const std::vector<llvm::Value*>& idx) {
    auto tile = bind_index(idx);
    std::vector<Expr> at = tile;
    at[1] = plus(at[1], col0);
    llvm::Value* p = tmem_element(inst, t, at, tmem);
    llvm::Value* lin = linear(idx, shape);
    if (load) store_reg(regs, lin, convert(load_memory(p, i64(0), dt), dt, regs.dtype()));
    else store_memory(p, i64(0), dt, convert(load_reg(regs, lin), regs.dtype(), dt));
    unbind(tile);
  });
}

void Emitter::emit_tcgen05(const InstNode& inst) {
  auto site = [&](const Tensor& t) {
    int32_t id = int32_t(sites.size());
    sites.push_back(CpuAccessSite{inst.display_name(), inst.loc, t.defined() ? t.type_str() : "", -1, std::string()});
    return id;
  };
  switch (inst.kind()) {
    case InstKind::Tcgen05Alloc: {
      auto& i = static_cast<const Tcgen05AllocInst&>(inst);
      llvm::Value* addr = service(kServiceTmemAlloc, i64(i.columns()), i64(site(i.out)));
      llvm::Value* slot = block_storage(i.out.get(), b.getInt32Ty(), 1, "tmem_addr");
      b.CreateStore(b.CreateTrunc(addr, b.getInt32Ty()), slot);
      return;
    }
    case InstKind::Tcgen05Slice:
    case InstKind::Tcgen05View: return;  // address maps: the facts
    case InstKind::Tcgen05Load: {
      auto& i = static_cast<const Tcgen05LoadInst&>(inst);
      declare_reg(i.out);
      tmem_registers(inst, i.src, i.out, true);
      return;
    }
    case InstKind::Defined: break;
    default: fail(inst, "not a tcgen05 instruction");
  }
  auto& i = static_cast<const DefinedInst&>(inst);
  const std::string& name = i.definition->name;
  if (name == "tcgen05.dealloc") {
    const TmemView& v = facts.tmem(inst, i.tensor("tensor"));
    llvm::Value* slot = block_storage(v.root.get(), b.getInt32Ty());
    service(kServiceTmemDealloc, b.CreateZExt(b.CreateLoad(b.getInt32Ty(), slot), b.getInt64Ty()),
            i64(v.alloc->columns()));
  } else if (name == "tcgen05.relinquish_alloc_permit") {
    service(kServiceTmemRelinquish, i64(0), i64(-1));
  } else if (name == "tcgen05.store") {
    tmem_registers(inst, i.tensor("tensor"), i.tensor("src"), false);
  } else if (name == "tcgen05.wait_load" || name == "tcgen05.wait_store") {
    // Loads and stores complete when issued here.
  } else if (name == "tcgen05.commit") {
    // The warp's tcgen05.mma and cp have completed: one arrival (on each block of the mask).
    llvm::Value* bar = barrier_ptr(inst, i.tensor("mbarrier"));
    int64_t mask = std::stoll(i.attr("multicast_mask"));
    if (!mask) {
      mbarrier_op(kMbarrierArrive, bar, i64(1));
      return;
    }
    for (int64_t r = 0; r < 16; ++r)
      if (mask >> r & 1) mbarrier_op(kMbarrierArrive, peer_address(bar, i64(r)), i64(1));
  } else if (name == "tcgen05.copy") {
    const Tensor &src = i.tensor("src"), &dst = i.tensor("dst");
    Tensor tile = Tensor::reg("tcgen05_cp", src.dtype(), src.static_shape());
    scratch_tensors_.push_back(tile);
    declare_reg(tile);
    register_access(inst, true, tile, shared_side(facts.shared(inst, src)));
    tmem_registers(inst, dst, tile, false);
  } else if (name == "tcgen05.mma") {
    emit_tcgen05_mma(i);
  } else {
    fail(inst, "not a tcgen05 instruction");
  }
}

void Emitter::emit_tcgen05_mma(const DefinedInst& i) {
  const Tensor &a = i.tensor("a"), &bt = i.tensor("b"), &d = i.tensor("d");
  int64_t cta_group = std::stoll(i.attr("cta_group"));
  auto sa = a.static_shape(), sb = bt.static_shape();
  int64_t m = sa[0], k = sa[1], n = sb[1];
  auto scratch = [&](const char* name, DataType t, std::vector<int64_t> shape) {
    Tensor r = Tensor::reg(name, t, std::move(shape));
    scratch_tensors_.push_back(r);
    declare_reg(r);
    return r;
  };
  Tensor ta = scratch("tcgen05_a", a.dtype(), {m, k}), tb = scratch("tcgen05_b", bt.dtype(), {k, n}),
         td = scratch("tcgen05_d", d.dtype(), {m, n});
  Expr e = facts.simplify(i.scalar("enable_input_d"));
  llvm::Value* enable = convert(expr(e), e.dtype(), dtypes::boolean);
  // The ranks of the pair (cta_group=2): this block (even) and the next; the operands of rank r
  // are at the same offsets of its shared and tensor memory.
  llvm::Value* me = nullptr;
  if (cta_group == 2) me = convert(expr(Expr(builtin::cluster_block_rank())), dtypes::int32, dtypes::int64);
  auto rank = [&](int r) { return b.CreateAdd(me, i64(r)); };
  auto tmem_of = [&](int r) -> llvm::Value* {
    if (cta_group == 1 || r == 0) return nullptr;  // this block's
    return b.CreateIntToPtr(service(kServicePeerTmem, rank(r), i64(0)), b.getInt8PtrTy());
  };
  auto shared_of = [&](const Tensor& t, int r) {
    Side s = shared_side(facts.shared(i, t));
    if (cta_group == 2 && r) s.base = peer_address(s.base, rank(r));
    return s;
  };
  // d rows of block ra, d columns [cb * n, (cb + 1) * n): a of block ra times b of block cb.
  for (int ra = 0; ra < cta_group; ++ra) {
    if (a.is_tmem()) tmem_registers(i, a, ta, true, tmem_of(ra));
    else register_access(i, true, ta, shared_of(a, ra));
    for (int cb = 0; cb < cta_group; ++cb) {
      register_access(i, true, tb, shared_of(bt, cb));
      if_then(enable, [&] { tmem_registers(i, d, td, true, tmem_of(ra), cb * n); },
              [&] {
                loop(i32(m * n), [&](llvm::Value* l) { store_reg(td, l, constant(d.dtype(), 0)); });
              });
      matmul_accumulate(ta, tb, td);
      tmem_registers(i, d, td, false, tmem_of(ra), cb * n);
    }
  }
}

}  // namespace tilus::cpu
