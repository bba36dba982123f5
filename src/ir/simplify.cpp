// The scalar simplifier and the bound analysis it relies on.
//
// Soundness contract: a rewrite may only replace an expression by one that has the same
// value (and the same dtype) for every variable assignment consistent with the
// BoundContext where the original is defined. Integer arithmetic wraps to the width of its
// type, so every rule below is justified either by modular arithmetic (exact whatever the
// values) or by a bound that proves no wrap-around happens.
//
// Interval arithmetic is done in 128-bit integers so that uint64 values, products of two
// 64-bit bounds and the differences of bounds are exact; a magnitude of kInf stands for
// "unbounded".
#include "tilus/ir/simplify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tilus/ir/error.h"

namespace tilus {

namespace {

using i128 = __int128;

// The stand-in for an unbounded side. Far above any 64-bit value, yet sums of two such
// values still fit in 128 bits, so additions never overflow before clamping.
constexpr i128 kInf = i128(1) << 120;

i128 clamp_inf(i128 v) { return v > kInf ? kInf : (v < -kInf ? -kInf : v); }
i128 sat_add(i128 a, i128 b) { return clamp_inf(clamp_inf(a) + clamp_inf(b)); }
i128 sat_neg(i128 a) { return -clamp_inf(a); }
i128 sat_mul(i128 a, i128 b) {
  i128 r;
  if (__builtin_mul_overflow(a, b, &r)) return ((a < 0) != (b < 0)) ? -kInf : kInf;
  return clamp_inf(r);
}
i128 abs128(i128 v) { return v < 0 ? -v : v; }
i128 gcd128(i128 a, i128 b) {
  a = abs128(a);
  b = abs128(b);
  while (b != 0) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// An internal interval; a side at +-kInf is unbounded.
struct IV {
  i128 lo = -kInf, hi = kInf;
  static IV exact(i128 v) { return {v, v}; }
  bool finite() const { return lo > -kInf && hi < kInf; }
  bool is_exact() const { return finite() && lo == hi; }
};

IV intersect(IV a, IV b) { return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)}; }
IV hull(IV a, IV b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }

// The values a type can hold; unbounded for types without an integer range.
IV type_iv(DataType t) {
  if (t.is_bool()) return {0, 1};
  if (t.is_int()) return {-(i128(1) << (t.bits() - 1)), (i128(1) << (t.bits() - 1)) - 1};
  if (t.is_uint()) return {0, (i128(1) << t.bits()) - 1};
  return {};
}

// The numeric value of an integer constant (uint64 constants are stored by bit pattern).
i128 imm_value(const IntImmNode& n) {
  if (n.dtype.is_uint()) {
    uint64_t u = uint64_t(n.value);
    if (n.dtype.bits() < 64) u &= (uint64_t(1) << n.dtype.bits()) - 1;
    return i128(u);
  }
  return i128(n.value);
}

bool is_int_type(DataType t) { return t.is_integer(); }

// The integer constant's numeric value, if e is one.
std::optional<i128> const_int(const Expr& e) {
  if (auto n = e.as<IntImmNode>()) return imm_value(*n);
  return std::nullopt;
}

// Sign-extends the low `bits` bits of v: the representative of v modulo 2^bits closest to 0
// on the negative side. Used to decide between `x + c` and `x - c` when printing sums.
int64_t signed_rep(uint64_t v, int bits) {
  if (bits >= 64) return int64_t(v);
  uint64_t mask = (uint64_t(1) << bits) - 1;
  v &= mask;
  if ((v >> (bits - 1)) & 1) v |= ~mask;
  return int64_t(v);
}

// --- bound analysis -------------------------------------------------------------------

IV bound_iv(const BoundContext& ctx, const Expr& e);
std::optional<bool> prove_impl(const BoundContext& ctx, const Expr& cond);

// The bound of an operand, narrowed by its type: whatever a subexpression computes, its
// value lies in its type's range. This is what lets `min(x * big, 3)` stay bounded above
// although the product may wrap.
IV operand_iv(const BoundContext& ctx, const Expr& e) { return intersect(bound_iv(ctx, e), type_iv(e.dtype())); }

// A result interval of an operation that wraps on overflow: if the mathematical result may
// leave the type's range, the wrapped value can be anything, so the result is unknown.
// Hence an interval that comes back finite also proves that no wrap-around happened.
IV checked(DataType t, i128 lo, i128 hi) {
  IV r = type_iv(t);
  if (lo < r.lo || hi > r.hi) return {};
  return {lo, hi};
}

// Quotient bounds. For a divisor of one sign, x / y is monotone in x and in y separately,
// and truncation / flooring are monotone, so the extremes lie at the corners. A divisor
// interval that straddles 0 is split into its negative and positive parts (y = 0 is
// undefined and so never observed).
IV div_iv(IV a, IV b, bool floor) {
  if (!a.finite() || !b.finite()) return {};
  auto q = [&](i128 x, i128 y) {
    i128 r = x / y;
    if (floor && x % y != 0 && ((x < 0) != (y < 0))) --r;
    return r;
  };
  bool any = false;
  IV out{kInf, -kInf};
  auto part = [&](i128 lo, i128 hi) {
    for (i128 x : {a.lo, a.hi})
      for (i128 y : {lo, hi}) {
        i128 r = q(x, y);
        out.lo = std::min(out.lo, r);
        out.hi = std::max(out.hi, r);
      }
    any = true;
  };
  if (b.hi >= 1) part(std::max<i128>(b.lo, 1), b.hi);
  if (b.lo <= -1) part(b.lo, std::min<i128>(b.hi, -1));
  return any ? out : IV{};
}

// Remainder bounds. Truncating: the sign follows x and |r| < |y|, and r == x when |x| < |y|.
// Flooring: the sign follows y and |r| < |y|, and r == x when x already lies in [0, y) or
// (y, 0].
IV mod_iv(IV a, IV b, bool floor) {
  if (!a.finite() || !b.finite()) return {};
  if (b.lo == 0 && b.hi == 0) return {};
  if (!floor) {
    i128 big = std::max(abs128(b.lo), abs128(b.hi));
    if (b.lo > 0 || b.hi < 0) {
      i128 small = std::min(abs128(b.lo), abs128(b.hi));
      if (a.lo > -small && a.hi < small) return a;
    }
    i128 lo = a.lo < 0 ? std::max(a.lo, -(big - 1)) : 0;
    i128 hi = a.hi > 0 ? std::min(a.hi, big - 1) : 0;
    return {lo, hi};
  }
  if (b.lo >= 1) {
    if (a.lo >= 0 && a.hi < b.lo) return a;
    return {0, a.lo >= 0 ? std::min(a.hi, b.hi - 1) : b.hi - 1};
  }
  if (b.hi <= -1) {
    if (a.hi <= 0 && a.lo > b.hi) return a;
    return {a.hi <= 0 ? std::max(a.lo, b.lo + 1) : b.lo + 1, 0};
  }
  return {std::min<i128>(0, b.lo + 1), std::max<i128>(0, b.hi - 1)};
}

int bit_length(i128 v) {
  int n = 0;
  while (v > 0) {
    ++n;
    v >>= 1;
  }
  return n;
}

IV bool_iv(const BoundContext& ctx, const Expr& e) {
  if (auto p = prove_impl(ctx, e)) return IV::exact(*p ? 1 : 0);
  return {0, 1};
}

IV binary_iv(const BoundContext& ctx, const BinaryNode& n) {
  DataType t = n.dtype;
  if (is_comparison(n.op) || is_logical(n.op)) return {};  // handled by bool_iv
  if (!is_int_type(t)) return {};
  IV a = operand_iv(ctx, n.a), b = operand_iv(ctx, n.b);
  switch (n.op) {
    case BinaryOp::Add:
      if (!a.finite() || !b.finite()) return {};
      return checked(t, a.lo + b.lo, a.hi + b.hi);
    case BinaryOp::Sub:
      if (!a.finite() || !b.finite()) return {};
      return checked(t, a.lo - b.hi, a.hi - b.lo);
    case BinaryOp::Mul: {
      if (!a.finite() || !b.finite()) return {};
      i128 c[4] = {sat_mul(a.lo, b.lo), sat_mul(a.lo, b.hi), sat_mul(a.hi, b.lo), sat_mul(a.hi, b.hi)};
      return checked(t, *std::min_element(c, c + 4), *std::max_element(c, c + 4));
    }
    case BinaryOp::Div:
    case BinaryOp::FloorDiv: {
      // Unsigned operands are non-negative, where both divisions agree.
      IV r = div_iv(a, b, n.op == BinaryOp::FloorDiv);
      // The only overflow is INT_MIN / -1, which wraps.
      return r.finite() ? checked(t, r.lo, r.hi) : r;
    }
    case BinaryOp::Mod:
    case BinaryOp::FloorMod: return mod_iv(a, b, n.op == BinaryOp::FloorMod && t.is_int());
    case BinaryOp::Min: return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
    case BinaryOp::Max: return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
    case BinaryOp::BitAnd:
      // x & y with y >= 0 keeps only bits of y: 0 <= x & y <= y.
      if (a.lo >= 0 && b.lo >= 0) return {0, std::min(a.hi, b.hi)};
      if (a.lo >= 0) return {0, a.hi};
      if (b.lo >= 0) return {0, b.hi};
      return {};
    case BinaryOp::BitOr:
    case BinaryOp::BitXor: {
      // Non-negative operands set no bit above the highest bit of either.
      if (a.lo < 0 || b.lo < 0 || !a.finite() || !b.finite()) return {};
      i128 top = (i128(1) << bit_length(std::max(a.hi, b.hi))) - 1;
      return {n.op == BinaryOp::BitOr ? std::max(a.lo, b.lo) : i128(0), top};
    }
    case BinaryOp::Shl: {
      // x << k is x * 2^k (then wrapped); an out-of-range k is undefined.
      if (!b.is_exact() || b.lo < 0 || b.lo >= t.bits() || !a.finite()) return {};
      i128 m = i128(1) << int(b.lo);
      return checked(t, sat_mul(a.lo, m), sat_mul(a.hi, m));
    }
    case BinaryOp::Shr: {
      // x >> k is floor(x / 2^k) (arithmetic for signed, and unsigned values are >= 0):
      // monotone in x, and decreasing in k for x >= 0, increasing for x < 0.
      if (!b.finite() || b.lo < 0 || b.hi >= t.bits() || !a.finite()) return {};
      int klo = int(b.lo), khi = int(b.hi);
      i128 lo = a.lo >= 0 ? (a.lo >> khi) : (a.lo >> klo);
      i128 hi = a.hi >= 0 ? (a.hi >> klo) : (a.hi >> khi);
      return {lo, hi};
    }
    default: return {};
  }
}

// Bounds are asked for the same subtrees again and again (every decomposition step of a
// comparison asks for the bound of what lies below, and a select's bound proves its
// condition), which is exponential in the nesting depth without a memo. One memo lives for
// the duration of one public query (bound, prove, divisor, simplify) on one context; it holds
// the nodes it has seen, so that no address is reused by a new node while it lives.
struct BoundMemo {
  const BoundContext* ctx = nullptr;
  std::unordered_map<const ExprNode*, std::pair<Expr, IV>> ivs;
  std::unordered_map<const ExprNode*, std::pair<Expr, std::optional<bool>>> proofs;
  std::unordered_map<const ExprNode*, std::pair<Expr, i128>> divisors;
};
thread_local BoundMemo* t_memo = nullptr;

class MemoScope {
 public:
  explicit MemoScope(const BoundContext& ctx) {
    if (t_memo && t_memo->ctx == &ctx) return;  // a nested query shares the outer memo
    own_.ctx = &ctx;
    prev_ = t_memo;
    t_memo = &own_;
    active_ = true;
  }
  ~MemoScope() {
    if (active_) t_memo = prev_;
  }
  MemoScope(const MemoScope&) = delete;
  MemoScope& operator=(const MemoScope&) = delete;

