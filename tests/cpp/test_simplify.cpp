// Tests of the scalar simplifier and its bound analysis.
//
// The central test is a brute-force check: random expression trees are simplified under
// known variable ranges, and the original and the simplified tree must evaluate alike for
// every assignment in those ranges. Targeted tests then show that each rule fires.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tilus/ir/expr.h"
#include "tilus/ir/simplify.h"

namespace tilus {
namespace {

size_t count_nodes(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::Unary: return 1 + count_nodes(e.as<UnaryNode>()->a);
    case ExprKind::Binary: return 1 + count_nodes(e.as<BinaryNode>()->a) + count_nodes(e.as<BinaryNode>()->b);
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      return 1 + count_nodes(n->cond) + count_nodes(n->t) + count_nodes(n->f);
    }
    case ExprKind::Cast: return 1 + count_nodes(e.as<CastNode>()->a);
    case ExprKind::Call: {
      size_t s = 1;
      for (auto& a : e.as<CallNode>()->args) s += count_nodes(a);
      return s;
    }
    default: return 1;
  }
}

using Env = std::function<std::optional<EvalValue>(const Var&)>;

// An environment binding vars[i] to values[i] (as int32).
Env env_of(const std::vector<Var>& vars, const std::vector<int64_t>& values) {
  return [vars, values](const Var& v) -> std::optional<EvalValue> {
    for (size_t i = 0; i < vars.size(); ++i)
      if (v.same_as(vars[i])) return EvalValue{vars[i].dtype(), values[i], 0.0};
    return std::nullopt;
  };
}

// --- the randomized brute-force test ----------------------------------------------------

// Random integer and boolean expression trees over a few int32 variables.
class ExprGen {
 public:
  ExprGen(std::vector<Var> vars, uint32_t seed) : vars_(std::move(vars)), rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t small(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Expr leaf() {
    if (pick(3) == 0) return Expr(int(small(-4, 8)));
    return vars_[pick(int(vars_.size()))];
  }

  Expr gen_int(int depth) {
    if (depth <= 0 || pick(6) == 0) return leaf();
    Expr a = gen_int(depth - 1);
    auto other = [&] { return pick(3) == 0 ? Expr(int(small(-4, 8))) : gen_int(depth - 1); };
    switch (pick(23)) {
      case 0: return a + other();
      case 1: return a - other();
      case 2: return a * other();
      case 3: return a / other();
      case 4: return a % other();
      case 5: return floor_div(a, other());
      case 6: return floor_mod(a, other());
      case 7: return min(a, other());
      case 8: return max(a, other());
      case 9: return select(gen_bool(depth - 1), a, other());
      case 10: return cast(a, dtypes::int64);
      case 11: return cast(a, dtypes::int8);
      case 12: return -a;
      case 13: return a & Expr(int(small(0, 15)));
      case 14: return a >> Expr(int(small(0, 3)));
      case 15: {
        // The tile-index shape: a * c + b, then divided or reduced by c.
        int64_t c = small(1, 8);
        Expr s = a * Expr(int(c)) + other();
        switch (pick(4)) {
          case 0: return s / Expr(int(c));
          case 1: return s % Expr(int(c));
          case 2: return floor_div(s, Expr(int(c)));
          default: return floor_mod(s, Expr(int(c)));
        }
      }
      case 16: return (a + Expr(int(small(-4, 8)))) + Expr(int(small(-4, 8)));
      case 17: return a - gen_int(depth - 1) + a;
      case 18: return cast(cast(a, dtypes::int8), dtypes::int32);
      case 19: {
        // Quotient and remainder that recombine, with either rounding.
        Expr c = Expr(int(small(-3, 8)));
        Expr k = Expr(int(small(-2, 3)));
        if (pick(2)) return a / c * c * k + a % c * k + other();
        return floor_div(a, c) * c + floor_mod(a, c);
      }
      case 20: {
        int64_t c2 = small(1, 4);
        Expr c1 = Expr(int(c2 * small(-1, 3)));
        return pick(2) ? (a % c1) % Expr(int(c2)) : floor_mod(floor_mod(a, c1), Expr(int(c2)));
      }
      case 21: return (a / Expr(int(small(1, 4)))) / Expr(int(small(-2, 4)));
      default: return a * Expr(int(small(-3, 5))) - other();
    }
  }

  Expr gen_bool(int depth) {
    if (depth <= 0 || pick(8) == 0) return pick(2) ? gen_int(0) < gen_int(0) : Expr(bool(pick(2)));
    switch (pick(10)) {
      case 0: return gen_int(depth - 1) < gen_int(depth - 1);
      case 1: return gen_int(depth - 1) <= Expr(int(small(-4, 12)));
      case 2: return gen_int(depth - 1) > gen_int(depth - 1);
      case 3: return gen_int(depth - 1) >= Expr(int(small(-4, 12)));
      case 4: return gen_int(depth - 1) == gen_int(depth - 1);
      case 5: return gen_int(depth - 1) != Expr(int(small(-4, 8)));
      case 6: return gen_bool(depth - 1) && gen_bool(depth - 1);
      case 7: return gen_bool(depth - 1) || gen_bool(depth - 1);
      case 8: return !gen_bool(depth - 1);
      default: return select(gen_bool(depth - 1), gen_bool(depth - 1), gen_bool(depth - 1));
    }
  }

 private:
  std::vector<Var> vars_;
  std::mt19937 rng_;
};

struct Range {
  int64_t lo, hi;
};

// Calls f(values) for every assignment of the ranges.
void for_each_assignment(const std::vector<Range>& ranges, const std::function<void(const std::vector<int64_t>&)>& f) {
  std::vector<int64_t> v(ranges.size());
  std::function<void(size_t)> rec = [&](size_t i) {
    if (i == ranges.size()) return f(v);
    for (int64_t x = ranges[i].lo; x <= ranges[i].hi; ++x) {
      v[i] = x;
      rec(i + 1);
    }
  };
  rec(0);
}

struct BruteForceStats {
  int trees = 0, shrunk = 0, to_const = 0;
  int64_t checked_values = 0;
};

std::string describe(const std::vector<Var>& vars, const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < vars.size(); ++i) s += vars[i].name() + "=" + std::to_string(values[i]) + " ";
  return s;
}

