#include "tilus/passes/insert_barriers.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

// One shared-memory access: a box of its root tensor, the bytes the root occupies, and
// the thread mapping ("" when it is not thread-private).
struct Access {
  const InstNode* inst = nullptr;
  const TensorNode* root = nullptr;
  std::vector<Expr> lo;          // per root dim
  std::vector<int64_t> extent;   // per root dim
  int64_t begin = 0, end = 0;    // bytes in the block's shared memory
  bool write = false;
  std::string mapping;
  // cp.async writes land when a wait covers them, not when issued: a barrier before that
  // separates nothing. `commits` counts the commit_group calls since the copy was issued.
  bool async = false, awaited = true;
  int commits = 0;
};

using Pending = std::vector<Access>;

// A conflict found where no barrier may be inserted.
struct Blocked {
  Access earlier;
  const InstNode* later;
};

// (x + c) % m as (x, c, m); nullopt for any other form.
std::optional<std::tuple<Expr, int64_t, int64_t>> mod_form(const Expr& e) {
  auto* mod = e.as<BinaryNode>();
  if (!mod || mod->op != BinaryOp::Mod || !mod->b.is_int_const()) return std::nullopt;
  Expr x = mod->a;
  int64_t c = 0;
  if (auto* add = x.as<BinaryNode>(); add && add->op == BinaryOp::Add && add->b.is_int_const()) {
    c = add->b.int_value();
    x = add->a;
  }
  return std::tuple(x, c, mod->b.int_value());
}

bool provably_disjoint(const Expr& a, int64_t ea, const Expr& b, int64_t eb) {
  Expr diff = simplify(a - b);
  if (diff.is_int_const()) return diff.int_value() >= eb || -diff.int_value() >= ea;
  auto ma = mod_form(simplify(a)), mb = mod_form(simplify(b));
  if (ma && mb && ea == 1 && eb == 1 && std::get<2>(*ma) == std::get<2>(*mb) &&
      structural_equal(std::get<0>(*ma), std::get<0>(*mb))) {
    int64_t m = std::get<2>(*ma);
    return ((std::get<1>(*ma) - std::get<1>(*mb)) % m + m) % m != 0;
  }
  return false;
}

// Accesses a barrier now would separate from what follows.
bool settled(const Access& a) { return !a.async || a.awaited; }

// Drops what a barrier separates; in-flight async writes stay.
void barrier_clears(Pending& pending) {
  pending.erase(std::remove_if(pending.begin(), pending.end(), settled), pending.end());
}

bool conflict(const Access& a, const Access& b) {
  // A copy still in flight is the async-wait pass's concern: a barrier cannot order it.
  if (!settled(a)) return false;
  if (!a.write && !b.write) return false;
  if (a.end <= b.begin || b.end <= a.begin) return false;
  if (a.root == b.root) {
    for (size_t d = 0; d < a.lo.size(); ++d)
      if (provably_disjoint(a.lo[d], a.extent[d], b.lo[d], b.extent[d])) return false;
    if (!a.mapping.empty() && a.mapping == b.mapping) return false;
  }
  return true;
}

Stmt sync_stmt(const SourceLoc& loc) {
  auto s = std::make_shared<SyncInst>();
  s->loc = loc;
  return make_inst_stmt(s);
}