 private:
  BoundMemo own_;
  BoundMemo* prev_ = nullptr;
  bool active_ = false;
};

IV bound_iv_uncached(const BoundContext& ctx, const Expr& e);

IV bound_iv(const BoundContext& ctx, const Expr& e) {
  if (!e.defined()) return {};
  // Leaves are cheap; only compound nodes are worth remembering.
  if (!t_memo || t_memo->ctx != &ctx || e.kind() == ExprKind::Var || e.is_const()) return bound_iv_uncached(ctx, e);
  auto it = t_memo->ivs.find(e.get());
  if (it != t_memo->ivs.end()) return it->second.second;
  IV r = bound_iv_uncached(ctx, e);
  t_memo->ivs.emplace(e.get(), std::make_pair(e, r));
  return r;
}

IV bound_iv_uncached(const BoundContext& ctx, const Expr& e) {
  if (!e.defined()) return {};
  DataType t = e.dtype();
  if (!t.is_integer() && !t.is_bool()) return {};
  switch (e.kind()) {
    case ExprKind::Var: {
      Interval r = ctx.range_of(Var(e));
      return {r.lo ? i128(*r.lo) : -kInf, r.hi ? i128(*r.hi) : kInf};
    }
    case ExprKind::IntImm: return IV::exact(imm_value(*e.as<IntImmNode>()));
    case ExprKind::BoolImm: return IV::exact(e.as<BoolImmNode>()->value ? 1 : 0);
    case ExprKind::Cast: {
      const Expr& a = e.as<CastNode>()->a;
      DataType s = a.dtype();
      if (!s.is_integer() && !s.is_bool()) return t.is_bool() ? IV{0, 1} : IV{};
      if (t.is_bool()) {
        // x != 0, decided when the interval of x excludes or is exactly 0.
        IV r = operand_iv(ctx, a);
        if (r.lo > 0 || r.hi < 0) return IV::exact(1);
        if (r.lo == 0 && r.hi == 0) return IV::exact(0);
        return {0, 1};
      }
      // An integer conversion keeps the value when it fits the target, and wraps otherwise.
      IV r = operand_iv(ctx, a);
      return r.finite() ? checked(t, r.lo, r.hi) : IV{};
    }
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      // prove_impl() looks into Not itself, so this does not come back here.
      if (n->op == UnaryOp::Not) return bool_iv(ctx, e);
      if (t.is_bool()) return {0, 1};
      IV a = operand_iv(ctx, n->a);
      if (!a.finite()) return {};
      if (n->op == UnaryOp::Neg) return checked(t, -a.hi, -a.lo);
      if (n->op == UnaryOp::BitNot) {
        // ~x is -x - 1 for signed and max - x for unsigned; never wraps.
        if (t.is_int()) return {-a.hi - 1, -a.lo - 1};
        i128 m = type_iv(t).hi;
        return {m - a.hi, m - a.lo};
      }
      return {};
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      if (t.is_bool()) {
        if (is_comparison(n->op) || is_logical(n->op)) return bool_iv(ctx, e);
        return {0, 1};
      }
      return binary_iv(ctx, *n);
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      if (auto p = prove_impl(ctx, n->cond)) return operand_iv(ctx, *p ? n->t : n->f);
      return hull(operand_iv(ctx, n->t), operand_iv(ctx, n->f));
    }
    default: return {};
  }
}

