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

// --- which registers each wgmma.fence and wgmma.wait_group pins ----------------------------
// A wait pins the registers of the groups it completes (their accumulators and register A
// operands: written, or read, behind the compiler's back until then), a fence the
// accumulators of the mma instructions it opens, not every wgmma operand in scope: a pin keeps
// a register live, and an idle one (S after the softmax, P once its P V completed) cost the
// kernel registers it could have used.
namespace {

using Regs = std::vector<const TensorNode*>;  // a small set, in first-seen order

void add(Regs& r, const TensorNode* t) {
  if (std::find(r.begin(), r.end(), t) == r.end()) r.push_back(t);
}
void add(Regs& r, const Regs& more) {
  for (const TensorNode* t : more) add(r, t);
}

// The wgmma state of every path reaching a point: the committed groups possibly in flight
// (oldest first; paths of different lengths aligned at the newest) and the mma since the last
// commit. Groups beyond kMaxGroups merge into the oldest kept (a superset: pins only grow).
struct GroupState {
  static constexpr size_t kMaxGroups = 8;
  std::vector<Regs> pending;
  Regs open;
  bool reached = true;

  void join(const GroupState& o) {
    if (!o.reached) return;
    if (!reached) {
      *this = o;
      return;
    }
    size_t n = std::max(pending.size(), o.pending.size());
    std::vector<Regs> out(n);
    for (size_t i = 0; i < pending.size(); ++i) add(out[n - pending.size() + i], pending[i]);
    for (size_t i = 0; i < o.pending.size(); ++i) add(out[n - o.pending.size() + i], o.pending[i]);
    pending = std::move(out);
    add(open, o.open);
  }
  bool operator==(const GroupState& o) const {
    auto same = [](const Regs& a, const Regs& b) {
      return a.size() == b.size() && std::all_of(a.begin(), a.end(), [&](auto* t) {
               return std::find(b.begin(), b.end(), t) != b.end();
             });
    };
    if (reached != o.reached || pending.size() != o.pending.size() || !same(open, o.open)) return false;
    for (size_t i = 0; i < pending.size(); ++i)
      if (!same(pending[i], o.pending[i])) return false;
    return true;
  }
};

class PinPlanner {
 public:
  explicit PinPlanner(std::unordered_map<const InstNode*, Regs>& pins) : pins_(pins) {}