class BarrierInserter {
 public:
  explicit BarrierInserter(const Kernel& k) : kernel_(k) {
    struct Collect : StmtVisitor {
      BarrierInserter* self;
      void visit_inst(const InstNode& i) override {
        if (auto* a = dynamic_cast<const AllocateSharedInst*>(&i)) self->roots_[a->out.get()] = a;
        if (auto* s = dynamic_cast<const SliceSharedInst*>(&i)) self->slices_[s->out.get()] = s;
      }
    } c;
    c.self = this;
    c.visit(k.body);
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
  std::unordered_map<const TensorNode*, const AllocateSharedInst*> roots_;
  std::unordered_map<const TensorNode*, const SliceSharedInst*> slices_;
  std::unordered_set<const ExprNode*> thread_vars_;  // variables that differ between threads
  int inserted_ = 0;

  // The root allocation and the box of it that a shared tensor (or slice) covers.
  std::optional<Access> region(const Tensor& t) {
    Access a;
    std::vector<Expr> lo;
    std::vector<int64_t> extent;
    for (int64_t e : t.static_shape()) lo.push_back(int_const(0, dtypes::int32)), extent.push_back(e);
    const TensorNode* node = t.get();
    while (slices_.count(node)) {
      const SliceSharedInst* s = slices_.at(node);
      std::vector<Expr> src_lo = s->offsets;
      std::vector<int64_t> src_extent(s->offsets.size(), 1);
      for (size_t k = 0; k < s->dims.size(); ++k) {
        src_lo[s->dims[k]] = src_lo[s->dims[k]] + lo[k];
        src_extent[s->dims[k]] = extent[k];
      }
      lo = src_lo, extent = src_extent;
      node = s->src.get();
    }
    auto root = roots_.find(node);
    if (root == roots_.end() || root->second->offset < 0) return std::nullopt;
    a.root = node;
    a.lo = lo;
    a.extent = extent;
    a.begin = root->second->offset;
    const Tensor& r = root->second->out;
    int64_t elements = r->shared_layout.defined() ? r->shared_layout.storage_elements() : r.num_elements();
    a.end = a.begin + r.dtype().storage_bytes(elements);
    return a;
  }

  std::vector<Access> accesses(const InstNode& inst) {
    std::vector<Access> out;
    for (auto& [t, use] : inst.operands()) {
      if (!t.defined() || !t.is_shared() || use == tilus::Access::Alias) continue;
      auto a = region(t);
      if (!a) continue;
      a->inst = &inst;
      a->write = use != tilus::Access::Read;
      // Register <-> shared moves through one view and one layout keep every element in
      // its thread; 16-bit loads may become warp-collective ldmatrix.
      Tensor reg;
      if (auto* l = dynamic_cast<const LoadSharedInst*>(&inst)) reg = l->out;
      if (auto* s = dynamic_cast<const StoreSharedInst*>(&inst)) reg = s->src;
      if (reg.defined() && reg->layout.defined() && reg.dtype().bits() != 16) {
        a->mapping = reg->layout.str();
        for (auto& e : a->lo) a->mapping += "|" + to_string(e);
      }
      if (inst.kind() == InstKind::CopyAsync) a->async = true, a->awaited = false;
      out.push_back(*a);
    }
    return out;
  }

  bool thread_dependent(const Expr& e) const {
    for (const Var& v : free_vars(e))
      if (v.same_as(builtin::thread_idx()) || thread_vars_.count(v.get())) return true;
    return false;
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

  static Access shifted(const Access& a, const Var& var, const Expr& step) {
    Access s = a;
    for (auto& e : s.lo)
      e = substitute(e, [&](const Var& v) { return v.same_as(var) ? Expr(v) - step : Expr(); });
    return s;
  }

  Stmt process(const Stmt& s, Pending& pending, bool may_insert) {
    if (!s) return s;
    switch (s->kind) {
      case StmtKind::Seq: {
        std::vector<Stmt> out;
        for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) {
          Stmt r = process_child(c, pending, may_insert, out);
          out.push_back(r);
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
        switch (inst.kind()) {
          case InstKind::Sync: barrier_clears(pending); return s;
          case InstKind::CopyAsyncCommitGroup:
            for (auto& p : pending) p.commits += p.async;
            return s;
          case InstKind::CopyAsyncWaitGroup: {
            int n = int(static_cast<const CopyAsyncWaitGroupInst&>(inst).n);
            for (auto& p : pending) p.awaited = p.awaited || p.commits > n;
            return s;
          }
          case InstKind::CopyAsyncWaitAll:
            for (auto& p : pending) p.awaited = true;
            return s;
          default: break;
        }
        auto mine = accesses(inst);
        for (auto& a : mine)
          for (auto& p : pending)
            if (conflict(p, a)) {
              if (!may_insert) throw Blocked{p, &inst};
              barrier(inst.loc);
              goto done;
            }
      done:
        for (auto& a : mine) pending.push_back(a);
        return s;
      }
      case StmtKind::Let: {
        auto& n = static_cast<const LetStmtNode&>(*s);
        if (thread_dependent(n.value)) thread_vars_.insert(n.var.get());
        return s;
      }
      case StmtKind::Declare: {
        auto& n = static_cast<const DeclareStmtNode&>(*s);
        if (thread_dependent(n.init)) thread_vars_.insert(n.var.get());
        return s;
      }
      case StmtKind::Assign: {
        auto& n = static_cast<const AssignStmtNode&>(*s);
        if (thread_dependent(n.value)) thread_vars_.insert(n.var.get());
        return s;
      }
      case StmtKind::For: {
        auto& n = static_cast<const ForStmtNode&>(*s);
        if (thread_dependent(n.begin) || thread_dependent(n.end) || thread_dependent(n.step))
          thread_vars_.insert(n.var.get());
        return loop(n.body, pending, may_insert && !thread_vars_.count(n.var.get()),
                    [&](const Access& a) { return shifted(a, n.var, n.step); },
                    [&](const Stmt& body) {
                      return Stmt(std::make_shared<ForStmtNode>(n.var, n.begin, n.end, n.step, n.unroll, body, n.loc));
                    });
      }
      case StmtKind::While: {
        auto& n = static_cast<const WhileStmtNode&>(*s);
        // The next iteration's offsets are unknown: compare them as if nothing moved, but
        // never as provably disjoint (a shift by an unknown amount).
        auto unknown = [](const Access& a) {
          Access u = a;
          for (auto& e : u.lo) e = Expr(Var("unknown_shift", e.dtype())) + e;
          return u;
        };
        return loop(n.body, pending, may_insert && !thread_dependent(n.cond), unknown,
                    [&](const Stmt& body) { return Stmt(std::make_shared<WhileStmtNode>(n.cond, body, n.loc)); });
      }
      case StmtKind::If: {
        auto& n = static_cast<const IfStmtNode&>(*s);
        bool uniform = !thread_dependent(n.cond);
        for (int attempt = 0;; ++attempt) {
          Pending then_p = pending, else_p = pending;
          try {
            Stmt t = process(n.then_body, then_p, may_insert && uniform);
            Stmt e = n.else_body ? process(n.else_body, else_p, may_insert && uniform) : n.else_body;
            pending = then_p;
            for (auto& a : else_p)
              if (std::none_of(pending.begin(), pending.end(), [&](const Access& p) { return p.inst == a.inst; }))
                pending.push_back(a);
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
        std::optional<Blocked> clash;
        for (auto& a : inside)
          for (auto& p : pending)
            if (!clash && conflict(p, a)) clash = Blocked{p, a.inst};
        if (clash) {
          if (!may_insert) throw *clash;
          barrier(n.loc);
        }
        Pending group;
        Stmt body = process(n.body, group, may_insert);
        for (auto& a : inside) {
          a.mapping.clear();  // other threads than the rest of the block
          pending.push_back(a);
        }
        return std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads, body, n.loc);
      }
      default: return s;
    }
  }

  // A loop body runs after itself: analyse it with what its end leaves pending (shifted
  // to the next iteration) until no barrier is added.
  template <class Shift, class Rebuild>
  Stmt loop(const Stmt& body0, Pending& pending, bool may_insert, Shift shift, Rebuild rebuild) {
    Pending entry = pending, last;
    Stmt body = body0;
    for (int round = 0; round < 4; ++round) {
      int count = inserted_;
      Pending state = entry;
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
      // Next iteration's entry: what was pending before the loop and what this iteration
      // left, seen from the next iteration.
      Pending next = pending;
      for (auto& a : state) next.push_back(shift(a));
      entry = next;
      last = state;
      if (inserted_ == count && round > 0) break;
    }
    // After the loop: what was pending before it (it may not run) and what it leaves.
    for (auto& a : last) pending.push_back(a);
    return rebuild(body);
  }
};

}  // namespace

Program insert_barriers(const Program& program, int* inserted) {
  Program out;
  int total = 0;
  for (auto& k : program.kernels) {
    int n = 0;
    out.kernels.push_back(BarrierInserter(k).run(&n));
    total += n;
  }
  if (inserted) *inserted = total;
  return out;
}

}  // namespace tilus
