// The C++ Script API: tracing of every construct, and errors that point at the user's line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include <fmt/format.h>

#include "golden.h"
#include "tilus/tilus.h"

using namespace tilus;

namespace {

// The line a failing Script marks (set while it is traced).
int expected_line = 0;

// Runs f, expects a CompileError raised at `expected_line` of this file whose message has `needle`.
template <class F>
::testing::AssertionResult fails_at(F f, const std::string& needle) {
  const int& line = expected_line;
  try {
    f();
  } catch (const CompileError& e) {
    if (e.loc().file.find("test_script.cpp") == std::string::npos || e.loc().line != line)
      return ::testing::AssertionFailure() << "error at " << e.loc().str() << " instead of line " << line << ": "
                                           << e.what();
    if (e.message().find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << e.message();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error raised";
}

struct ControlFlow : Script {
  static constexpr const char* param_names = "n, p";
  void operator()(Int32 n, Ptr<f32> p) {
    attrs.blocks = {1};
    attrs.warps = 2;
    auto g = global_view(p, {n});
    ScalarVar total = declare("total", dtypes::int32, 0);
    for (Expr i : range(0, n, 2, {.unroll = Unroll::by(4), .name = "i"})) {
      if_(i % 4 == 0, [&] { continue_(); }).else_if(i > 100, [&] { break_(); }).else_([&] { total = total + i; });
    }
    while_(total > 10, [&] { total = total / 2; });
    single_warp(1, [&] {
      auto t = load_global(g, {.offsets = {total}, .shape = {32}});
      store_global(g, t * 2.0f, {.offsets = {0}});
    });
    warp_group(0, 2, [&] { sync(); });
    thread_group(0, 32, [&] { single_thread([&] { printf("total=%d\n", total); }); });
    // C++ control flow runs at trace time: only the first two iterations are recorded.
    for (int unrolled = 0; unrolled < 4; ++unrolled) {
      if (unrolled == 2) break;
      assume(n % 16 == 0);
    }
  }
};

}  // namespace

TEST(Script, ControlFlowGolden) { EXPECT_TRUE(matches_golden("script_control_flow", print(trace(ControlFlow{})))); }

namespace {
struct Scaled : Script {
  static constexpr const char* param_names = "m, k, scale, a";
  static constexpr const char* kernel_name = "scaled";
  void operator()(Int64 m, int k, double scale, Ptr<bf16> a) {
    attrs.blocks = {cdiv(m, k)};
    attrs.warps = 1;
    auto g = global_view(a, {m});
    auto t = load_global(g, {.offsets = {blockIdx.x * k}, .shape = {k}});
    store_global(g, t * scale, {.offsets = {blockIdx.x * k}});
  }
};
}  // namespace

TEST(Script, ParamsAndConstants) {
  Program p = trace(Scaled{}, {{"k", int64_t(128)}, {"scale", 0.5}});
  const Kernel& kern = p.kernels[0];
  EXPECT_EQ(kern.name, "scaled");
  ASSERT_EQ(kern.params.size(), 2u);  // constants are not runtime parameters
  EXPECT_EQ(kern.params[0].name(), "m");
  EXPECT_EQ(kern.params[0].dtype(), dtypes::int64);
  EXPECT_EQ(kern.params[1].dtype(), dtypes::bfloat16.pointer_to());
  ASSERT_EQ(kern.constants.size(), 2u);
  EXPECT_EQ(kern.constants[0], (std::pair<std::string, std::string>{"k", "128"}));
  std::string text = print(p);
  EXPECT_NE(text.find("register bfloat16[128]"), std::string::npos) << text;
  EXPECT_NE(text.find("constants k=128, scale=0.5"), std::string::npos) << text;

  // A missing constant, a wrong type, and an unknown name are errors naming the parameter.
  EXPECT_THROW(trace(Scaled{}, {{"scale", 0.5}}), CompileError);
  try {
    trace(Scaled{}, {{"k", 0.5}, {"scale", 0.5}});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("'k' needs an integer"), std::string::npos) << e.message();
  }
  try {
    trace(Scaled{}, {{"k", int64_t(1)}, {"scale", 0.5}, {"kk", int64_t(2)}});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("'kk', which is not a parameter"), std::string::npos) << e.message();
  }
}

