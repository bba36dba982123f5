// wgmma: fence, mma (m64nNkK instructions with shared operands through matrix descriptors, as
// the lowering record splits them), commit_group and wait_group.
#include "emitter.h"

#include <algorithm>

namespace tilus::cuda {

namespace {

const char* wgmma_type(DataType t) {
  if (t == dtypes::float16) return "f16";
  if (t == dtypes::bfloat16) return "bf16";
  if (t == dtypes::float8_e4m3) return "e4m3";
  if (t == dtypes::float8_e5m2) return "e5m2";
  if (t == dtypes::float32) return "f32";
  return nullptr;
}

}  // namespace

void Emitter::pin_wgmma_registers(const std::vector<const TensorNode*>& tensors) {
  std::vector<std::string> done;
  for (const TensorNode* t : tensors) {
    auto it = regs_.find(t);
    if (it == regs_.end() || !visible(t)) continue;
    std::string name = t->dtype == dtypes::float32 ? it->second
                                                    : fmt::format("reinterpret_cast<uint32_t*>({})", it->second);
    if (std::find(done.begin(), done.end(), name) != done.end()) continue;
    done.push_back(name);
    linef("tilus::wgmma_fence_operand<{}>({});", t->layout.local_size() * t->dtype.bits() / 32, name);
  }
}

void Emitter::emit_wgmma(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::WgmmaFence: {
      // The accumulators of the mma the fence opens are pinned before it: a value the compiler
      // knows (a zeroed accumulator) could otherwise be materialized after it, right before the
      // mma, and ptxas then inserts a warpgroup arrive of its own and serializes the wgmma.
      pin_wgmma_registers(wgmma_ds_);
      line("tilus::wgmma_fence();");
      return;
    }
    case InstKind::WgmmaCommitGroup: line("tilus::wgmma_commit_group();"); return;
    case InstKind::WgmmaWaitGroup: {
      auto& w = static_cast<const WgmmaWaitGroupInst&>(inst);
      linef("tilus::wgmma_wait_group{}<{}>();", w.ordered ? "_ordered" : "", w.n);
      // The registers of the groups the wait completes: the compiler must not read their
      // accumulators before it (written behind its back), nor reuse their register A before it.
      for (auto& [name, regs] : wgmma_accumulators()) linef("tilus::wgmma_fence_operand<{}>({});", regs, name);
      return;
    }
    case InstKind::WgmmaMma: break;
    default: fail(inst, "not a wgmma instruction");
  }
  auto& i = static_cast<const WgmmaMmaInst&>(inst);
  const Lowering& rec = inst.lowering;
  if (rec.op != MachineOp::Wgmma) fail(inst, "no instruction selected; run the pass pipeline first");
  const WgmmaTiling& t = rec.wgmma;
  DataType ab = i.a.dtype(), dt = i.d.dtype();
  // The kind: .atype.btype (equal, except that the fp8 types e4m3 and e5m2 mix).
  const char* at = wgmma_type(ab);
  const char* bt = wgmma_type(i.b.dtype());
  const char* ct = wgmma_type(dt);
  if (!at || !bt || !ct || (dt != dtypes::float32 && dt != dtypes::float16))
    fail(inst, fmt::format("no wgmma for {} x {} operands into {}", ab.name(), i.b.dtype().name(), dt.name()));
  bool f32 = dt == dtypes::float32;
  const std::string& d = reg(i.d);
  int64_t regs = f32 ? t.n_instr / 2 : t.n_instr / 4;  // 32-bit accumulator registers per instruction
  int64_t m_rows = i.a.static_shape()[0] / t.groups;   // rows of a per warp group
  // The descriptors of the first instruction of this thread's warp group (b, and a when it is
  // in shared memory): the descriptor of the kernel's shared memory (1024-byte aligned, loop
  // invariant) plus the operand's start in 16-byte units, each k step's and n block's then a
  // constant more. Built from the byte address instead (masked and shifted), each operand's
  // descriptor cost its own uniform instructions and its own high word at every step.
  bool a_regs = t.a.registers;
  std::string group = t.groups > 1 ? fmt::format("uint32_t({} / 128)", expr(scope().thread)) : std::string();
  std::string desc[2];
  const Tensor* ops[2] = {&i.a, &i.b};
  const WgmmaOperand* od[2] = {&t.a, &t.b};
  for (int o = a_regs ? 1 : 0; o < 2; ++o) {
    SharedView view = facts_.shared(inst, *ops[o]);
    Expr bytes = simplify(shared_start_unswizzled(view) * Expr(elem_bytes(ab)) + Expr(view.base_bytes));
    // wgmma reads operands at 16-byte aligned starts: the units are exact where the
    // simplifier proves the alignment, else the shift drops nothing at run time either.
    std::string units = facts_.divisor(bytes) % 16 == 0 ? expr(simplify(bytes / Expr(int64_t(16))))
                                                        : fmt::format("(uint32_t({}) >> 4)", expr(bytes));
    if (o == 0 && !group.empty()) {
      if (m_rows * od[o]->row_bytes % 16) fail(inst, "a warp group's rows of a are not 16-byte aligned");
      units = fmt::format("uint32_t({}) + {} * {}u", units, group, m_rows * od[o]->row_bytes / 16);
    }
    desc[o] = fresh(o == 0 ? "wgmma_desc_a" : "wgmma_desc_b");
    // A start that moves at run time (a pipeline stage's slot) is summed opaquely: NVVM would
    // otherwise hoist shared memory's descriptor plus each instruction's constant out of the
    // loop, a 64-bit register pair per instruction held every step (d 256 spilled); a constant
    // start's descriptors are loop invariant either way.
    bool moves = !simplify(bytes).as<IntImmNode>() || (o == 0 && !group.empty());
    linef("const uint64_t {} = {}tilus::wgmma_desc(tilus::smem_addr(tilus_smem), {}u, {}u, {}u) + uint32_t({}){};",
          desc[o], moves ? "tilus::opaque_u64(" : "", od[o]->lbo, od[o]->sbo, od[o]->swizzle_code, units,
          moves ? ")" : "");
  }
  bool f8 = ab.bits() == 8;
  std::string shape = fmt::format("m64n{}k{}", t.n_instr, t.k_instr);
  // The instruction text with its register list: %0..%(regs-1) accumulators, then a (a
  // descriptor, or the 4 registers of this thread's A fragment), b's descriptor and scale-d.
  // With a in registers only b has a transpose flag (1: b MN-major).
  int64_t a_n = a_regs ? 4 : 1;
  std::string list, a_list;
  for (int64_t r = 0; r < regs; ++r) list += fmt::format("{}%{}", r ? ", " : "", r);
  for (int64_t r = 0; r < a_n; ++r) a_list += fmt::format("{}%{}", r ? ", " : "", regs + r);
  if (a_regs) a_list = "{" + a_list + "}";
  std::string text = fmt::format(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{2}, 0;\\nwgmma.mma_async.sync.aligned.{3}.{4}.{5}.{8} {{{0}}}, {1}, "
      "%{6}, p, 1, 1{7};\\n}}\\n",
      list, a_list, regs + a_n + 1, shape, ct, at, regs + a_n,
      f8 ? std::string() : fmt::format("{}, {}", a_regs ? "" : ", 0", t.b.mn_major ? 1 : 0), bt);
  // a in registers: 4 words (8 halves) per m64 x k16 instruction, in (m block, k step) order.
  const int64_t a_words = a_regs ? t.m_blocks * t.k_steps * 4 : 0;
  const std::string a_word = a_regs ? fmt::format("reinterpret_cast<uint32_t*>({})", reg(i.a)) : "";
  if (a_regs) {
    // wgmma.fence orders register writes before the instructions that read them: the A
    // fragments are written by ordinary code, which the compiler may schedule after the
    // kernel's own fence, so they are pinned (an empty asm reading them) and fenced here.
    linef("tilus::wgmma_fence_operand<{}>({});", a_words, a_word);
    line("tilus::wgmma_fence();");
  }
  for (int64_t mb = 0; mb < t.m_blocks; ++mb)
    for (int64_t nb = 0; nb < t.n_blocks; ++nb) {
      int64_t first = (mb * t.n_blocks + nb) * regs;  // the instruction's first 32-bit register
      std::string outs;
      for (int64_t r = 0; r < regs; ++r)
        outs += f32 ? fmt::format("{}\"+f\"({}[{}])", r ? ", " : "", d, first + r)
                    : fmt::format("{}\"+r\"(reinterpret_cast<uint32_t*>({})[{}])", r ? ", " : "", d, first + r);
      for (int64_t ks = 0; ks < t.k_steps; ++ks) {
        // Descriptor start addresses count 16-byte units.
        // b's first column of the instruction: MN-major b in swizzle atoms of `atom` columns,
        // lbo bytes apart where there are several (column blocks), else rows row_bytes apart.
        int64_t col = nb * t.n_instr, atom = t.b.mn_major ? t.b.swizzle_bytes / t.b.row_bytes : 0;
        int64_t col_bytes = atom ? col / atom * t.b.lbo + col % atom * t.b.row_bytes : col * t.b.row_bytes;
        int64_t b_off = (col_bytes + ks * t.b.k_step_bytes) >> 4;
        std::string a_in;
        if (a_regs) {
          int64_t w0 = (mb * t.k_steps + ks) * 4;  // this instruction's fragment
          for (int64_t q = 0; q < 4; ++q) a_in += fmt::format("\"r\"({}[{}]), ", a_word, w0 + q);
        } else {
          int64_t a_off = (mb * 64 * t.a.row_bytes + ks * t.a.k_step_bytes) >> 4;
          a_in = fmt::format("\"l\"({} + {}u), ", desc[0], a_off);
        }
        // scale-d: 0 (d = a @ b) on the first k step where d's values are not an input.
        int scale_d = i.enable_input_d || ks > 0 ? 1 : 0;
        linef("asm volatile(\"{}\" : {} : {}\"l\"({} + {}u), \"r\"({}));", text, outs, a_in, desc[1], b_off,
              scale_d);
      }
    }
  if (a_regs) wgmma_accs_.push_back({i.a.get(), a_words});
  wgmma_accs_.push_back({i.d.get(), regs * t.m_blocks * t.n_blocks});
}

std::vector<std::pair<std::string, int64_t>> Emitter::wgmma_accumulators() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& [t, regs] : wgmma_accs_) {
    auto it = regs_.find(t);
    if (it == regs_.end() || !visible(t)) continue;
    std::string name = it->second;
    if (t->dtype != dtypes::float32) name = fmt::format("reinterpret_cast<uint32_t*>({})", name);
    if (std::none_of(out.begin(), out.end(), [&](auto& p) { return p.first == name; })) out.push_back({name, regs});
  }
  return out;
}

}  // namespace tilus::cuda
