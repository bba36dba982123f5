// The simplify and layout-inference passes, each run alone on IR traced with the C++ API.
#include <gtest/gtest.h>

#include <set>

#include "golden.h"
#include "tilus/passes/choose_shared_layouts.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/simplify_program.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// The register tensors of a kernel by name hint, in definition order.
std::vector<Tensor> register_tensors(const Kernel& k) {
  struct Collect : StmtVisitor {
    std::vector<Tensor> out;
    void visit_inst(const InstNode& i) override {
      Tensor t = i.output();
      if (t.defined() && t.is_register()) out.push_back(t);
    }
  } c;
  c.visit(k.body);
  return c.out;
}

Tensor find(const Kernel& k, const std::string& name) {
  for (auto& t : register_tensors(k))
    if (t->name == name) return t;
  ADD_FAILURE() << "no register tensor " << name;
  return {};
}

// --- simplify -------------------------------------------------------------------------------

struct Foldable : Script {
  static constexpr const char* param_names = "n, p";
  void operator()(Int32 n, Ptr<f32> p) {
    attrs.blocks = {cdiv(n, 64)};
    attrs.warps = 2;
    auto g = global_view(p, {n});
    Expr four = let("four", Expr(2) + 2);                  // a constant let: substituted
    Expr base = let("base", blockIdx.x * 64);              // kept
    auto unused = load_global(g, {.offsets = {base}, .shape = {64}});  // never read: removed
    (void)unused;
    for (Expr i : range(0, 0)) {                           // zero trips: removed
      sync();
    }
    for (Expr i : range(4)) {
      if_(i < four, [&] {                                  // always true inside the loop
        auto x = load_global(g, {.offsets = {base + (i * 16) % 64}, .shape = {16}});
        store_global(g, x, {.offsets = {base + i * 16 / 16 * 16}});
      });
      if_(i >= 4, [&] { sync(); });                       // never true: removed
    }
  }
};

}  // namespace

TEST(SimplifyPass, Golden) {
  Program p = trace(Foldable{});
  EXPECT_TRUE(matches_golden("simplify_before", print(p)));
  EXPECT_TRUE(matches_golden("simplify_after", print(simplify_program(p))));
}

TEST(SimplifyPass, KeepsEffects) {
  // Stores, syncs, async copies and printf survive even when nothing reads their results.
  struct K : Script {
    void operator()(Int32 n, Ptr<f16> p) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto g = global_view(p, {n});
      auto s = shared_tensor(dtypes::float16, {32});
      copy_async(g, s, {.offsets = {0}});
      copy_async_commit_group();
      copy_async_wait_all();
      sync();
      printf("%d\n", n);
      store_shared(s, register_tensor(dtypes::float16, {32}, 1.0));
    }
  };
  Program p = trace(K{});
  auto count = [](const Program& q) {
    struct Count : StmtVisitor {
      int n = 0;
      void visit_inst(const InstNode&) override { ++n; }
    } c;
    c.visit(q.kernels[0].body);
    return c.n;
  };
  EXPECT_EQ(count(simplify_program(p)), count(p));
}

// --- layout inference -----------------------------------------------------------------------

namespace {
struct MmaDot : Script {
  int64_t m = 64, n = 64, k = 32, warps = 4;
  DataType in_dtype = dtypes::float16, acc_dtype = dtypes::float32;
  void operator()(Int32 size, Ptr<f16> a) {
    attrs.blocks = {1};
    attrs.warps = warps;
    auto ta = register_tensor(in_dtype, {m, k}, 1.0);
    auto tb = register_tensor(in_dtype, {k, n}, 1.0);
    auto acc = register_tensor(acc_dtype, {m, n}, 0.0);
    acc = dot(ta, tb, acc);
  }
};
}  // namespace

TEST(InferLayouts, MmaFragmentsTiledOverWarps) {
  Kernel k = infer_layouts(trace(MmaDot{})).kernels[0];
  auto regs = register_tensors(k);
  ASSERT_GE(regs.size(), 4u);
  // 4 warps over a 64x64 tile of 16x8 MMAs: 2x2 warps, each 2x4 MMAs.
  RegisterLayout mma_a = column_local({2, 2}) * spatial({8, 4}) * local({1, 2});
  RegisterLayout mma_b = local({2, 1}) * column_spatial({4, 8}) * local({2, 1});
  RegisterLayout mma_c = local({2, 1}) * spatial({8, 4}) * local({1, 2});
  EXPECT_EQ(regs[0]->layout, local({2, 2}) * spatial({2, 1}) * replicated(2) * mma_a)
      << regs[0]->layout.str() << " vs " << (local({2, 2}) * spatial({2, 1}) * replicated(2) * mma_a).str();
  EXPECT_EQ(regs[1]->layout, local({2, 4}) * replicated(2) * spatial({1, 2}) * mma_b) << regs[1]->layout.str();
  EXPECT_EQ(regs[2]->layout, local({2, 4}) * spatial({2, 2}) * mma_c) << regs[2]->layout.str();
  EXPECT_EQ(regs[3]->layout, regs[2]->layout);  // the dot's result, assigned back to acc
  for (auto& t : regs) EXPECT_EQ(t->layout.num_threads(), 128);
  // Each thread holds exactly its share of the accumulator.
  EXPECT_EQ(regs[2]->layout.local_size(), 64 * 64 / 128);
}