// Simplifies `trees` random trees under the ranges and checks them on every assignment.
BruteForceStats brute_force(const std::vector<Var>& vars, const std::vector<Range>& ranges, uint32_t seed,
                            int trees) {
  BoundContext ctx;
  for (size_t i = 0; i < vars.size(); ++i) ctx.set_range(vars[i], Interval::range(ranges[i].lo, ranges[i].hi));
  ExprGen gen(vars, seed);
  BruteForceStats st;
  for (int iter = 0; iter < trees; ++iter) {
    Expr e = iter % 4 == 3 ? gen.gen_bool(4) : gen.gen_int(4 + iter % 2);
    Expr s = simplify(e, ctx);
    // Simplifying the result again must keep the value as well.
    Expr s2 = simplify(s, ctx);
    EXPECT_EQ(s.dtype(), e.dtype()) << to_string(e) << "  =>  " << to_string(s);
    if (s.dtype() != e.dtype()) return st;
    ++st.trees;
    if (count_nodes(s) < count_nodes(e)) ++st.shrunk;
    if (s.is_const() && !e.is_const()) ++st.to_const;
    Interval b = ctx.bound(e);
    std::optional<bool> proved = e.dtype().is_bool() ? ctx.prove(e) : std::nullopt;
    bool failed = false;
    for_each_assignment(ranges, [&](const std::vector<int64_t>& values) {
      if (failed) return;
      Env env = env_of(vars, values);
      auto want = evaluate(e, env);
      if (!want) return;  // undefined (division by zero): nothing to preserve
      auto got = evaluate(s, env), again = evaluate(s2, env);
      std::string where = describe(vars, values) + "\n  original:   " + to_string(e) +
                          "\n  simplified: " + to_string(s);
      failed = true;
      ASSERT_TRUE(got.has_value()) << where;
      ASSERT_EQ(got->i, want->i) << where;
      ASSERT_EQ(got->dtype, want->dtype) << where;
      ASSERT_TRUE(again.has_value() && again->i == want->i) << where << "\n  again:      " << to_string(s2);
      // The bound analysis is sound too.
      // (uint64 values above INT64_MAX are stored by bit pattern.)
      __int128 value = want->dtype == dtypes::uint64 ? __int128(uint64_t(want->i)) : __int128(want->i);
      if (b.lo) {
        ASSERT_TRUE(value >= *b.lo) << "bound.lo " << *b.lo << " " << where;
      }
      if (b.hi) {
        ASSERT_TRUE(value <= *b.hi) << "bound.hi " << *b.hi << " " << where;
      }
      if (proved) {
        ASSERT_EQ(want->i, *proved ? 1 : 0) << "prove " << where;
      }
      failed = false;
      ++st.checked_values;
    });
    if (failed) return st;
  }
  return st;
}

TEST(SimplifyRandom, PreservesValueOnEveryAssignment) {
  Var x("x", dtypes::int32), y("y", dtypes::int32), z("z", dtypes::int32);
  const int kTrees = 4000;
  BruteForceStats st = brute_force({x, y, z}, {{-4, 7}, {0, 5}, {1, 3}}, 20240607, kTrees);
  ASSERT_EQ(st.trees, kTrees);
  // The simplifier must actually do something on these trees.
  EXPECT_GT(st.shrunk, kTrees / 2) << "shrunk " << st.shrunk << " of " << kTrees;
  EXPECT_GT(st.to_const, kTrees / 10) << "folded to constants " << st.to_const << " of " << kTrees;
  EXPECT_GT(st.checked_values, int64_t(kTrees) * 50);
}

// The same over variables of other types: unsigned (where subtraction wraps to huge
// values and comparisons are unsigned), int8 (where arithmetic wraps at 8 bits) and int64.
TEST(SimplifyRandom, PreservesValueWithMixedTypes) {
  Var u("u", dtypes::uint32), b("b", dtypes::int8), w("w", dtypes::int64);
  const int kTrees = 2000;
  BruteForceStats st = brute_force({u, b, w}, {{0, 5}, {-3, 4}, {-2, 9}}, 4242, kTrees);
  ASSERT_EQ(st.trees, kTrees);
  EXPECT_GT(st.shrunk, kTrees / 3) << "shrunk " << st.shrunk << " of " << kTrees;
}