// --- linear forms ---------------------------------------------------------------------

// Walks of shared subtrees (DAGs) can be exponential as trees; a decomposition that visits
// more nodes than this gives up.
constexpr int kWalkBudget = 512;

// sum(coef * atom) + c over mathematical integers. Atoms are compared structurally, so
// equal subexpressions cancel.
struct Lin {
  std::vector<std::pair<Expr, i128>> terms;
  i128 c = 0;
  bool ok = true;
  int budget = kWalkBudget;

  void add(const Expr& atom, i128 k) {
    for (auto& [a, coef] : terms) {
      if (structural_equal(a, atom)) {
        coef += k;
        return;
      }
    }
    terms.emplace_back(atom, k);
  }
};

// Coefficients beyond this are not worth tracking (and could overflow 128 bits).
constexpr i128 kMaxCoef = i128(1) << 90;

// Decomposes e * k into `out`. A node is looked through only when its bound is finite,
// which proves it does not wrap, so its value is exactly the mathematical sum; any other
// node is an atom.
void collect_math(const BoundContext& ctx, const Expr& e, i128 k, Lin& out) {
  if (!out.ok) return;
  if (abs128(k) > kMaxCoef || --out.budget < 0) {
    out.ok = false;
    return;
  }
  if (auto c = const_int(e)) {
    out.c = sat_add(out.c, sat_mul(*c, k));
    return;
  }
  if (auto b = e.as<BoolImmNode>()) {
    out.c = sat_add(out.c, b->value ? k : 0);
    return;
  }
  bool through = false;
  if (auto b = e.as<BinaryNode>(); b && is_int_type(b->dtype)) {
    through = b->op == BinaryOp::Add || b->op == BinaryOp::Sub ||
              (b->op == BinaryOp::Mul && (b->a.is_int_const() || b->b.is_int_const()));
  } else if (auto u = e.as<UnaryNode>(); u && u->op == UnaryOp::Neg && is_int_type(u->dtype)) {
    through = true;
  } else if (auto c = e.as<CastNode>();
             c && is_int_type(c->dtype) && (c->a.dtype().is_integer() || c->a.dtype().is_bool())) {
    through = true;
  }
  if (through && bound_iv(ctx, e).finite()) {
    if (auto b = e.as<BinaryNode>()) {
      if (b->op == BinaryOp::Add) {
        collect_math(ctx, b->a, k, out);
        collect_math(ctx, b->b, k, out);
      } else if (b->op == BinaryOp::Sub) {
        collect_math(ctx, b->a, k, out);
        collect_math(ctx, b->b, -k, out);
      } else if (b->b.is_int_const()) {
        collect_math(ctx, b->a, sat_mul(k, *const_int(b->b)), out);
      } else {
        collect_math(ctx, b->b, sat_mul(k, *const_int(b->a)), out);
      }
    } else if (auto u = e.as<UnaryNode>()) {
      collect_math(ctx, u->a, -k, out);
    } else {
      collect_math(ctx, e.as<CastNode>()->a, k, out);
    }
    return;
  }
  out.add(e, k);
}

IV lin_iv(const BoundContext& ctx, const Lin& l) {
  IV r = IV::exact(l.c);
  for (auto& [atom, k] : l.terms) {
    if (k == 0) continue;
    IV a = operand_iv(ctx, atom);
    i128 x = sat_mul(a.lo, k), y = sat_mul(a.hi, k);
    r.lo = sat_add(r.lo, std::min(x, y));
    r.hi = sat_add(r.hi, std::max(x, y));
  }
  return r;
}

// The interval of a - b over the mathematical integers (not wrapped).
IV diff_iv(const BoundContext& ctx, const Expr& a, const Expr& b) {
  IV x = operand_iv(ctx, a), y = operand_iv(ctx, b);
  IV direct{sat_add(x.lo, sat_neg(y.hi)), sat_add(x.hi, sat_neg(y.lo))};
  Lin l;
  collect_math(ctx, a, 1, l);
  collect_math(ctx, b, -1, l);
  if (!l.ok) return direct;
  return intersect(direct, lin_iv(ctx, l));
}

std::optional<bool> decide(BinaryOp op, IV d) {
  switch (op) {
    case BinaryOp::Lt:
      if (d.hi < 0) return true;
      if (d.lo >= 0) return false;
      break;
    case BinaryOp::Le:
      if (d.hi <= 0) return true;
      if (d.lo > 0) return false;
      break;
    case BinaryOp::Gt:
      if (d.lo > 0) return true;
      if (d.hi <= 0) return false;
      break;
    case BinaryOp::Ge:
      if (d.lo >= 0) return true;
      if (d.hi < 0) return false;
      break;
    case BinaryOp::Eq:
      if (d.lo == 0 && d.hi == 0) return true;
      if (d.lo > 0 || d.hi < 0) return false;
      break;
    case BinaryOp::Ne:
      if (d.lo == 0 && d.hi == 0) return false;
      if (d.lo > 0 || d.hi < 0) return true;
      break;
    default: break;
  }
  return std::nullopt;
}

std::optional<bool> prove_uncached(const BoundContext& ctx, const Expr& cond);

std::optional<bool> prove_impl(const BoundContext& ctx, const Expr& cond) {
  if (!cond.defined()) return std::nullopt;
  if (!t_memo || t_memo->ctx != &ctx || cond.is_const()) return prove_uncached(ctx, cond);
  auto it = t_memo->proofs.find(cond.get());
  if (it != t_memo->proofs.end()) return it->second.second;
  std::optional<bool> r = prove_uncached(ctx, cond);
  t_memo->proofs.emplace(cond.get(), std::make_pair(cond, r));
  return r;
}