  void run(const Stmt& s, GroupState& st) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::Seq: {
        auto& stmts = static_cast<const SeqStmtNode&>(*s).stmts;
        for (size_t i = 0; i < stmts.size(); ++i) {
          if (is(stmts[i], InstKind::WgmmaFence)) plan_fence(stmts, i);
          run(stmts[i], st);
        }
        return;
      }
      case StmtKind::Inst: return inst(*static_cast<const InstStmtNode&>(*s).inst, st);
      case StmtKind::For: return loop(static_cast<const ForStmtNode&>(*s).body, st);
      case StmtKind::While: return loop(static_cast<const WhileStmtNode&>(*s).body, st);
      case StmtKind::If: {
        auto& n = static_cast<const IfStmtNode&>(*s);
        GroupState e = st;
        run(n.then_body, st);
        run(n.else_body, e);
        st.join(e);
        return;
      }
      case StmtKind::ThreadGroup: {  // the threads outside skip the body
        GroupState in = st;
        run(static_cast<const ThreadGroupStmtNode&>(*s).body, st);
        st.join(in);
        return;
      }
      case StmtKind::Break:
      case StmtKind::Continue:
        if (!loops_.empty()) (s->kind == StmtKind::Break ? loops_.back().first : loops_.back().second).join(st);
        st.reached = false;
        return;
      case StmtKind::Return: st.reached = false; return;
      default: return;  // scalars
    }
  }

 private:
  static bool is(const Stmt& s, InstKind k) {
    return s && s->kind == StmtKind::Inst && static_cast<const InstStmtNode&>(*s).inst->kind() == k;
  }

  void inst(const InstNode& i, GroupState& st) {
    if (!st.reached) return;
    if (i.kind() == InstKind::WgmmaMma) {
      auto& m = static_cast<const WgmmaMmaInst&>(i);
      add(st.open, m.d.get());
      if (m.a.is_register()) add(st.open, m.a.get());
    } else if (i.kind() == InstKind::WgmmaCommitGroup) {
      st.pending.push_back(std::move(st.open));
      st.open.clear();
      if (st.pending.size() > GroupState::kMaxGroups) {
        add(st.pending[1], st.pending[0]);
        st.pending.erase(st.pending.begin());
      }
    } else if (i.kind() == InstKind::WgmmaWaitGroup) {
      size_t keep = size_t(static_cast<const WgmmaWaitGroupInst&>(i).n);
      Regs& pins = pins_[&i];  // present even when nothing completes here: nothing to pin
      if (st.pending.size() <= keep) return;
      size_t done = st.pending.size() - keep;
      for (size_t g = 0; g < done; ++g) add(pins, st.pending[g]);
      st.pending.erase(st.pending.begin(), st.pending.begin() + done);
    }
  }

  // The loop's head joins the state before it with the one each iteration leaves (and its
  // continues) until nothing changes; it is left from the head (the condition fails) or at a
  // break.
  void loop(const Stmt& body, GroupState& st) {
    GroupState head = st, breaks;
    breaks.reached = false;
    for (int it = 0; it < 64; ++it) {
      GroupState cont;
      cont.reached = false;
      loops_.push_back({breaks, cont});
      GroupState end = head;
      run(body, end);
      breaks = loops_.back().first;
      end.join(loops_.back().second);
      loops_.pop_back();
      GroupState next = head;
      next.join(end);
      if (next == head) break;
      head = std::move(next);
    }
    st = head;
    st.join(breaks);
  }

  // A fence pins the accumulators of the mma instructions after it in its sequence, up to the
  // commit; where anything else than instructions and scalars comes first (a loop, a branch,
  // the sequence's end), it has no entry and pins every accumulator in scope as before.
  void plan_fence(const std::vector<Stmt>& stmts, size_t at) {
    std::vector<Stmt> flat;
    flatten(stmts, at + 1, flat);
    Regs ds;
    for (const Stmt& s : flat) {
      if (s->kind != StmtKind::Inst) {
        if (s->kind == StmtKind::Let || s->kind == StmtKind::Declare || s->kind == StmtKind::Assign) continue;
        return;
      }
      const InstNode& i = *static_cast<const InstStmtNode&>(*s).inst;
      if (i.kind() == InstKind::WgmmaMma) add(ds, static_cast<const WgmmaMmaInst&>(i).d.get());
      if (i.kind() == InstKind::WgmmaCommitGroup) {
        pins_[static_cast<const InstStmtNode&>(*stmts[at]).inst.get()] = ds;
        return;
      }
      if (i.kind() == InstKind::WgmmaFence || i.kind() == InstKind::WgmmaWaitGroup) return;
    }
  }
  static void flatten(const std::vector<Stmt>& stmts, size_t from, std::vector<Stmt>& out) {
    for (size_t i = from; i < stmts.size(); ++i) {
      if (stmts[i] && stmts[i]->kind == StmtKind::Seq) flatten(static_cast<const SeqStmtNode&>(*stmts[i]).stmts, 0, out);
      else if (stmts[i]) out.push_back(stmts[i]);
    }
  }

  std::unordered_map<const InstNode*, Regs>& pins_;
  std::vector<std::pair<GroupState, GroupState>> loops_;  // per open loop: its breaks, its continues
};

}  // namespace

void Emitter::plan_wgmma_pins(const Stmt& body) {
  GroupState st;
  PinPlanner(wgmma_pins_).run(body, st);
}

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
      // mma, and ptxas then inserts a warpgroup arrive of its own and serializes the wgmma. A
      // fence the planner could not follow to its commit pins every accumulator in scope.
      auto it = wgmma_pins_.find(&inst);
      pin_wgmma_registers(it != wgmma_pins_.end() && options.wgmma_pin_in_flight ? it->second : wgmma_ds_);
      line("tilus::wgmma_fence();");
      return;
    }
    case InstKind::WgmmaCommitGroup: line("tilus::wgmma_commit_group();"); return;
    case InstKind::WgmmaWaitGroup: {
      auto& w = static_cast<const WgmmaWaitGroupInst&>(inst);
      linef("tilus::wgmma_wait_group{}<{}>();", w.ordered ? "_ordered" : "", w.n);
      // The registers of the groups the wait completes: the compiler must not read their
      // accumulators before it (written behind its back), nor reuse their register A before it.
      if (!options.wgmma_pin_in_flight) {
        for (auto& [name, regs] : wgmma_accumulators()) linef("tilus::wgmma_fence_operand<{}>({});", regs, name);
      } else {
        auto it = wgmma_pins_.find(&inst);  // none: no path with wgmma in flight reaches it
        if (it != wgmma_pins_.end()) pin_wgmma_registers(it->second);
      }
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
    if (!options.wgmma_desc_units) {  // the byte address, masked and shifted (CudaOptions)
      std::string addr = fmt::format("tilus::smem_addr(tilus_smem) + {}u + uint32_t({}) * {}u", view.base_bytes,
                                     expr(simplify(shared_start_unswizzled(view))), elem_bytes(ab));
      if (o == 0 && !group.empty()) addr += fmt::format(" + {} * {}u", group, m_rows * od[o]->row_bytes);
      linef("const uint64_t {} = tilus::wgmma_desc({}, {}u, {}u, {}u);", desc[o], addr, od[o]->lbo, od[o]->sbo,
            od[o]->swizzle_code);
      continue;
    }
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