TEST(Script, DefaultParamNames) {
  struct K : Script {
    void operator()(Int32 a, Float32 b) {
      attrs.blocks = {a};
      attrs.warps = 1;
      (void)b;
    }
  };
  Program p = trace(K{});
  EXPECT_EQ(p.kernels[0].params[0].name(), "arg0");
  EXPECT_EQ(p.kernels[0].params[1].name(), "arg1");
  EXPECT_EQ(p.kernels[0].name, "K");
}

TEST(Script, RegisterHandleAssignmentRecordsAssign) {
  struct K : Script {
    void operator()(Int32 n) {
      attrs.blocks = {1};
      attrs.warps = 1;
      auto acc = register_tensor(dtypes::float32, {32}, 0.0);
      RegisterTensor alias = acc;  // aliases: no instruction
      for (Expr i : range(n)) {
        acc = acc + 1.0f;          // assign into acc
      }
      RegisterTensor later;        // unbound: binds
      later = alias * 2.0f;
    }
  };
  std::string text = print(trace(K{}));
  size_t assigns = 0;
  for (size_t pos = text.find("assign("); pos != std::string::npos; pos = text.find("assign(", pos + 1)) ++assigns;
  EXPECT_EQ(assigns, 1u) << text;
  EXPECT_NE(text.find("  for i in range(0, arg0, 1) {\n    add = add("), std::string::npos) << text;
  EXPECT_NE(text.find("    assign(dst=r, src=add)\n  }"), std::string::npos) << text;
}

// Errors carry the line of the user's call (C++ source_location), including operators.
namespace {
struct BadDot : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto a = register_tensor(dtypes::float16, {64, 32});
    auto b = register_tensor(dtypes::float16, {16, 64});
    expected_line = __LINE__ + 1;
    dot(a, b);
  }
};

struct BadBroadcast : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto a = register_tensor(dtypes::float32, {64, 32});
    auto b = register_tensor(dtypes::float32, {16});
    expected_line = __LINE__ + 1;
    auto c = a + b;
    (void)c;
  }
};

struct BadOffsets : Script {
  static constexpr const char* param_names = "n, p";
  void operator()(Int32 n, Ptr<f32> p) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto g = global_view(p, {n, n});
    expected_line = __LINE__ + 1;
    load_global(g, {.offsets = {0}, .shape = {4, 4}});
  }
};

struct BadEvict : Script {
  static constexpr const char* param_names = "n, p";
  void operator()(Int32 n, Ptr<f16> p) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto g = global_view(p, {n});
    auto s = shared_tensor(dtypes::float16, {64});
    expected_line = __LINE__ + 1;
    copy_async(g, s, {.offsets = {0}, .evict = "evict_sometimes"});
  }
};

struct BadBreak : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    expected_line = __LINE__ + 1;
    break_();
  }
};

struct BadIndex : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto s = shared_tensor(dtypes::float16, {2, 64});
    expected_line = __LINE__ + 1;
    auto t = s[0][1][2];
  }
};

struct BadMath : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 4;
    auto t = register_tensor(dtypes::int32, {32});
    expected_line = __LINE__ + 1;
    exp(t);
  }
};

struct BadGroup : Script {
  void operator()(Int32 n) {
    attrs.blocks = {1};
    attrs.warps = 2;
    sync();
    expected_line = __LINE__ + 1;
    warp_group(0, 4, [&] {});
  }
};

}  // namespace

TEST(Script, ErrorsPointAtTheCall) {
  EXPECT_TRUE(fails_at([] { trace(BadDot{}); }, "inner dims differ"));
  EXPECT_TRUE(fails_at([] { trace(BadBroadcast{}); }, "cannot broadcast register float32[64, 32] and register float32[16]"));
  EXPECT_TRUE(fails_at([] { trace(BadOffsets{}); }, "load_global"));
  EXPECT_TRUE(fails_at([] { trace(BadEvict{}); }, "evict='evict_sometimes'"));
  EXPECT_TRUE(fails_at([] { trace(BadBreak{}); }, "break outside of a loop"));
  EXPECT_TRUE(fails_at([] { trace(BadIndex{}); }, "indexing"));
  EXPECT_TRUE(fails_at([] { trace(BadMath{}); }, "exp: needs a floating-point tensor, got register int32[32]"));
  EXPECT_TRUE(fails_at([] { trace(BadGroup{}); }, "do not fit in a block of 64 threads"));
}