std::optional<bool> prove_uncached(const BoundContext& ctx, const Expr& cond) {
  if (auto b = cond.as<BoolImmNode>()) return b->value;
  if (auto i = cond.as<IntImmNode>()) return imm_value(*i) != 0;
  if (auto u = cond.as<UnaryNode>(); u && u->op == UnaryOp::Not) {
    if (auto p = prove_impl(ctx, u->a)) return !*p;
    return std::nullopt;
  }
  if (auto b = cond.as<BinaryNode>()) {
    if (b->op == BinaryOp::And || b->op == BinaryOp::Or) {
      // One decided side can decide the whole; evaluation order does not matter here because
      // the result only has to hold where the condition is defined.
      bool is_and = b->op == BinaryOp::And;
      auto pa = prove_impl(ctx, b->a), pb = prove_impl(ctx, b->b);
      if ((pa && *pa != is_and) || (pb && *pb != is_and)) return !is_and;
      if (pa && pb) return is_and;
      return std::nullopt;
    }
    if (is_comparison(b->op)) {
      DataType ot = b->a.dtype();
      // Integer comparisons (signed or unsigned) compare the numeric values our intervals
      // describe. Floats (NaN) and pointers are left alone.
      if (!(ot.is_integer() || ot.is_bool()) || b->b.dtype() != ot) return std::nullopt;
      return decide(b->op, diff_iv(ctx, b->a, b->b));
    }
  }
  if (cond.dtype().is_bool() || cond.dtype().is_integer()) {
    IV r = operand_iv(ctx, cond);
    if (r.lo > 0 || r.hi < 0) return true;
    if (r.lo == 0 && r.hi == 0) return false;
  }
  return std::nullopt;
}

// --- divisors -------------------------------------------------------------------------

constexpr i128 kDivCap = i128(1) << 62;

// A known divisor of e; 0 means e is known to be 0 (divisible by anything), which makes
// gcd() and products compose without special cases. Like the rest of the divisibility
// facts, it assumes the arithmetic does not wrap (a wrapped product of 3 is no multiple of 3).
i128 divisor_uncached(const BoundContext& ctx, const Expr& e);

i128 divisor_impl(const BoundContext& ctx, const Expr& e) {
  if (!t_memo || t_memo->ctx != &ctx || e.is_const() || e.kind() == ExprKind::Var) return divisor_uncached(ctx, e);
  auto it = t_memo->divisors.find(e.get());
  if (it != t_memo->divisors.end()) return it->second.second;
  i128 r = divisor_uncached(ctx, e);
  t_memo->divisors.emplace(e.get(), std::make_pair(e, r));
  return r;
}

i128 divisor_uncached(const BoundContext& ctx, const Expr& e) {
  DataType t = e.dtype();
  if (!t.is_integer()) return 1;
  if (IV r = bound_iv(ctx, e); r.is_exact()) return std::min(abs128(r.lo), kDivCap);
  switch (e.kind()) {
    case ExprKind::IntImm: return std::min(abs128(imm_value(*e.as<IntImmNode>())), kDivCap);
    case ExprKind::Var: return std::max<int64_t>(1, ctx.divisor_of(Var(e)));
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      return n->op == UnaryOp::Neg ? divisor_impl(ctx, n->a) : 1;
    }
    case ExprKind::Cast: {
      const Expr& a = e.as<CastNode>()->a;
      return a.dtype().is_integer() ? divisor_impl(ctx, a) : 1;
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      return gcd128(divisor_impl(ctx, n->t), divisor_impl(ctx, n->f));
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      switch (n->op) {
        case BinaryOp::Add:
        case BinaryOp::Sub:
        case BinaryOp::Min:
        case BinaryOp::Max: return gcd128(divisor_impl(ctx, n->a), divisor_impl(ctx, n->b));
        case BinaryOp::Mul: {
          // d1 | a and d2 | b imply d1 * d2 | a * b; when the product is too large either
          // factor alone still divides it.
          i128 x = divisor_impl(ctx, n->a), y = divisor_impl(ctx, n->b);
          if (x == 0 || y == 0) return 0;
          i128 p = x * y;  // both <= 2^62: fits
          return p <= kDivCap ? p : std::max(x, y);
        }
        case BinaryOp::Shl: {
          auto k = const_int(n->b);
          i128 x = divisor_impl(ctx, n->a);
          if (!k || *k < 0 || *k >= 62) return x == 0 ? 0 : 1;
          i128 p = x << int(*k);
          return p <= kDivCap ? p : x;
        }
        case BinaryOp::Div:
        case BinaryOp::FloorDiv: {
          // An exact quotient: if c | d | a, then a / c is a multiple of d / c.
          auto c = const_int(n->b);
          i128 x = divisor_impl(ctx, n->a);
          if (!c || *c == 0) return 1;
          if (x == 0) return 0;
          return x % abs128(*c) == 0 ? x / abs128(*c) : 1;
        }
        case BinaryOp::Mod:
        case BinaryOp::FloorMod: {
          // a % c = a - q * c, a multiple of gcd(d, c).
          auto c = const_int(n->b);
          if (!c || *c == 0) return 1;
          return gcd128(divisor_impl(ctx, n->a), *c);
        }
        default: return 1;
      }
    }
    default: return 1;
  }
}

}  // namespace

// --- BoundContext ---------------------------------------------------------------------

void BoundContext::set_range(const Var& v, Interval r) { ranges_[v.get()] = r; }
void BoundContext::set_divisor(const Var& v, int64_t d) { divisors_[v.get()] = d; }

Interval BoundContext::range_of(const Var& v) const {
  auto it = ranges_.find(v.get());
  return it == ranges_.end() ? Interval::everything() : it->second;
}

int64_t BoundContext::divisor_of(const Var& v) const {
  auto it = divisors_.find(v.get());
  if (it == divisors_.end() || it->second == 0 || it->second == std::numeric_limits<int64_t>::min()) return 1;
  return it->second < 0 ? -it->second : it->second;
}

Interval BoundContext::bound(const Expr& e) const {
  MemoScope memo(*this);
  IV r = bound_iv(*this, e);
  constexpr i128 lo64 = -(i128(1) << 63), hi64 = (i128(1) << 63) - 1;
  // A uint64 interval above INT64_MAX cannot be written in int64: report nothing.
  if (r.lo > hi64 || r.hi < lo64) return Interval::everything();
  Interval out;
  if (r.lo > -kInf && r.lo >= lo64) out.lo = int64_t(r.lo);
  if (r.hi < kInf && r.hi <= hi64) out.hi = int64_t(r.hi);
  return out;
}

int64_t BoundContext::divisor(const Expr& e) const {
  MemoScope memo(*this);
  i128 d = divisor_impl(*this, e);
  if (d == 0) return int64_t(1) << 30;
  return int64_t(std::min(d, kDivCap));
}

std::optional<bool> BoundContext::prove(const Expr& cond) const {
  MemoScope memo(*this);
  return prove_impl(*this, cond);
}

// --- the simplifier -------------------------------------------------------------------

