// Tests of the IR verifier (ir/verifier.h, DESIGN 6.1).
//
// One test per rule: each builds IR that breaks the rule, either through the tracer
// (tilus::Builder, which calls verify_inst() on every instruction it records) or by
// constructing the instructions directly where the builder rejects the input earlier, and
// checks that a CompileError is raised whose message names the instruction and the
// operands (as Tensor::type_str() prints them) and whose location is the line passed in.
// The positive tests make sure that correct kernels pass (no false positives).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/layout.h"
#include "tilus/ir/printer.h"
#include "tilus/ir/program.h"
#include "tilus/ir/stmt.h"
#include "tilus/ir/verifier.h"
#include "tilus/lang/builder.h"
#include "tilus/lang/script.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/passes/verify_program.h"

namespace tilus {
namespace {

using namespace dtypes;

SourceLoc L(int line) { return SourceLoc{"user.cpp", line}; }

// Runs `f` and checks that it throws a CompileError located at user.cpp:`line` whose
// message starts with "`prefix`:" and contains every one of `pieces`.
::testing::AssertionResult Fails(const std::function<void()>& f, int line, const std::string& prefix,
                                 std::initializer_list<std::string> pieces) {
  try {
    f();
  } catch (const CompileError& e) {
    const std::string& m = e.message();
    if (e.loc().file != "user.cpp" || e.loc().line != line)
      return ::testing::AssertionFailure() << "error at " << e.loc().str() << " instead of user.cpp:" << line
                                           << ": " << m;
    if (m.rfind(prefix + ": ", 0) != 0)
      return ::testing::AssertionFailure() << "message does not start with '" << prefix << ": ': " << m;
    for (auto& p : pieces)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks '" << p << "': " << m;
    if (std::getenv("TILUS_SHOW_MESSAGES")) std::fprintf(stderr, "  %s\n", e.what());
    return ::testing::AssertionSuccess() << m;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than a CompileError: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error";
}

::testing::AssertionResult Passes(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "unexpected error: " << e.what();
  }
  return ::testing::AssertionSuccess();
}

// A builder for a kernel with params n (int32), m (int32), a (float32*), h (float16*),
// v (void*), with blocks and warps set.
struct Traced {
  Builder b{"k", L(1)};
  Var n, m, a, h, v;
  explicit Traced(int64_t warps = 4) {
    n = b.add_param("n", int32, L(1));
    m = b.add_param("m", int32, L(1));
    a = b.add_param("a", float32.pointer_to(), L(1));
    h = b.add_param("h", float16.pointer_to(), L(1));
    v = b.add_param("v", void_t.pointer_to(), L(1));
    b.set_blocks({cdiv(n, 128)}, L(2));
    b.set_warps(warps, L(3));
  }
  Tensor g2(DataType dt = float32) { return b.global_view(dt == float16 ? h : a, dt, {m, n}, {}, L(4), "g"); }
  Tensor reg(std::vector<int64_t> shape, DataType dt = float32) { return b.register_tensor(dt, shape, Expr(), L(5)); }
  Tensor smem(std::vector<int64_t> shape, DataType dt = float32) { return b.shared_tensor(dt, shape, L(6)); }
  Kernel kernel() { return b.finish().kernels[0]; }
};

Var param(const std::string& name, DataType dt) { return Var(name, dt, VarRole::Param); }

// A kernel made of the given statements: params n (int32), grid [1], `warps` warps.
Kernel make_kernel(std::vector<Stmt> body, int64_t warps = 4, std::vector<Var> params = {}) {
  Kernel k;
  k.name = "k";
  k.params = std::move(params);
  k.grid = {int_const(1)};
  k.warps = warps;
  k.body = make_seq(std::move(body));
  if (!k.body) k.body = std::make_shared<SeqStmtNode>(std::vector<Stmt>{});
  k.loc = L(1);
  return k;
}

template <class T>
Stmt S(const std::shared_ptr<T>& inst) {
  return make_inst_stmt(inst);
}

std::shared_ptr<AllocateRegisterInst> alloc_reg(Tensor out, int line = 5) {
  auto i = make_inst<AllocateRegisterInst>(L(line));
  i->out = std::move(out);
  return i;
}

// ---------------------------------------------------------------------------------------
// Rule 1: operand memory scopes
// ---------------------------------------------------------------------------------------

TEST(VerifierRule1, GlobalViewPtrMustBeAPointer) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.global_view(t.n, float32, {t.n}, {}, L(11)); }, 11, "global_view",
                    {"ptr must be a pointer expression", "n of type int32", "global float32[n]"}));
}

TEST(VerifierRule1, GlobalViewPointeeMustMatchUnlessVoid) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.global_view(t.a, float16, {t.n}, {}, L(12)); }, 12, "global_view",
                    {"float32*", "points to float32", "global float16[n]"}));
  // void* may be viewed as anything, sub-byte types included.
  EXPECT_TRUE(Passes([&] { t.b.global_view(t.v, float16, {t.n}, {}, L(13)); }));
  EXPECT_TRUE(Passes([&] { t.b.global_view(t.v, int4, {t.m, t.n}, {}, L(14)); }));
}

TEST(VerifierRule1, GlobalViewShapeIsNotNegative) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.global_view(t.a, float32, {Expr(-8)}, {}, L(18)); }, 18, "global_view",
                    {"negative extent -8 in dim 0", "global float32[-8]"}));
  EXPECT_TRUE(Fails([&] { t.b.global_view(t.a, float32, {t.n, Expr(-1)}, {}, L(19)); }, 19, "global_view",
                    {"negative extent -1 in dim 1"}));
  EXPECT_TRUE(Passes([&] { t.b.global_view(t.a, float32, {Expr(0), t.n}, {}, L(20)); }));  // empty is fine
}

TEST(VerifierRule1, LoadGlobalOtherIsAScalarOfTheTilesDtype) {
  Traced t;
  Tensor g = t.g2();
  EXPECT_TRUE(Passes([&] { t.b.load_global(g, {0, 0}, {4, 8}, {}, L(21), Expr(-1.5)); }));
  EXPECT_TRUE(Passes([&] { t.b.load_global(g, {0, 0}, {4, 8}, {}, L(22), Expr(int64_t(3))); }));  // an int converts
  Tensor gi = t.b.global_view(t.v, int32, {t.n}, {}, L(23));
  EXPECT_TRUE(Fails([&] { t.b.load_global(gi, {0}, {8}, {}, L(24), Expr(0.5)); }, 24, "load_global",
                    {"other 0.5 is float32", "register int32[8]", "an int number"}));
  Tensor g4 = t.b.global_view(t.v, int4, {t.n}, {}, L(25));
  EXPECT_TRUE(Fails([&] { t.b.load_global(g4, {0}, {8}, {}, L(26), Expr(int64_t(1))); }, 26, "load_global",
                    {"8 bits or more", "register int4[8]"}));
}

TEST(VerifierRule1, LoadGlobalScopes) {
  Traced t;
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.load_global(s, {0, 0}, {64, 32}, {}, L(15)); }, 15, "load_global",
                    {"src must be a global tensor", "shared float32[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.load_global(Tensor(), {0}, {64}, {}, L(16)); }, 16, "load_global",
                    {"src must be a global tensor", "undefined tensor"}));
  // out must be a register tensor (direct construction).
  auto i = make_inst<LoadGlobalInst>(L(17));
  i->src = t.g2();
  i->out = Tensor::shared("x", float32, {64, 32});
  i->offsets = {0, 0};
  i->dims = {0, 1};
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 17, "load_global",
                    {"out must be a register tensor", "shared float32[64, 32]"}));
}

TEST(VerifierRule1, StoreGlobalScopes) {
  Traced t;
  Tensor g = t.g2();
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.store_global(g, s, {0, 0}, {}, L(18)); }, 18, "store_global",
                    {"src must be a register tensor", "shared float32[64, 32]"}));
  Tensor r = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.store_global(s, r, {0, 0}, {}, L(19)); }, 19, "store_global",
                    {"dst must be a global tensor", "shared float32[64, 32]"}));
}

TEST(VerifierRule1, LoadAndStoreSharedScopes) {
  Traced t;
  Tensor r = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.load_shared(r, L(20)); }, 20, "load_shared",
                    {"src must be a shared tensor", "register float32[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.store_shared(r, r, L(21)); }, 21, "store_shared",
                    {"dst must be a shared tensor", "register float32[64, 32]"}));
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.store_shared(s, s, L(22)); }, 22, "store_shared",
                    {"src must be a register tensor", "shared float32[64, 32]"}));
}

TEST(VerifierRule1, CopyAsyncScopes) {
  Traced t;
  Tensor g = t.g2();
  Tensor r = t.reg({64, 32});
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.copy_async(g, r, {0, 0}, {}, std::nullopt, true, L(23)); }, 23, "copy_async",
                    {"dst must be a shared tensor", "register float32[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.copy_async(s, s, {0, 0}, {}, std::nullopt, true, L(24)); }, 24, "copy_async",
                    {"src must be a global tensor", "shared float32[64, 32]"}));
}

TEST(VerifierRule1, SliceSharedAndFreeSharedScopes) {
  Traced t;
  Tensor r = t.reg({2, 64});
  EXPECT_TRUE(Fails([&] { t.b.slice_shared(r, {0, 0}, {1}, {64}, L(25)); }, 25, "slice_shared",
                    {"src must be a shared tensor", "register float32[2, 64]"}));
  EXPECT_TRUE(Fails([&] { t.b.free_shared(r, L(26)); }, 26, "free_shared",
                    {"tensor must be a shared tensor", "register float32[2, 64]"}));
}

TEST(VerifierRule1, DotOperandsAreRegisters) {
  Traced t;
  Tensor sa = t.smem({64, 32}, float16);
  Tensor b = t.reg({32, 64}, float16);
  Tensor c = t.reg({64, 64});
  EXPECT_TRUE(Fails([&] { t.b.dot(sa, b, c, L(27)); }, 27, "dot",
                    {"a must be a register tensor", "shared float16[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.dot(b, b, Tensor(), L(28)); }, 28, "dot",
                    {"c must be a register tensor", "undefined tensor"}));
}

TEST(VerifierRule1, ComputeOperandsAreRegisters) {
  Traced t;
  Tensor s = t.smem({4, 32});
  Tensor r = t.reg({4, 32});
  const std::string shared = "shared float32[4, 32]";
  EXPECT_TRUE(Fails([&] { t.b.cast(s, float16, L(29)); }, 29, "cast", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.view(s, int32, {}, L(30)); }, 30, "view", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.reshape(s, {128}, L(31)); }, 31, "reshape", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.squeeze(s, {0}, L(32)); }, 32, "squeeze", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.unsqueeze(s, {0}, L(33)); }, 33, "unsqueeze", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.transpose(s, L(34)); }, 34, "transpose", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.repeat(s, {2, 1}, L(35)); }, 35, "repeat", {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.reduce(ReduceOp::Sum, s, std::nullopt, false, L(36)); }, 36, "sum",
                    {"x must be a register tensor", shared}));
  EXPECT_TRUE(Fails([&] { t.b.assign_tensor(r, s, L(37)); }, 37, "assign", {"src must be a register tensor", shared}));
  // The builder rejects non-register elementwise operands itself; the verifier says the same.
  auto e = make_inst<ElementwiseInst>(L(38));
  e->op = "add";
  e->inputs = {r, s};
  e->params = {Var("x0", float32, VarRole::Binder), Var("x1", float32, VarRole::Binder)};
  e->body = e->params[0] + e->params[1];
  e->out = Tensor::reg("add", float32, {4, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 38, "add", {"input 1 must be a register tensor", shared}));
}

