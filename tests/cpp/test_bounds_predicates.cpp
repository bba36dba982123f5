// The bounds-predicate pass, run alone on IR traced with the C++ API: which global dims of
// every load_global / store_global / copy_async keep a run-time check.
#include <gtest/gtest.h>

#include "golden.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/insert_bounds_predicates.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// The checked_dims of every global access in program order, printed ("[0, 1]", "[]", or
// "unset" before the pass), so that a failure shows which access differs.
std::vector<std::string> checks(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<std::string> out;
    void add(const std::optional<std::vector<int>>& dims) {
      if (!dims) {
        out.push_back("unset");
        return;
      }
      std::string s = "[";
      for (size_t i = 0; i < dims->size(); ++i) s += (i ? ", " : "") + std::to_string((*dims)[i]);
      out.push_back(s + "]");
    }
    void visit_inst(const InstNode& i) override {
      if (auto l = dynamic_cast<const LoadGlobalInst*>(&i)) add(l->checked_dims);
      if (auto s = dynamic_cast<const StoreGlobalInst*>(&i)) add(s->checked_dims);
      if (auto c = dynamic_cast<const CopyAsyncInst*>(&i)) add(c->checked_dims);
    }
  } c;
  for (auto& k : p.kernels) c.visit(k.body);
  return c.out;
}

std::vector<std::string> checked_after_pass(const Program& p) { return checks(insert_bounds_predicates(p)); }

using Checks = std::vector<std::string>;

// A 2-D tile copy over a grid of cdiv(size, tile) blocks per dim; the sizes are members, so
// a member that is a number is a compile-time constant and one that is a parameter is not.
struct TileCopy : Script {
  static constexpr const char* param_names = "m, n, p";
  int64_t tile_m = 64, tile_n = 64;
  std::optional<int64_t> const_m, const_n;  // constant sizes instead of the parameters
  void operator()(Int32 m, Int32 n, Ptr<f32> p) {
    Expr rows = const_m ? Expr(*const_m) : Expr(m);
    Expr cols = const_n ? Expr(*const_n) : Expr(n);
    attrs.blocks = {cdiv(rows, tile_m), cdiv(cols, tile_n)};
    attrs.warps = 4;
    auto g = global_view(p, {rows, cols});
    auto x = load_global(g, {.offsets = {blockIdx.x * tile_m, blockIdx.y * tile_n}, .shape = {tile_m, tile_n}});
    store_global(g, x, {.offsets = {blockIdx.x * tile_m, blockIdx.y * tile_n}});
  }
};

}  // namespace

TEST(BoundsPredicates, UnsetBeforeThePass) {
  EXPECT_EQ(checks(trace(TileCopy{})), (Checks{"unset", "unset"}));
}

TEST(BoundsPredicates, DynamicShapesCheckEveryDim) {
  EXPECT_EQ(checked_after_pass(trace(TileCopy{})), (Checks{"[0, 1]", "[0, 1]"}));
}

TEST(BoundsPredicates, ExactTilesOverAConstantShapeNeedNoCheck) {
  // 4096 / 64 blocks per dim: blockIdx * 64 + 64 <= 4096 for every block.
  TileCopy s;
  s.const_m = 4096;
  s.const_n = 4096;
  EXPECT_EQ(checked_after_pass(trace(s)), (Checks{"[]", "[]"}));
}

TEST(BoundsPredicates, OnlyTheDynamicDimIsChecked) {
  TileCopy s;
  s.const_n = 4096;  // m stays a runtime parameter
  EXPECT_EQ(checked_after_pass(trace(s)), (Checks{"[0]", "[0]"}));
  TileCopy t;
  t.const_m = 256;
  EXPECT_EQ(checked_after_pass(trace(t)), (Checks{"[1]", "[1]"}));
}

TEST(BoundsPredicates, NonDividingConstantShapeIsChecked) {
  // cdiv(4000, 64) = 63 blocks: the last covers [3968, 4032), past 4000.
  TileCopy s;
  s.const_m = 4000;
  s.const_n = 4096;
  EXPECT_EQ(checked_after_pass(trace(s)), (Checks{"[0]", "[0]"}));
}

