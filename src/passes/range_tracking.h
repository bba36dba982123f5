// The facts a kernel body implies about its scalars, tracked while a pass walks it: block
// indices over the grid, the thread index over the block, loop variables over their loops,
// let-bound values, register-tensor axes and (optionally) the kernel's specialization facts.
// Internal to src/passes: the simplify pass and the bounds-predicate pass both prove things
// about expressions at a point of the program, and must agree on what is known there.
#pragma once

#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

// A mutator that keeps `ctx_` holding the ranges and divisors valid at the statement being
// mutated. Subclasses that rewrite loops or lets themselves call enter_loop() / bind_let() /
// bind_axes() at the point where the facts start to hold.
class RangeTrackingMutator : public StmtMutator {
 public:
  struct Options {
    // A loop with constant begin and positive constant step gets its exact last value
    // (begin + step * (trips - 1)) as the upper bound and gcd(begin, step) as a divisor;
    // without it the bound is [begin, end - 1]. `for k in range(0, 1024, 32)` is then known
    // to keep k + 32 <= 1024.
    bool strided_loops = false;
    // Integer parameters get the divisors of Kernel::param_divisibility.
    bool param_facts = false;
  };

  explicit RangeTrackingMutator(const Kernel& kernel) : RangeTrackingMutator(kernel, Options{}) {}
  RangeTrackingMutator(const Kernel& kernel, Options options);

 protected:
  // The loop variable's facts inside the body of `for var in range(begin, end, step)`; only
  // loops with a positive constant step get any.
  void enter_loop(const Var& var, const Expr& begin, const Expr& end, const Expr& step);
  // The facts of `let var = value`: the value's bound and divisor.
  void bind_let(const Var& var, const Expr& value);
  // Register-tensor axes of an allocation range over the tensor's shape.
  void bind_axes(const Inst& inst);

  // Record the facts, then mutate as StmtMutator does.
  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override;
  Stmt mutate_let(const Stmt& s, const LetStmtNode& n) override;
  Stmt mutate_inst(const Stmt& s, const Inst& inst) override;

  BoundContext ctx_;

 private:
  Options options_;
};

}  // namespace tilus