TEST(Script, MissingAttributes) {
  struct NoWarps : Script {
    void operator()(Int32 n) { attrs.blocks = {n}; }
  };
  try {
    trace(NoWarps{});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("does not set attrs.warps"), std::string::npos);
  }
  struct TooManyWarps : Script {
    void operator()(Int32 n) {
      attrs.blocks = {n};
      attrs.warps = 64;
    }
  };
  EXPECT_THROW(trace(TooManyWarps{}), CompileError);
}

TEST(Script, DumpIrWritesEveryStage) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "tilus_dump_test";
  fs::remove_all(dir);
  PipelineOptions opts;
  opts.dump_dir = dir.string();
  Program traced = trace(ControlFlow{});
  run_pipeline(traced, opts);
  ASSERT_EQ(ir_dump_dirs(traced, opts).size(), 1u);
  fs::path folder = ir_dump_dirs(traced, opts)[0];
  EXPECT_EQ(folder.parent_path(), dir);
  EXPECT_EQ(folder.filename().string().rfind("ControlFlow-sm_90a-", 0), 0u) << folder;
  std::vector<std::string> expected = {"00_traced.tir",
                                       "01_verify.tir",
                                       "02_simplify.tir",
                                       "03_choose_shared_layouts.tir",
                                       "04_lower_dots_to_wgmma.tir",
                                       "05_pipeline_loops.tir",
                                       "06_infer_layouts.tir",
                                       "07_insert_bounds_predicates.tir",
                                       "08_select_instructions.tir",
                                       "09_plan_shared_memory.tir",
                                       "10_insert_async_waits.tir",
                                       "11_insert_barriers.tir",
                                       "12_insert_wgmma_fences.tir",
                                       "13_order_thread_groups.tir",
                                       "14_keep_wgmma_loops_rolled.tir",
                                       "15_order_wgmma_waits.tir"};
  // The traced IR plus one file per pass, and nothing else.
  ASSERT_EQ(expected.size(), pass_names().size() + 1);
  size_t files = 0;
  for (auto& entry : fs::directory_iterator(folder)) files += entry.is_regular_file();
  EXPECT_EQ(files, expected.size());
  for (auto& f : expected) {
    fs::path file = folder / f;
    ASSERT_TRUE(fs::exists(file)) << file;
    std::ifstream in(file);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "kernel ControlFlow(n: int32, p: float32*)");
  }
  // Dumps carry source locations.
  std::ifstream in(folder / "00_traced.tir");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("test_script.cpp:"), std::string::npos);
  fs::remove_all(dir);
}

// Each specialization (facts, target, constants, hyperparameters) keeps its own folder.
TEST(Script, DumpIrKeepsAFolderPerSpecialization) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("tilus_dump_spec_{}", getpid());
  fs::remove_all(dir);
  PipelineOptions opts;
  opts.dump_dir = dir.string();
  Program plain = trace(ControlFlow{});
  Program aligned = trace(ControlFlow{});
  specialize(aligned, {{0, 16}, {1, 16}});
  run_pipeline(plain, opts);
  run_pipeline(aligned, opts);
  PipelineOptions cpu = opts;
  cpu.target = Target::cpu();
  run_pipeline(aligned, cpu);
  std::set<std::string> folders;
  for (auto& entry : fs::directory_iterator(dir)) folders.insert(entry.path().filename().string());
  EXPECT_EQ(folders.size(), 3u);
  fs::path spec = ir_dump_dirs(aligned, opts)[0];
  EXPECT_NE(spec.filename().string().find("ControlFlow-sm_90a-n16-p16-"), std::string::npos) << spec;
  EXPECT_TRUE(fs::exists(spec / "11_insert_barriers.tir"));
  EXPECT_NE(ir_dump_dirs(aligned, cpu)[0].find("ControlFlow-cpu-n16-p16-"), std::string::npos);
  fs::remove_all(dir);
}
