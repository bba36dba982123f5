// tcgen05 (sm_100a / sm_103a): tensor memory (alloc, dealloc, relinquish, views), tcgen05.mma and
// tcgen05.cp with shared operands through matrix descriptors, tcgen05.commit, tcgen05.ld / st and
// their waits, as the instructions and their lowering records say. A tensor-memory tensor is a
// 32-bit address, (lane << 16) | column: the allocation's is read from the shared slot that
// tcgen05.alloc writes, a view's is that plus its lane and column offsets (KernelFacts::tmem).
#include "emitter.h"
#include "tilus/ir/inst_def.h"

namespace tilus::cuda {

namespace {

// The 32-bit words (registers) a thread holds of a register tensor of `elements` elements.
int64_t words_of(const Tensor& t, int64_t elements) { return (elements * t.dtype().bits() + 31) / 32; }

}  // namespace

std::string Emitter::tmem_address(const InstNode& inst, const Tensor& t) {
  const TmemView& v = facts_.tmem(inst, t);
  auto it = tmem_roots_.find(v.root.get());
  if (it == tmem_roots_.end())
    throw CompileError(fmt::format("{}: the tensor-memory tensor {} is used before its tcgen05.alloc (or outside the "
                                   "thread group that allocated it)",
                                   inst.display_name(), t.type_str()),
                       inst.loc);
  std::string a = it->second;
  if (v.lane_offset) a += fmt::format(" + {}u", uint32_t(v.lane_offset) << 16);
  Expr col = simplify(v.first_column());
  if (!col.is_int_const(0)) a += fmt::format(" + uint32_t({})", expr(col));
  return "(" + a + ")";
}

void Emitter::emit_tcgen05(const InstNode& inst) {
  const ThreadScope& sc = scope();
  std::string warp0 = fmt::format("{} < 32", expr(sc.thread));  // the group's first warp
  switch (inst.kind()) {
    case InstKind::Tcgen05Alloc: {
      auto& i = static_cast<const Tcgen05AllocInst&>(inst);
      if (i.slot_offset < 0) fail(inst, "no shared slot for the address; run the pass pipeline first");
      std::string slot = fmt::format("(tilus::smem_addr(tilus_smem) + {}u)", i.slot_offset);
      open(fmt::format("if ({})", warp0));
      linef("tilus::tcgen05_alloc<{}>({}, {}u);", i.cta_group, slot, i.columns());
      close();
      // The address lands in the slot: the group's threads read it after a barrier.
      line("tilus::tcgen05_fence_before_thread_sync();");
      emit_barrier(inst);
      line("tilus::tcgen05_fence_after_thread_sync();");
      std::string name = fresh(i.out->name.empty() ? "tmem" : i.out->name);
      linef("const uint32_t {} = *reinterpret_cast<volatile uint32_t*>(tilus_smem + {});", name, i.slot_offset);
      tmem_roots_[i.out.get()] = name;
      return;
    }
    case InstKind::Tcgen05Slice:
    case InstKind::Tcgen05View: return;  // views: their addresses are computed where used
    case InstKind::Tcgen05Load: {
      auto& i = static_cast<const Tcgen05LoadInst&>(inst);
      emit_tcgen05_ldst(inst, i.src, i.out, true);
      return;
    }
    case InstKind::Defined: break;
    default: fail(inst, "not a tcgen05 instruction");
  }
  auto& i = static_cast<const DefinedInst&>(inst);
  const std::string& name = i.definition->name;
  if (name == "tcgen05.dealloc") {
    const TmemView& v = facts_.tmem(inst, i.tensor("tensor"));
    line("tilus::tcgen05_fence_after_thread_sync();");
    open(fmt::format("if ({})", warp0));
    linef("tilus::tcgen05_dealloc<{}>({}, {}u);", v.alloc->cta_group, tmem_roots_.at(v.root.get()), v.alloc->columns());
    close();
  } else if (name == "tcgen05.relinquish_alloc_permit") {
    open(fmt::format("if ({})", warp0));
    linef("tilus::tcgen05_relinquish_alloc_permit<{}>();", i.attr("cta_group"));
    close();
  } else if (name == "tcgen05.store") {
    emit_tcgen05_ldst(inst, i.tensor("tensor"), i.tensor("src"), false);
  } else if (name == "tcgen05.wait_load") {
    line("tilus::tcgen05_wait_ld();");
    // The loads' registers are written behind the compiler's back: tie them to the wait, so that
    // no read of them moves above it.
    for (auto& [t, words] : tcgen05_loads_) {
      auto it = regs_.find(t);
      if (it == regs_.end() || !visible(t)) continue;
      linef("tilus::wgmma_fence_operand<{}>(reinterpret_cast<uint32_t*>({}));", words, it->second);
    }
    tcgen05_loads_.clear();
  } else if (name == "tcgen05.wait_store") {
    line("tilus::tcgen05_wait_st();");
  } else if (name == "tcgen05.commit") {
    int64_t mask = std::stoll(i.attr("multicast_mask"));
    std::string bar = barrier_address(inst, i.tensor("mbarrier"));
    // The thread that issued the warp's mma and cp (the group's first): a commit tracks its own.
    open(fmt::format("if ({})", elected()));
    if (mask) linef("tilus::tcgen05_commit_multicast<{}>({}, uint16_t({}));", i.attr("cta_group"), bar, mask);
    else linef("tilus::tcgen05_commit<{}>({});", i.attr("cta_group"), bar);
    close();
  } else if (name == "tcgen05.mma" || name == "tcgen05.copy") {
    emit_tcgen05_mma(i);
  } else {
    fail(inst, "not a tcgen05 instruction");
  }
}

void Emitter::emit_tcgen05_ldst(const InstNode& inst, const Tensor& tmem, const Tensor& regs, bool load) {
  const Lowering& rec = inst.lowering;
  if (rec.op != (load ? MachineOp::Tcgen05Ld : MachineOp::Tcgen05St))
    fail(inst, "no instruction selected; run the pass pipeline first");
  int64_t columns = rec.ldst.columns;
  std::string arr = load ? declare_reg(regs) : reg(regs);
  int64_t words = words_of(regs, regs->layout.local_size());
  std::string base = fresh("taddr");
  // Warp w of the group reads lanes 32w..32w+31 of the tile; the index through a shuffle is
  // warp-uniform for ptxas (the address can stay in a uniform register).
  linef("const uint32_t {} = {} + (uint32_t(__shfl_sync(0xffffffffu, {} / 32, 0)) << 21);", base,
        tmem_address(inst, tmem), expr(scope().thread));
  std::string w = fresh("words");
  linef("uint32_t* {} = reinterpret_cast<uint32_t*>({});", w, arr);
  for (int64_t k = 0; k < rec.ldst.instructions; ++k) {
    std::string list, ops;
    for (int64_t r = 0; r < columns; ++r) {
      list += fmt::format("{}%{}", r ? ", " : "", load ? r : r + 1);
      ops += fmt::format("{}\"{}\"({}[{}])", r ? ", " : "", load ? "=r" : "r", w, k * columns + r);
    }
    std::string addr = fmt::format("\"r\"({} + {}u)", base, k * columns);
    if (load)
      linef("asm volatile(\"tcgen05.ld.sync.aligned.32x32b.x{}.b32 {{{}}}, [%{}];\" : {} : {});", columns, list, columns,
            ops, addr);
    else
      linef("asm volatile(\"tcgen05.st.sync.aligned.32x32b.x{}.b32 [%0], {{{}}};\" :: {}, {} : \"memory\");", columns,
            list, addr, ops);
  }
  if (load) tcgen05_loads_.push_back({regs.get(), words});
}

void Emitter::emit_tcgen05_mma(const DefinedInst& i) {
  const Lowering& rec = i.lowering;
  bool mma = rec.op == MachineOp::Tcgen05Mma;
  if (rec.op != MachineOp::Tcgen05Mma && rec.op != MachineOp::Tcgen05Cp)
    fail(i, "no instruction selected; run the pass pipeline first");
  const Tcgen05MmaTiling& t = rec.tcgen05;
  auto desc = [&](const char* hint, const Tensor& s, const WgmmaOperand& o) {
    SharedView view = facts_.shared(i, s);
    std::string addr = fmt::format("tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u", view.base_bytes,
                                   expr(simplify(shared_start_unswizzled(view))), elem_bytes(s.dtype()));
    std::string d = fresh(hint);
    linef("const uint64_t {} = tilus::tcgen05_desc({}, {}u, {}u, {}u);", d, addr, o.lbo, o.sbo, o.swizzle_code);
    return d;
  };
  // Issued by the group's first thread (the commit that tracks it must be the same thread's).
  open(fmt::format("if ({})", elected()));
  if (!mma) {
    const Tensor& src = i.tensor("src");
    std::string d = desc("cp_desc", src, t.a);
    std::string dst = tmem_address(i, i.tensor("dst"));
    for (int64_t c = 0; c < t.n_blocks; ++c)
      linef("tilus::tcgen05_cp_128x256b<1>({} + {}u, {} + {}u);", dst, c * 8, d, (c * t.a.k_step_bytes) >> 4);
    close();
    return;
  }
  const Tensor &a = i.tensor("a"), &b = i.tensor("b"), &d = i.tensor("d");
  int kind = t.kind == "f16" ? 0 : t.kind == "tf32" ? 1 : 2;
  std::string da = t.a_tmem ? std::string() : desc("mma_desc_a", a, t.a);
  std::string db = desc("mma_desc_b", b, t.b);
  std::string ta = t.a_tmem ? tmem_address(i, a) : std::string();
  std::string td = tmem_address(i, d);
  std::string enable = fresh("accumulate");
  linef("const bool {} = {};", enable, expr(simplify(i.scalar("enable_input_d"))));
  int64_t d_cols = t.n_instr * d.dtype().bits() / 32;  // 32-bit columns of one instruction's n
  int64_t a_bits = a.dtype().bits();
  for (int64_t nb = 0; nb < t.n_blocks; ++nb)
    for (int64_t ks = 0; ks < t.k_steps; ++ks) {
      std::string acc = ks == 0 ? enable : "true";
      std::string bd = fmt::format("{} + {}u", db, (nb * t.n_instr * t.b.row_bytes + ks * t.b.k_step_bytes) >> 4);
      std::string dd = fmt::format("{} + {}u", td, nb * d_cols);
      if (t.a_tmem)
        linef("tilus::tcgen05_mma_ts<{}, {}>({}, {} + {}u, {}, {}u, {});", t.cta_group, kind, dd, ta,
              ks * t.k_instr * a_bits / 32, bd, t.idesc, acc);
      else
        linef("tilus::tcgen05_mma_ss<{}, {}>({}, {} + {}u, {}, {}u, {});", t.cta_group, kind, dd, da,
              (ks * t.a.k_step_bytes) >> 4, bd, t.idesc, acc);
    }
  close();
}

}  // namespace tilus::cuda
