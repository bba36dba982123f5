// Which scalars differ between the threads of a block: threadIdx, and the variables bound (let,
// declare, assign, the variable of a loop whose bounds differ) to expressions of those. A pass
// that walks a kernel in program order binds each variable as it meets it. Internal to the
// passes (insert_barriers, infer_layouts).
#pragma once

#include <unordered_set>

#include "tilus/ir/expr.h"
#include "tilus/ir/stmt.h"

namespace tilus {

class ThreadDependence {
 public:
  bool depends(const Expr& e) const {
    for (const Var& v : free_vars(e))
      if (v.same_as(builtin::thread_idx()) || vars_.count(v.get())) return true;
    return false;
  }
  void bind(const Var& var, const Expr& value) {
    if (depends(value)) vars_.insert(var.get());
  }
  // A loop whose trip count differs between threads (its variable then differs too).
  bool per_thread_loop(const ForStmtNode& n) {
    bool differs = depends(n.begin) || depends(n.end) || depends(n.step);
    if (differs) vars_.insert(n.var.get());
    return differs;
  }

 private:
  std::unordered_set<const ExprNode*> vars_;
};

}  // namespace tilus