TEST(VerifierRule1, AnnotateLayoutKinds) {
  Traced t;
  Tensor g = t.g2();
  Tensor r = t.reg({4, 32});
  Tensor s = t.smem({4, 32});
  EXPECT_TRUE(Fails([&] { t.b.annotate_layout(g, spatial({4, 32}), L(39)); }, 39, "annotate_layout",
                    {"must be a register or shared tensor", "global float32[m, n]"}));
  EXPECT_TRUE(Fails([&] { t.b.annotate_shared_layout(r, SharedLayout::row_major({4, 32}), L(40)); }, 40,
                    "annotate_layout", {"a register tensor takes a register layout", "register float32[4, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.annotate_layout(s, spatial({4, 32}), L(41)); }, 41, "annotate_layout",
                    {"a shared tensor takes a shared layout", "shared float32[4, 32]"}));
}

// ---------------------------------------------------------------------------------------
// Rule 2: offsets arity and type
// ---------------------------------------------------------------------------------------

TEST(VerifierRule2, OffsetsArity) {
  Traced t;
  Tensor g = t.g2();
  Tensor r = t.reg({64, 32});
  Tensor s = t.smem({2, 64, 32});
  EXPECT_TRUE(Fails([&] { t.b.load_global(g, {0}, {64, 32}, {0, 1}, L(42)); }, 42, "load_global",
                    {"needs 2 offsets", "global float32[m, n]", "got 1: [0]"}));
  EXPECT_TRUE(Fails([&] { t.b.store_global(g, r, {0, 0, 0}, {0, 1}, L(43)); }, 43, "store_global",
                    {"needs 2 offsets", "global float32[m, n]", "got 3"}));
  EXPECT_TRUE(Fails([&] { t.b.copy_async(g, t.smem({64, 32}), {0}, {0, 1}, std::nullopt, true, L(44)); }, 44,
                    "copy_async", {"needs 2 offsets", "global float32[m, n]"}));
  EXPECT_TRUE(Fails([&] { t.b.slice_shared(s, {0, 0}, {1, 2}, {64, 32}, L(45)); }, 45, "slice_shared",
                    {"needs 3 offsets", "shared float32[2, 64, 32]"}));
}

TEST(VerifierRule2, OffsetsAreIntegers) {
  Traced t;
  Tensor g = t.g2();
  EXPECT_TRUE(Fails([&] { t.b.load_global(g, {Expr(1.5), 0}, {64, 32}, {}, L(46)); }, 46, "load_global",
                    {"offsets must be integer expressions", "float32", "global float32[m, n]"}));
}

// ---------------------------------------------------------------------------------------
// Rule 3: dims
// ---------------------------------------------------------------------------------------

TEST(VerifierRule3, DimsArityRangeAndDistinct) {
  Traced t;
  Tensor g = t.g2();
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.load_global(g, {0, 0}, {64, 32}, {1}, L(47)); }, 47, "load_global",
                    {"dims [1] has 1 entries", "register float32[64, 32] has rank 2"}));
  EXPECT_TRUE(Fails([&] { t.b.load_global(g, {0, 0}, {64, 32}, {0, 2}, L(48)); }, 48, "load_global",
                    {"dim 2 is out of range", "global float32[m, n] (rank 2)"}));
  EXPECT_TRUE(Fails([&] { t.b.copy_async(g, s, {0, 0}, {1, 1}, std::nullopt, true, L(49)); }, 49, "copy_async",
                    {"dim 1", "appears twice", "global float32[m, n]"}));
  // A tile of higher rank than the global tensor cannot be placed (default dims).
  Tensor r3 = t.reg({2, 64, 32});
  EXPECT_TRUE(Fails([&] { t.b.store_global(g, r3, {0, 0}, {}, L(50)); }, 50, "store_global",
                    {"has 2 entries", "register float32[2, 64, 32] has rank 3"}));
  // copy_async maps shared dims to global dims in any order; a tile may drop global dims.
  EXPECT_TRUE(Passes([&] { t.b.copy_async(g, t.smem({32, 64}), {0, 0}, {1, 0}, std::nullopt, true, L(51)); }));
  EXPECT_TRUE(Passes([&] { t.b.load_global(g, {0, 0}, {32}, {0}, L(52)); }));
  Tensor s2 = t.smem({2, 64, 32});
  EXPECT_TRUE(Fails([&] { t.b.slice_shared(s2, {0, 0, 0}, {1, 1}, {64, 32}, L(53)); }, 53, "slice_shared",
                    {"appears twice", "shared float32[2, 64, 32]"}));
}

// ---------------------------------------------------------------------------------------
// Rule 4: shapes
// ---------------------------------------------------------------------------------------

TEST(VerifierRule4, LoadGlobalOutShapeStaticPositive) {
  Traced t;
  auto i = make_inst<LoadGlobalInst>(L(54));
  i->src = t.g2();
  i->out = Tensor::reg("x", float32, {0, 32});
  i->offsets = {0, 0};
  i->dims = {0, 1};
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 54, "load_global",
                    {"out must have a static shape of positive dims", "register float32[0, 32]"}));
  // A dynamic register shape is an error too.
  auto j = make_inst<LoadGlobalInst>(L(55));
  j->src = t.g2();
  auto node = std::make_shared<TensorNode>(*Tensor::reg("x", float32, {64, 32}).get());
  node->shape[0] = t.n;
  j->out = Tensor(node);
  j->offsets = {0, 0};
  j->dims = {0, 1};
  EXPECT_TRUE(Fails([&] { verify_inst(*j); }, 55, "load_global", {"static shape", "register float32[n, 32]"}));
}

TEST(VerifierRule4, SharedRegisterShapesEqual) {
  Traced t;
  Tensor s = t.smem({64, 32});
  Tensor r = t.reg({32, 64});
  EXPECT_TRUE(Fails([&] { t.b.store_shared(s, r, L(56)); }, 56, "store_shared",
                    {"dst is shared float32[64, 32] and src is register float32[32, 64]", "the shapes differ"}));
  auto i = make_inst<LoadSharedInst>(L(57));
  i->src = s;
  i->out = Tensor::reg("y", float32, {64, 16});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 57, "load_shared",
                    {"src is shared float32[64, 32] and out is register float32[64, 16]", "the shapes differ"}));
}

TEST(VerifierRule4, SliceSharedFitsInSource) {
  Traced t;
  Tensor s = t.smem({2, 64, 32});
  EXPECT_TRUE(Fails([&] { t.b.slice_shared(s, {0, 0, 0}, {1, 2}, {64, 64}, L(58)); }, 58, "slice_shared",
                    {"out is shared float32[64, 64] and src is shared float32[2, 64, 32]", "out dim 1 (64)",
                     "src dim 2 (32)"}));
  EXPECT_TRUE(Fails([&] { t.b.slice_shared(s, {2, 0, 0}, {1, 2}, {64, 32}, L(59)); }, 59, "slice_shared",
                    {"dim 0 takes [2, 3)", "shared float32[2, 64, 32]"}));
  EXPECT_TRUE(Passes([&] { t.b.index_shared(s, {t.n % 2}, L(60)); }));
  EXPECT_TRUE(Passes([&] { t.b.slice_shared(s, {1, 16, 0}, {1, 2}, {32, 32}, L(61)); }));
}

// ---------------------------------------------------------------------------------------
// Rule 5: dtypes
// ---------------------------------------------------------------------------------------

TEST(VerifierRule5, MemoryDtypesMatch) {
  Traced t;
  Tensor g16 = t.g2(float16);
  Tensor r = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.store_global(g16, r, {0, 0}, {}, L(62)); }, 62, "store_global",
                    {"dst is global float16[m, n] and src is register float32[64, 32]", "(float16 vs float32)"}));
  EXPECT_TRUE(Fails([&] { t.b.copy_async(g16, t.smem({64, 32}), {0, 0}, {}, std::nullopt, true, L(63)); }, 63,
                    "copy_async", {"src is global float16[m, n] and dst is shared float32[64, 32]", "dtypes differ"}));
  Tensor s16 = t.smem({64, 32}, float16);
  EXPECT_TRUE(Fails([&] { t.b.store_shared(s16, r, L(64)); }, 64, "store_shared",
                    {"shared float16[64, 32]", "register float32[64, 32]", "dtypes differ"}));
  auto lg = make_inst<LoadGlobalInst>(L(230));
  lg->src = g16;
  lg->out = Tensor::reg("x", float32, {64, 32});
  lg->offsets = {0, 0};
  lg->dims = {0, 1};
  EXPECT_TRUE(Fails([&] { verify_inst(*lg); }, 230, "load_global",
                    {"src is global float16[m, n] and out is register float32[64, 32]", "dtypes differ"}));
  auto sl = make_inst<SliceSharedInst>(L(231));
  sl->src = t.smem({2, 64, 32}, float16);
  sl->out = Tensor::shared("s", float32, {64, 32});
  sl->offsets = {1, 0, 0};
  sl->dims = {1, 2};
  EXPECT_TRUE(Fails([&] { verify_inst(*sl); }, 231, "slice_shared",
                    {"src is shared float16[2, 64, 32] and out is shared float32[64, 32]", "dtypes differ"}));
  // Sub-byte dtypes are fine.
  Tensor g4 = t.b.global_view(t.v, int4, {t.m, t.n}, {}, L(65));
  EXPECT_TRUE(Passes([&] { t.b.copy_async(g4, t.smem({64, 32}, int4), {0, 0}, {}, std::nullopt, true, L(66)); }));
}

TEST(VerifierRule5, AssignSameDtypeAndShape) {
  Traced t;
  Tensor r = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.assign_tensor(r, t.reg({64, 32}, float16), L(67)); }, 67, "assign",
                    {"dst is register float32[64, 32] and src is register float16[64, 32]", "dtypes differ"}));
  EXPECT_TRUE(Fails([&] { t.b.assign_tensor(r, t.reg({32, 64}), L(68)); }, 68, "assign",
                    {"dst is register float32[64, 32] and src is register float32[32, 64]", "shapes differ"}));
}

TEST(VerifierRule5, CastNumbersAndBools) {
  Traced t;
  Tensor r = t.reg({4, 32});
  EXPECT_TRUE(Fails([&] { t.b.cast(r, float32.pointer_to(), L(69)); }, 69, "cast",
                    {"cannot cast register float32[4, 32] to register float32*[4, 32]"}));
  EXPECT_TRUE(Passes([&] { t.b.cast(r, boolean, L(70)); }));
  EXPECT_TRUE(Passes([&] { t.b.cast(r, float4_e2m1, L(71)); }));
  EXPECT_TRUE(Passes([&] { t.b.cast(t.reg({4, 32}, int3), float16, L(72)); }));
}

// ---------------------------------------------------------------------------------------
// Rule 6: dot
// ---------------------------------------------------------------------------------------