// uint64 (bounds above INT64_MAX, constants such as 2^64 - 2), uint8 and int16.
TEST(SimplifyRandom, PreservesValueWithWideAndNarrowTypes) {
  Var u("u", dtypes::uint64), b("b", dtypes::uint8), w("w", dtypes::int16);
  const int kTrees = 1500;
  BruteForceStats st = brute_force({u, b, w}, {{0, 5}, {0, 7}, {-2, 9}}, 31337, kTrees);
  ASSERT_EQ(st.trees, kTrees);
  EXPECT_GT(st.shrunk, kTrees / 3) << "shrunk " << st.shrunk << " of " << kTrees;
}

// Without any known range, only the exact (range-free) rules may fire; they must hold for
// arbitrary values, including ones that wrap around int32 and int8.
TEST(SimplifyRandom, ExactRulesWithoutRanges) {
  Var x("x", dtypes::int32), y("y", dtypes::int32), z("z", dtypes::int32);
  std::vector<Var> vars = {x, y, z};
  BoundContext empty;
  ExprGen gen(vars, 77);
  std::vector<std::vector<int64_t>> samples;
  std::mt19937 rng(5);
  const int64_t special[] = {0, 1, -1, 2, 7, -8, 127, -128, 255, 2147483647, -2147483647 - 1, 1 << 30, 65536};
  for (int64_t a : special)
    for (int64_t b : {int64_t(0), int64_t(3), int64_t(-1), int64_t(2147483647)})
      samples.push_back({a, b, int64_t(rng() % 9) - 4});
  for (int i = 0; i < 40; ++i) samples.push_back({int32_t(rng()), int32_t(rng()) % 1000, int32_t(rng())});
  int shrunk = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Expr e = iter % 4 == 3 ? gen.gen_bool(4) : gen.gen_int(4);
    Expr s = simplify(e, empty);
    ASSERT_EQ(s.dtype(), e.dtype());
    if (count_nodes(s) < count_nodes(e)) ++shrunk;
    for (auto& values : samples) {
      Env env = env_of(vars, values);
      auto want = evaluate(e, env);
      if (!want) continue;
      auto got = evaluate(s, env);
      ASSERT_TRUE(got.has_value()) << to_string(e) << "  =>  " << to_string(s);
      ASSERT_EQ(got->i, want->i) << "x=" << values[0] << " y=" << values[1] << " z=" << values[2] << "\n  "
                                 << to_string(e) << "\n  " << to_string(s);
    }
  }
  EXPECT_GT(shrunk, 300);
}

// divisor() is a true divisor of every value (on trees that cannot overflow).
TEST(SimplifyRandom, DivisorDividesEveryValue) {
  Var x("x", dtypes::int32), y("y", dtypes::int32);
  BoundContext ctx;
  ctx.set_range(x, Interval::range(-6, 6));
  ctx.set_range(y, Interval::range(0, 8));
  ctx.set_divisor(x, 2);
  std::mt19937 rng(99);
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  std::function<Expr(int)> gen = [&](int d) -> Expr {
    if (d == 0 || pick(5) == 0) {
      switch (pick(4)) {
        case 0: return x;
        case 1: return y * Expr(pick(4) + 1);
        case 2: return Expr(pick(9) * 2);
        default: return Expr(pick(3) * 3);
      }
    }
    Expr a = gen(d - 1), b = gen(d - 1);
    switch (pick(8)) {
      case 0: return a + b;
      case 1: return a - b;
      case 2: return a * b;
      case 3: return min(a, b);
      case 4: return max(a, b);
      case 5: return -a;
      case 6: return a % Expr(pick(6) + 2);
      default: return select(x < y, a, b);
    }
  };
  int nontrivial = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    Expr e = gen(3);
    int64_t d = ctx.divisor(e);
    ASSERT_GE(d, 1);
    if (d > 1) ++nontrivial;
    for (int64_t xv = -6; xv <= 6; xv += 2)
      for (int64_t yv = 0; yv <= 8; ++yv) {
        auto v = evaluate(e, env_of({x, y}, {xv, yv}));
        if (!v) continue;
        ASSERT_EQ(v->i % d, 0) << to_string(e) << " divisor " << d << " x=" << xv << " y=" << yv;
      }
  }
  EXPECT_GT(nontrivial, 200);
}

// --- targeted rules -------------------------------------------------------------------

class SimplifyRules : public ::testing::Test {
 protected:
  Var i{"i", dtypes::int32}, j{"j", dtypes::int32}, n{"n", dtypes::int32}, x{"x", dtypes::int32};
  Var y{"y", dtypes::int32};
  Var f{"f", dtypes::float32}, p{"p", dtypes::boolean}, q{"q", dtypes::boolean};
  BoundContext ctx;
  void SetUp() override {
    ctx.set_range(i, Interval::range(0, 63));
    ctx.set_range(j, Interval::range(0, 15));
  }
  Expr s(const Expr& e) { return simplify(e, ctx); }
  std::string str(const Expr& e) { return to_string(simplify(e, ctx)); }
  static bool is_true(const Expr& e) { return e.as<BoolImmNode>() && e.as<BoolImmNode>()->value; }
  static bool is_false(const Expr& e) { return e.as<BoolImmNode>() && !e.as<BoolImmNode>()->value; }
};

