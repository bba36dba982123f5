#include "tilus/passes/simplify_program.h"

#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

// Simplifies expressions with the kernel's facts (ir/facts.h), and substitutes lets whose
// values are constants or variables.
class ExprSimplifier : public StmtMutator {
 public:
  explicit ExprSimplifier(const Kernel& k) : facts_(k) {}

 protected:
  Expr mutate_expr(const Expr& e) override {
    if (!e.defined()) return e;
    Expr s = subst_.empty() ? e : substitute(e, [this](const Var& v) {
      auto it = subst_.find(v.get());
      return it == subst_.end() ? Expr() : it->second;
    });
    return facts_.simplify(s);
  }

  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
    Expr b = mutate_expr(n.begin), e = mutate_expr(n.end), st = mutate_expr(n.step);
    // A loop that provably runs zero times disappears.
    if (st.is_int_const() && st.int_value() > 0 && facts_.holds(b >= e)) return nullptr;
    Stmt body = mutate(n.body);
    if (b.same_as(n.begin) && e.same_as(n.end) && st.same_as(n.step) && body == n.body) return s;
    return rebuild_for(n, b, e, st, body);
  }

  Stmt mutate_if(const Stmt& s, const IfStmtNode& n) override {
    Expr c = mutate_expr(n.cond);
    if (auto b = c.as<BoolImmNode>()) return b->value ? mutate(n.then_body) : mutate(n.else_body);
    return StmtMutator::mutate_if(s, n);
  }

  // A global tensor's shape and strides are simplified, and name the lets too: a substituted
  // one is replaced there. Once per tensor, at its definition (the lets its shape names come
  // before it), so that the definition and every use take the same new tensor.
  Tensor mutate_tensor(const Tensor& t) override {
    if (auto it = tensor_map.find(t.get()); it != tensor_map.end()) return it->second;
    if (!t.defined() || !t.is_global()) return t;
    std::vector<Expr> shape, strides;
    bool changed = false;
    for (const Expr& e : t.shape()) shape.push_back(mutate_expr(e)), changed |= !shape.back().same_as(e);
    for (const Expr& e : t->strides) strides.push_back(mutate_expr(e)), changed |= !strides.back().same_as(e);
    Tensor r = changed ? Tensor::global(t->name, t.dtype(), shape, strides) : t;
    tensor_map[t.get()] = r;
    return r;
  }

  Stmt mutate_let(const Stmt& s, const LetStmtNode& n) override {
    Expr v = mutate_expr(n.value);
    if (v.is_const() || v.as<VarNode>()) {
      subst_[n.var.get()] = v;
      return nullptr;
    }
    if (v.same_as(n.value)) return s;
    return std::make_shared<LetStmtNode>(n.var, v, n.loc);
  }

 private:
  KernelFacts facts_;
  std::unordered_map<const void*, Expr> subst_;
};

// A variable declared and never assigned again is a let: the facts (ranges, divisors) then
// hold for it, as for any let (the front ends declare every name a loop body binds).
class ConstantDeclarations : public StmtMutator {
 public:
  explicit ConstantDeclarations(const Stmt& body) {
    struct Assigned : StmtVisitor {
      std::unordered_set<const void*>* out;
      void visit_assign(const AssignStmtNode& n) override { out->insert(n.var.get()); }
    } a;
    a.out = &assigned_;
    a.visit(body);
  }

 protected:
  Stmt mutate_declare(const Stmt& s, const DeclareStmtNode& n) override {
    if (assigned_.count(n.var.get())) return StmtMutator::mutate_declare(s, n);
    return std::make_shared<LetStmtNode>(n.var, mutate_expr(n.init), n.loc);
  }

 private:
  std::unordered_set<const void*> assigned_;
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
    if (inst->has_side_effects()) return s;
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
  return map_kernels(program, [](const Kernel& k) {
    Kernel lets = ConstantDeclarations(k.body).mutate(k);
    Kernel r = ExprSimplifier(lets).mutate(lets);
    for (;;) {
      DeadCodeRemover dce;
      dce.collect(r.body);
      Kernel next = dce.mutate(r);
      if (!dce.changed) return r;
      r = next;
    }
  });
}

}  // namespace tilus