TEST(VerifierRule6, DotShapes) {
  Traced t;
  Tensor a = t.reg({64, 32}, float16);
  Tensor c = t.reg({64, 64});
  EXPECT_TRUE(Fails([&] { t.b.dot(a, t.reg({16, 64}, float16), c, L(73)); }, 73, "dot",
                    {"a is register float16[64, 32] and b is register float16[16, 64]: the inner dims differ (32 vs 16)"}));
  EXPECT_TRUE(Fails([&] { t.b.dot(a, t.reg({32, 64}, float16), t.reg({64, 32}), L(74)); }, 74, "dot",
                    {"c must be [64, 64]", "register float32[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.dot(t.reg({64}, float16), t.reg({64}, float16), t.reg({64}), L(75)); }, 75, "dot",
                    {"rank 2", "register float16[64]"}));
  // out must have c's shape (direct construction).
  auto i = make_inst<DotInst>(L(76));
  i->a = a;
  i->b = t.reg({32, 64}, float16);
  i->c = c;
  i->out = Tensor::reg("d", float32, {64, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 76, "dot",
                    {"c is register float32[64, 64] but out is register float32[64, 32]"}));
  // Batched dot.
  EXPECT_TRUE(Passes([&] { t.b.dot(t.reg({2, 64, 32}, float16), t.reg({2, 32, 16}, float16), t.reg({2, 64, 16}), L(77)); }));
}

TEST(VerifierRule6, DotDtypes) {
  Traced t;
  Tensor a = t.reg({16, 16}, float16);
  Tensor c = t.reg({16, 16});
  EXPECT_TRUE(Fails([&] { t.b.dot(a, t.reg({16, 16}, bfloat16), c, L(78)); }, 78, "dot",
                    {"a is register float16[16, 16] and b is register bfloat16[16, 16]", "one dtype"}));
  EXPECT_TRUE(Fails([&] { t.b.dot(a, a, t.reg({16, 16}, int32), L(79)); }, 79, "dot",
                    {"float operands need a float accumulator", "register int32[16, 16]"}));
  Tensor i8 = t.reg({16, 16}, int8);
  EXPECT_TRUE(Fails([&] { t.b.dot(i8, i8, c, L(80)); }, 80, "dot",
                    {"integer operands need an integer accumulator", "register int8[16, 16]", "register float32[16, 16]"}));
  EXPECT_TRUE(Fails([&] { t.b.dot(a, a, t.reg({16, 16}, boolean), L(81)); }, 81, "dot",
                    {"accumulator c must be numeric", "register bool[16, 16]"}));
  auto d = make_inst<DotInst>(L(82));
  d->a = a;
  d->b = a;
  d->c = c;
  d->out = Tensor::reg("d", float16, {16, 16});
  EXPECT_TRUE(Fails([&] { verify_inst(*d); }, 82, "dot",
                    {"c is register float32[16, 16] but out is register float16[16, 16]", "c's dtype"}));
  // Every numeric combination with a matching accumulator kind is fine, sub-byte included.
  EXPECT_TRUE(Passes([&] { t.b.dot(i8, i8, t.reg({16, 16}, int32), L(83)); }));
  EXPECT_TRUE(Passes([&] { t.b.dot(t.reg({16, 16}, int4), t.reg({16, 16}, int4), t.reg({16, 16}, int32), L(84)); }));
  EXPECT_TRUE(Passes([&] { t.b.dot(a, a, t.reg({16, 16}, float16), L(85)); }));
}

// ---------------------------------------------------------------------------------------
// Rule 7: view, reshape, squeeze, unsqueeze, transpose, repeat
// ---------------------------------------------------------------------------------------

TEST(VerifierRule7, ViewTotalBits) {
  Traced t;
  Tensor x = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.view(x, float32, local({2, 1}) * spatial({64, 2}) * local({1, 16}), L(86)); }, 86,
                    "view", {"cannot view register float32[64, 32] (65536 bits) as register float32[128, 32]",
                             "total bits differ"}));
  EXPECT_TRUE(Passes([&] { t.b.view(x, float16, {}, L(87)); }));
  EXPECT_TRUE(Passes([&] { t.b.view(t.reg({4, 32}, int4), uint8, {}, L(88)); }));
}

TEST(VerifierRule7, ViewBitsPerThread) {
  auto i = make_inst<ViewInst>(L(89));
  i->x = Tensor::reg("x", float32, {4, 32}, spatial({4, 32}));
  // 128 threads with two slots of float32 each: 64 bits per thread instead of 32.
  i->out = Tensor::reg("v", float32, {4, 32}, replicated(2) * spatial({2, 32}) * local({2, 1}));
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 89, "view",
                    {"register float32[4, 32]", "each thread holds 32 bits of x but 64 bits of out"}));
  auto ok = make_inst<ViewInst>(L(90));
  ok->x = i->x;
  ok->out = Tensor::reg("v", float16, {4, 64}, spatial({4, 32}) * local({1, 2}));
  EXPECT_TRUE(Passes([&] { verify_inst(*ok); }));
}

TEST(VerifierRule7, ReshapeElementCount) {
  auto i = make_inst<ReshapeInst>(L(91));
  i->x = Tensor::reg("x", float32, {4, 32});
  i->out = Tensor::reg("rs", float32, {4, 16});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 91, "reshape",
                    {"cannot reshape register float32[4, 32] (128 elements) to register float32[4, 16] (64 elements)"}));
  Traced t;
  EXPECT_TRUE(Passes([&] { t.b.reshape(t.reg({4, 32}), {2, -1, 8}, L(92)); }));
}

TEST(VerifierRule7, Squeeze) {
  Traced t;
  Tensor x = t.reg({1, 4, 32});
  EXPECT_TRUE(Fails([&] { t.b.squeeze(x, {1}, L(93)); }, 93, "squeeze",
                    {"dim 1 of x register float32[1, 4, 32] has extent 4, not 1"}));
  EXPECT_TRUE(Fails([&] { t.b.squeeze(x, {3}, L(94)); }, 94, "squeeze",
                    {"dim 3 is out of range", "register float32[1, 4, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.squeeze(x, {0, 0}, L(95)); }, 95, "squeeze",
                    {"dim 0 appears twice", "register float32[1, 4, 32]"}));
  EXPECT_TRUE(Passes([&] { t.b.squeeze(x, {-3}, L(96)); }));
}

TEST(VerifierRule7, Unsqueeze) {
  Traced t;
  Tensor x = t.reg({4, 32});
  EXPECT_TRUE(Fails([&] { t.b.unsqueeze(x, {3}, L(97)); }, 97, "unsqueeze",
                    {"dim 3 is out of range", "register float32[4, 32]"}));
  auto i = make_inst<UnsqueezeInst>(L(98));
  i->x = x;
  i->dims = {0};
  i->out = Tensor::reg("us", float32, {4, 1, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 98, "unsqueeze",
                    {"unsqueezing x register float32[4, 32] at dims [0] gives [1, 4, 32]",
                     "out is register float32[4, 1, 32]"}));
  EXPECT_TRUE(Passes([&] { t.b.unsqueeze(x, {0, -1}, L(99)); }));
}

TEST(VerifierRule7, Transpose) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.transpose(t.reg({2, 4, 32}), L(100)); }, 100, "transpose",
                    {"x must have rank 2", "register float32[2, 4, 32]"}));
  auto i = make_inst<TransposeInst>(L(101));
  i->x = Tensor::reg("x", float32, {4, 32});
  i->out = Tensor::reg("tr", float32, {4, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 101, "transpose",
                    {"transposing x register float32[4, 32] gives [32, 4]", "out is register float32[4, 32]"}));
}

TEST(VerifierRule7, Repeat) {
  Traced t;
  Tensor x = t.reg({4, 32});
  EXPECT_TRUE(Fails([&] { t.b.repeat(x, {0, 2}, L(102)); }, 102, "repeat",
                    {"repeats [0, 2] must be positive", "register float32[4, 32]"}));
  auto i = make_inst<RepeatInst>(L(103));
  i->x = x;
  i->repeats = {2, 1, 2};
  i->out = Tensor::reg("rp", float32, {2, 4, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 103, "repeat",
                    {"repeating x register float32[4, 32] by [2, 1, 2] gives [2, 4, 64]"}));
  EXPECT_TRUE(Passes([&] { t.b.repeat(x, {3, 1, 2}, L(104)); }));
}

// ---------------------------------------------------------------------------------------
// Rule 8: elementwise
// ---------------------------------------------------------------------------------------

std::shared_ptr<ElementwiseInst> add_inst(Tensor a, Tensor b, int line) {
  auto e = make_inst<ElementwiseInst>(L(line));
  e->op = "add";
  e->inputs = {a, b};
  e->params = {Var("x0", a.dtype(), VarRole::Binder), Var("x1", b.dtype(), VarRole::Binder)};
  e->body = e->params[0] + e->params[1];
  e->out = Tensor::reg("add", e->body.dtype(), {4, 32});
  return e;
}

TEST(VerifierRule8, Elementwise) {
  Tensor a = Tensor::reg("a", float32, {4, 32});
  Tensor b = Tensor::reg("b", float32, {1, 32});
  EXPECT_TRUE(Passes([&] { verify_inst(*add_inst(a, b, 105)); }));

  auto e = add_inst(a, b, 106);
  e->params.pop_back();
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 106, "add", {"has 2 inputs but 1 params"}));

  e = add_inst(a, b, 107);
  e->params[1] = Var("x1", float16, VarRole::Binder);
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 107, "add",
                    {"param 1 'x1' has type float16 but input 1 is register float32[1, 32]"}));

  e = add_inst(a, Tensor::reg("b", float32, {3, 32}), 108);
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 108, "add",
                    {"cannot broadcast register float32[4, 32] and register float32[3, 32]"}));

  e = add_inst(a, b, 109);
  e->out = Tensor::reg("add", float32, {1, 32});
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 109, "add",
                    {"broadcasting register float32[4, 32] and register float32[1, 32] gives [4, 32]",
                     "out is register float32[1, 32]"}));

  e = add_inst(a, b, 110);
  e->body = Expr();
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 110, "add", {"the body is undefined", "register float32[4, 32]"}));

  e = add_inst(a, b, 111);
  e->body = e->params[0] < e->params[1];
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 111, "add",
                    {"the body x0 < x1 has type bool but out is register float32[4, 32]"}));

  e = add_inst(a, b, 112);
  Var foreign("x7", float32, VarRole::Binder);
  e->body = e->params[0] + foreign;
  EXPECT_TRUE(Fails([&] { verify_inst(*e); }, 112, "add",
                    {"body x0 + x7 uses 'x7', a variable bound by another instruction", "[x0, x1]"}));

  // Scalars captured by the body (kernel params, locals) are fine.
  e = add_inst(a, b, 113);
  e->body = e->params[0] + cast(param("n", int32), float32);
  EXPECT_TRUE(Passes([&] { verify_inst(*e); }));
}

// ---------------------------------------------------------------------------------------
// Rule 9: reduce
// ---------------------------------------------------------------------------------------

TEST(VerifierRule9, Reduce) {
  Traced t;
  Tensor x = t.reg({4, 32});
  Tensor flags = t.reg({4, 32}, boolean);
  EXPECT_TRUE(Fails([&] { t.b.reduce(ReduceOp::Any, x, std::nullopt, false, L(114)); }, 114, "any",
                    {"needs a bool tensor", "register float32[4, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.reduce(ReduceOp::Sum, flags, std::nullopt, false, L(115)); }, 115, "sum",
                    {"needs a numeric tensor", "register bool[4, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.reduce(ReduceOp::Max, x, std::vector<int>{2}, false, L(116)); }, 116, "max",
                    {"dim 2 is out of range", "register float32[4, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.reduce(ReduceOp::Min, x, std::vector<int>{1, -1}, false, L(117)); }, 117, "min",
                    {"dim 1 appears twice", "register float32[4, 32]"}));
  auto i = make_inst<ReduceInst>(L(118));
  i->x = x;
  i->dims = {1};
  i->keepdim = true;
  i->out = Tensor::reg("sum", float32, {4});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 118, "sum",
                    {"reducing dims [1] of x register float32[4, 32] (keepdim=true) gives [4, 1]",
                     "out is register float32[4]"}));
  auto j = make_inst<ReduceInst>(L(119));
  j->x = flags;
  j->op = ReduceOp::All;
  j->dims = {0, 1};
  j->out = Tensor::reg("all", int32, {});
  EXPECT_TRUE(Fails([&] { verify_inst(*j); }, 119, "all", {"out must be bool", "register int32[]"}));
  EXPECT_TRUE(Passes([&] { t.b.reduce(ReduceOp::All, flags, std::vector<int>{0}, true, L(120)); }));
  EXPECT_TRUE(Passes([&] { t.b.reduce(ReduceOp::Sum, x, std::vector<int>{}, false, L(121)); }));
}

// ---------------------------------------------------------------------------------------
// Rule 10: copy_async_wait_group
// ---------------------------------------------------------------------------------------

TEST(VerifierRule10, WaitGroupCount) {
  auto i = make_inst<CopyAsyncWaitGroupInst>(L(122));
  i->n = -1;
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 122, "copy_async_wait_group", {"n must be >= 0", "got -1"}));
  i->n = 7;
  EXPECT_TRUE(Passes([&] { verify_inst(*i); }));
}