TEST_F(SimplifyRules, BoundedComparisonsFold) {
  EXPECT_TRUE(is_true(s(i < 64)));
  EXPECT_TRUE(is_true(s(i >= 0)));
  EXPECT_TRUE(is_false(s(i > 63)));
  EXPECT_TRUE(is_false(s(i == 64)));
  EXPECT_TRUE(is_true(s(i != -1)));
  EXPECT_TRUE(is_true(s(i * 16 + j < 1024)));
  EXPECT_TRUE(is_true(s(i <= i)));
  EXPECT_TRUE(is_true(s(i < i + 1)));             // cancels i, whatever i is
  EXPECT_TRUE(is_true(s(i * 16 + j < i * 16 + 16)));  // the terms in i cancel
  EXPECT_TRUE(is_true(s(64 > i)));                // constant on the left
  // Undecidable comparisons stay.
  EXPECT_EQ(str(i < n), "i < n");
  EXPECT_EQ(str(i < 32), "i < 32");
  EXPECT_EQ(str(x < 5), "x < 5");
  EXPECT_EQ(str(5 > x), "x < 5");  // only mirrored
  // An unknown variable plus one might wrap: no folding.
  EXPECT_EQ(str(x < x + 1), "x < x + 1");
}

TEST_F(SimplifyRules, BoundedDivisionAndRemainder) {
  EXPECT_TRUE(s(i / 64).is_int_const(0));
  EXPECT_TRUE(s(floor_div(i, 64)).is_int_const(0));
  EXPECT_TRUE(s(i % 64).same_as(i));
  EXPECT_TRUE(s(floor_mod(i, 64)).same_as(i));
  EXPECT_TRUE(s((i * 4) / 4).same_as(i));
  EXPECT_TRUE(s((i * 4) % 4).is_int_const(0));
  EXPECT_TRUE(s(floor_div(i * 4, 4)).same_as(i));
  EXPECT_TRUE(s(floor_mod(i * 4, 4)).is_int_const(0));
  // (i * 16 + j) / 16 == i and % 16 == j when 0 <= j < 16.
  EXPECT_TRUE(s((i * 16 + j) / 16).same_as(i));
  EXPECT_TRUE(s((i * 16 + j) % 16).same_as(j));
  EXPECT_TRUE(s(floor_div(j + i * 16, 16)).same_as(i));
  EXPECT_EQ(str((i * 32 + j) / 16), "i * 2");
  EXPECT_EQ(str((i * 32 + j + 16) / 16), "i * 2 + 1");
  EXPECT_EQ(str((i * 32 + j + 16) % 16), "j");
  EXPECT_EQ(str(i / 4 / 4), "i / 16");
  EXPECT_EQ(str(floor_div(floor_div(x, 4), 8)), "x // 32");
  EXPECT_EQ(str(x % 32 % 8), "x % 8");
  EXPECT_EQ(str(x % 32 % 5), "x % 32 % 5");
  // Quotient and remainder recombine, whatever x is.
  EXPECT_TRUE(s(x / 32 * 32 + x % 32).same_as(x));
  EXPECT_TRUE(s(floor_div(x, 8) * 8 + floor_mod(x, 8)).same_as(x));
  EXPECT_EQ(str(x / 8 * 16 + x % 8 * 2 + y), "x * 2 + y");
  EXPECT_EQ(str(x / 8 * 8 + floor_mod(x, 8)), "x / 8 * 8 + floor_mod(x, 8)");  // mixed roundings
  // The remainder can reach 16: no folding.
  EXPECT_EQ(str((i * 16 + j + 1) / 16), "(i * 16 + j + 1) / 16");
  // Unknown sign: truncating division keeps its form, flooring folds.
  Expr m = i - 32;  // in [-32, 31]
  EXPECT_EQ(str((m * 8) / 8), "i - 32");  // exact quotient: no rounding involved
  EXPECT_EQ(str((m * 8 + j % 8) / 8), "((i - 32) * 8 + j % 8) / 8");
  EXPECT_EQ(str(floor_div(m * 8 + j % 8, 8)), "i - 32");
  // Negative divisors: exact quotients only.
  EXPECT_TRUE(s((i * -4) / -4).same_as(i));
  EXPECT_EQ(str(floor_div(i * 8 - 16, -4)), "4 - i * 2");
  EXPECT_TRUE(s(floor_mod(i * 8, -4)).is_int_const(0));
  EXPECT_EQ(str((i * 8 + 1) / -4), "(i * 8 + 1) / -4");
  // Without bounds the product may wrap: (x * 4) / 4 is not x.
  EXPECT_EQ(str((x * 4) / 4), "x * 4 / 4");
  EXPECT_EQ(str(x % 64), "x % 64");
}

