// The scalar expression simplifier: constant folding, algebraic identities and
// bound-aware folding of comparisons, divisions and remainders.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "tilus/ir/expr.h"

namespace tilus {

// An inclusive integer interval; an unbounded side is nullopt.
struct Interval {
  std::optional<int64_t> lo, hi;
  static Interval exact(int64_t v) { return {v, v}; }
  static Interval range(int64_t lo, int64_t hi) { return {lo, hi}; }
  static Interval everything() { return {}; }
  bool is_exact() const { return lo && hi && *lo == *hi; }
};

// Known facts about variables: value ranges and divisibility (var % d == 0).
class BoundContext {
 public:
  void set_range(const Var& v, Interval r);
  void set_divisor(const Var& v, int64_t d);
  Interval range_of(const Var& v) const;
  int64_t divisor_of(const Var& v) const;  // 1 when unknown
  // Interval of an expression by interval arithmetic over the known ranges.
  Interval bound(const Expr& e) const;
  // Largest d known to divide e (1 when unknown). Used for alignment decisions.
  int64_t divisor(const Expr& e) const;
  // True / false when the condition is decided by the known ranges; nullopt otherwise.
  std::optional<bool> prove(const Expr& cond) const;

 private:
  std::unordered_map<const void*, Interval> ranges_;
  std::unordered_map<const void*, int64_t> divisors_;
};

// Simplifies `e`. Folding never changes the value of the expression for any assignment
// of variables consistent with `ctx` (integer overflow aside).
Expr simplify(const Expr& e, const BoundContext& ctx = BoundContext());

}  // namespace tilus