namespace {

Expr mk_bin(BinaryOp op, const Expr& a, const Expr& b, DataType t) {
  return Expr(std::make_shared<BinaryNode>(op, a, b, t));
}
Expr mk_un(UnaryOp op, const Expr& a, DataType t) { return Expr(std::make_shared<UnaryNode>(op, a, t)); }
Expr mk_cast(const Expr& a, DataType t) {
  if (a.dtype() == t) return a;
  return Expr(std::make_shared<CastNode>(a, t));
}
// An integer constant of type t holding v modulo 2^bits.
Expr mk_int(i128 v, DataType t) { return int_const(int64_t(uint64_t(v)), t); }

bool is_zero(const Expr& e) {
  if (auto c = const_int(e)) return *c == 0;
  return false;
}
bool is_one(const Expr& e) {
  if (auto c = const_int(e)) return *c == 1;
  return false;
}
// -1 in the type's arithmetic: all bits set.
bool is_all_ones(const Expr& e) {
  auto n = e.as<IntImmNode>();
  if (!n) return false;
  return n->value == int_const(-1, n->dtype).int_value();
}
bool is_float_const(const Expr& e, double v) {
  auto f = e.as<FloatImmNode>();
  return f && f->value == v;
}
std::optional<bool> const_bool(const Expr& e) {
  if (auto b = e.as<BoolImmNode>()) return b->value;
  return std::nullopt;
}

// The number of nodes of e as a tree, counting no further than `cap` (shared subtrees
// would make an exact count exponential).
size_t node_count(const Expr& e, size_t cap = 4096) {
  size_t n = 0;
  std::vector<const ExprNode*> stack{e.get()};
  while (!stack.empty() && n < cap) {
    const ExprNode* x = stack.back();
    stack.pop_back();
    ++n;
    switch (x->kind) {
      case ExprKind::Unary: stack.push_back(static_cast<const UnaryNode*>(x)->a.get()); break;
      case ExprKind::Binary:
        stack.push_back(static_cast<const BinaryNode*>(x)->a.get());
        stack.push_back(static_cast<const BinaryNode*>(x)->b.get());
        break;
      case ExprKind::Select: {
        auto s = static_cast<const SelectNode*>(x);
        stack.insert(stack.end(), {s->cond.get(), s->t.get(), s->f.get()});
        break;
      }
      case ExprKind::Cast: stack.push_back(static_cast<const CastNode*>(x)->a.get()); break;
      case ExprKind::Call:
        for (auto& a : static_cast<const CallNode*>(x)->args) stack.push_back(a.get());
        break;
      default: break;
    }
  }
  return n;
}

// A value produced by evaluate() as a constant of type t.
Expr value_const(const EvalValue& v, DataType t) {
  if (t.is_bool()) return bool_const(v.i != 0);
  if (t.is_integer()) return int_const(v.i, t);
  if (t.is_float()) return float_const(v.f, t);
  return Expr();
}

// Folds a node whose operands are all constants with the reference semantics; undefined
// results (division by zero, shifts out of range) stay unfolded.
Expr fold(const Expr& e) {
  if (e.dtype().is_pointer()) return Expr();
  auto v = evaluate(e, [](const Var&) -> std::optional<EvalValue> { return std::nullopt; });
  if (!v) return Expr();
  return value_const(*v, e.dtype());
}

// Integer types whose every value another type can hold: casting through `mid` then loses
// nothing.
bool widens(DataType from, DataType mid) {
  if (from.is_bool()) return mid.is_integer() || mid.is_bool();
  if (!from.is_integer() || !mid.is_integer()) return false;
  if (from.is_int() == mid.is_int()) return mid.bits() >= from.bits();
  return from.is_uint() && mid.is_int() && mid.bits() > from.bits();
}

BinaryOp flip(BinaryOp op) {
  switch (op) {
    case BinaryOp::Lt: return BinaryOp::Gt;
    case BinaryOp::Le: return BinaryOp::Ge;
    case BinaryOp::Gt: return BinaryOp::Lt;
    case BinaryOp::Ge: return BinaryOp::Le;
    default: return op;
  }
}
BinaryOp negate(BinaryOp op) {
  switch (op) {
    case BinaryOp::Lt: return BinaryOp::Ge;
    case BinaryOp::Le: return BinaryOp::Gt;
    case BinaryOp::Gt: return BinaryOp::Le;
    case BinaryOp::Ge: return BinaryOp::Lt;
    case BinaryOp::Eq: return BinaryOp::Ne;
    case BinaryOp::Ne: return BinaryOp::Eq;
    default: return op;
  }
}
bool commutative(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Min || op == BinaryOp::Max ||
         op == BinaryOp::BitAnd || op == BinaryOp::BitOr || op == BinaryOp::BitXor;
}

// A sum over Z / 2^bits: Add, Sub, Neg and multiplication by constants are ring operations,
// so regrouping and cancelling them is exact whatever wraps. Coefficients are kept as
// uint64 (mod 2^64, which reduces to mod 2^bits when the constants are built).
struct ModLin {
  std::vector<std::pair<Expr, uint64_t>> terms;
  uint64_t c = 0;
  int budget = kWalkBudget;
  void add(const Expr& atom, uint64_t k) {
    for (auto& [a, coef] : terms) {
      if (structural_equal(a, atom)) {
        coef += k;
        return;
      }
    }
    terms.emplace_back(atom, k);
  }
};

void collect_mod(const Expr& e, uint64_t k, DataType t, ModLin& out) {
  if (--out.budget < 0) return;  // checked by the caller
  if (e.dtype() == t) {
    if (auto c = e.as<IntImmNode>()) {
      out.c += k * uint64_t(c->value);
      return;
    }
    if (auto b = e.as<BinaryNode>()) {
      if (b->op == BinaryOp::Add) {
        collect_mod(b->a, k, t, out);
        collect_mod(b->b, k, t, out);
        return;
      }
      if (b->op == BinaryOp::Sub) {
        collect_mod(b->a, k, t, out);
        collect_mod(b->b, 0 - k, t, out);
        return;
      }
      if (b->op == BinaryOp::Mul && b->b.is_int_const()) {
        collect_mod(b->a, k * uint64_t(b->b.int_value()), t, out);
        return;
      }
      if (b->op == BinaryOp::Mul && b->a.is_int_const()) {
        collect_mod(b->b, k * uint64_t(b->a.int_value()), t, out);
        return;
      }
    }
    if (auto u = e.as<UnaryNode>(); u && u->op == UnaryOp::Neg) {
      collect_mod(u->a, 0 - k, t, out);
      return;
    }
  }
  out.add(e, k);
}

// Builds sum(coef * atom) + c in type t: positive terms first, then subtractions, then the
// constant, so that `x - y + 3` reads naturally. Exact modulo 2^bits.
Expr build_sum(const std::vector<std::pair<Expr, int64_t>>& terms, int64_t c, DataType t) {
  Expr acc;
  // Atoms of another type come through value-preserving casts (or cancel out): casting them
  // to t reduces them modulo 2^bits, which keeps the sum exact modulo 2^bits.
  auto term = [&](const Expr& atom, i128 k) {
    return k == 1 ? mk_cast(atom, t) : mk_bin(BinaryOp::Mul, mk_cast(atom, t), mk_int(k, t), t);
  };
  // A negative coefficient prints as a subtraction of its magnitude, unless the magnitude
  // is not a value of t (-INT_MIN).
  i128 tmin = type_iv(t).lo;
  auto neg_ok = [&](int64_t k) { return k < 0 && (t.is_uint() || i128(k) > tmin); };
  for (auto& [atom, k] : terms) {
    if (k == 0 || neg_ok(k)) continue;
    Expr x = term(atom, k);
    acc = acc.defined() ? mk_bin(BinaryOp::Add, acc, x, t) : x;
  }
  if (!acc.defined() && c != 0 && !neg_ok(c)) {
    // No positive term: start from the constant, as in `3 - x`.
    acc = mk_int(c, t);
    c = 0;
  }
  for (auto& [atom, k] : terms) {
    if (k == 0 || !neg_ok(k)) continue;
    Expr x = term(atom, -i128(k));
    acc = acc.defined() ? mk_bin(BinaryOp::Sub, acc, x, t) : mk_un(UnaryOp::Neg, x, t);
  }
  if (!acc.defined()) return mk_int(c, t);
  if (c == 0) return acc;
  if (neg_ok(c)) return mk_bin(BinaryOp::Sub, acc, mk_int(-i128(c), t), t);
  return mk_bin(BinaryOp::Add, acc, mk_int(c, t), t);
}

class Simplifier {
 public:
  explicit Simplifier(const BoundContext& ctx) : ctx_(ctx) {}