// ---------------------------------------------------------------------------------------
// Rule 11: copy
// ---------------------------------------------------------------------------------------

TEST(VerifierRule11, Copy) {
  Traced t;
  Tensor g = t.g2();
  Tensor s = t.smem({64, 32});
  Tensor r = t.reg({64, 32});
  auto whole = [](const Tensor& x) { return CopyRegion{x, {}, {}}; };
  // Legal copies: global -> shared, shared -> register, register -> global, broadcasts,
  // dynamic extents, a head element, two scalars.
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {0, 0}, {64, 32}}, whole(s), {}, L(123)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(whole(s), whole(r), {}, L(124)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(whole(r), CopyRegion{g, {t.n, 0}, {}}, {.coalesced_width = 4}, L(125)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {0, 0}, {t.m, 32}}, whole(s), {}, L(126)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {0, 0}, {1, 32}}, whole(s), {}, L(127)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {0, 0}, {}}, CopyRegion{s, {3, 4}, {}}, {}, L(128)); }));
  EXPECT_TRUE(Passes([&] {
    t.b.copy(CopyRegion{g, {0, 0}, {64, 32}}, whole(s), {.loop_layout = spatial({4, 32}) * local({16, 1})}, L(129));
  }));

  EXPECT_TRUE(Fails([&] { t.b.copy(whole(r), whole(t.reg({64, 32})), {}, L(130)); }, 130, "copy",
                    {"src is register float32[64, 32] and dst is register float32[64, 32]", "use assign"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(CopyRegion{g, {0}, {64}}, whole(s), {}, L(131)); }, 131, "copy",
                    {"src region needs 2 offsets", "global float32[m, n]", "got 1"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(whole(s), CopyRegion{r, {0, 1}, {}}, {}, L(132)); }, 132, "copy",
                    {"dst is register float32[64, 32]", "a register region must be the whole tensor"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(CopyRegion{g, {0, 0}, {64, 16}}, whole(s), {}, L(133)); }, 133, "copy",
                    {"src is global float32[m, n] with extents [64, 16]", "dst is shared float32[64, 32]",
                     "16 and 32 do not match"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(whole(s), CopyRegion{g, {0, 0}, {}}, {.coalesced_width = 3}, L(134)); }, 134,
                    "copy", {"coalesced_width must be a positive power of two, got 3", "shared float32[64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(CopyRegion{g, {0, 0}, {}}, whole(t.smem({64, 32}, float16)), {}, L(135)); }, 135,
                    "copy", {"src is global float32[m, n] and dst is shared float16[64, 32]", "dtypes differ"}));
  EXPECT_TRUE(Fails([&] {
    t.b.copy(CopyRegion{g, {0, 0}, {64, 32}}, whole(s), {.loop_layout = spatial({4, 32})}, L(136));
  }, 136, "copy", {"loop_layout has shape [4, 32]", "extents [64, 32]"}));
  EXPECT_TRUE(Fails([&] { t.b.copy(whole(s), CopyRegion{s, {32, 0}, {64, 32}}, {}, L(137)); }, 137, "copy",
                    {"dst region", "leaves shared float32[64, 32] in dim 0 ([32, 96) vs extent 64)"}));
  // An undefined tensor is reported, not dereferenced.
  auto c = make_inst<CopyInst>(L(138));
  c->dst = whole(s);
  EXPECT_TRUE(Fails([&] { verify_inst(*c); }, 138, "copy", {"src must be a tensor region, got an undefined tensor"}));
}

TEST(VerifierRule11, CopyRegionsWithRuntimeStartsKeepTheirExtent) {
  Traced t;
  Tensor g = t.g2();
  Tensor s = t.smem({16, 32});
  Tensor r = t.reg({16, 32});
  auto whole = [](const Tensor& x) { return CopyRegion{x, {}, {}}; };
  // A slice's extent is stop - start: g[n:n + 16] has extent 16, and g[n:] reaches the end.
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {t.n, 0}, {(t.n + 16) - t.n, 32}}, whole(s), {}, L(301)); }));
  EXPECT_TRUE(Passes([&] { t.b.copy(CopyRegion{g, {t.n, 0}, {t.m - t.n, 32}}, whole(r), {}, L(301)); }));
  Kernel k = t.kernel();
  std::string text = print(k);
  EXPECT_NE(text.find("src_offsets=[n, 0], src_extents=[16, 32]"), std::string::npos) << text;
  // A slice of another extent than the other side's is an error, not a larger tile.
  Traced u;
  g = u.g2();
  s = u.smem({16, 32});
  EXPECT_TRUE(Fails([&] { u.b.copy(CopyRegion{g, {u.n, 0}, {(u.n + 8) - u.n, 32}}, whole(s), {}, L(302)); }, 302,
                    "copy", {"src is global float32[m, n] with extents [8, 32]", "dst is shared float32[16, 32]",
                             "8 and 16 do not match"}));
  // A dynamic extent that stops before the tensor's end would copy past the slice.
  EXPECT_TRUE(Fails([&] { u.b.copy(CopyRegion{g, {u.n, 0}, {u.m - 2 * u.n, 32}}, whole(s), {}, L(303)); }, 303,
                    "copy", {"extent m - n * 2 of dim 0 of the src region is not a constant",
                             "stops before its tensor's end", "would move 16 elements there",
                             "src global float32[m, n] (offsets [n, 0], extents [m - n * 2, 32])",
                             "dst shared float32[16, 32] (offsets [0, 0], extents [16, 32])", "g[i0:i0 + 16]"}));
  // Shared tiles are static; a copy's tile needs a constant from one side.
  EXPECT_TRUE(Fails([&] { u.b.copy(CopyRegion{s, {0, 0}, {u.n, 32}}, whole(u.reg({16, 32})), {}, L(304)); }, 304,
                    "copy", {"extent n of dim 0 of the src region is not a constant, but a shared tile's extents are",
                             "src shared float32[16, 32] (offsets [0, 0], extents [n, 32])"}));
  EXPECT_TRUE(Fails([&] { u.b.copy(CopyRegion{g, {0, 0}, {u.n, 32}}, CopyRegion{g, {0, 32}, {u.n, 32}}, {}, L(305)); },
                    305, "copy", {"the extent of the copied tile in its dim 0 is not a constant (n and n)",
                                  "memory-to-memory copies need constant extents"}));
  // IR built without the tracer: the verifier holds shared regions to constant extents.
  auto c = make_inst<CopyInst>(L(306));
  c->src = CopyRegion{g, {int_const(0), int_const(0)}, {u.n, int_const(32)}};
  c->dst = CopyRegion{s, {int_const(0), int_const(0)}, {u.n, int_const(32)}};
  EXPECT_TRUE(Fails([&] { verify_inst(*c); }, 306, "copy", {"dst region of shared float32[16, 32]", "must be constants"}));
}

// ---------------------------------------------------------------------------------------
// Rules 12-16
// ---------------------------------------------------------------------------------------

TEST(VerifierRule12, PrintfConversions) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.printf("%d and %f\n", {t.n}, L(139)); }, 139, "printf",
                    {"the format \"%d and %f\\n\" has 2 % conversions but 1 arguments", "[n]"}));
  EXPECT_TRUE(Fails([&] { t.b.printf("100%", {}, L(140)); }, 140, "printf", {"lone '%'"}));
  EXPECT_TRUE(Fails([&] { t.b.printf("%d", {Expr()}, L(141)); }, 141, "printf",
                    {"arguments must be scalar numbers, bools or pointers", "<undefined>"}));
  EXPECT_TRUE(Passes([&] { t.b.printf("%d%% of %5.2f at %p %s\n", {t.n, Expr(1.5f), t.a, Expr(true)}, L(142)); }));
}

TEST(VerifierRule13, AssumeNeedsBool) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.assume(t.n % 16, L(143)); }, 143, "assume",
                    {"the condition must be a bool expression", "n % 16 of type int32"}));
  EXPECT_TRUE(Passes([&] { t.b.assume(t.n % 16 == 0, L(144)); }));
}

TEST(VerifierRule14, AnnotateLayoutShape) {
  Traced t;
  Tensor r = t.reg({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.annotate_layout(r, spatial({4, 32}), L(145)); }, 145, "annotate_layout",
                    {"has shape [4, 32] but tensor is register float32[64, 32]"}));
  Tensor s = t.smem({64, 32});
  EXPECT_TRUE(Fails([&] { t.b.annotate_shared_layout(s, SharedLayout::row_major({32, 64}), L(146)); }, 146,
                    "annotate_layout", {"has shape [32, 64] but tensor is shared float32[64, 32]"}));
  EXPECT_TRUE(Passes([&] { t.b.annotate_layout(r, local({16, 1}) * spatial({4, 32}), L(147)); }));
  EXPECT_TRUE(Passes([&] { t.b.annotate_shared_layout(s, SharedLayout::column_major({64, 32}), L(148)); }));
}

TEST(VerifierRule15, RegisterTensor) {
  EXPECT_TRUE(Fails([&] { verify_inst(*alloc_reg(Tensor::reg("r", float32, {4, 0}), 149)); }, 149,
                    "register_tensor", {"out must have a static shape of positive dims", "register float32[4, 0]"}));
  auto i = alloc_reg(Tensor::reg("r", int32, {4, 32}), 150);
  i->init = float_const(1.0);
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 150, "register_tensor",
                    {"init 1.0 has type float32 but out is register int32[4, 32]"}));
  i = alloc_reg(Tensor::reg("r", int32, {4, 32}), 151);
  i->init = param("p", int32.pointer_to());
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 151, "register_tensor",
                    {"init must be a number or bool", "int32*", "register int32[4, 32]"}));
  i = alloc_reg(Tensor::reg("r", int32, {4, 32}), 152);
  i->axes = {Var("i0", int32, VarRole::Binder)};
  i->init = Expr(i->axes[0]);
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 152, "register_tensor",
                    {"binds 1 axes but out register int32[4, 32] has rank 2"}));
  i = alloc_reg(Tensor::reg("r", int32, {4, 32}), 153);
  i->init = Expr(Var("i9", int32, VarRole::Binder));
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 153, "register_tensor", {"'i9', a variable bound by another"}));
  Traced t;
  EXPECT_TRUE(Passes([&] {
    t.b.register_tensor(int32, {4, 32}, [](const std::vector<Var>& ax) { return ax[0] * 32 + ax[1]; }, L(154));
  }));
  EXPECT_TRUE(Passes([&] { t.b.register_tensor(boolean, {4}, Expr(true), L(155)); }));
}

