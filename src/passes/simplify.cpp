#include "tilus/passes/simplify.h"

#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

// Simplifies expressions with the ranges known at each point, and substitutes lets whose
// values are constants or variables.
class ExprSimplifier : public StmtMutator {
 public:
  explicit ExprSimplifier(const Kernel& k) {
    // Block indices range over the grid; threads over the block.
    for (size_t d = 0; d < 3; ++d) {
      Interval r = Interval::range(0, 0);
      if (d < k.grid.size()) {
        Interval g = ctx_.bound(k.grid[d]);
        r = Interval{0, g.hi ? std::optional<int64_t>(*g.hi - 1) : std::nullopt};
      }
      ctx_.set_range(builtin::block_idx(int(d)), r);
    }
    ctx_.set_range(builtin::thread_idx(), Interval::range(0, k.num_threads() - 1));
  }

 protected:
  Expr mutate_expr(const Expr& e) override {
    if (!e.defined()) return e;
    Expr s = subst_.empty() ? e : substitute(e, [this](const Var& v) {
      auto it = subst_.find(v.get());
      return it == subst_.end() ? Expr() : it->second;
    });
    return simplify(s, ctx_);
  }

  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
    Expr b = mutate_expr(n.begin), e = mutate_expr(n.end), st = mutate_expr(n.step);
    // A loop that provably runs zero times disappears.
    if (st.is_int_const() && st.int_value() > 0) {
      if (auto ge = ctx_.prove(b >= e); ge && *ge) return nullptr;
    }
    if (st.is_int_const() && st.int_value() > 0) {
      Interval lo = ctx_.bound(b), hi = ctx_.bound(e);
      ctx_.set_range(n.var, Interval{lo.lo, hi.hi ? std::optional<int64_t>(*hi.hi - 1) : std::nullopt});
    }
    Stmt body = mutate(n.body);
    if (b.same_as(n.begin) && e.same_as(n.end) && st.same_as(n.step) && body == n.body) return s;
    return std::make_shared<ForStmtNode>(n.var, b, e, st, n.unroll, body ? body : make_seq({}), n.loc);
  }

  Stmt mutate_if(const Stmt& s, const IfStmtNode& n) override {
    Expr c = mutate_expr(n.cond);
    if (auto b = c.as<BoolImmNode>()) return b->value ? mutate(n.then_body) : mutate(n.else_body);
    return StmtMutator::mutate_if(s, n);
  }

  Stmt mutate_let(const Stmt& s, const LetStmtNode& n) override {
    Expr v = mutate_expr(n.value);
    if (v.is_const() || v.as<VarNode>()) {
      subst_[n.var.get()] = v;
      return nullptr;
    }
    Interval r = ctx_.bound(v);
    if (r.lo || r.hi) ctx_.set_range(n.var, r);
    int64_t d = ctx_.divisor(v);
    if (d > 1) ctx_.set_divisor(n.var, d);
    if (v.same_as(n.value)) return s;
    return std::make_shared<LetStmtNode>(n.var, v, n.loc);
  }

  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    // Register-tensor axes range over the tensor's shape.
    if (auto a = inst_as<AllocateRegisterInst>(inst)) {
      auto shape = a->out.static_shape();
      for (size_t d = 0; d < a->axes.size() && d < shape.size(); ++d)
        ctx_.set_range(a->axes[d], Interval::range(0, shape[d] - 1));
    }
    return StmtMutator::mutate_inst(s, inst);
  }

 private:
  BoundContext ctx_;
  std::unordered_map<const void*, Expr> subst_;
};

// Removes instructions whose effects nobody can observe: no side effects, not async, no
// writes to global or shared memory, and no reader of any register tensor they define or
// write. Repeats until nothing changes.
class DeadCodeRemover : public StmtMutator {
 public:
  bool changed = false;
  std::unordered_set<const TensorNode*> read;

  void collect(const Stmt& body) {
    struct Reads : StmtVisitor {
      std::unordered_set<const TensorNode*>* read;
      void visit_inst(const InstNode& i) override {
        for (auto& [t, a] : i.operands())
          if (a != Access::Write) read->insert(t.get());
      }
    } r;
    r.read = &read;
    r.visit(body);
  }

 protected:
  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    if (inst->has_side_effects() || inst->is_async()) return s;
    Tensor out = inst->output();
    if (out.defined() && (!out.is_register() || read.count(out.get()))) return s;
    for (auto& [t, a] : inst->operands()) {
      if (a == Access::Write || a == Access::ReadWrite) {
        if (!t.defined() || !t.is_register() || read.count(t.get())) return s;
      }
    }
    changed = true;
    return nullptr;
  }
};

}  // namespace

Program simplify_program(const Program& program) {
  Program out;
  for (auto& k : program.kernels) {
    ExprSimplifier simplifier(k);
    Kernel r = simplifier.mutate(k);
    for (;;) {
      DeadCodeRemover dce;
      dce.collect(r.body);
      Kernel next = dce.mutate(r);
      if (!dce.changed) break;
      r = next;
    }
    out.kernels.push_back(std::move(r));
  }
  return out;
}

}  // namespace tilus