  Expr visit(const Expr& e) {
    if (!e.defined()) return e;
    auto it = memo_.find(e.get());
    if (it != memo_.end()) return it->second;
    Expr r = visit_children(e);
    r = rewrite(r, 8);
    memo_.emplace(e.get(), r);
    keep_.push_back(e);  // keeps the memo key alive
    return r;
  }

 private:
  const BoundContext& ctx_;
  std::unordered_map<const ExprNode*, Expr> memo_;
  std::vector<Expr> keep_;

  Expr visit_children(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::Unary: {
        auto n = e.as<UnaryNode>();
        Expr a = visit(n->a);
        return a.same_as(n->a) ? e : mk_un(n->op, a, n->dtype);
      }
      case ExprKind::Binary: {
        auto n = e.as<BinaryNode>();
        Expr a = visit(n->a), b = visit(n->b);
        return a.same_as(n->a) && b.same_as(n->b) ? e : mk_bin(n->op, a, b, n->dtype);
      }
      case ExprKind::Select: {
        auto n = e.as<SelectNode>();
        Expr c = visit(n->cond), t = visit(n->t), f = visit(n->f);
        if (c.same_as(n->cond) && t.same_as(n->t) && f.same_as(n->f)) return e;
        return Expr(std::make_shared<SelectNode>(c, t, f, n->dtype));
      }
      case ExprKind::Cast: {
        auto n = e.as<CastNode>();
        Expr a = visit(n->a);
        return a.same_as(n->a) ? e : Expr(std::make_shared<CastNode>(a, n->dtype));
      }
      case ExprKind::Call: {
        auto n = e.as<CallNode>();
        std::vector<Expr> args;
        bool changed = false;
        for (auto& a : n->args) {
          args.push_back(visit(a));
          changed |= !args.back().same_as(a);
        }
        return changed ? Expr(std::make_shared<CallNode>(n->name, std::move(args), n->dtype)) : e;
      }
      default: return e;
    }
  }

  // Applies the rules to a node whose operands are simplified. A rule that builds a new node
  // from simplified parts hands it back here (with less fuel) since it may enable more.
  Expr rewrite(const Expr& e, int fuel) {
    Expr r = rules(e);
    if (r.defined() && !r.same_as(e)) {
      if (fuel > 0 && !r.is_const() && !r.as<VarNode>()) return rewrite(r, fuel - 1);
      return r;
    }
    return finish(e);
  }

  // Rules that apply to any node once the specific ones are done: an integer expression
  // whose interval is a single value is that value, and a decided condition is a constant.
  Expr finish(const Expr& e) {
    if (e.is_const()) return e;
    DataType t = e.dtype();
    if (t.is_integer()) {
      IV r = bound_iv(ctx_, e);
      if (r.is_exact()) return mk_int(r.lo, t);
    } else if (t.is_bool()) {
      if (auto p = prove_impl(ctx_, e)) return bool_const(*p);
    }
    return e;
  }