TEST(VerifierRule16, GlobalViewShapeAndStrides) {
  Var n = param("n", int32), p = param("p", float32.pointer_to());
  auto i = make_inst<GlobalViewInst>(L(156));
  i->ptr = p;
  i->out = Tensor::global("g", float32, {n, n}, {n});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 156, "global_view", {"has 2 dims but 1 strides [n]", "global float32[n, n]"}));
  i = make_inst<GlobalViewInst>(L(157));
  i->ptr = p;
  i->out = Tensor::global("g", float32, {cast(n, float32)});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 157, "global_view",
                    {"integer shape expressions", "float32(n) has type float32"}));
  i = make_inst<GlobalViewInst>(L(158));
  i->ptr = p;
  i->out = Tensor::global("g", float32, {n, n}, {n, Expr(1.0f)});
  EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 158, "global_view", {"integer strides", "global float32[n, n]"}));
  i = make_inst<GlobalViewInst>(L(159));
  i->ptr = p;
  i->out = Tensor::global("g", float32, {n, n}, {n * 2, 1});
  EXPECT_TRUE(Passes([&] { verify_inst(*i); }));
}

// ---------------------------------------------------------------------------------------
// Kernel rules
// ---------------------------------------------------------------------------------------

TEST(VerifierRuleA, WarpsAndGrid) {
  Traced t;
  Kernel k = t.kernel();
  EXPECT_TRUE(Passes([&] { verify(k); }));
  Kernel bad = k;
  bad.warps = 33;
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"warps = 33", "1 to 32 warps"}));
  bad = k;
  bad.warps = 0;
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"warps = 0"}));
  bad = k;
  bad.grid = {};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"grid needs 1 to 3 block counts, got 0"}));
  bad.grid = {1, 1, 1, 1};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"grid needs 1 to 3 block counts, got 4"}));
  bad.grid = {Expr(2.0f)};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"block counts must be integer expressions", "float32"}));
  bad.grid = {builtin::block_idx(0) + 1};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"only the kernel's parameters", "'blockIdx.x' (builtin)"}));
  bad.grid = {Var("i", int32, VarRole::Loop)};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"only the kernel's parameters", "'i' (loop variable)"}));
  bad.grid = {param("n", int32)};  // a parameter of another kernel with the same name
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"only the kernel's parameters", "'n' (a parameter of another kernel)"}));
}

TEST(VerifierRuleA, MinBlocks) {
  Traced t;  // 4 warps
  t.b.set_min_blocks(4, L(7));
  Kernel k = t.kernel();
  EXPECT_EQ(k.min_blocks, 4);
  EXPECT_TRUE(Passes([&] { verify(k); }));
  // The tracer rejects a bad count at the line that sets it.
  Traced u;
  EXPECT_TRUE(Fails([&] { u.b.set_min_blocks(0, L(8)); }, 8, "attrs.min_blocks = 0", {"an SM holds 1 to 32 blocks"}));
  EXPECT_TRUE(Fails([&] { u.b.set_min_blocks(17, L(9)); }, 9, "attrs.min_blocks = 17",  // 17 x 4 = 68 warps
                    {"17 blocks of 4 warps are more than the 64 warps an SM holds"}));
  Kernel bad = k;
  bad.min_blocks = 32;
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"min_blocks = 32", "more than the 64 warps an SM holds"}));
}

TEST(VerifierRuleA, ClusterShape) {
  Traced t;  // grid [cdiv(n, 128)]: only known at launch, which checks it (launch_grid)
  t.b.set_cluster({2}, L(7));
  Kernel k = t.kernel();
  EXPECT_EQ(k.cluster, (std::array<int64_t, 3>{2, 1, 1}));
  EXPECT_TRUE(Passes([&] { verify(k); }));
  Kernel ok = k;
  ok.grid = {int_const(8), int_const(3)};
  ok.cluster = {4, 1, 1};
  EXPECT_TRUE(Passes([&] { verify(ok); }));
  ok.cluster = {2, 3, 1};
  EXPECT_TRUE(Passes([&] { verify(ok); }));
  Kernel bad = ok;
  bad.cluster = {0, 1, 1};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"cluster_blocks [0, 1, 1]", "must be positive"}));
  bad.cluster = {4, 3, 1};  // divides the grid, but 12 blocks is too many
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"a cluster of 12 blocks", "portable maximum of 8"}));
  bad.cluster = {1, 1, 16};
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"a cluster of 16 blocks"}));
  bad.cluster = {1, 2, 1};  // 3 blocks in y
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k",
                    {"cluster_blocks [1, 2, 1]: grid [8, 3] has 3 blocks in dimension 1", "multiple of the cluster's 2"}));
  bad.cluster = {1, 1, 2};  // the grid has no z dimension: 1 block
  EXPECT_TRUE(Fails([&] { verify(bad); }, 1, "kernel k", {"has 1 blocks in dimension 2"}));
  // The tracer rejects a bad shape at the line that sets it.
  Traced u;
  EXPECT_TRUE(Fails([&] { u.b.set_cluster({2, 0}, L(9)); }, 9, "attrs.cluster_blocks", {"dimension 1 is 0, not positive"}));
  EXPECT_TRUE(Fails([&] { u.b.set_cluster({1, 1, 1, 1}, L(9)); }, 9, "attrs.cluster_blocks",
                    {"needs 1 to 3 dimensions, got 4"}));
  EXPECT_TRUE(Fails([&] { u.b.set_cluster({4, 4}, L(9)); }, 9, "attrs.cluster_blocks",
                    {"a cluster of 16 blocks is larger than the portable maximum of 8"}));
}

TEST(VerifierRuleB, TensorsUsedAfterDefinitionInVisibleScope) {
  {
    // A tensor defined in a loop body is not visible after the loop.
    Traced t;
    Tensor g = t.g2();
    t.b.begin_for("i", 0, t.n, 1, Unroll::none(), L(160));
    Tensor x = t.b.load_global(g, {0, 0}, {64, 32}, {}, L(161));
    t.b.end_for();
    t.b.store_global(g, x, {0, 0}, {}, L(162));  // passes verify_inst: local rules hold
    Kernel k = t.kernel();
    EXPECT_TRUE(Fails([&] { verify(k); }, 162, "store_global",
                      {"src register float32[64, 32] ('x') is not defined here"}));
  }
  {
    // Use before definition.
    Tensor r = Tensor::reg("r", float32, {4, 32});
    auto st = make_inst<AssignInst>(L(163));
    st->dst = r;
    st->src = r;
    Kernel k = make_kernel({S(st), S(alloc_reg(r, 164))});
    EXPECT_TRUE(Fails([&] { verify(k); }, 163, "assign", {"dst register float32[4, 32] ('r') is not defined here"}));
  }
  {
    // A tensor defined in a then-branch is not visible in the else-branch.
    Tensor r = Tensor::reg("r", float32, {4, 32});
    Tensor u = Tensor::reg("u", float32, {4, 32});
    auto as = make_inst<AssignInst>(L(165));
    as->dst = u;
    as->src = r;
    Kernel k = make_kernel({S(alloc_reg(u, 166)),
                            std::make_shared<IfStmtNode>(bool_const(true), S(alloc_reg(r, 167)), S(as), L(168))});
    EXPECT_TRUE(Fails([&] { verify(k); }, 165, "assign", {"src register float32[4, 32] ('r') is not defined here"}));
  }
}

TEST(VerifierRuleB, ScalarVariablesVisible) {
  {
    // A let inside a loop is not visible after it.
    Traced t;
    Tensor g = t.g2();
    Var i = t.b.begin_for("i", 0, t.n, 1, Unroll::none(), L(170));
    Var off = t.b.let("off", i * 64, L(171));
    t.b.end_for();
    t.b.load_global(g, {off, 0}, {64, 32}, {}, L(172));
    Kernel k = t.kernel();
    EXPECT_TRUE(Fails([&] { verify(k); }, 172, "load_global",
                      {"offsets off uses 'off' (local variable) where it is not visible"}));
  }
  {
    // A loop variable after its loop.
    Traced t;
    Tensor g = t.g2();
    Var i = t.b.begin_for("i", 0, t.n, 1, Unroll::none(), L(173));
    t.b.end_for();
    t.b.let("j", i + 1, L(174));
    Kernel k = t.kernel();
    EXPECT_TRUE(Fails([&] { verify(k); }, 174, "let j", {"value i + 1 uses 'i' (loop variable)"}));
  }
  {
    // A parameter of another kernel, in a global view's shape.
    Traced t;
    Var other = param("n", int32);
    t.b.global_view(t.a, float32, {other}, {}, L(175));
    Kernel k = t.kernel();
    EXPECT_TRUE(Fails([&] { verify(k); }, 175, "global_view",
                      {"out shape n uses 'n' (kernel parameter)", "not a parameter of this kernel"}));
  }
  {
    // A condition using a variable declared later.
    Var late("late", boolean, VarRole::Local);
    Kernel k = make_kernel({std::make_shared<IfStmtNode>(late, std::make_shared<SeqStmtNode>(std::vector<Stmt>{}),
                                                         nullptr, L(176)),
                            std::make_shared<DeclareStmtNode>(late, bool_const(false), L(177))});
    EXPECT_TRUE(Fails([&] { verify(k); }, 176, "if", {"condition late uses 'late'"}));
  }
}

TEST(VerifierRuleC, BreakAndContinue) {
  Kernel k = make_kernel({std::make_shared<BreakStmtNode>(L(178))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 178, "break", {"outside of a loop"}));
  Var i("i", int32, VarRole::Loop);
  auto group = std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleWarp, 0, 32,
                                                     std::make_shared<ContinueStmtNode>(L(179)), L(180));
  k = make_kernel({std::make_shared<ForStmtNode>(i, int_const(0), int_const(4), int_const(1), Unroll::none(), group,
                                                 L(181))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 179, "continue", {"cannot leave a thread group"}));
  // Inside a while loop, and inside a loop inside a thread group: fine.
  k = make_kernel({std::make_shared<WhileStmtNode>(bool_const(true), std::make_shared<BreakStmtNode>(L(182)), L(183)),
                   std::make_shared<ThreadGroupStmtNode>(
                       ThreadGroupKind::SingleWarp, 32, 32,
                       std::make_shared<ForStmtNode>(i, int_const(0), int_const(4), int_const(1), Unroll::none(),
                                                     std::make_shared<ContinueStmtNode>(L(184)), L(185)),
                       L(186))});
  EXPECT_TRUE(Passes([&] { verify(k); }));
}

TEST(VerifierRuleD, ConditionsAndLoopBounds) {
  Var n = param("n", int32);
  auto empty = std::make_shared<SeqStmtNode>(std::vector<Stmt>{});
  Kernel k = make_kernel({std::make_shared<IfStmtNode>(n, empty, nullptr, L(187))}, 4, {n});
  EXPECT_TRUE(Fails([&] { verify(k); }, 187, "if", {"must be a bool expression, got n of type int32"}));
  k = make_kernel({std::make_shared<WhileStmtNode>(Expr(1.0f), empty, L(188))}, 4, {n});
  EXPECT_TRUE(Fails([&] { verify(k); }, 188, "while", {"must be a bool expression", "float32"}));
  Var i("i", int32, VarRole::Loop);
  k = make_kernel({std::make_shared<ForStmtNode>(i, int_const(0), cast(n, float32), int_const(1), Unroll::none(),
                                                 empty, L(189))},
                  4, {n});
  EXPECT_TRUE(Fails([&] { verify(k); }, 189, "for", {"loop bounds must be integers, got end float32(n) of type float32"}));
}

TEST(VerifierRuleE, ThreadGroups) {
  auto empty = std::make_shared<SeqStmtNode>(std::vector<Stmt>{});
  Kernel k = make_kernel({std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::WarpGroup, 64, 128, empty, L(190))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 190, "warp_group",
                    {"threads [64, 192) do not fit in the enclosing block (4 warps) of 128 threads"}));
  auto inner = std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::ThreadGroup, 16, 32, empty, L(191));
  k = make_kernel({std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleWarp, 32, 32, inner, L(192))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 191, "thread_group",
                    {"threads [16, 48) do not fit in the enclosing thread group of 32 threads"}));
  k = make_kernel({std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::ThreadGroup, -1, 0, empty, L(193))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 193, "thread_group", {"thread_begin >= 0 and num_threads >= 1"}));
}

