// Visitor and mutator bases over statements (and, through InstNode::visit_fields, over the
// tensors and expressions of every instruction).
#pragma once

#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/program.h"
#include "tilus/ir/stmt.h"

namespace tilus {

// Walks statements in program order. Override a hook and call the base to keep recursing.
class StmtVisitor {
 public:
  virtual ~StmtVisitor() = default;
  void visit(const Stmt& s);
  void visit(const Kernel& k) { visit(k.body); }

 protected:
  virtual void visit_seq(const SeqStmtNode& s);
  virtual void visit_for(const ForStmtNode& s);
  virtual void visit_if(const IfStmtNode& s);
  virtual void visit_while(const WhileStmtNode& s);
  virtual void visit_break(const BreakStmtNode& s) {}
  virtual void visit_continue(const ContinueStmtNode& s) {}
  virtual void visit_return(const ReturnStmtNode& s) {}
  virtual void visit_let(const LetStmtNode& s) {}
  virtual void visit_declare(const DeclareStmtNode& s) {}
  virtual void visit_assign(const AssignStmtNode& s) {}
  virtual void visit_thread_group(const ThreadGroupStmtNode& s);
  virtual void visit_inst(const InstNode& inst) {}
};

// Whether `s` holds an instruction of kind `k` anywhere (in nested scopes too).
bool contains_inst(const Stmt& s, InstKind k);

// Rebuilds statements bottom-up; unchanged subtrees are shared with the input. A hook may
// return null (delete) or a sequence (expand into several statements).
//
// By default an instruction is rebuilt by mapping its tensors through mutate_tensor()
// (the `tensor_map` table) and its expressions through mutate_expr(); nothing is copied
// when nothing changes.
class StmtMutator {
 public:
  virtual ~StmtMutator() = default;
  Stmt mutate(const Stmt& s);
  Kernel mutate(const Kernel& k);

  // Maps a tensor to its replacement (identity when absent).
  std::unordered_map<const TensorNode*, Tensor> tensor_map;

 protected:
  virtual Stmt mutate_seq(const Stmt& s, const SeqStmtNode& n);
  virtual Stmt mutate_for(const Stmt& s, const ForStmtNode& n);
  virtual Stmt mutate_if(const Stmt& s, const IfStmtNode& n);
  virtual Stmt mutate_while(const Stmt& s, const WhileStmtNode& n);
  virtual Stmt mutate_break(const Stmt& s, const BreakStmtNode& n) { return s; }
  virtual Stmt mutate_continue(const Stmt& s, const ContinueStmtNode& n) { return s; }
  virtual Stmt mutate_return(const Stmt& s, const ReturnStmtNode& n) { return s; }
  virtual Stmt mutate_let(const Stmt& s, const LetStmtNode& n);
  virtual Stmt mutate_declare(const Stmt& s, const DeclareStmtNode& n);
  virtual Stmt mutate_assign(const Stmt& s, const AssignStmtNode& n);
  virtual Stmt mutate_thread_group(const Stmt& s, const ThreadGroupStmtNode& n);
  virtual Stmt mutate_inst(const Stmt& s, const Inst& inst);

  virtual Expr mutate_expr(const Expr& e) { return e; }
  virtual Tensor mutate_tensor(const Tensor& t);
  // The default instruction rewrite (tensors and expressions); returns `inst` itself when
  // nothing changed.
  Inst rewrite_inst(const Inst& inst);
};

// Sibling thread groups that wait on each other's work: two or more consecutive thread-group
// statements of a sequence, one of which waits on an mbarrier (or a cluster barrier) or meets
// threads outside its group at a named barrier (sync_threads or named_barrier_arrive with an
// arrive_count above the group's threads: warp groups taking turns). On the GPU
// they run at once (a producer warp beside its consumers), so a barrier of the block between them
// would never be passed: the barrier pass puts barriers only around such a run, and the CPU backend
// runs its groups concurrently.
bool waits_on_siblings(const std::vector<Stmt>& groups);

// The tensors some instruction of the kernel reads (any access but Write): whether an
// instruction's result is used (an atomic whose old values are not is a red).
std::unordered_set<const TensorNode*> read_tensors(const Kernel& k);

}  // namespace tilus