TEST_F(SimplifyRules, Identities) {
  EXPECT_TRUE(s(x + 0).same_as(x));
  EXPECT_TRUE(s(0 + x).same_as(x));
  EXPECT_TRUE(s(x - 0).same_as(x));
  EXPECT_TRUE(s(x * 1).same_as(x));
  EXPECT_TRUE(s(1 * x).same_as(x));
  EXPECT_TRUE(s(x * 0).is_int_const(0));
  EXPECT_TRUE(s(0 * x).is_int_const(0));
  EXPECT_TRUE(s(x / 1).same_as(x));
  EXPECT_TRUE(s(x % 1).is_int_const(0));
  EXPECT_TRUE(s(floor_mod(x, 1)).is_int_const(0));
  EXPECT_TRUE(s(x - x).is_int_const(0));
  EXPECT_TRUE(s((x + y) - x).same_as(y));
  EXPECT_TRUE(s(min(x, x)).same_as(x));
  EXPECT_TRUE(s(max(x, x)).same_as(x));
  EXPECT_TRUE(s(-(-x)).same_as(x));
  EXPECT_TRUE(s(~(~x)).same_as(x));
  EXPECT_TRUE(s(~(~p)).same_as(p));
  EXPECT_TRUE(s(cast(cast(x, dtypes::int64), dtypes::int32)).same_as(x));
  EXPECT_EQ(str(cast(cast(x, dtypes::int8), dtypes::int32)), "int32(int8(x))");  // narrowing: kept
  EXPECT_TRUE(s(x & 0).is_int_const(0));
  EXPECT_TRUE(s(x | 0).same_as(x));
  EXPECT_TRUE(s(x ^ x).is_int_const(0));
  EXPECT_TRUE(s(x & -1).same_as(x));
  EXPECT_TRUE(s(i & 63).same_as(i));
  EXPECT_TRUE(s(x << 0).same_as(x));
  EXPECT_EQ(str(x / -1), "-x");
  // Floats: x * 0 is not 0 (NaN, infinities) and x + 0 is not x (-0.0); x * 1 is x.
  EXPECT_EQ(str(f * 0.0f), "f * 0.0");
  EXPECT_EQ(str(f + 0.0f), "f + 0.0");
  EXPECT_TRUE(s(f * 1.0f).same_as(f));
  EXPECT_TRUE(s(f - 0.0f).same_as(f));
  EXPECT_TRUE(s(f / 1.0f).same_as(f));
  EXPECT_EQ(str(f - f), "f - f");  // NaN - NaN, inf - inf
  EXPECT_TRUE(s(min(f, f)).same_as(f));
  // 0.0 and -0.0 are different values: a select between them stays.
  EXPECT_EQ(str(select(p, float_const(0.0), float_const(-0.0))), "select(p, 0.0, -0.0)");
}

TEST_F(SimplifyRules, Reassociation) {
  EXPECT_EQ(str((x + 3) + 4), "x + 7");
  EXPECT_EQ(str((x + 3) - 4), "x - 1");
  EXPECT_EQ(str((x - 3) - 4), "x - 7");
  EXPECT_EQ(str(3 + x), "x + 3");
  EXPECT_EQ(str(4 + (x + 3)), "x + 7");
  EXPECT_EQ(str((x * 3) * 4), "x * 12");
  EXPECT_EQ(str(3 * x), "x * 3");
  EXPECT_EQ(str((x + 3) + y), "x + y + 3");
  EXPECT_EQ(str(x + y - x - y + 5), "5");
  EXPECT_EQ(str(x * 2 + x * 3), "x * 5");
  EXPECT_EQ(str(5 - x), "5 - x");
  EXPECT_EQ(str(min(min(x, 7), 3)), "min(x, 3)");
  EXPECT_EQ(str(max(max(x, 7), 3)), "max(x, 7)");
  // Wrapping makes these exact even without bounds: int32 arithmetic is modulo 2^32.
  EXPECT_EQ(str((x + 2147483647) + 1), "x + -2147483648");
  EXPECT_EQ(str((x - 2147483647) - 1), "x + -2147483648");
  EXPECT_EQ(str((x - 2147483647) - 2), "x + 2147483647");
}

