#include "tilus/passes/insert_barriers.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/simplify.h"
#include "shared_access.h"
#include "thread_dependence.h"

namespace tilus {

namespace {

using Access = SharedAccess;
using Pending = std::vector<Access>;

// A conflict found where no barrier may be inserted.
struct Blocked {
  Access earlier;
  const InstNode* later;
};

// Accesses a barrier now would separate from what follows (a write's mark that it is unfenced
// is not an access: a barrier leaves it).
bool settled(const Access& a) { return !a.async || a.awaited; }

// Drops what a barrier separates; in-flight async writes and unfenced marks stay.
void barrier_clears(Pending& pending) {
  pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Access& a) { return settled(a) && !a.unfenced; }),
                pending.end());
}

// Adds the entries of `b` that `a` lacks: what is pending after one path or the other. An entry
// is kept apart from another of its instruction unless every field that decides what it
// conflicts with is the same (a barrier on one path does not cover the other's accesses; the
// commits since a landed write no longer matter).
void merge_into(Pending& a, const Pending& b) {
  for (auto& x : b)
    if (std::none_of(a.begin(), a.end(), [&](const Access& p) {
          return same_box(p, x) && p.write == x.write && p.mapping == x.mapping && p.async == x.async &&
                 p.awaited == x.awaited && (p.awaited || p.commits == x.commits) && p.unfenced == x.unfenced &&
                 p.barrier == x.barrier;
        }))
      a.push_back(x);
}

bool conflict(const Access& a, const Access& b) {
  // A copy still in flight is the async-wait pass's concern: a barrier cannot order it.
  if (a.unfenced || !settled(a)) return false;
  if (!a.write && !b.write) return false;
  if (!may_overlap(a, b)) return false;
  return !(a.root == b.root && !a.mapping.empty() && a.mapping == b.mapping);
}

Stmt sync_stmt(const SourceLoc& loc) {
  auto s = std::make_shared<SyncInst>();
  s->loc = loc;
  return make_inst_stmt(s);
}

class BarrierInserter {
 public:
  explicit BarrierInserter(const Kernel& k) : kernel_(k), map_(k) {
    struct Find : StmtVisitor {
      bool found = false;
      void visit_inst(const InstNode& i) override {
        found = found || i.lowering.op == MachineOp::TmaStore || i.lowering.op == MachineOp::Wgmma;
      }
    } f;
    f.visit(k.body);
    async_proxy_reads_ = f.found;
  }

  Kernel run(int* inserted) {
    Pending pending;
    Kernel out = kernel_;
    out.body = process(kernel_.body, pending, true);
    if (inserted) *inserted = inserted_;
    return out;
  }

 private:
  const Kernel& kernel_;
  SharedAccessMap map_;
  ThreadDependence threads_;  // the scalars that differ between threads
  int inserted_ = 0;
  bool async_proxy_reads_ = false;  // whether anything reads shared memory through the async proxy

  static void commit(Pending& pending, Completion kind) {
    for (auto& p : pending) p.commits += p.async && p.completion == kind;
  }
  static void await(Pending& pending, int64_t n, Completion kind) {
    for (auto& p : pending) p.awaited = p.awaited || (p.completion == kind && p.commits > n);
  }

  std::vector<int64_t> groups_;  // threads of the enclosing thread groups (innermost last)

  std::vector<Access> accesses(const InstNode& inst) const { return map_.accesses(inst); }

  // Whether a barrier waits for every thread of the current group: sync(), a named barrier
  // (its arrive_count covers the group: the verifier's rule), cluster and grid barriers; a
  // __syncwarp only for a group inside one warp and with the group's own lanes.
  bool separates_group(const SyncInst& i) const {
    if (i.scope != SyncScope::Warp) return true;
    int64_t threads = groups_.empty() ? kernel_.num_threads() : groups_.back();
    return !i.mask.defined() && threads <= 32;
  }

  // A TMA store and a wgmma read shared memory through the async proxy: generic writes to it
  // need a proxy fence in the writing threads before the barrier that orders them. The
  // unfenced write (pending's mark of it) one of `later`'s async-proxy reads meets, if any.
  // The marks are part of the path's state, so a fence on one arm of a branch or in one
  // iteration covers nothing on the other arm or in the next.
  static const Access* unfenced_write(const Pending& pending, const std::vector<Access>& later) {
    for (auto& a : later) {
      if (!reads_through_async_proxy(a.inst->lowering.op)) continue;
      for (auto& w : pending)
        if (w.unfenced && may_overlap(w, a)) return &w;
    }
    return nullptr;
  }

