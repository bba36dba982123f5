#include "tilus/ir/functor.h"

#include "tilus/ir/error.h"
#include "tilus/ir/inst_def.h"

namespace tilus {

bool contains_inst(const Stmt& s, InstKind k) {
  struct Find : StmtVisitor {
    InstKind kind;
    bool found = false;
    void visit_inst(const InstNode& i) override { found = found || i.kind() == kind; }
  } f;
  f.kind = k;
  f.visit(s);
  return f.found;
}

// --- StmtVisitor ----------------------------------------------------------------------

void StmtVisitor::visit(const Stmt& s) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::Seq: visit_seq(static_cast<const SeqStmtNode&>(*s)); return;
    case StmtKind::For: visit_for(static_cast<const ForStmtNode&>(*s)); return;
    case StmtKind::If: visit_if(static_cast<const IfStmtNode&>(*s)); return;
    case StmtKind::While: visit_while(static_cast<const WhileStmtNode&>(*s)); return;
    case StmtKind::Break: visit_break(static_cast<const BreakStmtNode&>(*s)); return;
    case StmtKind::Continue: visit_continue(static_cast<const ContinueStmtNode&>(*s)); return;
    case StmtKind::Return: visit_return(static_cast<const ReturnStmtNode&>(*s)); return;
    case StmtKind::Let: visit_let(static_cast<const LetStmtNode&>(*s)); return;
    case StmtKind::Declare: visit_declare(static_cast<const DeclareStmtNode&>(*s)); return;
    case StmtKind::Assign: visit_assign(static_cast<const AssignStmtNode&>(*s)); return;
    case StmtKind::Inst: visit_inst(*static_cast<const InstStmtNode&>(*s).inst); return;
    case StmtKind::ThreadGroup: visit_thread_group(static_cast<const ThreadGroupStmtNode&>(*s)); return;
  }
}

void StmtVisitor::visit_seq(const SeqStmtNode& s) {
  for (auto& c : s.stmts) visit(c);
}
void StmtVisitor::visit_for(const ForStmtNode& s) { visit(s.body); }
void StmtVisitor::visit_if(const IfStmtNode& s) {
  visit(s.then_body);
  visit(s.else_body);
}
void StmtVisitor::visit_while(const WhileStmtNode& s) { visit(s.body); }
void StmtVisitor::visit_thread_group(const ThreadGroupStmtNode& s) { visit(s.body); }

// --- StmtMutator ----------------------------------------------------------------------

Stmt StmtMutator::mutate(const Stmt& s) {
  if (!s) return s;
  switch (s->kind) {
    case StmtKind::Seq: return mutate_seq(s, static_cast<const SeqStmtNode&>(*s));
    case StmtKind::For: return mutate_for(s, static_cast<const ForStmtNode&>(*s));
    case StmtKind::If: return mutate_if(s, static_cast<const IfStmtNode&>(*s));
    case StmtKind::While: return mutate_while(s, static_cast<const WhileStmtNode&>(*s));
    case StmtKind::Break: return mutate_break(s, static_cast<const BreakStmtNode&>(*s));
    case StmtKind::Continue: return mutate_continue(s, static_cast<const ContinueStmtNode&>(*s));
    case StmtKind::Return: return mutate_return(s, static_cast<const ReturnStmtNode&>(*s));
    case StmtKind::Let: return mutate_let(s, static_cast<const LetStmtNode&>(*s));
    case StmtKind::Declare: return mutate_declare(s, static_cast<const DeclareStmtNode&>(*s));
    case StmtKind::Assign: return mutate_assign(s, static_cast<const AssignStmtNode&>(*s));
    case StmtKind::Inst: return mutate_inst(s, static_cast<const InstStmtNode&>(*s).inst);
    case StmtKind::ThreadGroup: return mutate_thread_group(s, static_cast<const ThreadGroupStmtNode&>(*s));
  }
  return s;
}

Kernel StmtMutator::mutate(const Kernel& k) {
  Kernel out = k;
  for (auto& g : out.grid) g = mutate_expr(g);
  for (auto& g : out.global_tensors)
    for (auto& d : g.shape) d = mutate_expr(d);
  out.body = mutate(k.body);
  if (!out.body) out.body = make_seq({});
  return out;
}

Stmt StmtMutator::mutate_seq(const Stmt& s, const SeqStmtNode& n) {
  std::vector<Stmt> out;
  bool changed = false;
  for (auto& c : n.stmts) {
    Stmt m = mutate(c);
    changed |= m != c;
    if (m) out.push_back(std::move(m));
  }
  if (!changed) return s;
  if (out.empty()) return std::make_shared<SeqStmtNode>(std::vector<Stmt>{}, n.loc);
  return make_seq(std::move(out), n.loc);
}

Stmt StmtMutator::mutate_for(const Stmt& s, const ForStmtNode& n) {
  Expr b = mutate_expr(n.begin), e = mutate_expr(n.end), st = mutate_expr(n.step);
  Stmt body = mutate(n.body);
  if (b.same_as(n.begin) && e.same_as(n.end) && st.same_as(n.step) && body == n.body) return s;
  return rebuild_for(n, b, e, st, body);
}

