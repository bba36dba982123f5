#include "range_tracking.h"

#include <numeric>

namespace tilus {

RangeTrackingMutator::RangeTrackingMutator(const Kernel& k, Options options) : options_(options) {
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
  if (options_.param_facts) {
    // Pointer facts are alignments in bytes, not values of an integer: only integer
    // parameters become divisors.
    for (auto& [index, d] : k.param_divisibility) {
      if (index < 0 || index >= int(k.params.size()) || d <= 1) continue;
      const Var& p = k.params[index];
      if (p.dtype().is_integer()) ctx_.set_divisor(p, d);
    }
  }
}

void RangeTrackingMutator::enter_loop(const Var& var, const Expr& begin, const Expr& end, const Expr& step) {
  if (!(step.is_int_const() && step.int_value() > 0)) return;
  Interval lo = ctx_.bound(begin), hi = ctx_.bound(end);
  Interval r{lo.lo, hi.hi ? std::optional<int64_t>(*hi.hi - 1) : std::nullopt};
  if (options_.strided_loops) {
    int64_t s = step.int_value();
    // The variable takes begin + s * j only, so with a constant begin the last value is the
    // largest such number below end.
    if (lo.is_exact() && r.hi && *r.hi >= *lo.lo) r.hi = *lo.lo + (*r.hi - *lo.lo) / s * s;
    int64_t d = std::gcd(ctx_.divisor(begin), s);
    if (d > 1) ctx_.set_divisor(var, d);
  }
  ctx_.set_range(var, r);
}

void RangeTrackingMutator::bind_let(const Var& var, const Expr& value) {
  Interval r = ctx_.bound(value);
  if (r.lo || r.hi) ctx_.set_range(var, r);
  int64_t d = ctx_.divisor(value);
  if (d > 1) ctx_.set_divisor(var, d);
}

void RangeTrackingMutator::bind_axes(const Inst& inst) {
  if (auto a = inst_as<AllocateRegisterInst>(inst)) {
    auto shape = a->out.static_shape();
    for (size_t d = 0; d < a->axes.size() && d < shape.size(); ++d)
      ctx_.set_range(a->axes[d], Interval::range(0, shape[d] - 1));
  }
}

Stmt RangeTrackingMutator::mutate_for(const Stmt& s, const ForStmtNode& n) {
  Expr b = mutate_expr(n.begin), e = mutate_expr(n.end), st = mutate_expr(n.step);
  enter_loop(n.var, b, e, st);
  Stmt body = mutate(n.body);
  if (b.same_as(n.begin) && e.same_as(n.end) && st.same_as(n.step) && body == n.body) return s;
  return std::make_shared<ForStmtNode>(n.var, b, e, st, n.unroll, body ? body : make_seq({}), n.loc);
}

Stmt RangeTrackingMutator::mutate_let(const Stmt& s, const LetStmtNode& n) {
  Expr v = mutate_expr(n.value);
  bind_let(n.var, v);
  if (v.same_as(n.value)) return s;
  return std::make_shared<LetStmtNode>(n.var, v, n.loc);
}

Stmt RangeTrackingMutator::mutate_inst(const Stmt& s, const Inst& inst) {
  bind_axes(inst);
  return StmtMutator::mutate_inst(s, inst);
}

}  // namespace tilus