TEST_F(SimplifyRules, ConstantFolding) {
  auto fold = [&](const Expr& e) {
    Expr r = simplify(e);
    EXPECT_TRUE(r.is_const()) << to_string(e) << " => " << to_string(r);
    EXPECT_EQ(r.dtype(), e.dtype());
    return r;
  };
  Expr a = 7, b = -2;
  EXPECT_EQ(fold(a + b).int_value(), 5);
  EXPECT_EQ(fold(a - b).int_value(), 9);
  EXPECT_EQ(fold(a * b).int_value(), -14);
  EXPECT_EQ(fold(a / b).int_value(), -3);
  EXPECT_EQ(fold(a % b).int_value(), 1);
  EXPECT_EQ(fold(floor_div(a, b)).int_value(), -4);
  EXPECT_EQ(fold(floor_mod(a, b)).int_value(), -1);
  EXPECT_EQ(fold(min(a, b)).int_value(), -2);
  EXPECT_EQ(fold(max(a, b)).int_value(), 7);
  EXPECT_EQ(fold(a & Expr(3)).int_value(), 3);
  EXPECT_EQ(fold(a | Expr(8)).int_value(), 15);
  EXPECT_EQ(fold(a ^ Expr(5)).int_value(), 2);
  EXPECT_EQ(fold(a << Expr(2)).int_value(), 28);
  EXPECT_EQ(fold(b >> Expr(1)).int_value(), -1);
  EXPECT_EQ(fold(-a).int_value(), -7);
  EXPECT_EQ(fold(~a).int_value(), -8);
  EXPECT_TRUE(fold(a < b).as<BoolImmNode>() && !fold(a < b).as<BoolImmNode>()->value);
  EXPECT_TRUE(fold(a <= Expr(7)).as<BoolImmNode>()->value);
  EXPECT_TRUE(fold(a > b).as<BoolImmNode>()->value);
  EXPECT_FALSE(fold(a >= Expr(8)).as<BoolImmNode>()->value);
  EXPECT_TRUE(fold(a == Expr(7)).as<BoolImmNode>()->value);
  EXPECT_TRUE(fold(a != b).as<BoolImmNode>()->value);
  EXPECT_FALSE(fold(Expr(true) && Expr(false)).as<BoolImmNode>()->value);
  EXPECT_TRUE(fold(Expr(true) || Expr(false)).as<BoolImmNode>()->value);
  EXPECT_FALSE(fold(!Expr(true)).as<BoolImmNode>()->value);
  EXPECT_EQ(fold(select(Expr(false), a, b)).int_value(), -2);
  // Types are kept: int8 wraps, int64 does not, uint32 compares unsigned.
  EXPECT_EQ(fold(int_const(100, dtypes::int8) + int_const(100, dtypes::int8)).int_value(), -56);
  EXPECT_EQ(fold(int_const(100, dtypes::int64) * int_const(100000000, dtypes::int64)).int_value(), 10000000000LL);
  EXPECT_EQ(fold(cast(Expr(300), dtypes::int8)).int_value(), 44);
  EXPECT_EQ(fold(cast(Expr(300), dtypes::int8)).dtype(), dtypes::int8);
  EXPECT_TRUE(fold(int_const(-1, dtypes::uint32) > int_const(1, dtypes::uint32)).as<BoolImmNode>()->value);
  // Floats fold with the reference semantics (float32 rounding).
  Expr fl = fold(Expr(1.5f) * Expr(2.0f));
  EXPECT_DOUBLE_EQ(fl.float_value(), 3.0);
  EXPECT_EQ(fl.dtype(), dtypes::float32);
  EXPECT_DOUBLE_EQ(fold(cast(Expr(2.75f), dtypes::int32)).float_value(), 2.0);
  EXPECT_DOUBLE_EQ(fold(call("sqrt", {Expr(4.0f)})).float_value(), 2.0);
  EXPECT_DOUBLE_EQ(fold(cast(Expr(3), dtypes::float16)).float_value(), 3.0);
  // Division by zero is undefined: it stays.
  EXPECT_EQ(to_string(simplify(Expr(1) / Expr(0))), "1 / 0");
}

TEST_F(SimplifyRules, BoolLogic) {
  EXPECT_TRUE(s(p && Expr(true)).same_as(p));
  EXPECT_TRUE(s(Expr(true) && p).same_as(p));
  EXPECT_TRUE(is_false(s(p && Expr(false))));
  EXPECT_TRUE(is_false(s(Expr(false) && p)));
  EXPECT_TRUE(s(p || Expr(false)).same_as(p));
  EXPECT_TRUE(is_true(s(p || Expr(true))));
  EXPECT_TRUE(s(p && p).same_as(p));
  EXPECT_TRUE(s(!(!p)).same_as(p));
  EXPECT_EQ(str(!(x < y)), "x >= y");
  // Provable parts fold away.
  EXPECT_TRUE(s((i < 64) && p).same_as(p));
  EXPECT_TRUE(is_false(s((i < 0) && p)));
  EXPECT_TRUE(is_true(s((i < 64) || p)));
  EXPECT_EQ(str((i < 64) && (x < n)), "x < n");
  EXPECT_EQ(str(p && q), "p && q");
}

TEST_F(SimplifyRules, SelectFolding) {
  EXPECT_TRUE(s(select(Expr(true), x, y)).same_as(x));
  EXPECT_TRUE(s(select(Expr(false), x, y)).same_as(y));
  EXPECT_TRUE(s(select(p, x, x)).same_as(x));
  EXPECT_TRUE(s(select(i < 64, x, y)).same_as(x));
  EXPECT_TRUE(s(select(i >= 64, x, y)).same_as(y));
  EXPECT_EQ(str(select(!p, x, y)), "select(p, y, x)");
  EXPECT_TRUE(s(select(p, Expr(true), Expr(false))).same_as(p));
  EXPECT_EQ(str(select(p, Expr(false), Expr(true))), "!p");
  EXPECT_EQ(str(select(x < n, x, y)), "select(x < n, x, y)");
}

TEST_F(SimplifyRules, MinMaxByBounds) {
  EXPECT_TRUE(s(min(i, 64)).same_as(i));
  EXPECT_TRUE(s(max(i, 0)).same_as(i));
  EXPECT_TRUE(s(min(i, j + 64)).same_as(i));
  EXPECT_TRUE(s(max(i, i + 1)).as<BinaryNode>());  // i + 1
  EXPECT_EQ(str(max(i, i + 1)), "i + 1");
  EXPECT_TRUE(s(min(i, -1)).is_int_const(-1));
  EXPECT_EQ(str(min(i, 32)), "min(i, 32)");
}