TEST(InferLayouts, SimtDotForOtherDtypes) {
  MmaDot s;
  s.in_dtype = dtypes::float32;  // f32 x f32 has no m16n8k16 MMA: SIMT outer product
  Kernel k = infer_layouts(trace(s)).kernels[0];
  auto regs = register_tensors(k);
  const RegisterLayout& a = regs[0]->layout;
  const RegisterLayout& b = regs[1]->layout;
  const RegisterLayout& c = regs[2]->layout;
  // Every thread owns, for each c element, the whole matching row of a and column of b.
  for (int64_t t = 0; t < 128; ++t) {
    for (int64_t slot = 0; slot < c.local_size(); ++slot) {
      auto idx = c.map(t, slot);
      for (int64_t kk = 0; kk < 32; ++kk) {
        bool has_a = false, has_b = false;
        for (auto& [thread, s2] : a.owners({idx[0], kk})) has_a |= thread == t;
        for (auto& [thread, s2] : b.owners({kk, idx[1]})) has_b |= thread == t;
        ASSERT_TRUE(has_a && has_b) << "thread " << t << " c" << idx[0] << "," << idx[1] << " k " << kk;
      }
    }
  }
  EXPECT_FALSE(c.is_replicated());
}

TEST(InferLayouts, DefaultIs16ByteVectors) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f16> p) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto g = global_view(p, {n, n});
      auto x = load_global(g, {.offsets = {0, 0}, .shape = {32, 64}});
      store_global(g, x, {.offsets = {0, 0}});
    }
  };
  Kernel k = infer_layouts(trace(K{})).kernels[0];
  Tensor x = find(k, "x");
  // f16: 8 contiguous elements (16 bytes) per thread, 8 threads across a row of 64,
  // 16 rows across 128 threads, 2 row repeats.
  EXPECT_EQ(x->layout, local({2, 1}) * spatial({16, 8}) * local({1, 8})) << x->layout.str();
}

TEST(InferLayouts, SmallTilesReplicate) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 2;
      auto g = global_view(p, {n});
      auto x = load_global(g, {.offsets = {0}, .shape = {8}});
      store_global(g, x, {.offsets = {0}});
    }
  };
  Kernel k = infer_layouts(trace(K{})).kernels[0];
  Tensor x = find(k, "x");
  EXPECT_EQ(x->layout.num_threads(), 64);
  EXPECT_TRUE(x->layout.is_replicated());
  // Fewer elements than threads: one element per thread, the rest replicas (NVIDIA Tilus's and
  // Triton's rule), not 16-byte vectors on 2 threads.
  EXPECT_EQ(x->layout, replicated(8) * spatial({8})) << x->layout.str();
}

TEST(InferLayouts, TilesOfUnder16BytesPerThreadSpreadOverTheThreads) {
  auto elements_per_thread = [](std::vector<int64_t> shape, DataType dt, int64_t threads) {
    RegisterLayout l = default_register_layout(shape, dt, threads);
    return l.local_size();
  };
  EXPECT_EQ(elements_per_thread({4}, dtypes::float32, 32), 1);       // NVIDIA Tilus's gating tile
  EXPECT_EQ(elements_per_thread({1, 64}, dtypes::float32, 32), 2);   // 2 per thread, no replicas
  EXPECT_EQ(elements_per_thread({128}, dtypes::float32, 128), 1);
  EXPECT_EQ(elements_per_thread({64, 64}, dtypes::float16, 128), 32);  // large tiles: 16-byte vectors
  EXPECT_EQ(elements_per_thread({8}, dtypes::float16, 32), 1);
  EXPECT_EQ(elements_per_thread({128}, dtypes::int4, 128), 2);   // sub-byte: a whole byte per thread
  EXPECT_EQ(elements_per_thread({64}, dtypes::int4, 128), 2);    // (replicas beyond 32 threads)
  EXPECT_EQ(elements_per_thread({4096}, dtypes::int4, 128), 32);  // large: 16-byte vectors
  // A given vector is kept (the copies' lowerings ask for their width).
  EXPECT_EQ(default_register_layout({8}, dtypes::float16, 32, 8).local_size(), 8);
}

