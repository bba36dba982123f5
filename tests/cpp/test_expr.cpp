// Tests of scalar expressions: construction and type promotion, the reference evaluator,
// printing, and the structural utilities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"

namespace tilus {
namespace {

using Env = std::function<std::optional<EvalValue>(const Var&)>;

std::optional<EvalValue> eval(const Expr& e) {
  return evaluate(e, [](const Var&) -> std::optional<EvalValue> { return std::nullopt; });
}
int64_t ival(const Expr& e) {
  auto v = eval(e);
  EXPECT_TRUE(v.has_value()) << to_string(e);
  return v ? v->i : 0;
}
double fval(const Expr& e) {
  auto v = eval(e);
  EXPECT_TRUE(v.has_value()) << to_string(e);
  return v ? v->f : 0.0;
}
bool bval(const Expr& e) {
  EXPECT_EQ(e.dtype(), dtypes::boolean) << to_string(e);
  return ival(e) != 0;
}

// Binds variables to integer values.
Env bind(std::vector<std::pair<Var, int64_t>> values) {
  return [values](const Var& v) -> std::optional<EvalValue> {
    for (auto& [var, x] : values)
      if (var.same_as(v)) return EvalValue{var.dtype(), x, 0.0};
    return std::nullopt;
  };
}

// --- construction and promotion ----------------------------------------------------------

TEST(ExprConstruct, Literals) {
  EXPECT_EQ(Expr(3).dtype(), dtypes::int32);
  EXPECT_EQ(Expr(3).int_value(), 3);
  EXPECT_EQ(Expr(int64_t(1) << 40).dtype(), dtypes::int64);
  EXPECT_EQ(Expr(int64_t(5)).dtype(), dtypes::int32);  // fits: int32
  EXPECT_EQ(Expr(2.5).dtype(), dtypes::float32);
  EXPECT_EQ(Expr(2.5f).dtype(), dtypes::float32);
  EXPECT_EQ(Expr(true).dtype(), dtypes::boolean);
  EXPECT_TRUE(Expr(7).is_const());
  EXPECT_TRUE(Expr(7).is_int_const(7));
  EXPECT_FALSE(Expr(7.0).is_int_const());
  EXPECT_DOUBLE_EQ(Expr(true).float_value(), 1.0);
  // Constants wrap to their type.
  EXPECT_EQ(int_const(300, dtypes::int8).int_value(), 44);
  EXPECT_EQ(int_const(-1, dtypes::uint8).int_value(), 255);
  EXPECT_DOUBLE_EQ(int_const(-1, dtypes::uint64).float_value(), 18446744073709551615.0);
  EXPECT_EQ(make_const(dtypes::int32, 3.7).int_value(), 3);
  EXPECT_TRUE(make_const(dtypes::boolean, 2.0).as<BoolImmNode>()->value);
  EXPECT_EQ(make_const(dtypes::float16, 1.5).dtype(), dtypes::float16);
  EXPECT_EQ(int_const(3, dtypes::float32).kind(), ExprKind::FloatImm);
  Var x("x", dtypes::int32);
  EXPECT_THROW(x.int_value(), InternalError);
  EXPECT_THROW(Var(Expr(1)), InternalError);
  EXPECT_EQ(Var(Expr(x)).name(), "x");
}

TEST(ExprConstruct, Promotion) {
  Var a("a", dtypes::int32), l("l", dtypes::int64), f("f", dtypes::float32), h("h", dtypes::float16);
  Var b("b", dtypes::int8), u("u", dtypes::uint32);
  // An integer literal adopts the other operand's type.
  EXPECT_EQ((a + 1).dtype(), dtypes::int32);
  EXPECT_EQ((l + 1).dtype(), dtypes::int64);
  EXPECT_EQ((l + 1).as<BinaryNode>()->b.kind(), ExprKind::IntImm);  // converted, not cast
  EXPECT_EQ((l + 1).as<BinaryNode>()->b.dtype(), dtypes::int64);
  EXPECT_EQ((1 + b).dtype(), dtypes::int8);
  EXPECT_EQ((u * 2).dtype(), dtypes::uint32);
  EXPECT_EQ((f + 1).dtype(), dtypes::float32);
  EXPECT_EQ((h * 2).dtype(), dtypes::float16);
  EXPECT_EQ((h * 2.0).dtype(), dtypes::float16);  // a float literal adopts a float type
  // Two typed operands promote.
  Expr al = a + l;
  EXPECT_EQ(al.dtype(), dtypes::int64);
  EXPECT_EQ(al.as<BinaryNode>()->a.kind(), ExprKind::Cast);
  EXPECT_EQ((a + f).dtype(), dtypes::float32);
  EXPECT_EQ((b + a).dtype(), dtypes::int32);
  EXPECT_EQ((a + 1.5).dtype(), dtypes::float32);
  EXPECT_EQ((h + f).dtype(), dtypes::float32);
  // Comparisons and logic produce bool; logic on integers compares with zero.
  EXPECT_EQ((a < l).dtype(), dtypes::boolean);
  EXPECT_EQ((f == 1.0).dtype(), dtypes::boolean);
  Expr land = a && l;
  EXPECT_EQ(land.dtype(), dtypes::boolean);
  EXPECT_EQ(to_string(land), "a != 0 && l != 0_int64");
  EXPECT_EQ((!a).dtype(), dtypes::boolean);
  EXPECT_EQ(to_string(!a), "!(a != 0)");
  EXPECT_EQ((-a).dtype(), dtypes::int32);
  EXPECT_EQ((~b).dtype(), dtypes::int8);
  // select promotes its branches and turns an integer condition into a comparison.
  Expr s = select(a, l, 1);
  EXPECT_EQ(s.dtype(), dtypes::int64);
  EXPECT_EQ(s.as<SelectNode>()->cond.dtype(), dtypes::boolean);
  EXPECT_EQ(select(a < 0, a, f).dtype(), dtypes::float32);
  // Casts to the same type return the operand itself.
  EXPECT_TRUE(cast(a, dtypes::int32).same_as(a));
  EXPECT_EQ(cast(a, dtypes::int8).dtype(), dtypes::int8);
  // Math calls on integers compute in float32; abs keeps integers.
  EXPECT_EQ(call("exp", {a}).dtype(), dtypes::float32);
  EXPECT_EQ(call("abs", {a}).dtype(), dtypes::int32);
  EXPECT_EQ(call("pow", {h, 2}).dtype(), dtypes::float16);
  // Errors.
  EXPECT_THROW(f & 1, CompileError);
  EXPECT_THROW(f << 1, CompileError);
  EXPECT_THROW(~f, CompileError);
  EXPECT_THROW(-Expr(true), CompileError);
  EXPECT_THROW(Expr() + a, InternalError);
  EXPECT_NO_THROW(f % 2.0);  // fmod
}

TEST(ExprConstruct, Pointers) {
  DataType pf = dtypes::float16.pointer_to();
  Var p("p", pf), q("q", pf), i("i", dtypes::int32);
  EXPECT_EQ((p + i).dtype(), pf);
  EXPECT_EQ((i + p).dtype(), pf);  // normalized to pointer + offset
  EXPECT_EQ(to_string(i + p), "p + i");
  EXPECT_EQ((p - i).dtype(), pf);
  EXPECT_EQ((p == q).dtype(), dtypes::boolean);
  EXPECT_THROW(p * i, CompileError);
  EXPECT_THROW(i - p, CompileError);
  // Pointer arithmetic counts elements.
  auto v = evaluate(p + i, bind({{p, 1000}, {i, 3}}));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->i, 1006);
}

TEST(ExprConstruct, Builtins) {
  EXPECT_TRUE(builtin::block_idx(0).same_as(builtin::block_idx(0)));
  EXPECT_FALSE(builtin::block_idx(0).same_as(builtin::block_idx(1)));
  EXPECT_EQ(builtin::block_idx(2).name(), "blockIdx.z");
  EXPECT_EQ(builtin::thread_idx().name(), "threadIdx.x");
  EXPECT_EQ(builtin::thread_idx()->role, VarRole::Builtin);
  EXPECT_THROW(builtin::block_idx(3), InternalError);
  Var a("a", dtypes::int32), b("a", dtypes::int32);
  EXPECT_NE(a->id, b->id);
}

// --- evaluation -----------------------------------------------------------------------

TEST(ExprEvaluate, IntegerOperators) {
  Expr a = 7, b = -2;
  EXPECT_EQ(ival(a + b), 5);
  EXPECT_EQ(ival(a - b), 9);
  EXPECT_EQ(ival(a * b), -14);
  EXPECT_EQ(ival(min(a, b)), -2);
  EXPECT_EQ(ival(max(a, b)), 7);
  EXPECT_EQ(ival(a & Expr(12)), 4);
  EXPECT_EQ(ival(a | Expr(8)), 15);
  EXPECT_EQ(ival(a ^ Expr(5)), 2);
  EXPECT_EQ(ival(a << Expr(3)), 56);
  EXPECT_EQ(ival(a >> Expr(1)), 3);
  EXPECT_EQ(ival(b >> Expr(1)), -1);  // arithmetic shift
  EXPECT_EQ(ival(int_const(-2, dtypes::uint8) >> int_const(1, dtypes::uint8)), 127);  // logical shift
  EXPECT_EQ(ival(-a), -7);
  EXPECT_EQ(ival(~a), -8);
  EXPECT_EQ(ival(cdiv(Expr(10), Expr(4))), 3);
  EXPECT_EQ(ival(select(a > b, a, b)), 7);
  // On bool, ~ flips the single bit.
  EXPECT_FALSE(bval(~Expr(true)));
  EXPECT_TRUE(bval(~Expr(false)));
  EXPECT_EQ(ival(select(a < b, a, b)), -2);
}

TEST(ExprEvaluate, TruncatingAndFlooringDivision) {
  // C semantics: truncate toward zero; the remainder has the sign of the dividend.
  EXPECT_EQ(ival(Expr(-7) / Expr(2)), -3);
  EXPECT_EQ(ival(Expr(-7) % Expr(2)), -1);
  EXPECT_EQ(ival(Expr(7) / Expr(-2)), -3);
  EXPECT_EQ(ival(Expr(7) % Expr(-2)), 1);
  EXPECT_EQ(ival(Expr(-7) / Expr(-2)), 3);
  EXPECT_EQ(ival(Expr(-7) % Expr(-2)), -1);
  // Python semantics: floor; the remainder has the sign of the divisor.
  EXPECT_EQ(ival(floor_div(Expr(-7), Expr(2))), -4);
  EXPECT_EQ(ival(floor_mod(Expr(-7), Expr(2))), 1);
  EXPECT_EQ(ival(floor_div(Expr(7), Expr(-2))), -4);
  EXPECT_EQ(ival(floor_mod(Expr(7), Expr(-2))), -1);
  EXPECT_EQ(ival(floor_div(Expr(-7), Expr(-2))), 3);
  EXPECT_EQ(ival(floor_mod(Expr(-7), Expr(-2))), -1);
  EXPECT_EQ(ival(floor_div(Expr(-8), Expr(2))), -4);
  EXPECT_EQ(ival(floor_mod(Expr(-8), Expr(2))), 0);
  // Both agree on non-negative operands.
  EXPECT_EQ(ival(Expr(7) / Expr(2)), ival(floor_div(Expr(7), Expr(2))));
  // Division by zero is undefined.
  EXPECT_FALSE(eval(Expr(1) / Expr(0)));
  EXPECT_FALSE(eval(Expr(1) % Expr(0)));
  EXPECT_FALSE(eval(floor_div(Expr(1), Expr(0))));
  EXPECT_FALSE(eval(floor_mod(Expr(1), Expr(0))));
  // INT_MIN / -1 wraps; INT_MIN % -1 is 0.
  Expr mn = int_const(std::numeric_limits<int64_t>::min(), dtypes::int64);
  EXPECT_EQ(ival(mn / int_const(-1, dtypes::int64)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ival(mn % int_const(-1, dtypes::int64)), 0);
  EXPECT_EQ(ival(int_const(-2147483648LL, dtypes::int32) / Expr(-1)), -2147483648LL);
}

TEST(ExprEvaluate, WrapAround) {
  Expr x = int_const(100, dtypes::int8);
  EXPECT_EQ(ival(x + x), -56);
  EXPECT_EQ((x + x).dtype(), dtypes::int8);
  EXPECT_EQ(ival(-int_const(-128, dtypes::int8)), -128);
  EXPECT_EQ(ival(int_const(127, dtypes::int8) + int_const(1, dtypes::int8)), -128);
  EXPECT_EQ(ival(int_const(0, dtypes::uint8) - int_const(1, dtypes::uint8)), 255);
  EXPECT_EQ(ival(cast(Expr(200), dtypes::int8)), -56);
  EXPECT_EQ(ival(cast(Expr(-1), dtypes::uint16)), 65535);
  EXPECT_EQ(ival(cast(int_const(-1, dtypes::int8), dtypes::int32)), -1);  // sign extension
  EXPECT_EQ(ival(cast(int_const(255, dtypes::uint8), dtypes::int32)), 255);
  EXPECT_EQ(ival(Expr(2147483647) + Expr(1)), -2147483648LL);
  EXPECT_EQ(ival(Expr(65536) * Expr(65536)), 0);
  EXPECT_EQ(ival(int_const(1, dtypes::int4) * int_const(9, dtypes::int4)), -7);  // sub-byte
  // A variable's arithmetic wraps the same way.
  Var v("v", dtypes::int8);
  auto r = evaluate(v * 3, bind({{v, 50}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->i, -106);
  EXPECT_EQ(r->dtype, dtypes::int8);
}

TEST(ExprEvaluate, UnsignedComparisons) {
  Expr big = int_const(0xFFFFFFFFLL, dtypes::uint32), one = int_const(1, dtypes::uint32);
  EXPECT_TRUE(bval(big > one));
  EXPECT_FALSE(bval(big < one));
  EXPECT_TRUE(bval(big >= one));
  EXPECT_FALSE(bval(Expr(-1) > Expr(1)));  // signed
  Expr top = int_const(-1, dtypes::uint64);
  EXPECT_TRUE(bval(top > int_const(1, dtypes::uint64)));
  EXPECT_EQ(ival(top / int_const(2, dtypes::uint64)), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ival(max(top, int_const(1, dtypes::uint64))), -1);  // bit pattern of 2^64 - 1
  Var u("u", dtypes::uint32);
  auto r = evaluate(u < 5, bind({{u, 0xFFFFFFFFLL}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->i, 0);
}

TEST(ExprEvaluate, ComparisonsAndLogic) {
  Expr a = 3, b = 5;
  EXPECT_TRUE(bval(a < b));
  EXPECT_TRUE(bval(a <= a));
  EXPECT_FALSE(bval(a > b));
  EXPECT_TRUE(bval(b >= a));
  EXPECT_TRUE(bval(a == 3));
  EXPECT_TRUE(bval(a != b));
  EXPECT_TRUE(bval((a < b) && (b > a)));
  EXPECT_FALSE(bval((a < b) && (b < a)));
  EXPECT_TRUE(bval((a > b) || (b > a)));
  EXPECT_FALSE(bval(!(a < b)));
  EXPECT_TRUE(bval(Expr(2) && Expr(3)));  // integers compare with 0
  EXPECT_FALSE(bval(Expr(0) || Expr(0)));
  // && and || short-circuit: the undefined side is never evaluated.
  EXPECT_FALSE(bval(Expr(false) && (Expr(1) / Expr(0) == 0)));
  EXPECT_TRUE(bval(Expr(true) || (Expr(1) / Expr(0) == 0)));
  EXPECT_FALSE(eval(Expr(true) && (Expr(1) / Expr(0) == 0)));
  // select evaluates only the chosen branch.
  EXPECT_EQ(ival(select(Expr(true), Expr(1), Expr(1) / Expr(0))), 1);
  // Shifts by a negative amount or by the width or more are undefined.
  EXPECT_FALSE(eval(Expr(1) << Expr(32)));
  EXPECT_FALSE(eval(Expr(1) >> Expr(-1)));
  EXPECT_EQ(ival(Expr(1) << Expr(31)), -2147483648LL);
}

TEST(ExprEvaluate, Floats) {
  Expr a = 1.0f, b = 3.0f;
  EXPECT_DOUBLE_EQ(fval(a / b), double(1.0f / 3.0f));  // rounded to float32
  EXPECT_DOUBLE_EQ(fval(a + b), 4.0);
  EXPECT_DOUBLE_EQ(fval(min(a, b)), 1.0);
  EXPECT_DOUBLE_EQ(fval(Expr(-7.0f) % Expr(2.0f)), -1.0);       // fmod
  EXPECT_DOUBLE_EQ(fval(floor_mod(Expr(-7.0f), Expr(2.0f))), 1.0);
  EXPECT_DOUBLE_EQ(fval(floor_div(Expr(-7.0f), Expr(2.0f))), -4.0);
  EXPECT_TRUE(std::isinf(fval(a / Expr(0.0f))));
  EXPECT_TRUE(bval(a < b));
  Expr nan = float_const(std::nan(""), dtypes::float32);
  EXPECT_FALSE(bval(nan == nan));
  EXPECT_TRUE(bval(nan != nan));
  // float16 rounds to its precision.
  Expr h = float_const(1.0, dtypes::float16) + float_const(0.0001, dtypes::float16);
  EXPECT_DOUBLE_EQ(fval(h), 1.0);
  // Casts between floats and integers truncate toward zero.
  EXPECT_EQ(ival(cast(Expr(-2.75f), dtypes::int32)), -2);
  EXPECT_DOUBLE_EQ(fval(cast(Expr(7), dtypes::float32)), 7.0);
  EXPECT_TRUE(bval(cast(Expr(0.5f), dtypes::boolean)));
  // Builtin math.
  EXPECT_DOUBLE_EQ(fval(call("sqrt", {Expr(9.0f)})), 3.0);
  EXPECT_DOUBLE_EQ(fval(call("exp2", {Expr(3.0f)})), 8.0);
  // float exp2 flushes results below 2^-126 to zero, as the GPU's ex2.approx.ftz does; double does not.
  EXPECT_DOUBLE_EQ(fval(call("exp2", {Expr(-126.0f)})), std::ldexp(1.0, -126));
  EXPECT_DOUBLE_EQ(fval(call("exp2", {Expr(-130.0f)})), 0.0);
  EXPECT_DOUBLE_EQ(fval(call("exp2", {float_const(-130.0, dtypes::float64)})), std::ldexp(1.0, -130));
  EXPECT_DOUBLE_EQ(fval(call("floor", {Expr(-1.5f)})), -2.0);
  EXPECT_DOUBLE_EQ(fval(call("pow", {Expr(2.0f), Expr(10.0f)})), 1024.0);
  EXPECT_EQ(ival(call("abs", {Expr(-4)})), 4);
  EXPECT_FALSE(eval(call("nonexistent", {Expr(1.0f)})));
}

TEST(ExprEvaluate, Variables) {
  Var x("x", dtypes::int32), y("y", dtypes::int32);
  Expr e = x * 10 + y;
  auto r = evaluate(e, bind({{x, 4}, {y, 2}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->i, 42);
  EXPECT_EQ(r->dtype, dtypes::int32);
  EXPECT_FALSE(evaluate(e, bind({{x, 4}})));  // y unbound
}

// --- printing -------------------------------------------------------------------------

TEST(ExprPrint, Precedence) {
  Var a("a", dtypes::int32), b("b", dtypes::int32), c("c", dtypes::int32);
  Var p("p", dtypes::boolean), q("q", dtypes::boolean);
  EXPECT_EQ(to_string((a + b) * c), "(a + b) * c");
  EXPECT_EQ(to_string(a + b * c), "a + b * c");
  EXPECT_EQ(to_string(a * b + c), "a * b + c");
  EXPECT_EQ(to_string(a + b + c), "a + b + c");
  EXPECT_EQ(to_string(a + (b + c)), "a + (b + c)");
  EXPECT_EQ(to_string(a - (b - c)), "a - (b - c)");
  EXPECT_EQ(to_string((a - b) - c), "a - b - c");
  EXPECT_EQ(to_string(a * b / c), "a * b / c");
  EXPECT_EQ(to_string(a / (b * c)), "a / (b * c)");
  EXPECT_EQ(to_string(floor_div(a, b)), "a // b");
  EXPECT_EQ(to_string(floor_mod(a + 1, b)), "floor_mod(a + 1, b)");
  EXPECT_EQ(to_string(-(a + b)), "-(a + b)");
  EXPECT_EQ(to_string(-a * b), "-a * b");
  EXPECT_EQ(to_string((a << 2) + 1), "(a << 2) + 1");
  EXPECT_EQ(to_string(a << (b + 1)), "a << b + 1");
  EXPECT_EQ(to_string(a < b && p), "a < b && p");
  EXPECT_EQ(to_string((p || q) && p), "(p || q) && p");
  EXPECT_EQ(to_string(p || (q && p)), "p || q && p");
  EXPECT_EQ(to_string((a & b) | c), "a & b | c");
  EXPECT_EQ(to_string(a & (b | c)), "a & (b | c)");
  EXPECT_EQ(to_string(min(a + 1, b)), "min(a + 1, b)");
  EXPECT_EQ(to_string(max(a, b) * 2), "max(a, b) * 2");
  EXPECT_EQ(to_string(select(p, a, b + 1)), "select(p, a, b + 1)");
  EXPECT_EQ(to_string(select(p, a, b) + 1), "select(p, a, b) + 1");
  EXPECT_EQ(to_string(cast(a + b, dtypes::int64)), "int64(a + b)");
  EXPECT_EQ(to_string(call("exp", {a})), "exp(float32(a))");
  EXPECT_EQ(to_string(!p), "!p");
  EXPECT_EQ(to_string(!(a < b)), "!(a < b)");
}

TEST(ExprPrint, Constants) {
  EXPECT_EQ(to_string(Expr(5)), "5");
  EXPECT_EQ(to_string(Expr(-5)), "-5");
  EXPECT_EQ(to_string(int_const(5, dtypes::int64)), "5_int64");
  EXPECT_EQ(to_string(int_const(-1, dtypes::uint32)), "4294967295_uint32");
  EXPECT_EQ(to_string(int_const(-1, dtypes::uint64)), "18446744073709551615_uint64");
  EXPECT_EQ(to_string(Expr(1.5f)), "1.5");
  EXPECT_EQ(to_string(Expr(2.0f)), "2.0");
  EXPECT_EQ(to_string(float_const(1.5, dtypes::float16)), "1.5_float16");
  EXPECT_EQ(to_string(float_const(INFINITY, dtypes::float32)), "inf");
  EXPECT_EQ(to_string(Expr(true)), "true");
  EXPECT_EQ(to_string(Expr(false)), "false");
  EXPECT_EQ(to_string(Expr()), "<undefined>");
}

TEST(ExprPrint, CustomNames) {
  Var a("x", dtypes::int32), b("x", dtypes::int32);
  auto namer = [&](const VarNode& v) { return v.name + "_" + (&v == a.get() ? "0" : "1"); };
  EXPECT_EQ(to_string(a + b, namer), "x_0 + x_1");
}

// --- utilities --------------------------------------------------------------------------

TEST(ExprUtil, Substitute) {
  Var a("a", dtypes::int32), b("b", dtypes::int32), c("c", dtypes::int32), l("l", dtypes::int64);
  Expr e = a * 2 + c;
  Expr r = substitute(e, [&](const Var& v) { return v.same_as(a) ? b + 1 : Expr(); });
  EXPECT_EQ(to_string(r), "(b + 1) * 2 + c");
  // Nothing substituted: the same node comes back; untouched subtrees are shared.
  Expr same = substitute(e, [](const Var&) { return Expr(); });
  EXPECT_TRUE(same.same_as(e));
  Expr f = (a + 1) * (c + 2);
  Expr g = substitute(f, [&](const Var& v) { return v.same_as(a) ? Expr(b) : Expr(); });
  EXPECT_TRUE(g.as<BinaryNode>()->b.same_as(f.as<BinaryNode>()->b));
  // A substitution of another type re-promotes the operation.
  Expr w = substitute(a + 1, [&](const Var& v) { return v.same_as(a) ? Expr(l) : Expr(); });
  EXPECT_EQ(w.dtype(), dtypes::int64);
  EXPECT_EQ(to_string(w), "l + 1_int64");
  // Into selects, casts and calls.
  Expr s = select(a < c, cast(a, dtypes::int64), l);
  Expr t = substitute(s, [&](const Var& v) { return v.same_as(a) ? Expr(7) : Expr(); });
  EXPECT_EQ(to_string(t), "select(7 < c, int64(7), l)");
  auto val = evaluate(t, bind({{c, 10}, {l, 1}}));
  ASSERT_TRUE(val);
  EXPECT_EQ(val->i, 7);
  EXPECT_EQ(to_string(substitute(call("exp", {a}), [&](const Var&) { return Expr(b); })), "exp(float32(b))");
}

TEST(ExprUtil, FreeVars) {
  Var a("a", dtypes::int32), b("b", dtypes::int32), c("c", dtypes::boolean);
  auto vs = free_vars(select(c, a * b + a, b) + call("abs", {a}));
  ASSERT_EQ(vs.size(), 3u);
  EXPECT_TRUE(vs[0].same_as(c));
  EXPECT_TRUE(vs[1].same_as(a));
  EXPECT_TRUE(vs[2].same_as(b));
  EXPECT_TRUE(free_vars(Expr(1) + Expr(2)).empty());
  auto one = free_vars(cast(a, dtypes::int64) - a);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].same_as(a));
}

TEST(ExprUtil, StructuralEqualAndHash) {
  Var a("a", dtypes::int32), b("b", dtypes::int32), a2("a", dtypes::int32);
  Expr e1 = (a + 1) * b, e2 = (a + 1) * b;
  EXPECT_FALSE(e1.same_as(e2));
  EXPECT_TRUE(structural_equal(e1, e2));
  EXPECT_EQ(structural_hash(e1), structural_hash(e2));
  EXPECT_FALSE(structural_equal(e1, (a + 2) * b));
  EXPECT_FALSE(structural_equal(e1, (a + 1) + b));
  EXPECT_FALSE(structural_equal(e1, b * (a + 1)));  // no commutativity
  EXPECT_FALSE(structural_equal(a + 1, a2 + 1));    // variables by identity, not by name
  EXPECT_FALSE(structural_equal(Expr(1), int_const(1, dtypes::int64)));  // types matter
  EXPECT_FALSE(structural_equal(Expr(1), Expr(1.0f)));
  EXPECT_TRUE(structural_equal(select(a < b, a, b), select(a < b, a, b)));
  EXPECT_TRUE(structural_equal(cast(a, dtypes::int8), cast(a, dtypes::int8)));
  EXPECT_FALSE(structural_equal(cast(a, dtypes::int8), cast(a, dtypes::int16)));
  EXPECT_TRUE(structural_equal(call("exp", {a}), call("exp", {a})));
  EXPECT_FALSE(structural_equal(call("exp", {a}), call("log", {a})));
  EXPECT_TRUE(structural_equal(-a, -a));
  EXPECT_FALSE(structural_equal(-a, ~a));
  Expr nan = float_const(std::nan(""), dtypes::float32);
  EXPECT_TRUE(structural_equal(nan, float_const(std::nan(""), dtypes::float32)));
  EXPECT_FALSE(structural_equal(float_const(0.0), float_const(-0.0)));  // 1 / x differs
  // NaNs of any payload are alike, and hash alike.
  Expr other_nan = float_const(-std::numeric_limits<double>::quiet_NaN(), dtypes::float32);
  EXPECT_TRUE(structural_equal(nan, other_nan));
  EXPECT_EQ(structural_hash(nan), structural_hash(other_nan));
  EXPECT_TRUE(structural_equal(Expr(), Expr()));
  EXPECT_FALSE(structural_equal(Expr(), a));
  EXPECT_EQ(structural_hash(select(a < b, a, b)), structural_hash(select(a < b, a, b)));
  EXPECT_EQ(structural_hash(call("exp", {a})), structural_hash(call("exp", {a})));
  EXPECT_NE(structural_hash(a), structural_hash(a2));
  EXPECT_NE(structural_hash(Expr(1)), structural_hash(Expr(2)));
}

}  // namespace
}  // namespace tilus