TEST_F(SimplifyRules, ExactRangeBecomesConstant) {
  BoundContext c;
  c.set_range(x, Interval::exact(5));
  EXPECT_TRUE(simplify(x * 2 + 1, c).is_int_const(11));
  EXPECT_TRUE(simplify(x, c).is_int_const(5));
}

TEST_F(SimplifyRules, KeepsDtypes) {
  Var a("a", dtypes::int64), u("u", dtypes::uint32), b("b", dtypes::int8);
  EXPECT_EQ(s(a + 0).dtype(), dtypes::int64);
  EXPECT_EQ(s(a * 0).dtype(), dtypes::int64);
  EXPECT_EQ(s(a - a).dtype(), dtypes::int64);
  EXPECT_EQ(str((a + 3) + 4), "a + 7_int64");
  EXPECT_EQ(s(u - u).dtype(), dtypes::uint32);
  EXPECT_EQ(str((u + 3) - 4), "u - 1_uint32");
  EXPECT_EQ(s(b * 0).dtype(), dtypes::int8);
  // uint32 values are never negative.
  EXPECT_TRUE(is_true(s(u >= int_const(0, dtypes::uint32))));
  EXPECT_TRUE(is_true(s(cast(b, dtypes::int32) < 128)));
  EXPECT_TRUE(is_true(s(cast(b, dtypes::int32) >= -128)));
}

TEST_F(SimplifyRules, IdempotentAndSharesUnchanged) {
  Expr e = i * 16 + j;
  Expr r = s(e);
  EXPECT_TRUE(r.same_as(e));  // nothing to do: the same node comes back
  EXPECT_TRUE(structural_equal(s(r), r));
  Expr g = (x < n) && (y < n);
  EXPECT_TRUE(s(g).same_as(g));
}

// Expressions are DAGs: a subtree may be shared many times. Simplification and bounds
// must stay polynomial in the number of distinct nodes (as trees these are 2^60 and 3^40
// nodes large).
TEST_F(SimplifyRules, SharedSubtreesStayFast) {
  Expr d = j;
  for (int k = 0; k < 60; ++k) d = d + d;
  Expr sd = s(d);
  EXPECT_EQ(sd.dtype(), dtypes::int32);
  EXPECT_FALSE(ctx.bound(d).hi.has_value());  // 15 * 2^60 leaves int32
  EXPECT_EQ(ctx.divisor(d * 4), 4);
  auto nest = [&](int depth) {
    Expr e = j;
    for (int k = 0; k < depth; ++k) e = select((i + e * 2 + 1) * 3 + j < n + k, e + 1, i - e);
    return e;
  };
  EXPECT_EQ(s(nest(40)).dtype(), dtypes::int32);
  // (evaluate() walks trees, so the value check uses a shallower nest.)
  Expr e = nest(10), se = s(e);
  auto v1 = evaluate(e, env_of({i, j, n}, {3, 2, 7}));
  auto v2 = evaluate(se, env_of({i, j, n}, {3, 2, 7}));
  ASSERT_TRUE(v1 && v2);
  EXPECT_EQ(v1->i, v2->i);
}

// --- BoundContext ---------------------------------------------------------------------

TEST(BoundContext, Bound) {
  Var i("i", dtypes::int32), j("j", dtypes::int32), n("n", dtypes::int32);
  BoundContext c;
  c.set_range(i, Interval::range(0, 63));
  c.set_range(j, Interval::range(-3, 5));
  auto eq = [](Interval r, std::optional<int64_t> lo, std::optional<int64_t> hi) {
    return r.lo == lo && r.hi == hi;
  };
  EXPECT_TRUE(eq(c.bound(i), 0, 63));
  EXPECT_TRUE(eq(c.bound(Expr(7)), 7, 7));
  EXPECT_TRUE(c.bound(Expr(7)).is_exact());
  EXPECT_TRUE(eq(c.bound(i + j), -3, 68));
  EXPECT_TRUE(eq(c.bound(i - j), -5, 66));
  EXPECT_TRUE(eq(c.bound(i * j), -189, 315));
  EXPECT_TRUE(eq(c.bound(i / 4), 0, 15));
  EXPECT_TRUE(eq(c.bound(j / 2), -1, 2));             // truncation
  EXPECT_TRUE(eq(c.bound(floor_div(j, 2)), -2, 2));   // floor
  EXPECT_TRUE(eq(c.bound(i % 8), 0, 7));
  EXPECT_TRUE(eq(c.bound(j % 4), -3, 3));
  EXPECT_TRUE(eq(c.bound(floor_mod(j, 4)), 0, 3));
  EXPECT_TRUE(eq(c.bound(min(i, j)), -3, 5));
  EXPECT_TRUE(eq(c.bound(max(i, j)), 0, 63));
  EXPECT_TRUE(eq(c.bound(select(n < 0, i, j)), -3, 63));
  EXPECT_TRUE(eq(c.bound(i & 15), 0, 15));
  EXPECT_TRUE(eq(c.bound(n & 15), 0, 15));            // whatever n is
  EXPECT_TRUE(eq(c.bound(i >> 2), 0, 15));
  EXPECT_TRUE(eq(c.bound(cast(i, dtypes::int64)), 0, 63));
  EXPECT_TRUE(eq(c.bound(cast(i, dtypes::int8)), 0, 63));   // fits
  EXPECT_TRUE(eq(c.bound(cast(i * 4, dtypes::int8)), std::nullopt, std::nullopt));  // may wrap
  EXPECT_TRUE(eq(c.bound(-j), -5, 3));
  // Unknown variables and possible overflow give nothing.
  EXPECT_TRUE(eq(c.bound(n), std::nullopt, std::nullopt));
  EXPECT_TRUE(eq(c.bound(n + 1), std::nullopt, std::nullopt));
  EXPECT_TRUE(eq(c.bound(i * 100000000), std::nullopt, std::nullopt));  // leaves int32
  EXPECT_TRUE(eq(c.bound(cast(i, dtypes::int64) * 100000000), 0, 6300000000LL));
  // One-sided ranges.
  BoundContext d;
  d.set_range(n, Interval{1, std::nullopt});
  EXPECT_TRUE(eq(d.bound(n), 1, std::nullopt));
  EXPECT_TRUE(eq(d.bound(max(n, 4)), 4, 2147483647));  // n is an int32
  EXPECT_TRUE(eq(d.bound(n + 1), std::nullopt, std::nullopt));  // n + 1 may wrap
  EXPECT_TRUE(eq(d.bound(n / 2), 0, 1073741823));            // n <= INT32_MAX
  // Comparisons are booleans: [0, 1], or decided.
  EXPECT_TRUE(eq(c.bound(i < n), 0, 1));
  EXPECT_TRUE(eq(c.bound(i < 64), 1, 1));
}