TEST(VerifierRuleF, RegisterLayouts) {
  // Layout shape differs from the tensor shape.
  Kernel k = make_kernel({S(alloc_reg(Tensor::reg("r", float32, {64, 32}, spatial({4, 32})), 194))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 194, "register_tensor",
                    {"out register float32[64, 32] has a layout of shape [4, 32]"}));
  // 128-thread layout in a 2-warp block.
  k = make_kernel({S(alloc_reg(Tensor::reg("r", float32, {4, 32}, spatial({4, 32})), 195))}, 2);
  EXPECT_TRUE(Fails([&] { verify(k); }, 195, "register_tensor",
                    {"out register float32[4, 32] has a layout over 128 threads but the block has 64 threads"}));
  // Inside a single warp, a tensor's layout spans 32 threads.
  auto in_warp = [](RegisterLayout l, int line) {
    return make_kernel({std::make_shared<ThreadGroupStmtNode>(
        ThreadGroupKind::SingleWarp, 0, 32, S(alloc_reg(Tensor::reg("r", float32, {4, 32}, l), line)), L(196))});
  };
  EXPECT_TRUE(Fails([&] { verify(in_warp(spatial({4, 32}), 197)); }, 197, "register_tensor",
                    {"layout over 128 threads but the enclosing thread group has 32 threads"}));
  EXPECT_TRUE(Passes([&] { verify(in_warp(local({4, 1}) * spatial({1, 32}), 198)); }));
  // With require_layouts, every register tensor needs one.
  k = make_kernel({S(alloc_reg(Tensor::reg("r", float32, {4, 32}), 199))});
  EXPECT_TRUE(Passes([&] { verify(k); }));
  EXPECT_TRUE(Fails([&] { verify(k, {.require_layouts = true}); }, 199, "register_tensor",
                    {"out register float32[4, 32] has no register layout"}));
}

TEST(VerifierRuleG, SharedMemoryBudget) {
  Traced t;
  t.b.shared_tensor(float16, {64, 64}, L(200));  // 8192 bytes
  t.b.shared_tensor(float16, {64, 64}, L(201));  // 16384
  t.b.shared_tensor(float16, {64, 64}, L(202));  // 24576
  t.b.shared_tensor(boolean, {1}, L(203));       // 1 byte, rounded to 128: 24704
  Kernel k = t.kernel();
  EXPECT_TRUE(Passes([&] { verify(k, {.shared_memory_limit = 24704}); }));
  EXPECT_TRUE(Passes([&] { verify(k); }));  // 0: not checked
  EXPECT_TRUE(Fails([&] { verify(k, {.shared_memory_limit = 20000}); }, 202, "shared_tensor",
                    {"kernel k needs 24704 bytes of shared memory", "limit of 20000 bytes",
                     "shared float16[64, 64] (8192 bytes) brings the total to 24576"}));
  EXPECT_TRUE(Fails([&] { verify(k, {.shared_memory_limit = 24600}); }, 203, "shared_tensor",
                    {"kernel k needs 24704 bytes", "shared bool[1] (128 bytes)"}));
  // Sub-byte storage is packed: 64 x 64 int4 is 2048 bytes.
  Traced u;
  u.b.shared_tensor(int4, {64, 64}, L(204));
  Kernel k4 = u.kernel();
  EXPECT_TRUE(Passes([&] { verify(k4, {.shared_memory_limit = 2048}); }));
  EXPECT_TRUE(Fails([&] { verify(k4, {.shared_memory_limit = 2047}); }, 204, "shared_tensor", {"2048 bytes"}));
}

TEST(VerifierRuleH, AssignOnlyToDeclaredVariables) {
  {
    Traced t;
    Var v = t.b.let("v", t.n + 1, L(205));
    // The tracer rejects it at the call site.
    EXPECT_TRUE(Fails([&] { t.b.assign(v, t.n, L(206)); }, 206, "cannot assign to 'v'", {"declare()"}));
    // Built by hand, the verifier rejects it.
    Kernel k = make_kernel({std::make_shared<LetStmtNode>(v, int_const(1), L(205)),
                            std::make_shared<AssignStmtNode>(v, int_const(2), L(206))});
    EXPECT_TRUE(Fails([&] { verify(k); }, 206, "assignment to 'v'", {"'v' is bound by let", "declare()"}));
  }
  Var n = param("n", int32);
  Kernel k = make_kernel({std::make_shared<AssignStmtNode>(n, int_const(0), L(207))}, 4, {n});
  EXPECT_TRUE(Fails([&] { verify(k); }, 207, "assignment to 'n'", {"'n' is a kernel parameter"}));
  Var i("i", int32, VarRole::Loop);
  k = make_kernel({std::make_shared<ForStmtNode>(i, int_const(0), int_const(4), int_const(1), Unroll::none(),
                                                 std::make_shared<AssignStmtNode>(i, int_const(0), L(208)), L(209))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 208, "assignment to 'i'", {"'i' is a loop variable"}));
  Var x("x", int32, VarRole::Local);
  k = make_kernel({std::make_shared<IfStmtNode>(bool_const(true), std::make_shared<DeclareStmtNode>(x, int_const(0), L(210)),
                                                nullptr, L(211)),
                   std::make_shared<AssignStmtNode>(x, int_const(1), L(212))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 212, "assignment to 'x'", {"not declared in an enclosing scope"}));
  // Declared in an enclosing scope: fine.
  k = make_kernel({std::make_shared<DeclareStmtNode>(x, int_const(0), L(213)),
                   std::make_shared<ForStmtNode>(i, int_const(0), int_const(4), int_const(1), Unroll::none(),
                                                 std::make_shared<AssignStmtNode>(x, x + i, L(214)), L(215))});
  EXPECT_TRUE(Passes([&] { verify(k); }));
}

// ---------------------------------------------------------------------------------------
// Malformed IR is reported, never dereferenced
// ---------------------------------------------------------------------------------------

TEST(VerifierMalformed, UndefinedPiecesAreReported) {
  // Every instruction with default (undefined) fields: verify_inst reports or accepts, but
  // never crashes or throws anything but a CompileError.
  std::vector<std::shared_ptr<InstNode>> insts = {
      make_inst<GlobalViewInst>(L(300)),      make_inst<AllocateSharedInst>(L(300)), make_inst<FreeSharedInst>(L(300)),
      make_inst<AllocateRegisterInst>(L(300)), make_inst<SliceSharedInst>(L(300)),   make_inst<LoadGlobalInst>(L(300)),
      make_inst<StoreGlobalInst>(L(300)),      make_inst<LoadSharedInst>(L(300)),    make_inst<StoreSharedInst>(L(300)),
      make_inst<CopyAsyncInst>(L(300)),        make_inst<CopyInst>(L(300)),          make_inst<DotInst>(L(300)),
      make_inst<CastInst>(L(300)),             make_inst<ViewInst>(L(300)),          make_inst<ReshapeInst>(L(300)),
      make_inst<SqueezeInst>(L(300)),          make_inst<UnsqueezeInst>(L(300)),     make_inst<TransposeInst>(L(300)),
      make_inst<RepeatInst>(L(300)),           make_inst<ElementwiseInst>(L(300)),   make_inst<ReduceInst>(L(300)),
      make_inst<AssignInst>(L(300)),           make_inst<AssumeInst>(L(300)),        make_inst<AnnotateLayoutInst>(L(300)),
  };
  for (auto& i : insts) {
    std::string name = i->display_name().empty() ? i->name() : i->display_name();
    EXPECT_TRUE(Fails([&] { verify_inst(*i); }, 300, name, {})) << i->name();
  }
  // A null instruction statement and undefined scalars in statements.
  Kernel k = make_kernel({std::make_shared<InstStmtNode>(nullptr)});
  k.body = std::make_shared<SeqStmtNode>(std::vector<Stmt>{std::make_shared<LetStmtNode>(Var("x", int32), Expr(), L(301))});
  EXPECT_TRUE(Fails([&] { verify(k); }, 301, "let x", {"the value is undefined"}));
  k.body = std::make_shared<IfStmtNode>(Expr(), nullptr, nullptr, L(302));
  EXPECT_TRUE(Fails([&] { verify(k); }, 302, "if", {"must be a bool expression, got <undefined>"}));
}

// ---------------------------------------------------------------------------------------
// Positive tests: correct kernels pass
// ---------------------------------------------------------------------------------------

TEST(VerifierValid, VectorAddBuiltDirectly) {
  Builder b("vector_add", L(400));
  Var n = b.add_param("n", int32, L(400));
  Var a = b.add_param("a", float32.pointer_to(), L(400));
  Var bp = b.add_param("b", float32.pointer_to(), L(400));
  Var c = b.add_param("c", float32.pointer_to(), L(400));
  b.set_blocks({cdiv(n, 512)}, L(401));
  b.set_warps(4, L(402));
  Var off = b.let("off", builtin::block_idx(0) * 512, L(403));
  Tensor ga = b.global_view(a, float32, {n}, {}, L(404));
  Tensor gb = b.global_view(bp, float32, {n}, {}, L(405));
  Tensor gc = b.global_view(c, float32, {n}, {}, L(406));
  Tensor x = b.load_global(ga, {off}, {512}, {}, L(407));
  Tensor y = b.load_global(gb, {off}, {512}, {}, L(408));
  Tensor z = b.binary(BinaryOp::Add, x, Expr(), y, Expr(), L(409));
  b.store_global(gc, z, {off}, {}, L(410));
  Program p = b.finish();
  EXPECT_TRUE(Passes([&] { verify(p, {.shared_memory_limit = 48 * 1024}); }));
}

struct VecAdd : Script {
  static constexpr const char* param_names = "n, a, b, c";
  void operator()(Int32 n, Ptr<f32> a, Ptr<f32> b, Ptr<f32> c) {
    attrs.blocks = {cdiv(n, 1024)};
    attrs.warps = 4;
    Expr off = let("off", blockIdx.x * 1024);
    auto ga = global_view(a, {n});
    auto gb = global_view(b, {n});
    auto gc = global_view(c, {n});
    auto x = load_global(ga, {.offsets = {off}, .shape = {1024}});
    auto y = load_global(gb, {.offsets = {off}, .shape = {1024}});
    store_global(gc, x + y, {.offsets = {off}});
  }
};