  bool all_const(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::Unary: return e.as<UnaryNode>()->a.is_const();
      case ExprKind::Binary: return e.as<BinaryNode>()->a.is_const() && e.as<BinaryNode>()->b.is_const();
      case ExprKind::Select: {
        auto n = e.as<SelectNode>();
        return n->cond.is_const() && n->t.is_const() && n->f.is_const();
      }
      case ExprKind::Cast: return e.as<CastNode>()->a.is_const();
      case ExprKind::Call:
        for (auto& a : e.as<CallNode>()->args)
          if (!a.is_const()) return false;
        return true;
      default: return false;
    }
  }

  // Returns a rewritten expression, or an undefined one when no rule applies.
  Expr rules(const Expr& e) {
    if (all_const(e)) {
      if (Expr c = fold(e); c.defined()) return c;
    }
    switch (e.kind()) {
      case ExprKind::Unary: return unary_rules(*e.as<UnaryNode>());
      case ExprKind::Binary: return binary_rules(e, *e.as<BinaryNode>());
      case ExprKind::Select: return select_rules(*e.as<SelectNode>());
      case ExprKind::Cast: return cast_rules(*e.as<CastNode>());
      default: return Expr();
    }
  }

  // A subexpression may replace the node only when it has the node's type.
  static Expr same_type(const Expr& r, DataType t) { return r.dtype() == t ? r : Expr(); }

  Expr unary_rules(const UnaryNode& n) {
    DataType t = n.dtype;
    auto inner = n.a.as<UnaryNode>();
    switch (n.op) {
      case UnaryOp::Neg:
      case UnaryOp::BitNot:
        // -(-x) == x and ~~x == x, in wrapping integer and in float arithmetic.
        if (inner && inner->op == n.op) return same_type(inner->a, t);
        return Expr();
      case UnaryOp::Not:
        // !!x == x for a bool x (for an integer x it would change the type).
        if (inner && inner->op == UnaryOp::Not) return same_type(inner->a, t);
        // !(a < b) == (a >= b) for integers; not for floats, where NaN makes both false.
        if (auto c = n.a.as<BinaryNode>(); c && is_comparison(c->op) && c->a.dtype().is_integer())
          return mk_bin(negate(c->op), c->a, c->b, dtypes::boolean);
        return Expr();
    }
    return Expr();
  }

  Expr select_rules(const SelectNode& n) {
    DataType t = n.dtype;
    // A decided condition picks its branch; the other one is never evaluated.
    if (auto p = prove_impl(ctx_, n.cond)) return same_type(*p ? n.t : n.f, t);
    // Both branches alike: the condition does not matter.
    if (structural_equal(n.t, n.f)) return same_type(n.t, t);
    // select(!c, a, b) == select(c, b, a).
    if (auto u = n.cond.as<UnaryNode>(); u && u->op == UnaryOp::Not && u->a.dtype().is_bool())
      return Expr(std::make_shared<SelectNode>(u->a, n.f, n.t, t));
    // select(c, true, false) == c and select(c, false, true) == !c.
    auto bt = const_bool(n.t), bf = const_bool(n.f);
    if (t.is_bool() && bt && bf && *bt != *bf && n.cond.dtype().is_bool())
      return *bt ? n.cond : mk_un(UnaryOp::Not, n.cond, dtypes::boolean);
    return Expr();
  }

  Expr cast_rules(const CastNode& n) {
    DataType t = n.dtype;
    if (n.a.dtype() == t) return n.a;
    // cast(cast(x, mid), t) == cast(x, t) when the inner cast keeps every value of x.
    if (auto inner = n.a.as<CastNode>(); inner && widens(inner->a.dtype(), inner->dtype) &&
                                         (t.is_integer() || t.is_bool() || t.is_float()))
      return mk_cast(inner->a, t);
    return Expr();
  }

  // An integer type's min/max comparisons of two constants, with the type's semantics.
  Expr fold_bin(BinaryOp op, const Expr& a, const Expr& b, DataType t) { return fold(mk_bin(op, a, b, t)); }

  Expr binary_rules(const Expr& e, const BinaryNode& n) {
    BinaryOp op = n.op;
    DataType t = n.dtype;
    const Expr &a = n.a, &b = n.b;
    bool integer = t.is_integer() && a.dtype() == t && b.dtype() == t;

    // Canonical order: constants to the right. Exact for integer commutative operators
    // (wrapping + and * commute), and for any comparison with the operator mirrored.
    if (a.is_const() && !b.is_const()) {
      if (integer && commutative(op)) return mk_bin(op, b, a, t);
      if (is_comparison(op) && !a.dtype().is_pointer()) return mk_bin(flip(op), b, a, t);
    }

    if (is_logical(op)) return logical_rules(n);
    if (is_comparison(op)) return comparison_rules(n);
    if (t.is_float()) return float_rules(n);
    if (!integer) return Expr();

    switch (op) {
      case BinaryOp::Add:
      case BinaryOp::Sub: return additive_rules(e, n);
      case BinaryOp::Mul:
        // x * 0 == 0 and x * 1 == x in wrapping arithmetic (for floats x * 0 is NaN for
        // an infinite x, so floats are handled elsewhere).
        if (is_zero(b)) return b;
        if (is_one(b)) return a;
        // x * -1 == -x modulo 2^bits.
        if (is_all_ones(b) && t.is_int()) return mk_un(UnaryOp::Neg, a, t);
        // (x * c1) * c2 == x * (c1 * c2): multiplication modulo 2^bits is associative.
        if (auto m = a.as<BinaryNode>(); m && m->op == BinaryOp::Mul && m->b.is_int_const() && b.is_int_const())
          return mk_bin(BinaryOp::Mul, m->a, fold_bin(BinaryOp::Mul, m->b, b, t), t);
        return Expr();
      case BinaryOp::Div:
      case BinaryOp::FloorDiv: return division_rules(n);
      case BinaryOp::Mod:
      case BinaryOp::FloorMod: return division_rules(n);
      case BinaryOp::Min:
      case BinaryOp::Max: {
        bool is_min = op == BinaryOp::Min;
        if (structural_equal(a, b)) return a;
        // Ordered operands: the bounds decide which one wins.
        if (auto le = prove_impl(ctx_, mk_bin(BinaryOp::Le, a, b, dtypes::boolean)); le && *le) return is_min ? a : b;
        if (auto ge = prove_impl(ctx_, mk_bin(BinaryOp::Ge, a, b, dtypes::boolean)); ge && *ge) return is_min ? b : a;
        // min(min(x, c1), c2) == min(x, min(c1, c2)): min and max are associative.
        if (auto m = a.as<BinaryNode>(); m && m->op == op && m->b.is_int_const() && b.is_int_const())
          return mk_bin(op, m->a, fold_bin(op, m->b, b, t), t);
        return Expr();
      }
      case BinaryOp::BitAnd:
        if (is_zero(b)) return b;                  // x & 0 == 0
        if (is_all_ones(b)) return a;              // x & ~0 == x
        if (structural_equal(a, b)) return a;      // x & x == x
        // x & (2^k - 1) == x when 0 <= x < 2^k: the mask clears no set bit.
        if (auto c = const_int(b); c && *c > 0 && ((*c + 1) & *c) == 0) {
          IV r = operand_iv(ctx_, a);
          if (r.lo >= 0 && r.hi <= *c) return a;
        }
        return Expr();
      case BinaryOp::BitOr:
        if (is_zero(b)) return a;                  // x | 0 == x
        if (is_all_ones(b)) return b;              // x | ~0 == ~0
        if (structural_equal(a, b)) return a;      // x | x == x
        return Expr();
      case BinaryOp::BitXor:
        if (is_zero(b)) return a;                  // x ^ 0 == x
        if (structural_equal(a, b)) return mk_int(0, t);  // x ^ x == 0
        return Expr();
      case BinaryOp::Shl:
      case BinaryOp::Shr:
        if (is_zero(b)) return a;                  // a shift by 0 is always defined
        return Expr();
      default: return Expr();
    }
  }

  Expr float_rules(const BinaryNode& n) {
    const Expr &a = n.a, &b = n.b;
    DataType t = n.dtype;
    if (a.dtype() != t || b.dtype() != t) return Expr();
    switch (n.op) {
      // Exact in IEEE arithmetic for every x, NaN, infinities and -0 included. (x + 0 is not:
      // -0 + 0 == +0; nor x * 0: inf * 0 is NaN.)
      case BinaryOp::Sub:
        if (is_float_const(b, 0.0) && !std::signbit(b.as<FloatImmNode>()->value)) return a;
        return Expr();
      case BinaryOp::Mul:
        if (is_float_const(b, 1.0)) return a;
        if (is_float_const(a, 1.0)) return b;
        return Expr();
      case BinaryOp::Div:
        if (is_float_const(b, 1.0)) return a;
        return Expr();
      case BinaryOp::Min:
      case BinaryOp::Max:
        if (structural_equal(a, b)) return a;
        return Expr();
      default: return Expr();
    }
  }

  Expr logical_rules(const BinaryNode& n) {
    const Expr &a = n.a, &b = n.b;
    bool is_and = n.op == BinaryOp::And;
    auto ca = const_bool(a), cb = const_bool(b);
    // The absorbing constant decides the result on either side: `false && x` never evaluates
    // x, and `x && false` is false wherever x is defined.
    if ((ca && *ca != is_and) || (cb && *cb != is_and)) return bool_const(!is_and);
    // The neutral constant drops out: `true && x` is x, and `x && true` is x.
    if (ca) return same_type(b, dtypes::boolean);
    if (cb) return same_type(a, dtypes::boolean);
    // x && x == x || x == x (operands are pure).
    if (structural_equal(a, b)) return same_type(a, dtypes::boolean);
    return Expr();
  }

  Expr comparison_rules(const BinaryNode& n) {
    if (auto p = prove_impl(ctx_, mk_bin(n.op, n.a, n.b, dtypes::boolean))) return bool_const(*p);
    return Expr();
  }

  // k * c * (x / c) + k * (x % c) == k * x: the quotient and remainder of one division
  // recombine (x == (x / c) * c + x % c holds for truncating and for flooring division, and
  // modulo 2^bits also for the wrapping INT_MIN / -1).
  static void recombine_div_mod(ModLin& l, DataType t) {
    for (size_t m = 0; m < l.terms.size(); ++m) {
      auto mod = l.terms[m].first.as<BinaryNode>();
      uint64_t k = l.terms[m].second;
      if (!mod || mod->dtype != t || (mod->op != BinaryOp::Mod && mod->op != BinaryOp::FloorMod) || !mod->b.is_int_const() ||
          signed_rep(k, t.bits()) == 0)
        continue;
      BinaryOp div_op = mod->op == BinaryOp::Mod ? BinaryOp::Div : BinaryOp::FloorDiv;
      uint64_t want = k * uint64_t(mod->b.int_value());
      for (size_t d = 0; d < l.terms.size(); ++d) {
        auto div = l.terms[d].first.as<BinaryNode>();
        if (!div || div->op != div_op || signed_rep(l.terms[d].second - want, t.bits()) != 0 ||
            !structural_equal(div->a, mod->a) || !structural_equal(div->b, mod->b))
          continue;
        l.terms[d].second = 0;
        l.terms[m].second = 0;
        Expr x = mod->a;
        l.add(x, k);
        break;
      }
    }
  }

  // + and - over Z / 2^bits.
  Expr additive_rules(const Expr& e, const BinaryNode& n) {
    DataType t = n.dtype;
    const Expr &a = n.a, &b = n.b;
    if (is_zero(b)) return a;  // x + 0 == x - 0 == x
    if (n.op == BinaryOp::Sub) {
      if (structural_equal(a, b)) return mk_int(0, t);              // x - x == 0
      if (is_zero(a)) return mk_un(UnaryOp::Neg, b, t);             // 0 - x == -x
    }
    // Regroup the whole sum: equal terms merge or cancel and constants gather into one.
    // Adopted only when it shrinks the tree, so that a sum already in a good shape keeps
    // the form its author gave it.
    ModLin l;
    collect_mod(e, 1, t, l);
    if (l.budget < 0) return Expr();
    recombine_div_mod(l, t);
    std::vector<std::pair<Expr, int64_t>> terms;
    for (auto& [atom, k] : l.terms) terms.emplace_back(atom, signed_rep(k, t.bits()));
    Expr r = build_sum(terms, signed_rep(l.c, t.bits()), t);
    size_t before = node_count(e);
    if (before < 4096 && node_count(r) < before) return r;
    // Constants move outward: (x + c) + y == (x + y) + c, so that they can meet others.
    if (n.op == BinaryOp::Add) {
      if (auto m = a.as<BinaryNode>(); m && m->op == BinaryOp::Add && m->b.is_int_const() && !b.is_int_const())
        return mk_bin(BinaryOp::Add, mk_bin(BinaryOp::Add, m->a, b, t), m->b, t);
    }
    return Expr();
  }

  // Builds sum(k * atom) + c in type t from a mathematical linear form.
  static Expr build_lin(const Lin& x, DataType t) {
    std::vector<std::pair<Expr, int64_t>> terms;
    for (auto& [atom, k] : x.terms) terms.emplace_back(atom, signed_rep(uint64_t(k), t.bits()));
    return build_sum(terms, signed_rep(uint64_t(x.c), t.bits()), t);
  }

  // N / c and N % c for a (negative) c that divides every term of N, as in (x * -4) / -4:
  // the quotient is exact, so truncation and flooring agree, the remainder is 0, and
  // building N / c term by term modulo 2^bits gives the wrapped quotient (INT_MIN / -1
  // included).
  Expr exact_division(const BinaryNode& n, i128 c) {
    DataType t = n.dtype;
    if (!t.is_int()) return Expr();
    Lin l;
    collect_math(ctx_, n.a, 1, l);
    if (!l.ok || l.c % c != 0) return Expr();
    Lin q;
    q.c = l.c / c;
    for (auto& [atom, k] : l.terms) {
      if (k % c != 0) return Expr();
      if (k != 0) q.terms.emplace_back(atom, k / c);
    }
    bool is_div = n.op == BinaryOp::Div || n.op == BinaryOp::FloorDiv;
    return is_div ? build_lin(q, t) : mk_int(0, t);
  }

  // Div, FloorDiv, Mod and FloorMod over integers.
  Expr division_rules(const BinaryNode& n) {
    BinaryOp op = n.op;
    DataType t = n.dtype;
    const Expr &a = n.a, &b = n.b;
    bool is_div = op == BinaryOp::Div || op == BinaryOp::FloorDiv;
    bool floor = (op == BinaryOp::FloorDiv || op == BinaryOp::FloorMod) && t.is_int();
    // x / 1 == x and x % 1 == 0.
    if (is_one(b)) return is_div ? a : mk_int(0, t);
    // x / -1 == -x (INT_MIN / -1 wraps to INT_MIN, like -INT_MIN), x % -1 == 0.
    if (is_all_ones(b) && t.is_int()) return is_div ? mk_un(UnaryOp::Neg, a, t) : mk_int(0, t);
    // 0 / y == 0 % y == 0 wherever y != 0, i.e. wherever the original is defined.
    if (is_zero(a)) return a;
    auto c = const_int(b);
    if (!c || *c == 0) return Expr();
    if (*c < 0) return exact_division(n, *c);
    // (x / c1) / c2 == x / (c1 * c2) for positive divisors, truncating or flooring alike.
    if (is_div) {
      if (auto inner = a.as<BinaryNode>(); inner && inner->op == op) {
        auto c1 = const_int(inner->b);
        if (c1 && *c1 > 0 && *c1 <= type_iv(t).hi / *c) return mk_bin(op, inner->a, mk_int(*c1 * *c, t), t);
      }
    }
    // (x % c1) % c2 == x % c2 when c2 divides c1 (both positive): x % c1 differs from x by
    // a multiple of c2 and, when truncating, has the sign of x (or is 0 exactly when x is
    // a multiple of c1, and so of c2).
    if (!is_div) {
      if (auto inner = a.as<BinaryNode>(); inner && inner->op == op) {
        auto c1 = const_int(inner->b);
        if (c1 && *c1 > 0 && *c1 % *c == 0) return mk_bin(op, inner->a, b, t);
      }
    }
    // Split the numerator N (as a non-wrapping linear form) into q * c + r, where the
    // coefficients of q's terms are multiples of c and the constant part of r is in [0, c).
    // If r's interval lies in [0, c) then N // c == q and N %% c == r exactly. Truncating
    // division agrees with flooring when N >= 0 (unsigned values always are).
    Lin l;
    collect_math(ctx_, a, 1, l);
    if (!l.ok) return Expr();
    Lin q, r;
    i128 cq = l.c / *c, cr = l.c % *c;
    if (cr < 0) {
      cr += *c;
      cq -= 1;
    }
    q.c = cq;
    r.c = cr;
    for (auto& [atom, k] : l.terms) {
      if (k == 0) continue;
      if (k % *c == 0) q.terms.emplace_back(atom, k / *c);
      else r.terms.emplace_back(atom, k);
    }
    IV rv = lin_iv(ctx_, r);
    if (rv.lo < 0 || rv.hi >= *c) return Expr();
    // An exact quotient (r == 0) involves no rounding; otherwise truncation needs N >= 0.
    if (!floor && t.is_int() && !(rv.lo == 0 && rv.hi == 0)) {
      IV nv = intersect(operand_iv(ctx_, a), lin_iv(ctx_, l));
      if (nv.lo < 0) return Expr();
    }
    if (is_div) return build_lin(q, t);
    // The remainder is the numerator itself when nothing divisible was split off.
    if (q.terms.empty() && q.c == 0) return a;
    return build_lin(r, t);
  }
};

}  // namespace

Expr simplify(const Expr& e, const BoundContext& ctx) {
  MemoScope memo(ctx);
  Simplifier s(ctx);
  return s.visit(e);
}

}  // namespace tilus