TEST(InferLayouts, ReductionsAndBroadcastsAgree) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto g = global_view(p, {n, n});
      auto x = load_global(g, {.offsets = {0, 0}, .shape = {16, 128}});
      auto m = max(x, {.dims = std::vector<int>{1}, .keepdim = true});
      auto y = x - m;
      auto s = sum(y, {.dims = std::vector<int>{0}});
      store_global(g, y, {.offsets = {0, 0}});
      (void)s;
    }
  };
  Kernel k = infer_layouts(trace(K{})).kernels[0];
  Tensor x = find(k, "x"), m = find(k, "max"), y = find(k, "sub"), s = find(k, "sum");
  EXPECT_EQ(m->layout, x->layout.reduce({1}, true));
  EXPECT_EQ(y->layout, x->layout);
  EXPECT_EQ(s->layout, x->layout.reduce({0}, false));
  EXPECT_EQ(s->layout.shape(), (std::vector<int64_t>{128}));
}

TEST(InferLayouts, BackwardThroughTransposeAndCast) {
  // The dot fixes tb's layout; it flows back through the cast and the transpose to the load.
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto g = global_view(p, {n, n});
      auto bt = load_global(g, {.offsets = {0, 0}, .shape = {64, 32}});
      auto tb = transpose(cast(bt, dtypes::float16));
      auto ta = register_tensor(dtypes::float16, {64, 32}, 1.0);
      auto c = dot(ta, tb);
      store_global(g, c, {.offsets = {0, 0}});
    }
  };
  Kernel k = infer_layouts(trace(K{})).kernels[0];
  Tensor bt = find(k, "x"), tb = find(k, "tr"), d = find(k, "d");
  EXPECT_EQ(bt->layout, tb->layout.permute({1, 0}));
  EXPECT_EQ(d->layout.num_threads(), 128);
}

TEST(InferLayouts, AnnotationWinsAndIsConsumed) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto g = global_view(p, {n});
      auto x = load_global(g, {.offsets = {0}, .shape = {64}});
      annotate_layout(x, spatial({32}) * local({2}));
      store_global(g, x + 1.0f, {.offsets = {0}});
    }
  };
  Program p = infer_layouts(trace(K{}));
  Tensor x = find(p.kernels[0], "x"), y = find(p.kernels[0], "add");
  EXPECT_EQ(x->layout, spatial({32}) * local({2}));
  EXPECT_EQ(y->layout, x->layout);
  EXPECT_EQ(print(p).find("annotate_layout"), std::string::npos);
}

TEST(InferLayouts, ConflictNamesBothUses) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto g = global_view(p, {n});
      auto x = load_global(g, {.offsets = {0}, .shape = {64}});
      annotate_layout(x, spatial({32}) * local({2}));
      annotate_layout(x, local({2}) * spatial({32}));
    }
  };
  try {
    infer_layouts(trace(K{}));
    FAIL() << "expected a layout conflict";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("register float32[64]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("annotate_layout at"), std::string::npos) << e.message();
    EXPECT_NE(e.loc().file.find("test_passes.cpp"), std::string::npos);
  }
}

TEST(InferLayouts, ThreadGroupsUseTheirOwnThreadCount) {
  struct K : Script {
    void operator()(Int32 n, Ptr<f32> p) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto g = global_view(p, {n});
      single_warp(2, [&] {
        auto x = load_global(g, {.offsets = {0}, .shape = {256}});
        store_global(g, x, {.offsets = {0}});
      });
    }
  };
  Kernel k = infer_layouts(trace(K{})).kernels[0];
  EXPECT_EQ(find(k, "x")->layout.num_threads(), 32);
  VerifyOptions strict;
  strict.require_layouts = true;
  EXPECT_NO_THROW(verify(k, strict));
}

namespace {
// Allocates one shared tensor per shape (dtype per entry), optionally annotating the first.
struct SharedShapes : Script {
  std::vector<std::pair<DataType, std::vector<int64_t>>> tensors;
  std::optional<SharedLayout> annotate_first;
  bool annotate_slice = false;
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto s = shared_tensor(tensors[i].first, tensors[i].second);
      if (i == 0 && annotate_first) annotate_layout(s, *annotate_first);
      if (i == 0 && annotate_slice) annotate_layout(s[0], SharedLayout::row_major({tensors[0].second[1], tensors[0].second[2]}));
    }
  }
};