// A matmul-like kernel exercising loops, shared tensors, copy_async with a pipeline index,
// dot, casts, elementwise ops, reductions, scalars and thread groups.
struct MatmulLike : Script {
  static constexpr const char* param_names = "m, n, k, a, b, c, rowsum";
  void operator()(Int32 m, Int32 n, Int32 k, Ptr<f16> a, Ptr<f16> b, Ptr<f16> c, Ptr<f32> rowsum) {
    attrs.blocks = {cdiv(m, 64), cdiv(n, 64)};
    attrs.warps = 4;
    Expr om = let("om", blockIdx.x * 64);
    Expr on = let("on", blockIdx.y * 64);
    auto ga = global_view(a, {m, k});
    auto gb = global_view(b, {k, n});
    auto gc = global_view(c, {m, n});
    auto gr = global_view(rowsum, {m});
    auto sa = shared_tensor(dtypes::float16, {2, 64, 32});
    auto sb = shared_tensor(dtypes::float16, {2, 32, 64});
    auto acc = register_tensor(dtypes::float32, {64, 64}, 0.0);
    ScalarVar steps = declare("steps", dtypes::int32, 0);
    for (Expr ko : range(cdiv(k, 32), {.name = "ko"})) {
      copy_async(ga, sa[ko % 2], {.offsets = {om, ko * 32}});
      copy_async(gb, sb[ko % 2], {.offsets = {ko * 32, on}, .evict = "evict_first"});
      copy_async_commit_group();
      copy_async_wait_group(0);
      sync();
      acc = dot(load_shared(sa[ko % 2]), load_shared(sb[ko % 2]), acc);
      sync();
      steps = steps + 1;
      if_(steps > 1000, [&] { break_(); });
    }
    free_shared(sa);
    free_shared(sb);
    auto total = sum(acc, {.dims = std::vector<int>{1}});
    auto positive = all(acc > 0.0f, {.dims = std::vector<int>{1}, .keepdim = true});
    auto scaled = where(positive, acc * 2.0f, acc);
    store_global(gc, scaled.to(dtypes::float16), {.offsets = {om, on}});
    single_warp(0, [&] {
      auto inner = register_tensor(dtypes::float32, {32}, 1.0);
      store_global(gr, total, {.offsets = {om}});
      store_global(gr, inner, {.offsets = {om}});
      printf("steps %d\n", Expr(steps));
    });
    warp_group(0, 4, [&] {
      for (Expr j : range(4, {.name = "j"})) {
        if_(j == 2, [&] { continue_(); });
        assume(j < 4);
      }
    });
  }
};

TEST(VerifierValid, ScriptKernelsPass) {
  Program v = trace(VecAdd{});
  EXPECT_TRUE(Passes([&] { verify(v, {.shared_memory_limit = 48 * 1024}); }));
  Program p = trace(MatmulLike{});
  EXPECT_TRUE(Passes([&] { verify(p, {.shared_memory_limit = 48 * 1024}); }));
  // 2 x (2 x 64 x 32 x 2 bytes) = 16384 bytes; the error points at the Script's line.
  try {
    verify(p, {.shared_memory_limit = 16383});
    ADD_FAILURE() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("needs 16384 bytes of shared memory"), std::string::npos) << e.message();
    EXPECT_NE(e.loc().file.find("test_verifier.cpp"), std::string::npos) << e.loc().str();
  }
}

TEST(VerifierValid, LayoutsAfterInferencePass) {
  for (Program p : {trace(VecAdd{}), trace(MatmulLike{})}) {
    Program q = infer_layouts(p);
    EXPECT_TRUE(Passes([&] { verify(q, {.shared_memory_limit = 48 * 1024, .require_layouts = true}); }));
  }
}

TEST(VerifierRuleF, ARegisterTensorFitsInItsThreads) {
  Traced ok(1);
  ok.reg({256, 512});  // 512 KiB over 32 threads
  EXPECT_TRUE(Passes([&] { verify(ok.kernel()); }));
  Traced big(1);
  big.reg({4096, 4096});
  EXPECT_TRUE(Fails([&] { verify(big.kernel()); }, 5, "register_tensor",
                    {"register float32[4096, 4096]", "2097152 bytes per thread of the 32 threads", "524288"}));
  Traced wide(32);  // the same tile over 1024 threads fits
  wide.reg({4096, 4096});
  EXPECT_TRUE(Passes([&] { verify(wide.kernel()); }));
}

// --- tracer rules both front ends rely on (Python: tests/python/test_bad_input.py) ------------

TEST(BuilderRules, NegativeDimsCountFromTheEnd) {
  Traced t;
  Tensor g = t.g2();
  Tensor x = t.b.load_global(g, {0, 0}, {4, 8}, {-2, -1}, L(10));
  t.b.store_global(g, x, {0, 0}, {0, -1}, L(11));
  t.b.copy_async(g, t.smem({4, 8}), {0, 0}, {-2, 1}, std::nullopt, true, L(12));
  std::string text = print(t.b.finish());
  EXPECT_NE(text.find("load_global(src=g, offsets=[0, 0], dims=[0, 1])"), std::string::npos) << text;
  EXPECT_NE(text.find("store_global(dst=g, src=x, offsets=[0, 0], dims=[0, 1])"), std::string::npos) << text;
  EXPECT_NE(text.find("offsets=[0, 0], dims=[0, 1], evict"), std::string::npos) << text;
  Traced u;
  EXPECT_TRUE(Fails([&] { u.b.load_global(u.g2(), {0, 0}, {4, 8}, {0, -3}, L(13)); }, 13, "load_global",
                    {"dim -3 is out of range", "(rank 2)", "-1 to -2"}));
  EXPECT_TRUE(Fails([&] { u.b.store_global(u.g2(), u.reg({4, 8}), {0, 0}, {1, -1}, L(14)); }, 14, "store_global",
                    {"appears twice"}));
  EXPECT_TRUE(Fails([&] { u.b.copy_async(u.g2(), u.smem({4, 8}), {0, 0}, {2, 0}, std::nullopt, true, L(15)); }, 15,
                    "copy_async", {"dim 2", "out of range"}));
}

TEST(BuilderRules, ARunTimeStepOfZeroRunsNoIterations) {
  Traced t;
  t.b.begin_for("i", int_const(0), t.n, t.m, Unroll::none(), L(10));
  t.b.end_for();
  t.b.begin_for("j", int_const(0), t.n, int_const(2), Unroll::none(), L(11));
  t.b.end_for();
  std::string text = print(t.b.finish());
  EXPECT_NE(text.find("for i in range(0, select(m == 0, 0, n), m)"), std::string::npos) << text;
  EXPECT_NE(text.find("for j in range(0, n, 2)"), std::string::npos) << text;
  Traced u;
  EXPECT_TRUE(Fails([&] { u.b.begin_for("i", int_const(0), u.n, int_const(0), Unroll::none(), L(12)); }, 12, "range",
                    {"step must not be zero"}));
}

TEST(BuilderRules, AScopeLeftOpenIsAnErrorAtItsLine) {
  Traced t;
  t.b.begin_if(t.n > 0, L(10));
  t.b.begin_for("i", int_const(0), t.n, int_const(1), Unroll::none(), L(11));
  EXPECT_TRUE(Fails([&] { t.b.finish(); }, 11, "kernel k", {"for loop", "never closed"}));
}