TEST(BoundContext, Prove) {
  Var i("i", dtypes::int32), j("j", dtypes::int32), n("n", dtypes::int32);
  Var f("f", dtypes::float32), u("u", dtypes::uint32);
  BoundContext c;
  c.set_range(i, Interval::range(0, 63));
  c.set_range(j, Interval::range(0, 3));
  EXPECT_EQ(c.prove(i < 64), true);
  EXPECT_EQ(c.prove(i < 63), std::nullopt);
  EXPECT_EQ(c.prove(i <= 63), true);
  EXPECT_EQ(c.prove(i > 63), false);
  EXPECT_EQ(c.prove(i >= 0), true);
  EXPECT_EQ(c.prove(i == 100), false);
  EXPECT_EQ(c.prove(i != 100), true);
  EXPECT_EQ(c.prove(i * 4 + j < i * 4 + 4), true);
  EXPECT_EQ(c.prove(i * 4 + j < 256), true);
  EXPECT_EQ(c.prove(i + j == j + i), true);
  EXPECT_EQ(c.prove(i < n), std::nullopt);
  EXPECT_EQ(c.prove(n == n), true);  // equal atoms cancel
  EXPECT_EQ(c.prove((i < 64) && (j < 4)), true);
  EXPECT_EQ(c.prove((i < 64) && (n < 4)), std::nullopt);
  EXPECT_EQ(c.prove((i > 64) && (n < 4)), false);
  EXPECT_EQ(c.prove((i > 64) || (n < 4)), std::nullopt);
  EXPECT_EQ(c.prove((i < 64) || (n < 4)), true);
  EXPECT_EQ(c.prove(!(i < 64)), false);
  EXPECT_EQ(c.prove(Expr(true)), true);
  EXPECT_EQ(c.prove(Expr(false)), false);
  EXPECT_EQ(c.prove(f < f + 1.0f), std::nullopt);  // floats are not decided
  EXPECT_EQ(c.prove(u >= int_const(0, dtypes::uint32)), true);
  EXPECT_EQ(c.prove(select(i < 64, j < 4, n < 0)), true);
}

TEST(BoundContext, Divisor) {
  Var i("i", dtypes::int32), k("k", dtypes::int32), n("n", dtypes::int32);
  BoundContext c;
  c.set_divisor(k, 8);
  EXPECT_EQ(c.divisor(Expr(12)), 12);
  EXPECT_EQ(c.divisor(Expr(-12)), 12);
  EXPECT_EQ(c.divisor(Expr(0)), int64_t(1) << 30);
  EXPECT_EQ(c.divisor(n), 1);
  EXPECT_EQ(c.divisor(k), 8);
  EXPECT_EQ(c.divisor_of(k), 8);
  EXPECT_EQ(c.divisor_of(n), 1);
  EXPECT_EQ(c.divisor(k * 4), 32);
  EXPECT_EQ(c.divisor(i * 4), 4);
  EXPECT_EQ(c.divisor(k * 4 + i * 6), 2);
  EXPECT_EQ(c.divisor(k * 4 - 16), 16);
  EXPECT_EQ(c.divisor(k + 0), 8);
  EXPECT_EQ(c.divisor(k << 2), 32);
  EXPECT_EQ(c.divisor(-k), 8);
  EXPECT_EQ(c.divisor((k * 4) / 8), 4);
  EXPECT_EQ(c.divisor(k % 12), 4);
  EXPECT_EQ(c.divisor(select(n < 0, k, i * 4)), 4);
  EXPECT_EQ(c.divisor(n / 2), 1);
  EXPECT_EQ(c.divisor(cast(k, dtypes::int64)), 8);
  c.set_range(n, Interval::exact(24));
  EXPECT_EQ(c.divisor(n), 24);
}

}  // namespace
}  // namespace tilus