TEST(BoundsPredicates, NegativeAndUnknownOffsetsAreChecked) {
  struct K : Script {
    void operator()(Int32 off, Ptr<f32> p) {
      attrs.blocks = {64};
      attrs.warps = 4;
      auto g = global_view(p, {Expr(4096)});
      // Block 0 starts at -1: below the tensor.
      load_global(g, {.offsets = {blockIdx.x * 64 - 1}, .shape = {64}});
      // A runtime offset: anything.
      load_global(g, {.offsets = {off}, .shape = {64}});
      // One element right of every block's start, one element shorter: still inside.
      load_global(g, {.offsets = {blockIdx.x * 64 + 1}, .shape = {63}});
      // The same start with a full tile: the last block reaches 4097.
      load_global(g, {.offsets = {blockIdx.x * 64 + 1}, .shape = {64}});
      // A remainder of a runtime value may be negative (C semantics): below the tensor.
      load_global(g, {.offsets = {off % 64}, .shape = {1}});
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[0]", "[0]", "[]", "[0]", "[0]"}));
}

namespace {
// for k0 in range(0, K, 32) over a [M, K] matrix.
struct KLoop : Script {
  static constexpr const char* param_names = "m, p";
  int64_t K = 1024;
  void operator()(Int32 m, Ptr<f16> p) {
    attrs.blocks = {cdiv(m, 64)};
    attrs.warps = 4;
    auto g = global_view(p, {m, Expr(K)});
    auto s = shared_tensor(dtypes::float16, {64, 32});
    for (Expr k0 : range(0, K, 32, {.name = "k0"})) {
      copy_async(g, s, {.offsets = {blockIdx.x * 64, k0}});
      copy_async_wait_all();
    }
  }
};
}  // namespace

TEST(BoundsPredicates, StridedLoopOverADividingConstantNeedsNoCheck) {
  // k0 takes 0, 32, ..., 992: k0 + 32 <= 1024. The rows depend on the dynamic m.
  EXPECT_EQ(checked_after_pass(trace(KLoop{})), (Checks{"[0]"}));
  KLoop odd;
  odd.K = 1000;  // k0 = 992 reads up to 1024 > 1000
  EXPECT_EQ(checked_after_pass(trace(odd)), (Checks{"[0, 1]"}));
}

TEST(BoundsPredicates, LoopWithARuntimeEndIsChecked) {
  struct K : Script {
    void operator()(Int32 k, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto g = global_view(p, {Expr(1024)});
      for (Expr i : range(0, k, 32)) {
        auto x = load_global(g, {.offsets = {i}, .shape = {32}});
        store_global(g, x, {.offsets = {i}});
      }
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[0]", "[0]"}));
}

TEST(BoundsPredicates, PermutedDimsUseTheMappedTileExtent) {
  // Tile dim 0 (64) runs along global dim 1, tile dim 1 (32) along global dim 0.
  struct K : Script {
    void operator()(Int32 m, Ptr<f32> p) {
      attrs.blocks = {cdiv(m, 64), 8};
      attrs.warps = 4;
      auto g = global_view(p, {Expr(256), m});
      // Global dim 0 (256) at blockIdx.y * 32 with extent 32: in bounds. Global dim 1 (m):
      // dynamic.
      auto x = load_global(g, {.offsets = {blockIdx.y * 32, blockIdx.x * 64}, .shape = {64, 32}, .dims = {1, 0}});
      // Swapping the extents puts 64 rows along the 256 dim: 7 * 32 + 64 > 256.
      auto y = load_global(g, {.offsets = {blockIdx.y * 32, blockIdx.x * 64}, .shape = {32, 64}, .dims = {1, 0}});
      store_global(g, x, {.offsets = {blockIdx.y * 32, blockIdx.x * 64}, .dims = {1, 0}});
      (void)y;
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[1]", "[0, 1]", "[1]"}));
}

TEST(BoundsPredicates, FixedGlobalDimsOfLowerRankTiles) {
  // A [8, 4096] tensor read one row at a time: the row dim is fixed at its offset and
  // needs 0 <= offset < 8.
  struct K : Script {
    void operator()(Int32 row, Ptr<f32> p) {
      attrs.blocks = {64, 8};
      attrs.warps = 2;
      auto g = global_view(p, {Expr(8), Expr(4096)});
      auto a = load_global(g, {.offsets = {blockIdx.y, blockIdx.x * 64}, .shape = {64}});      // row in [0, 7]
      auto b = load_global(g, {.offsets = {blockIdx.y + 1, blockIdx.x * 64}, .shape = {64}});  // row 8 exists not
      auto c = load_global(g, {.offsets = {row, blockIdx.x * 64}, .shape = {64}});              // runtime row
      store_global(g, a + b + c, {.offsets = {7 - blockIdx.y, blockIdx.x * 64}});                // in [0, 7]
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[]", "[0]", "[0]", "[]"}));
}

TEST(BoundsPredicates, CopyAsyncWithoutCheckBoundsHasNoPredicate) {
  struct K : Script {
    void operator()(Int32 m, Int32 n, Ptr<f16> p) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto g = global_view(p, {m, n});
      auto s = shared_tensor(dtypes::float16, {64, 32});
      copy_async(g, s, {.offsets = {0, 0}, .check_bounds = false});  // the user vouches for it
      copy_async(g, s, {.offsets = {0, 0}});                          // the same box, checked
      copy_async_wait_all();
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[]", "[0, 1]"}));
}

TEST(BoundsPredicates, LetsCarryTheirRanges) {
  struct K : Script {
    void operator()(Ptr<f32> p) {
      attrs.blocks = {32};
      attrs.warps = 4;
      auto g = global_view(p, {Expr(4096)});
      Expr base = let("base", blockIdx.x * 128);  // in [0, 3968]
      auto x = load_global(g, {.offsets = {base}, .shape = {128}});
      // A mutable scalar may have been changed anywhere: nothing is known about it.
      ScalarVar v = declare("v", dtypes::int32, 0);
      store_global(g, x, {.offsets = {v}});
    }
  };
  EXPECT_EQ(checked_after_pass(trace(K{})), (Checks{"[]", "[0]"}));
}

namespace {
// for k0 in range(0, k, 32) over a [4096, k] matrix with a runtime k.
struct DynamicKLoop : Script {
  static constexpr const char* param_names = "k, p";
  int64_t tile_k = 32, shift = 0;
  void operator()(Int32 k, Ptr<f16> p) {
    attrs.blocks = {64};
    attrs.warps = 4;
    auto g = global_view(p, {Expr(4096), k});
    auto s = shared_tensor(dtypes::float16, {64, tile_k});
    for (Expr k0 : range(0, k, 32, {.name = "k0"})) {
      copy_async(g, s, {.offsets = {blockIdx.x * 64, k0 + shift}});
      copy_async_wait_all();
    }
  }
};
}  // namespace

TEST(BoundsPredicates, SpecializationFactsFeedTheProof) {
  // k0 + 32 <= k holds for every k0 of range(0, k, 32) exactly when 32 divides k: the
  // specialization fact on k (parameter 0) decides the k dim's check.
  Program p = trace(DynamicKLoop{});
  EXPECT_EQ(checked_after_pass(p), (Checks{"[1]"}));
  p.kernels[0].param_divisibility[0] = 32;
  EXPECT_EQ(checked_after_pass(p), (Checks{"[]"}));
  p.kernels[0].param_divisibility[0] = 128;  // a multiple of 32 is as good
  EXPECT_EQ(checked_after_pass(p), (Checks{"[]"}));
  p.kernels[0].param_divisibility[0] = 16;  // k = 48: k0 = 32 reads up to 64
  EXPECT_EQ(checked_after_pass(p), (Checks{"[1]"}));

  DynamicKLoop wide;
  wide.tile_k = 64;  // tiles longer than the step overlap the next one and run past k
  Program q = trace(wide);
  q.kernels[0].param_divisibility[0] = 32;
  EXPECT_EQ(checked_after_pass(q), (Checks{"[1]"}));

  DynamicKLoop shifted;
  shifted.tile_k = 16;
  shifted.shift = 16;  // [k0 + 16, k0 + 32): still inside the step
  Program r = trace(shifted);
  r.kernels[0].param_divisibility[0] = 32;
  EXPECT_EQ(checked_after_pass(r), (Checks{"[]"}));
  for (int64_t bad : {17, -16}) {  // past the step; before the tensor when k0 = 0
    shifted.shift = bad;
    Program r2 = trace(shifted);
    r2.kernels[0].param_divisibility[0] = 32;
    EXPECT_EQ(checked_after_pass(r2), (Checks{"[1]"})) << "shift " << bad;
  }
}

TEST(BoundsPredicates, LoopsWithAMutableEndGiveNoFact) {
  // The end of `for i in range(0, v, 32)` is re-read every iteration; v may change.
  struct K : Script {
    void operator()(Int32 k, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto g = global_view(p, {k});
      ScalarVar v = declare("v", dtypes::int32, k);
      for (Expr i : range(0, v, 32)) {
        auto x = load_global(g, {.offsets = {i}, .shape = {32}});
        v = v - 1;
        store_global(g, x, {.offsets = {i}});
      }
    }
  };
  Program p = trace(K{});
  p.kernels[0].param_divisibility[0] = 32;
  EXPECT_EQ(checked_after_pass(p), (Checks{"[0]", "[0]"}));
}

TEST(BoundsPredicates, DivisibilityAloneDoesNotProveBounds) {
  // n divisible by 64 makes every tile of a cdiv(n, 64) grid fit, but the ranges cannot
  // relate blockIdx.x to n: the check stays (and costs one comparison).
  Program p = trace(TileCopy{});
  p.kernels[0].param_divisibility = {{0, 64}, {1, 64}};
  EXPECT_EQ(checked_after_pass(p), (Checks{"[0, 1]", "[0, 1]"}));
}

TEST(BoundsPredicates, OnlyCheckedDimsChangeAndThePassIsIdempotent) {
  TileCopy s;
  s.const_n = 4096;
  Program traced = trace(s);
  Program once = insert_bounds_predicates(traced);
  Program twice = insert_bounds_predicates(once);
  EXPECT_EQ(print(once), print(twice));
  std::string before = print(traced), after = print(once);
  // Removing the new attribute gives back the input text.
  const std::string attr = ", checked_dims=[0]";
  EXPECT_NE(after.find(attr), std::string::npos) << after;
  for (size_t pos; (pos = after.find(attr)) != std::string::npos;) after.erase(pos, attr.size());
  EXPECT_EQ(before, after);
}

namespace {
// Every rule once: a constant-shape tile grid, a strided k loop, a permuted copy, an
// unchecked copy_async, and load_global's fill (other=) kept where a dim is checked and dropped
// where none is.
struct GoldenKernel : Script {
  static constexpr const char* param_names = "m, a, b";
  void operator()(Int32 m, Ptr<f16> a, Ptr<f16> b) {
    attrs.blocks = {cdiv(m, 64), 16};
    attrs.warps = 4;
    auto ga = global_view(a, {m, Expr(512)});
    auto gb = global_view(b, {Expr(512), Expr(1024)});
    auto sa = shared_tensor(dtypes::float16, {64, 32});
    auto sb = shared_tensor(dtypes::float16, {32, 64});
    auto acc = register_tensor(dtypes::float32, {64, 64}, 0.0);
    for (Expr k0 : range(0, 512, 32, {.name = "k0"})) {
      copy_async(ga, sa, {.offsets = {blockIdx.x * 64, k0}});
      copy_async(gb, sb, {.offsets = {k0, blockIdx.y * 64}, .check_bounds = false});
      copy_async_wait_all();
      sync();
      acc = dot(load_shared(sa), load_shared(sb), acc);
      sync();
    }
    auto gc = global_view(b, {Expr(1024), m});
    store_global(gc, acc.to(dtypes::float16), {.offsets = {blockIdx.y * 64, blockIdx.x * 64}, .dims = {1, 0}});
    auto rows = load_global(ga, {.offsets = {blockIdx.x * 64, 0}, .shape = {64, 32}, .other = Expr(-1.0)});
    auto inside = load_global(gb, {.offsets = {0, blockIdx.y * 64}, .shape = {32, 64}, .other = Expr(-1.0)});
    store_global(gc, (rows.to(dtypes::float32) + 1.0).to(dtypes::float16), {.offsets = {0, 0}, .dims = {1, 0}});
    store_global(gb, inside, {.offsets = {0, 0}});
  }
};
}  // namespace

TEST(BoundsPredicates, Golden) {
  Program p = insert_bounds_predicates(trace(GoldenKernel{}));
  EXPECT_EQ(checks(p), (Checks{"[0]", "[]", "[1]", "[0]", "[]", "[1]", "[]"}));
  std::string text = print(p);
  EXPECT_EQ(text.find("other="), text.rfind("other="));  // the in-bounds load lost its fill
  EXPECT_NE(text.find("checked_dims=[0], other=-1.0_float16)"), std::string::npos) << text;
  EXPECT_TRUE(matches_golden("bounds_predicates", print(p)));
}