Stmt StmtMutator::mutate_if(const Stmt& s, const IfStmtNode& n) {
  Expr c = mutate_expr(n.cond);
  Stmt t = mutate(n.then_body), e = mutate(n.else_body);
  if (c.same_as(n.cond) && t == n.then_body && e == n.else_body) return s;
  return std::make_shared<IfStmtNode>(c, t ? t : make_seq({}), e, n.loc);
}

Stmt StmtMutator::mutate_while(const Stmt& s, const WhileStmtNode& n) {
  Expr c = mutate_expr(n.cond);
  Stmt body = mutate(n.body);
  if (c.same_as(n.cond) && body == n.body) return s;
  return std::make_shared<WhileStmtNode>(c, body ? body : make_seq({}), n.loc);
}

namespace {
// A statement that binds n.var to an expression, rebuilt only when the expression changed.
template <class N>
Stmt rebound(const Stmt& s, const N& n, const Expr& old, const Expr& now) {
  return now.same_as(old) ? s : std::make_shared<N>(n.var, now, n.loc);
}
}  // namespace

Stmt StmtMutator::mutate_let(const Stmt& s, const LetStmtNode& n) { return rebound(s, n, n.value, mutate_expr(n.value)); }

Stmt StmtMutator::mutate_declare(const Stmt& s, const DeclareStmtNode& n) {
  return rebound(s, n, n.init, mutate_expr(n.init));
}

Stmt StmtMutator::mutate_assign(const Stmt& s, const AssignStmtNode& n) {
  return rebound(s, n, n.value, mutate_expr(n.value));
}

Stmt StmtMutator::mutate_thread_group(const Stmt& s, const ThreadGroupStmtNode& n) {
  Stmt body = mutate(n.body);
  if (body == n.body) return s;
  return std::make_shared<ThreadGroupStmtNode>(n.group_kind, n.thread_begin, n.num_threads, body ? body : make_seq({}),
                                               n.loc);
}

Stmt StmtMutator::mutate_inst(const Stmt& s, const Inst& inst) {
  Inst r = rewrite_inst(inst);
  if (r == inst) return s;
  return make_inst_stmt(r);
}

Tensor StmtMutator::mutate_tensor(const Tensor& t) {
  auto it = tensor_map.find(t.get());
  return it == tensor_map.end() ? t : it->second;
}

namespace {
// Applies the mutator's tensor and expression maps to a copy of an instruction, or (`apply`
// false) only finds whether anything would change, without copying.
struct Rewriter : FieldVisitor {
  std::function<Tensor(const Tensor&)> map_tensor;
  std::function<Expr(const Expr&)> map_expr;
  bool apply = true;
  bool changed = false;
  void output(const char*, Tensor& t, uint8_t) override { update(t); }
  void operand(const char*, Tensor& t, Access, uint8_t, const CopyRegion*) override { update(t); }
  void expr(const char*, Expr& e) override { replace(e, map_expr(e)); }
  void update(Tensor& t) {
    if (t.defined()) replace(t, map_tensor(t));
  }
  template <class T>
  void replace(T& x, const T& m) {
    if (m.same_as(x)) return;
    changed = true;
    if (apply) x = m;
  }
};
}  // namespace

Inst StmtMutator::rewrite_inst(const Inst& inst) {
  auto mt = [this](const Tensor& t) { return mutate_tensor(t); };
  auto me = [this](const Expr& e) { return mutate_expr(e); };
  Rewriter probe;
  probe.map_tensor = mt;
  probe.map_expr = me;
  probe.apply = false;
  inst->visit_fields(probe);
  if (!probe.changed) return inst;
  auto copy = inst->clone();
  Rewriter r;
  r.map_tensor = mt;
  r.map_expr = me;
  copy->visit_fields(r);
  return copy;
}

std::unordered_set<const TensorNode*> read_tensors(const Kernel& k) {
  struct Reads : StmtVisitor {
    std::unordered_set<const TensorNode*> tensors;
    void visit_inst(const InstNode& i) override {
      for (auto& [t, a] : i.operands())
        if (a != Access::Write && t.defined()) tensors.insert(t.get());
    }
  } reads;
  reads.visit(k);
  return std::move(reads.tensors);
}

bool waits_on_siblings(const std::vector<Stmt>& groups) {
  if (groups.size() < 2) return false;
  struct Find : StmtVisitor {
    bool found = false;
    int64_t threads = 0;  // the sibling group's
    void visit_inst(const InstNode& i) override {
      if (i.def().traits.role == SyncRole::BarrierWait) found = true;
      if (i.kind() != InstKind::Sync) return;
      auto& s = static_cast<const SyncInst&>(i);
      bool named = s.scope == SyncScope::Named || s.scope == SyncScope::NamedArrive;
      if (s.scope == SyncScope::Cluster || (named && s.arrive_count > threads)) found = true;
    }
  } find;
  for (auto& g : groups) {
    if (!g || g->kind != StmtKind::ThreadGroup) return false;
    find.threads = static_cast<const ThreadGroupStmtNode&>(*g).num_threads;
    find.visit(g);
  }
  return find.found;
}

}  // namespace tilus
