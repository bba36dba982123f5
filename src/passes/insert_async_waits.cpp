#include "tilus/passes/insert_async_waits.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "shared_access.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

using InFlight = std::vector<SharedAccess>;  // copies not yet covered by a wait

Stmt inst_stmt(std::shared_ptr<InstNode> i, const SourceLoc& loc) {
  i->loc = loc;
  return make_inst_stmt(i);
}

class WaitInserter {
 public:
  WaitInserter(const Kernel& k, bool strict) : kernel_(k), map_(k), strict_(strict) {}

  Kernel run(int* inserted) {
    check_barriers_arrived_at();
    group_waits_.push_back(waited_barriers(kernel_.body));
    InFlight state;
    Kernel out = kernel_;
    out.body = process(kernel_.body, state);
    if (inserted) *inserted = inserted_;
    return out;
  }

 private:
  // A wait on barriers that nothing in the kernel arrives at (no arrive, arrive_and_expect_tx
  // or tma_copy on any barrier of that allocation, here or from a cluster peer) never completes.
  void check_barriers_arrived_at() const {
    struct Collect : StmtVisitor {
      const SharedAccessMap* map;
      std::unordered_set<const TensorNode*> arrived;
      std::vector<const InstNode*> waits;
      void visit_inst(const InstNode& i) override {
        SyncRole role = i.def().traits.role;
        if (role == SyncRole::BarrierWait) waits.push_back(&i);
        else if (role == SyncRole::Arrive || role == SyncRole::HandOver) arrived.insert(map->barrier_root(i));
        else if (arrives_itself(i)) {
          arrived.insert(map->load_barrier_root(i));
        }
      }
    } c;
    c.map = &map_;
    c.visit(kernel_.body);
    for (const InstNode* w : c.waits)
      if (!c.arrived.count(map_.barrier_root(*w)))
        throw CompileError(fmt::format("{} at {} waits on an mbarrier of {} that nothing in the kernel arrives at "
                                       "(no mbarrier.arrive, arrive_and_expect_tx or tma_copy on it): the wait would "
                                       "never complete",
                                       w->display_name(), w->loc.str(), map_.barrier_root(*w)->name),
                           w->loc);
  }

  // tma_copy and a split-phase c2d_im2col arrive on their barrier themselves (with their bytes).
  static bool arrives_itself(const InstNode& i) {
    auto* c = dynamic_cast<const CopyInst*>(&i);
    return barrier_operand(i).defined() && (!c || c->api == CopyApi::TmaCopy);
  }

  // The barrier allocations that mbarrier waits in a statement wait on.
  std::unordered_set<const TensorNode*> waited_barriers(const Stmt& s) const {
    struct Collect : StmtVisitor {
      const SharedAccessMap* map;
      std::unordered_set<const TensorNode*> out;
      void visit_inst(const InstNode& i) override {
        if (i.def().traits.role == SyncRole::BarrierWait) out.insert(map->barrier_root(i));
      }
    } c;
    c.map = &map_;
    c.visit(s);
    return c.out;
  }

  const Kernel& kernel_;
  SharedAccessMap map_;
  // Per enclosing thread group (the kernel body first): the barriers waited on inside it.
  std::vector<std::unordered_set<const TensorNode*>> group_waits_;
  bool strict_;
  int inserted_ = 0;