  // A tcgen05.mma / cp that meets one of this path's unfenced generic writes.
  static bool unfenced_tcgen05_read(const Pending& pending, const std::vector<Access>& later) {
    for (auto& a : later) {
      MachineOp op = a.inst->lowering.op;
      if (op != MachineOp::Tcgen05Mma && op != MachineOp::Tcgen05Cp) continue;
      for (auto& w : pending)
        if (w.unfenced && may_overlap(w, a)) return true;
    }
    return false;
  }

  // A fence covers the writes that have landed: a copy this path still has in flight (its mark
  // not awaited) stays unfenced, for the fence after its wait.
  static void fence(const SourceLoc& loc, std::vector<Stmt>& before, Pending& pending) {
    auto f = std::make_shared<FenceProxyAsyncInst>();
    f->loc = loc;
    before.push_back(make_inst_stmt(f));
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Access& w) { return w.unfenced && settled(w); }),
                  pending.end());
  }

  // The first pending access that conflicts with one of `later`, and that one's instruction.
  static std::optional<Blocked> first_conflict(const Pending& pending, const std::vector<Access>& later) {
    for (auto& a : later)
      for (auto& p : pending)
        if (conflict(p, a)) return Blocked{p, a.inst};
    return std::nullopt;
  }

  const Stmt& bind(const Stmt& s, const Var& var, const Expr& value) {
    threads_.bind(var, value);
    return s;
  }

  // Every shared access in a statement (for the checks around thread groups).
  std::vector<Access> all_accesses(const Stmt& s) {
    struct Collect : StmtVisitor {
      BarrierInserter* self;
      std::vector<Access> out;
      void visit_inst(const InstNode& i) override {
        for (auto& a : self->accesses(i)) out.push_back(a);
      }
    } c;
    c.self = this;
    c.visit(s);
    return c.out;
  }

  // A thread group's body, with the group's threads the innermost on groups_ while it is processed.
  Stmt process_group(const ThreadGroupStmtNode& n, Pending& pending, bool may_insert) {
    struct Scope {
      std::vector<int64_t>& groups;
      ~Scope() { groups.pop_back(); }
    } scope{groups_};
    groups_.push_back(n.num_threads);
    return process(n.body, pending, may_insert);
  }

  Stmt process(const Stmt& s, Pending& pending, bool may_insert) {
    if (!s) return s;
    switch (s->kind) {
      case StmtKind::Seq: {
        std::vector<Stmt> out;
        const auto& stmts = static_cast<const SeqStmtNode&>(*s).stmts;
        for (size_t i = 0; i < stmts.size();) {
          // Sibling thread groups that wait on each other run at once: barriers only around them.
          size_t j = i;
          while (j < stmts.size() && stmts[j] && stmts[j]->kind == StmtKind::ThreadGroup) ++j;
          std::vector<Stmt> run(stmts.begin() + long(i), stmts.begin() + long(j));
          if (waits_on_siblings(run)) {
            process_run(run, pending, may_insert, out);
            i = j;
            continue;
          }
          Stmt r = process_child(stmts[i], pending, may_insert, out);
          out.push_back(r);
          ++i;
        }
        return make_seq(out, s->loc);
      }
      default: {
        std::vector<Stmt> out;
        Stmt r = process_child(s, pending, may_insert, out);
        out.push_back(r);
        return out.size() == 1 ? r : make_seq(out, s->loc);
      }
    }
  }

  // Processes one statement; barriers that must precede it are appended to `before`.
  Stmt process_child(const Stmt& s, Pending& pending, bool may_insert, std::vector<Stmt>& before) {
    auto barrier = [&](const SourceLoc& loc) {
      before.push_back(sync_stmt(loc));
      ++inserted_;
      barrier_clears(pending);
    };
    switch (s->kind) {
      case StmtKind::Inst: {
        const InstNode& inst = *static_cast<const InstStmtNode&>(*s).inst;
        // What the instruction does to the work in flight is its definition's traits.
        const InstTraits& traits = inst.def().traits;
        switch (traits.role) {
          case SyncRole::Barrier:
            if (separates_group(static_cast<const SyncInst&>(inst))) barrier_clears(pending);
            return s;
          case SyncRole::Commit: commit(pending, traits.completion); return s;
          case SyncRole::Wait: await(pending, int_attr(inst, "n").value_or(-1), traits.completion); return s;
          case SyncRole::ProxyFence:
            pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Access& a) { return a.unfenced; }),
                          pending.end());
            return s;
          case SyncRole::HandOver:
            // The threads that wait on the barrier see the work handed to it (cp_async_barrier_noinc).
            for (auto& p : pending)
              if (p.completion == traits.completion && !p.barrier) p.barrier = map_.barrier_root(inst);
            break;
          case SyncRole::BarrierWait: {
            // The threads that wait on a barrier see the TMA loads that complete on it, and the
            // work handed to it: those need no barrier for them (groups that meet through
            // mbarriers).
            const TensorNode* root = map_.barrier_root(inst);
            auto seen = [&](const Access& p) {
              return p.barrier == root && (p.async || p.completion == Completion::CpAsyncGroup);
            };
            // A mark stays (the writes landed, but are not fenced for the async proxy).
            for (auto& p : pending)
              if (p.unfenced && seen(p)) p.awaited = true;
            pending.erase(std::remove_if(pending.begin(), pending.end(),
                                         [&](const Access& p) { return !p.unfenced && seen(p); }),
                          pending.end());
            break;
          }
          default: break;
        }
        auto mine = accesses(inst);
        if (const Access* w = unfenced_write(pending, mine)) {
          if (!may_insert) throw Blocked{*w, &inst};
          fence(inst.loc, before, pending);
          barrier(inst.loc);
        }
        if (auto hazard = first_conflict(pending, mine)) {
          if (!may_insert) throw *hazard;
          barrier(inst.loc);
        }
        if (commits_itself(inst)) commit(pending, Completion::CpAsyncGroup);
        for (auto& a : mine) {
          pending.push_back(a);
          if (a.write && inst.lowering.op != MachineOp::TmaLoad && async_proxy_reads_) {
            pending.push_back(a);
            pending.back().unfenced = true;
          }
        }
        return s;
      }
      // A scalar bound to something thread-dependent makes what uses it thread-dependent.
      case StmtKind::Let: return bind(s, static_cast<const LetStmtNode&>(*s).var, static_cast<const LetStmtNode&>(*s).value);
      case StmtKind::Declare:
        return bind(s, static_cast<const DeclareStmtNode&>(*s).var, static_cast<const DeclareStmtNode&>(*s).init);
      case StmtKind::Assign:
        return bind(s, static_cast<const AssignStmtNode&>(*s).var, static_cast<const AssignStmtNode&>(*s).value);
      case StmtKind::For: {
        auto& n = static_cast<const ForStmtNode&>(*s);
        if (at_most_one_trip(n)) {  // no iteration meets another: the body once
          Pending before_loop_pending = pending;
          Stmt body = process(n.body, pending, may_insert && !threads_.per_thread_loop(n));
          for (auto& a : before_loop_pending)
            if (std::none_of(pending.begin(), pending.end(), [&](const Access& p) { return p.inst == a.inst; }))
              pending.push_back(a);
          return rebuild_for(n, body);
        }
        bool per_thread = threads_.per_thread_loop(n);
        before_loop(n.body, pending, may_insert, barrier, before, n.loc);
        return loop(n.body, pending, may_insert && !per_thread,
                    [&](const Access& a) { return previous_iteration(a, &n.var, n.step); },
                    [&](const Stmt& body) {
                      return rebuild_for(n, body);
                    });
      }
      case StmtKind::While: {
        auto& n = static_cast<const WhileStmtNode&>(*s);
        auto unknown = [](const Access& a) { return previous_iteration(a, nullptr, Expr()); };
        before_loop(n.body, pending, may_insert, barrier, before, n.loc);
        return loop(n.body, pending, may_insert && !threads_.depends(n.cond), unknown,
                    [&](const Stmt& body) { return Stmt(std::make_shared<WhileStmtNode>(n.cond, body, n.loc)); });
      }
      case StmtKind::If: {
        auto& n = static_cast<const IfStmtNode&>(*s);
        bool uniform = !threads_.depends(n.cond);
        for (int attempt = 0;; ++attempt) {
          Pending then_p = pending, else_p = pending;
          try {
            Stmt t = process(n.then_body, then_p, may_insert && uniform);
            Stmt e = n.else_body ? process(n.else_body, else_p, may_insert && uniform) : n.else_body;
            pending = then_p;
            merge_into(pending, else_p);
            return std::make_shared<IfStmtNode>(n.cond, t, e, n.loc);
          } catch (const Blocked& b) {
            bool from_outside = std::any_of(pending.begin(), pending.end(),
                                            [&](const Access& p) { return p.inst == b.earlier.inst; });
            if (!from_outside || attempt > 0 || !may_insert) {
              if (!may_insert) throw;
              throw CompileError(
                  fmt::format("{} at {} needs a barrier after {} at {} (they share shared memory with different "
                              "thread mappings), but both are inside a branch whose condition depends on the thread "
                              "index, where a barrier would hang; synchronize outside the branch",
                              b.later->display_name(), b.later->loc.str(), b.earlier.inst->display_name(),
                              b.earlier.inst->loc.str()),
                  b.later->loc);
            }
            barrier(n.loc);  // the hazard is with accesses before the branch
          }
        }
      }
      case StmtKind::ThreadGroup: {
        auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
        auto inside = all_accesses(n.body);
        if (auto hazard = first_conflict(pending, inside)) {
          if (!may_insert) throw *hazard;
          // The writers fence before the barrier that hands their writes to the group (for
          // example the thread that then issues a TMA store of them).
          if (unfenced_write(pending, inside)) fence(n.loc, before, pending);
          barrier(n.loc);
        } else if (may_insert && unfenced_tcgen05_read(pending, inside)) {
          // A tcgen05.mma / cp in the group reads what the block wrote through the generic proxy
          // (cp.async, stores) and a barrier already ordered: the writers' fence must come before
          // a barrier too, which a fence inside the group would not have.
          fence(n.loc, before, pending);
          barrier(n.loc);
        }
        // What is still in flight may be waited for inside the group: its threads then see it
        // land, and the rest of the block needs a barrier after the group to see it too.
        // The unfenced marks go in too (a fence inside the group covers the writes before it).
        Pending group;
        for (auto& p : pending)
          if (!settled(p) || p.unfenced) group.push_back(p);
        Stmt body = process_group(n, group, may_insert);
        for (auto& p : pending)
          if (!settled(p) && !p.unfenced)
            p.awaited = std::any_of(group.begin(), group.end(), [&](const Access& g) {
              return !g.unfenced && g.inst == p.inst && g.async && g.awaited;
            });
        // The marks the group leaves: those from before it it did not fence, and its own writes'.
        pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Access& p) { return p.unfenced; }),
                      pending.end());
        for (auto& g : group)
          if (g.unfenced) pending.push_back(g);
        for (auto& a : inside) {
          a.mapping.clear();  // other threads than the rest of the block
          // An asynchronous access the group waited for has landed for its threads only: the
          // rest of the block needs a barrier to see it.
          // and the groups it was committed in there still count for the waits that follow.
          if (a.async) {
            a.awaited = std::none_of(group.begin(), group.end(), [&](const Access& g) {
              return !g.unfenced && g.inst == a.inst && g.async && !g.awaited;
            });
            for (auto& g : group)
              if (!g.unfenced && g.inst == a.inst && g.async) a.commits = std::max(a.commits, g.commits);
          }
          pending.push_back(a);
        }
        return std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads, body, n.loc);
      }
      default: return s;
    }
  }

  // A run of sibling thread groups that wait on each other (waits_on_siblings): on the GPU they run
  // at once, so a barrier between two of them would never be passed. A hazard with what precedes
  // them gets its barrier before them all; each group is analysed from what was in flight before
  // them, and they meet each other through their mbarriers, not through barriers; after them,
  // what any of them accessed is pending for the block.
  void process_run(const std::vector<Stmt>& run, Pending& pending, bool may_insert, std::vector<Stmt>& out) {
    std::vector<Access> inside;
    for (auto& g : run)
      for (auto& a : all_accesses(static_cast<const ThreadGroupStmtNode&>(*g).body)) inside.push_back(a);
    const SourceLoc& loc = run.front()->loc;
    bool fence_too = unfenced_write(pending, inside) || unfenced_tcgen05_read(pending, inside);
    if (auto hazard = first_conflict(pending, inside)) {
      if (!may_insert) throw *hazard;
      if (fence_too) fence(loc, out, pending);
      out.push_back(sync_stmt(loc));
      ++inserted_;
      barrier_clears(pending);
    } else if (may_insert && unfenced_tcgen05_read(pending, inside)) {
      fence(loc, out, pending);
      out.push_back(sync_stmt(loc));
      ++inserted_;
      barrier_clears(pending);
    }
    Pending base;
    for (auto& p : pending)
      if (!settled(p) || p.unfenced) base.push_back(p);  // the unfenced marks go in too
    std::vector<Pending> after;
    for (auto& g : run) {
      auto& n = static_cast<const ThreadGroupStmtNode&>(*g);
      Pending group = base;
      Stmt body = process_group(n, group, may_insert);
      after.push_back(std::move(group));
      out.push_back(std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads, body, n.loc));
    }
    auto any = [&](const Access& a, bool awaited) {
      for (auto& group : after)
        for (auto& g : group)
          if (!g.unfenced && g.inst == a.inst && g.async && g.awaited == awaited) return true;
      return false;
    };
    for (auto& p : pending)
      if (!settled(p) && !p.unfenced) p.awaited = any(p, true);
    // The unfenced marks the groups leave (as for one group): each group's own, those from before
    // it included where the group did not fence them.
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Access& p) { return p.unfenced; }),
                  pending.end());
    for (auto& group : after)
      for (auto& g : group)
        if (g.unfenced) pending.push_back(g);
    for (auto& a : inside) {
      a.mapping.clear();
      if (a.async) {
        a.awaited = !any(a, false);
        for (auto& group : after)
          for (auto& g : group)
            if (!g.unfenced && g.inst == a.inst && g.async) a.commits = std::max(a.commits, g.commits);
      }
      pending.push_back(a);
    }
  }

  // A hazard between what precedes a loop and its body gets its barrier before the loop, once,
  // rather than in the body, where it would run every iteration.
  // Only the body's accesses before its first barrier of the group can meet what precedes it.
  template <class Barrier>
  void before_loop(const Stmt& body, Pending& pending, bool may_insert, Barrier& barrier, std::vector<Stmt>& before,
                   const SourceLoc& loc) {
    if (!may_insert) return;
    std::vector<Stmt> top;
    if (body && body->kind == StmtKind::Seq) top = static_cast<const SeqStmtNode&>(*body).stmts;
    else top = {body};
    std::vector<Access> early;
    for (const Stmt& st : top) {
      if (!st) continue;
      if (st->kind == StmtKind::Inst) {
        auto* sync = inst_as<SyncInst>(static_cast<const InstStmtNode&>(*st).inst);
        if (sync && separates_group(*sync)) break;
      }
      for (auto& a : all_accesses(st)) early.push_back(a);
    }
    if (!first_conflict(pending, early)) return;
    if (unfenced_write(pending, early)) fence(loc, before, pending);
    barrier(loc);
  }

  // A loop body runs after itself: analysed to a fixpoint (loop_fixpoint) with what each
  // iteration leaves meeting the next. Barriers added in any round stay.
  template <class Shift, class Rebuild>
  Stmt loop(const Stmt& body0, Pending& pending, bool may_insert, Shift shift, Rebuild rebuild) {
    Stmt body = body0;
    auto run = [&](Pending state) {
      try {
        body = process(body, state, may_insert);
      } catch (const Blocked& b) {
        if (!may_insert && !pending.empty()) throw;
        throw CompileError(fmt::format("{} at {} needs a barrier after {} at {} inside a loop whose trip count "
                                       "depends on the thread index, where a barrier would hang",
                                       b.later->display_name(), b.later->loc.str(), b.earlier.inst->display_name(),
                                       b.earlier.inst->loc.str()),
                           b.later->loc);
      }
      return state;
    };
    auto concat = [](Pending a, const Pending& b) {
      merge_into(a, b);
      return a;
    };
    // After the loop: what was pending before it (it may not run) and what it leaves.
    pending = concat(pending, loop_fixpoint(pending, run, shift, concat, [&] { return inserted_; }));
    return rebuild(body);
  }
};

}  // namespace

Program insert_barriers(const Program& program, int* inserted) {
  int total = 0;
  Program out = map_kernels(program, [&](const Kernel& k) {
    int n = 0;
    Kernel r = BarrierInserter(k).run(&n);
    total += n;
    return r;
  });
  if (inserted) *inserted = total;
  return out;
}

}  // namespace tilus