std::vector<SharedLayout> shared_layouts(const Program& p) {
  struct Collect : StmtVisitor {
    std::vector<SharedLayout> out;
    void visit_inst(const InstNode& i) override {
      if (auto* a = dynamic_cast<const AllocateSharedInst*>(&i)) out.push_back(a->out->shared_layout);
    }
  } c;
  c.visit(p.kernels[0].body);
  return c.out;
}
}  // namespace

// The swizzle that spreads the 16-byte units of 8 consecutive rows over all bank groups.
TEST(ChooseSharedLayouts, SharedTilesGetAConflictFreeSwizzle) {
  SharedShapes s;
  s.tensors = {{dtypes::float16, {64, 32}},      // 64-byte rows: TMA's 64-byte swizzle
               {dtypes::float16, {3, 32, 128}},  // 256-byte rows: XOR the row index
               {dtypes::float32, {32, 32}},      // 4-byte elements: units of 4
               {dtypes::int8, {64, 64}},         // 1-byte elements: units of 16 (64-byte rows)
               {dtypes::float16, {4, 64}},       // too few rows: left alone
               {dtypes::float16, {64, 8}},       // 16-byte rows: left alone
               {dtypes::uint4, {64, 64}},        // sub-byte: left alone
               {dtypes::float16, {64, 48}}};     // rows not a power of two: left alone
  auto layouts = shared_layouts(choose_shared_layouts(trace(s)));
  ASSERT_EQ(layouts.size(), 8u);
  auto z = [](const SharedLayout& l) { return std::tuple(l.swizzle().bits, l.swizzle().base, l.swizzle().shift); };
  EXPECT_EQ(z(layouts[0]), std::tuple(2, 3, 3));
  EXPECT_EQ(z(layouts[1]), std::tuple(3, 3, 4));
  EXPECT_EQ(z(layouts[2]), std::tuple(3, 2, 3));
  EXPECT_EQ(z(layouts[3]), std::tuple(2, 4, 3));
  for (int i = 4; i < 8; ++i) EXPECT_TRUE(layouts[i].swizzle().none()) << layouts[i].str();
  // The property itself: for every 16-byte column of every group of 8 rows, the 8 units
  // land in 8 distinct 16-byte bank groups (mod 128 bytes).
  for (int i = 0; i < 4; ++i) {
    const SharedLayout& l = layouts[i];
    int64_t eb = s.tensors[i].first.bits() / 8, cols = l.shape().back(), unit = 16 / eb;
    std::vector<int64_t> index(l.rank(), 0);
    for (int64_t r0 = 0; r0 + 8 <= l.shape()[l.rank() - 2]; r0 += 8)
      for (int64_t c = 0; c < cols; c += unit) {
        std::set<int64_t> groups;
        for (int64_t r = r0; r < r0 + 8; ++r) {
          index[l.rank() - 2] = r, index[l.rank() - 1] = c;
          groups.insert(l.offset(index) * eb % 128 / 16);
        }
        EXPECT_EQ(groups.size(), 8u) << l.str() << " rows " << r0 << " column " << c;
      }
  }
}

TEST(ChooseSharedLayouts, SharedAnnotationWinsAndSlicesFollowTheirRoot) {
  SharedShapes s;
  s.tensors = {{dtypes::float16, {64, 32}}};
  s.annotate_first = SharedLayout::column_major({64, 32});
  Program p = choose_shared_layouts(trace(s));
  EXPECT_EQ(shared_layouts(p)[0], SharedLayout::column_major({64, 32}));
  EXPECT_EQ(print(p).find("annotate_layout"), std::string::npos);

  // A slice of a swizzled tensor keeps the strides and swizzle of its dims.
  struct Sliced : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 4;
      auto s = shared_tensor(dtypes::float16, {3, 64, 32});
      auto t = s[n % 3];
      store_shared(t, register_tensor(dtypes::float16, {64, 32}, 0.0));
    }
  };
  std::string text = print(choose_shared_layouts(trace(Sliced{})));
  EXPECT_NE(text.find("shared float16[64, 32] shared_layout(shape=[64, 32], strides=[32, 1], swizzle=(2, 3, 3))"),
            std::string::npos)
      << text;

  SharedShapes bad;
  bad.tensors = {{dtypes::float16, {2, 64, 32}}};
  bad.annotate_slice = true;
  try {
    choose_shared_layouts(trace(bad));
    FAIL() << "annotating a slice must be rejected";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("must be set on the shared_tensor allocation"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_passes.cpp"), std::string::npos) << e.what();
  }
}