TEST(BuilderRules, DeclaredOutsideLandsBeforeTheOpenScope) {
  Traced t;
  t.b.begin_if(t.n > 0, L(10));
  Var x = t.b.declare_outside("x", int32, Expr(), L(11));
  Tensor r = t.b.register_tensor_outside(float32, {4}, L(11), "r");
  t.b.assign(x, t.n, L(12));
  t.b.assign_tensor(r, t.reg({4}), L(12));
  t.b.end_if();
  t.b.name(r, "acc");
  std::string text = print(t.b.finish());
  size_t decl = text.find("var x: int32 = 0"), alloc = text.find("acc = register_tensor()"), branch = text.find("if n > 0");
  ASSERT_NE(decl, std::string::npos) << text;
  ASSERT_NE(alloc, std::string::npos) << text;
  EXPECT_LT(decl, branch) << text;
  EXPECT_LT(alloc, branch) << text;
  EXPECT_NE(text.find("x = n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tilus

namespace tilus {
namespace {

// ---------------------------------------------------------------------------------------
// Rule I: the thread-level builtins of seed 004
// ---------------------------------------------------------------------------------------

TEST(VerifierBuiltins, NamedBarriers) {
  Traced t;  // 4 warps
  EXPECT_TRUE(Fails([&] { t.b.sync_threads(0, 128, L(20)); }, 20, "sync_threads",
                    {"barrier_id 0 is not a named barrier", "1 to 15"}));
  EXPECT_TRUE(Fails([&] { t.b.sync_threads(16, 128, L(21)); }, 21, "sync_threads", {"barrier_id 16"}));
  EXPECT_TRUE(Fails([&] { t.b.sync_threads(1, 100, L(22)); }, 22, "sync_threads",
                    {"arrive_count 100 (barrier_id 1) must be a positive multiple of 32"}));
  EXPECT_TRUE(Fails([&] { t.b.sync_threads(std::nullopt, 64, L(23)); }, 23, "sync_threads",
                    {"arrive_count=64 needs a barrier_id"}));
  EXPECT_TRUE(Passes([&] { t.b.sync_threads(1, std::nullopt, L(24)); }));
  Traced big;
  big.b.sync_threads(1, 256, L(25));
  EXPECT_TRUE(Fails([&] { verify(big.kernel()); }, 25, "sync_threads",
                    {"arrive_count 256 (barrier_id 1) is more than the block's 128 threads"}));
  Traced group;
  group.b.begin_thread_group(ThreadGroupKind::WarpGroup, 64, 64, L(26));
  group.b.sync_threads(2, 32, L(27));
  group.b.end_thread_group();
  EXPECT_TRUE(Fails([&] { verify(group.kernel()); }, 27, "sync_threads",
                    {"arrive_count 32 (barrier_id 2) is fewer than the 64 threads", "threads [64, 128)"}));
  // The signal half: other threads must wait at it, so it counts more than the arriving group.
  EXPECT_TRUE(Fails([&] { t.b.named_barrier_arrive(16, 256, L(40)); }, 40, "named_barrier_arrive", {"barrier_id 16"}));
  EXPECT_TRUE(Fails([&] { t.b.named_barrier_arrive(1, 48, L(41)); }, 41, "named_barrier_arrive",
                    {"arrive_count 48 (barrier_id 1) must be a positive multiple of 32"}));
  Traced alone;
  alone.b.named_barrier_arrive(3, 128, L(42));
  EXPECT_TRUE(Fails([&] { verify(alone.kernel()); }, 42, "named_barrier_arrive",
                    {"arrive_count 128 (barrier_id 3) must be more than the 128 threads of the block of 128 threads",
                     "sync_threads(3, 128)"}));
  Traced over;
  over.b.named_barrier_arrive(3, 160, L(43));
  EXPECT_TRUE(Fails([&] { verify(over.kernel()); }, 43, "named_barrier_arrive",
                    {"arrive_count 160 (barrier_id 3) is more than the block's 128 threads"}));
  Traced half;
  half.b.begin_thread_group(ThreadGroupKind::WarpGroup, 0, 64, L(44));
  half.b.named_barrier_arrive(4, 128, L(45));
  half.b.end_thread_group();
  EXPECT_TRUE(Passes([&] { verify(half.kernel()); }));
  Traced grid;
  grid.b.begin_thread_group(ThreadGroupKind::SingleWarp, 0, 32, L(28));
  grid.b.sync_grid(L(29));
  grid.b.end_thread_group();
  EXPECT_TRUE(Fails([&] { verify(grid.kernel()); }, 29, "sync_grid", {"every thread of every block", "[0, 32)"}));
}

TEST(VerifierBuiltins, SetMaxNReg) {
  Traced t(8);
  EXPECT_TRUE(Fails([&] { t.b.set_max_nreg(20, true, L(30)); }, 30, "inc_max_nreg",
                    {"reg_count 20 must be a multiple of 8 from 24 to 256"}));
  EXPECT_TRUE(Fails([&] { t.b.set_max_nreg(100, false, L(31)); }, 31, "dec_max_nreg", {"reg_count 100"}));
  Traced g(8);
  g.b.begin_thread_group(ThreadGroupKind::WarpGroup, 64, 128, L(32));
  g.b.set_max_nreg(240, true, L(33));
  g.b.end_thread_group();
  EXPECT_TRUE(Fails([&] { verify(g.kernel()); }, 33, "inc_max_nreg",
                    {"whole warp groups", "threads [64, 192)", "multiples of 128"}));
  Traced ok(8);
  ok.b.begin_thread_group(ThreadGroupKind::WarpGroup, 128, 128, L(34));
  ok.b.set_max_nreg(240, true, L(35));
  ok.b.end_thread_group();
  Program p = ok.b.finish();
  EXPECT_TRUE(Passes([&] { verify(p); }));
  // The target is known in the passes: setmaxnreg needs sm_90a.
  EXPECT_TRUE(Fails([&] { verify_program(p, Target::from_arch("sm_80")); }, 35, "inc_max_nreg",
                    {"sm_90a", "not sm_80"}));
  EXPECT_TRUE(Fails([&] { verify_program(p, Target::from_arch("sm_90")); }, 35, "inc_max_nreg", {"not sm_90"}));
  EXPECT_TRUE(Passes([&] { verify_program(p, Target::from_arch("sm_90a")); }));
}

TEST(VerifierBuiltins, ThreadIndicesAndShuffles) {
  Builder early("k", L(1));
  EXPECT_TRUE(Fails([&] { early.thread_index("get_lane_idx", 32, 4, 0, L(40)); }, 40, "get_lane_idx",
                    {"set attrs.warps before it"}));
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.thread_index("get_lane_idx", 0, 4, 0, L(41)); }, 41, "get_lane_idx",
                    {"warp_size 0 must be positive"}));
  EXPECT_TRUE(Fails([&] { t.b.thread_index("shuffle_elect", 32, 4, -1, L(42)); }, 42, "shuffle_elect",
                    {"thread_extent -1"}));
  Tensor lanes = t.b.thread_index("get_lane_idx", 32, 4, 0, L(43));
  EXPECT_EQ(lanes.type_str(), "register int32[128]");
  EXPECT_EQ(lanes->layout, spatial({128}));
  EXPECT_TRUE(Fails([&] { t.b.shuffle("shfl_xor", lanes, 32, Expr(), 32, L(44)); }, 44, "shfl_xor",
                    {"offset 32 must be a lane from 0 to 31", "register int32[128]"}));
  EXPECT_TRUE(Fails([&] { t.b.shuffle("shfl_sync", lanes, 1, Expr(), 3, L(45)); }, 45, "shfl_sync",
                    {"width 3 must be a power of two"}));
  EXPECT_TRUE(Fails([&] { t.b.shuffle("shfl_down", lanes, make_const(float32, 1.0), Expr(), 32, L(46)); }, 46,
                    "shfl_down", {"offset must be an integer scalar", "float32"}));
  EXPECT_TRUE(Fails([&] { t.b.shuffle("shfl_up", t.smem({32}), 1, Expr(), 32, L(47)); }, 47, "shfl_up",
                    {"value must be a register tensor or a scalar", "shared float32[32]"}));
  Traced small;
  small.b.begin_thread_group(ThreadGroupKind::ThreadGroup, 0, 16, L(48));
  Tensor v = small.b.thread_index("get_lane_idx", 32, 4, 0, L(49));
  small.b.shuffle("shfl_xor", v, 1, Expr(), 32, L(50));
  small.b.end_thread_group();
  EXPECT_TRUE(Fails([&] { verify(small.kernel()); }, 50, "shfl_xor",
                    {"within whole warps", "threads [0, 16)", "has 16 threads", "register int32[16]"}));
}

TEST(VerifierBuiltins, ExplicitWidthAccesses) {
  Traced t;
  Tensor g = t.g2();  // float32[m, n]
  auto region = [&](std::vector<Expr> extents) { return CopyRegion{g, {0, 0}, std::move(extents), std::nullopt}; };
  EXPECT_TRUE(Fails([&] { t.b.ldg(128, region({1, 8}), Expr(), L(60)); }, 60, "ldg128",
                    {"holds 32 bytes of float32, but ldg128 moves 16 bytes", "global float32[m, n]"}));
  EXPECT_TRUE(Fails([&] { t.b.ldg(128, region({2, 2}), Expr(), L(61)); }, 61, "ldg128",
                    {"must be contiguous: only its last dim may span more than one element"}));
  EXPECT_TRUE(Fails([&] { t.b.ldg(64, region({1, t.n}), Expr(), L(62)); }, 62, "ldg64", {"constant extents"}));
  EXPECT_TRUE(Fails([&] { t.b.ldg(48, region({1, 2}), Expr(), L(63)); }, 63, "ldg48", {"32, 64, 128 or 256 bits"}));
  EXPECT_TRUE(Fails([&] { t.b.ldg(32, region({1, 1}), make_const(float32, 1.0), L(64)); }, 64, "ldg32",
                    {"pred must be a bool scalar", "float32"}));
  Tensor four = t.b.ldg(128, region({1, 4}), Expr(), L(65));
  EXPECT_EQ(four.type_str(), "register float32[1, 4]");
  // A single element stands for the vector that starts there.
  EXPECT_EQ(t.b.ldg(256, CopyRegion{g, {1, 8}, {}, std::nullopt}, Expr(), L(66)).type_str(), "register float32[1, 8]");
  EXPECT_TRUE(Fails([&] { t.b.stg(128, region({1, 4}), t.reg({4}), Expr(), L(67)); }, 67, "stg128",
                    {"register float32[4] must have the dst region's dtype float32 and shape [1, 4]"}));
  EXPECT_TRUE(Fails([&] { t.b.ldg(128, CopyRegion{t.smem({4}), {0}, {4}, std::nullopt}, Expr(), L(68)); }, 68,
                    "ldg128", {"src must be a global tensor or region", "shared float32[4]"}));
}

TEST(VerifierBuiltins, LoopBreakNeedsALoop) {
  Traced t;
  EXPECT_TRUE(Fails([&] { t.b.emit_break(L(70), "loop_break"); }, 70, "loop_break", {"outside of a loop"}));
}


// ---------------------------------------------------------------------------------------
// Definitions (inst_def.h): every instruction has one, named as the user calls it, and the
// synchronization passes' traits come from it
// ---------------------------------------------------------------------------------------

TEST(InstDefs, EveryInstructionKindHasADefinition) {
  std::vector<std::shared_ptr<InstNode>> insts;
#define TILUS_MAKE_ONE(name) \
  if (InstKind::name != InstKind::Defined) insts.push_back(std::make_shared<name##Inst>());
  TILUS_INSTRUCTIONS(TILUS_MAKE_ONE)
#undef TILUS_MAKE_ONE
  int kinds = 0;
  for (auto& i : insts) {
    ++kinds;
    EXPECT_NO_THROW(EXPECT_EQ(i->def().kind, i->kind()) << i->name());
  }
  EXPECT_GT(kinds, 40);
  std::set<std::string> names;
  for (const InstDef* d : inst_defs()) {
    EXPECT_TRUE(names.insert(d->name).second) << "two definitions named " << d->name;
    EXPECT_EQ(find_inst_def(d->name), d);
    if (!d->group.empty()) {
      EXPECT_EQ(d->name.rfind(d->group + ".", 0), 0u) << d->name << " is not in group " << d->group;
    }
  }
  EXPECT_EQ(find_inst_def("no_such_instruction"), nullptr);
}

TEST(InstDefs, VariantsAreTheUsersNames) {
  for (MbarrierOp op : {MbarrierOp::Arrive, MbarrierOp::ArriveExpectTx, MbarrierOp::ExpectTx, MbarrierOp::Wait,
                        MbarrierOp::CpAsyncArrive}) {
    MbarrierInst m;
    m.op = op;
    EXPECT_EQ(m.def().name, m.display_name());
  }
  for (SyncScope scope : {SyncScope::Group, SyncScope::Named, SyncScope::Warp, SyncScope::Cluster, SyncScope::Grid}) {
    SyncInst i;
    i.scope = scope;
    EXPECT_EQ(i.def().name, i.display_name());
  }
}

TEST(InstDefs, TheSynchronizationTraits) {
  auto traits = [](const char* name) { return find_inst_def(name)->traits; };
  EXPECT_EQ(traits("copy_async_commit_group").role, SyncRole::Commit);
  EXPECT_EQ(traits("copy_async_wait_group").role, SyncRole::Wait);
  EXPECT_EQ(traits("copy_async_wait_group").completion, Completion::CpAsyncGroup);
  EXPECT_EQ(traits("tma.wait_group").completion, Completion::TmaStoreGroup);
  EXPECT_EQ(traits("wgmma.commit_group").completion, Completion::WgmmaGroup);
  EXPECT_EQ(traits("mbarrier.wait").role, SyncRole::BarrierWait);
  EXPECT_EQ(traits("mbarrier.expect_tx").role, SyncRole::Expect);
  EXPECT_EQ(traits("cp_async_barrier_noinc").role, SyncRole::HandOver);
  EXPECT_EQ(traits("fence.proxy_async").role, SyncRole::ProxyFence);
  EXPECT_EQ(traits("sync").role, SyncRole::Barrier);
  // Every group that is committed can be waited for, and a wait reads its count from `n`.
  for (const InstDef* d : inst_defs()) {
    if (d->traits.role == SyncRole::Commit) {
      bool waited = false;
      for (const InstDef* w : inst_defs())
        waited |= w->traits.role == SyncRole::Wait && w->traits.completion == d->traits.completion;
      EXPECT_TRUE(waited) << d->name;
    }
  }
  auto w = std::make_shared<WgmmaWaitGroupInst>();
  w->n = 3;
  EXPECT_EQ(int_attr(*w, "n"), 3);
  EXPECT_EQ(int_attr(CopyAsyncWaitAllInst(), "n"), std::nullopt);
}

TEST(InstDefs, AttributeValuesAreCheckedAgainstTheDefinition) {
  // fence.proxy_async's space is one of its definition's allowed values (its hook says so first,
  // in its own words; the data rule is the same rule).
  FenceProxyAsyncInst f;
  f.loc = L(80);
  f.space = "local";
  EXPECT_TRUE(Fails([&] { verify_inst(f); }, 80, "fence.proxy_async", {"space", "local"}));
  f.space = "global";
  EXPECT_TRUE(Passes([&] { verify_inst(f); }));
}


TEST(InstDefs, DefinedInstructionsCheckTheirOperandsAsTheirDefinitionSays) {
  Traced t;
  Tensor bars = t.b.mbarrier_alloc({int_const(128)}, L(7));
  EXPECT_TRUE(Passes([&] { t.b.defined("tcgen05_mma_arrive", {{"mbar", bars}}, {}, {}, L(81)); }));
  Tensor f = t.smem({2});
  EXPECT_TRUE(Fails([&] { t.b.defined("tcgen05_mma_arrive", {{"mbar", f}}, {}, {}, L(82)); }, 82,
                    "tcgen05_mma_arrive", {"mbar must be a shared tensor of uint64 with 1 element", "float32[2]"}));
  EXPECT_TRUE(Fails([&] { t.b.defined("tcgen05_mma_arrive", {{"mbar", t.reg({1}, uint64)}}, {}, {}, L(83)); }, 83,
                    "tcgen05_mma_arrive", {"mbar must be a shared tensor", "register"}));
  EXPECT_TRUE(Fails([&] { t.b.defined("tcgen05_mma_arrive", {{"barrier", bars}}, {}, {}, L(84)); }, 84,
                    "tcgen05_mma_arrive", {"unknown operand barrier"}));
  EXPECT_TRUE(Fails([&] { t.b.defined("tcgen05_mma_arive", {}, {}, {}, L(85)); }, 85, "tcgen05_mma_arive",
                    {"no such definition-driven instruction"}));
  // It prints as its definition says, and is an arrival for the passes.
  std::string ir = print(t.b.finish());
  EXPECT_NE(ir.find("tcgen05_mma_arrive(mbar="), std::string::npos) << ir;
  EXPECT_EQ(find_inst_def("tcgen05_mma_arrive")->traits.role, SyncRole::Arrive);
}

}  // namespace
}  // namespace tilus