  Stmt process(const Stmt& s, InFlight& state) {
    if (!s) return s;
    std::vector<Stmt> out;
    if (s->kind == StmtKind::Seq) {
      for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) out.push_back(child(c, state, out));
      return make_seq(out, s->loc);
    }
    Stmt r = child(s, state, out);
    out.push_back(r);
    return out.size() == 1 ? r : make_seq(out, s->loc);
  }

  // cp.async groups and TMA-store groups are counted apart (Completion of each access).
  static void commit(InFlight& state, Completion kind = Completion::CpAsyncGroup) {
    for (auto& c : state) c.commits += c.completion == kind;
  }
  static void wait(InFlight& state, int64_t n, Completion kind = Completion::CpAsyncGroup) {
    state.erase(std::remove_if(state.begin(), state.end(),
                               [&](const SharedAccess& c) { return c.completion == kind && c.commits > n; }),
                state.end());
  }
  // Two accesses of which one is an in-flight asynchronous access: a hazard unless both read.
  static bool hazard(const SharedAccess& in_flight, const SharedAccess& a) {
    // wgmma.mma chains on an accumulator still being written by earlier ones (the hardware
    // orders them); every other access waits.
    if (in_flight.inst->lowering.op == MachineOp::Wgmma && a.inst->lowering.op == MachineOp::Wgmma) return false;
    return (in_flight.write || a.write) && may_overlap(in_flight, a);
  }
  // What the kernel must add before `inst` for the in-flight access `c` it depends on.
  static std::string missing_wait(const SharedAccess& c) {
    switch (c.completion) {
      case Completion::MbarrierTx:
        return fmt::format("{} completes on its mbarrier: wait on it (mbarrier.wait / mbarrier_wait_parity) before "
                           "it",
                           c.inst->display_name());
      case Completion::TmaStoreGroup:
        return "a TMA store reads its shared source after it is issued: add tma.commit_group() and "
               "tma.wait_group(0, read=True) (tma_store_arrive / tma_store_wait) before it";
      case Completion::WgmmaGroup:
        return "wgmma.mma reads its operands (shared, or a in registers) and writes its accumulator after it "
               "is issued: add wgmma.commit_group() and a wgmma.wait_group(n) that covers it before it";
      case Completion::Tcgen05:
        return fmt::format("{} reads its shared operands after it is issued: add tcgen05.commit(mbarrier=...) and a "
                           "wait on that mbarrier before it",
                           c.inst->display_name());
      case Completion::Tcgen05Load:
        return "tcgen05.load writes its registers after it is issued: add tcgen05.wait_load() before it";
      case Completion::Tcgen05Store:
        return "tcgen05.store reads its registers after it is issued: add tcgen05.wait_store() before it";
      default:
        return "async_copy leaves the wait to the kernel: add copy_async_wait_group(n) or copy_async_wait_all() "
               "before it";
    }
  }

  // Processes one statement; commits and waits that must precede it go to `before`.
  Stmt child(const Stmt& s, InFlight& state, std::vector<Stmt>& before) {
    switch (s->kind) {
      case StmtKind::Inst: {
        const InstNode& inst = *static_cast<const InstStmtNode&>(*s).inst;
        // What the instruction does to the work in flight is its definition's traits.
        const InstTraits& traits = inst.def().traits;
        switch (traits.role) {
          case SyncRole::Commit: commit(state, traits.completion); return s;
          case SyncRole::Wait:  // no n: every copy, uncommitted ones too
            wait(state, int_attr(inst, "n").value_or(-1), traits.completion);
            return s;
          case SyncRole::HandOver:
            // This thread's work of that completion now also completes on the barrier (a wait on
            // it covers the copies a cp_async_barrier_noinc handed to it).
            for (auto& c : state)
              if (c.completion == traits.completion && !c.barrier) c.barrier = map_.barrier_root(inst);
            return s;
          case SyncRole::BarrierWait: {
            // A wait on a barrier completes the TMA loads of that barrier's tensor, and the work
            // handed to it (any index: which phase it is is the kernel's business; a wait on the
            // wrong one hangs). A thread group that never waits on the barriers of its own TMA
            // loads hands them to another group (a producer): it learns they landed, and were
            // read, through the barriers it does wait on (the consumers' arrivals), so any wait
            // retires them.
            const TensorNode* root = map_.barrier_root(inst);
            const auto& waited = group_waits_.back();
            state.erase(std::remove_if(state.begin(), state.end(),
                                       [&](const SharedAccess& c) {
                                         return c.barrier && (c.barrier == root || !waited.count(c.barrier));
                                       }),
                        state.end());
            return s;
          }
          case SyncRole::Arrive:
          case SyncRole::Expect: return s;  // they synchronize; not data accesses
          default: break;
        }
        auto mine = accesses(inst);
        for (auto& a : mine)
          for (auto& c : state)
            if (c.explicit_wait && hazard(c, a)) {
              // A wgmma's register operands (its accumulator, a in registers) are in flight too.
              std::string what = c.root && c.root->scope == MemoryScope::Register
                                     ? fmt::format("register tensor {}", c.root->name)
                                     : std::string("shared memory");
              throw CompileError(fmt::format("{} at {} touches {} that {} at {} may still be {}; {}",
                                             inst.display_name(), inst.loc.str(), what, c.inst->display_name(),
                                             c.inst->loc.str(), c.write ? "writing" : "reading", missing_wait(c)),
                                 inst.loc);
            }
        const SharedAccess* oldest_needed = nullptr;  // the conflicting copy with the fewest commits
        for (auto& a : mine)
          for (auto& c : state)
            if (hazard(c, a) && (!oldest_needed || c.commits < oldest_needed->commits)) oldest_needed = &c;
        if (oldest_needed && (oldest_needed->completion == Completion::Tcgen05Load ||
                              oldest_needed->completion == Completion::Tcgen05Store)) {
          // The thread's tcgen05.ld / st registers: its wait (every one of them at once).
          Completion kind = oldest_needed->completion;
          bool ld = kind == Completion::Tcgen05Load;
          before.push_back(inst_stmt(make_defined(ld ? "tcgen05.wait_load" : "tcgen05.wait_store", {}, {}, {}, inst.loc),
                                     inst.loc));
          ++inserted_;
          wait(state, -1, kind);
          oldest_needed = nullptr;
          for (auto& a : mine)
            for (auto& c : state)
              if (hazard(c, a) && (!oldest_needed || c.commits < oldest_needed->commits)) oldest_needed = &c;
        }
        if (oldest_needed) {
          if (strict_)
            throw CompileError(fmt::format("{} at {} touches shared memory that {} at {} may still be writing; add "
                                           "copy_async_commit_group() / copy_async_wait_group(n) before it (or "
                                           "compile without strict waits)",
                                           inst.display_name(), inst.loc.str(), oldest_needed->inst->display_name(),
                                           oldest_needed->inst->loc.str()),
                               inst.loc);
          if (oldest_needed->commits == 0) {
            before.push_back(inst_stmt(std::make_shared<CopyAsyncCommitGroupInst>(), inst.loc));
            ++inserted_;
            commit(state);
          }
          auto w = std::make_shared<CopyAsyncWaitGroupInst>();
          w->n = oldest_needed->commits - 1;
          int64_t n = w->n;
          before.push_back(inst_stmt(w, inst.loc));
          ++inserted_;
          wait(state, n);
        }
        if (commits_itself(inst)) commit(state);
        for (auto& a : mine)
          if (a.async) state.push_back(a);
        return s;
      }
      case StmtKind::For: {
        auto& n = static_cast<const ForStmtNode&>(*s);
        Expr runs = simplify(n.begin < n.end);
        if (at_most_one_trip(n)) {  // no iteration meets another: the body once
          InFlight after = state;
          Stmt body = process(n.body, after);
          state = runs.as<BoolImmNode>() && runs.as<BoolImmNode>()->value ? after : merge(state, after);
          return rebuild_for(n, body);
        }
        Stmt body = loop(
            n.body, state, [&](const SharedAccess& a) { return previous_iteration(a, &n.var, n.step); },
            runs.as<BoolImmNode>() && runs.as<BoolImmNode>()->value, &n.var, n.begin, n.step, constant_trips(n));
        return rebuild_for(n, body);
      }
      case StmtKind::While: {
        auto& n = static_cast<const WhileStmtNode&>(*s);
        forget_assigned(n.body);
        Stmt body =
            loop(n.body, state, [](const SharedAccess& a) { return previous_iteration(a, nullptr, Expr()); }, false);
        return std::make_shared<WhileStmtNode>(n.cond, body, n.loc);
      }
      case StmtKind::If: {
        // Waits are per thread, so they may go inside any branch.
        auto& n = static_cast<const IfStmtNode&>(*s);
        InFlight then_s = state, else_s = state;
        auto vals = vals_;
        Stmt t = process(n.then_body, then_s);
        std::swap(vals, vals_);
        Stmt e = n.else_body ? process(n.else_body, else_s) : n.else_body;
        // A variable keeps a known value after the if where both branches leave it the same.
        for (auto it = vals_.begin(); it != vals_.end();) {
          auto other = vals.find(it->first);
          if (other == vals.end() || !structural_equal(other->second, it->second)) it = vals_.erase(it);
          else ++it;
        }
        state = merge(then_s, else_s);
        return std::make_shared<IfStmtNode>(n.cond, t, e, n.loc);
      }
      case StmtKind::Let: {
        // Offsets may name a let (`nxt = step + 3`): the peeled iterations see through it.
        auto& n = static_cast<const LetStmtNode&>(*s);
        lets_[n.var.get()] = n.value;
        return s;
      }
      // A mutable variable with a value known here (a ring's stage in the first iterations of its
      // loop: `stage = (stage + 1) % stages`): offsets that name it see through it.
      case StmtKind::Declare: {
        auto& n = static_cast<const DeclareStmtNode&>(*s);
        track(n.var, n.init);
        return s;
      }
      case StmtKind::Assign: {
        auto& n = static_cast<const AssignStmtNode&>(*s);
        track(n.var, n.value);
        return s;
      }
      case StmtKind::ThreadGroup: {
        auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
        group_waits_.push_back(waited_barriers(n.body));
        // The group's threads have their own copies of the variables: they start from the values
        // before the group, and what they assign is theirs (unknown to the rest after it).
        auto vals = vals_;
        Stmt body = process(n.body, state);
        vals_ = std::move(vals);
        forget_assigned(n.body);
        group_waits_.pop_back();
        return std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads, body, n.loc);
      }
      default: return s;
    }
  }

  // Copies in flight after either branch; a copy in both keeps the fewer commits (it is the
  // one a later wait covers last).
  static InFlight merge(const InFlight& a, const InFlight& b) {
    InFlight out = a;
    for (auto& c : b) {
      auto it = std::find_if(out.begin(), out.end(), [&](const SharedAccess& o) { return same_box(o, c); });
      if (it == out.end()) out.push_back(c);
      else it->commits = std::min(it->commits, c.commits);
    }
    return out;
  }

  // A loop is analysed in two phases. First its first iterations one by one, with the loop
  // variable fixed (so `(i + 2) % 3` is a known buffer) starting from the copies in flight
  // before the loop: this is where a prologue's copies meet the body. Then the general
  // iteration, with the variable free, starting from the prologue copies still in flight
  // and repeated with what each round leaves (loop_fixpoint). Waits added in any round
  // stay, so the body is right for every iteration.
  // A loop of a known trip count no larger than the peeled iterations is analysed whole that way
  // (an iteration that never runs, such as a ring prologue's stage `stages - 1` in
  // range(stages - 1), must not meet the code after the loop).
  template <class Shift>
  Stmt loop(const Stmt& body0, InFlight& state, Shift shift, bool surely_runs, const Var* var = nullptr,
            Expr begin = {}, Expr step = {}, std::optional<int64_t> trips = std::nullopt) {
    constexpr int kPeeled = 4;
    // Leaving the loop: after any iteration, or without one unless it surely runs.
    InFlight entry = state, exit = surely_runs ? InFlight{} : state;
    Stmt body = body0;
    if (var && trips && *trips <= kPeeled) {
      for (int64_t r = 0; r < *trips; ++r) {
        fixed_.push_back({*var, simplify(begin + step * Expr(r))});
        body = process(body, entry);
        fixed_.pop_back();
      }
      forget_assigned(body0);
      state = entry;
      return body;
    }
    if (var) {
      for (int r = 0; r < kPeeled; ++r) {
        fixed_.push_back({*var, simplify(begin + step * Expr(int64_t(r)))});
        InFlight s = entry;
        body = process(body, s);
        fixed_.pop_back();
        exit = merge(exit, s);
        entry = s;
      }
      // Only copies from before the loop carry into the general phase as they are; the
      // body's own copies come back through the shifted rounds below.
      std::vector<const InstNode*> mine;
      struct Collect : StmtVisitor {
        std::vector<const InstNode*>* out;
        void visit_inst(const InstNode& i) override { out->push_back(&i); }
      } c;
      c.out = &mine;
      c.visit(body);
      entry.erase(std::remove_if(entry.begin(), entry.end(),
                                 [&](const SharedAccess& a) {
                                   return std::find(mine.begin(), mine.end(), a.inst) != mine.end();
                                 }),
                  entry.end());
    }
    forget_assigned(body0);  // the general iteration: what the body assigns is unknown
    auto run = [&](InFlight s) {
      body = process(body, s);
      return s;
    };
    exit = merge(exit, loop_fixpoint(entry, run, shift, merge, [&] { return inserted_; }));
    state = exit;
    return body;
  }

  // The trip count of a loop with constant bounds (nullopt otherwise).
  static std::optional<int64_t> constant_trips(const ForStmtNode& n) {
    Expr b = simplify(n.begin), e = simplify(n.end), st = simplify(n.step);
    if (!b.is_int_const() || !e.is_int_const() || !st.is_int_const() || st.int_value() <= 0) return std::nullopt;
    int64_t span = e.int_value() - b.int_value();
    return span <= 0 ? 0 : (span + st.int_value() - 1) / st.int_value();
  }

  // Loop variables fixed while the first iterations are analysed, and the lets seen so far.
  std::vector<std::pair<Var, Expr>> fixed_;
  std::unordered_map<const ExprNode*, Expr> lets_;
  // Mutable variables whose value is a known constant where the analysis is.
  std::unordered_map<const ExprNode*, Expr> vals_;

  void track(const Var& v, const Expr& value) {
    Expr x = value.defined() ? simplify(fix(value)) : Expr();
    if (x.defined() && x.is_int_const()) vals_[v.get()] = x;
    else vals_.erase(v.get());
  }
  // Forgets the values of the variables a statement assigns.
  void forget_assigned(const Stmt& s) {
    struct Collect : StmtVisitor {
      std::unordered_map<const ExprNode*, Expr>* vals;
      void visit_assign(const AssignStmtNode& n) override { vals->erase(n.var.get()); }
      void visit_declare(const DeclareStmtNode& n) override { vals->erase(n.var.get()); }
    } c;
    c.vals = &vals_;
    c.visit(s);
  }

  // `e` with the fixed loop variables' values, through the lets that use them.
  Expr fix(const Expr& e, int depth = 0) const {
    return substitute(e, [&](const Var& v) -> Expr {
      for (auto& [fv, value] : fixed_)
        if (v.same_as(fv)) return value;
      if (auto it = vals_.find(v.get()); it != vals_.end()) return it->second;
      if (auto it = lets_.find(v.get()); it != lets_.end() && depth < 8) return fix(it->second, depth + 1);
      return Expr();
    });
  }

  std::vector<SharedAccess> accesses(const InstNode& inst) const {
    auto out = map_.accesses(inst);
    // Register tensors as whole-tensor accesses, so that a read of a wgmma accumulator meets
    // the in-flight wgmma.mma that writes it.
    for (auto& o : inst.traits()) {
      if (!o.tensor.defined() || !o.tensor.is_register() || o.access == Access::Alias) continue;
      SharedAccess a;
      a.inst = &inst;
      a.root = o.tensor.get();
      a.write = o.access != Access::Read;
      if (inst.lowering.op == MachineOp::Wgmma) {
        a.async = true, a.awaited = false, a.explicit_wait = true;
        a.completion = Completion::WgmmaGroup;
      }
      // tcgen05.ld writes its registers, tcgen05.st reads its, until the thread's wait (which this
      // pass adds where the kernel left it out, as it does cp.async's).
      if (inst.lowering.op == MachineOp::Tcgen05Ld || inst.lowering.op == MachineOp::Tcgen05St) {
        a.async = true, a.awaited = false;
        a.completion = inst.lowering.completion;
      }
      out.push_back(a);
    }
    if (fixed_.empty() && lets_.empty() && vals_.empty()) return out;
    for (auto& a : out)
      for (auto& e : a.lo)
        e = simplify(fix(e));
    return out;
  }
};

}  // namespace

Program insert_async_waits(const Program& program, bool strict, int* inserted) {
  int total = 0;
  Program out = map_kernels(program, [&](const Kernel& k) {
    int n = 0;
    Kernel r = WaitInserter(k, strict).run(&n);
    total += n;
    return r;
  });
  if (inserted) *inserted = total;
  return out;
}

}  // namespace tilus
