// The runtime without a GPU: NVRTC errors, compiling through the disk cache, argument
// checks and grid evaluation (both happen before anything touches the driver), and the
// in-process specialization map.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../../examples/cpp/vector_add.h"
#include "tilus/codegen/nvrtc.h"
#include "message_of.h"
#include "temp_dir.h"
#include "tilus/runtime/jit.h"

using namespace tilus;
namespace fs = std::filesystem;

namespace {


#define REQUIRE_NVRTC() \
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC"

CompiledKernel compile_vector_add(DiskCache* cache) {
  return compile_program(trace(examples::VectorAdd{}), "sm_80", cache);
}

}  // namespace

TEST(Nvrtc, ErrorShowsLogAndSourceLines) {
  REQUIRE_NVRTC();
  std::string source = "#include \"tilus/device.h\"\nextern \"C\" __global__ void k(int* p) {\n  p[0] = undefined_name;\n}\n";
  std::string msg = message_of<NvrtcError>([&] { nvrtc_compile(source, "broken", "sm_80"); });
  ASSERT_FALSE(msg.empty());
  EXPECT_NE(msg.find("broken"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;         // the log
  EXPECT_NE(msg.find(">    3 |   p[0] = undefined_name;"), std::string::npos) << msg;  // the marked line
  EXPECT_NE(msg.find("    2 | extern"), std::string::npos) << msg;         // its neighbours
}

// The registers come from ptxas's report and, read independently, from the cubin's .nv.info
// (what nvrtc_compile falls back to when an NVRTC build leaves the report out of its log).
TEST(Nvrtc, RegistersFromThePtxasReportAndTheCubinAgree) {
  REQUIRE_NVRTC();
  std::string source =
      "extern \"C\" __global__ void heavy(float* p, int n) {\n"
      "  float acc[24];\n  for (int i = 0; i < 24; ++i) acc[i] = p[threadIdx.x + i * n];\n"
      "  float s = 0;\n  for (int i = 0; i < 24; ++i) s += acc[i] * acc[(i * 7) % 24];\n"
      "  p[threadIdx.x] = s;\n}\n"
      "extern \"C\" __global__ void light(int* p) { p[0] = 1; }\n";
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    NvrtcOutput out = nvrtc_compile(source, "heavy", arch);
    int heavy = cubin_register_count(out.cubin, "heavy"), light = cubin_register_count(out.cubin, "light");
    EXPECT_GT(heavy, light) << arch;
    EXPECT_GT(light, 0) << arch;
    EXPECT_EQ(out.resources.registers, heavy) << arch;  // the report, or the fallback: the same number
    EXPECT_EQ(out.resources.stack_frame_bytes, cubin_frame_bytes(out.cubin, "heavy")) << arch;
    EXPECT_EQ(cubin_register_count(out.cubin, "missing"), -1);
    EXPECT_EQ(cubin_frame_bytes(out.cubin, "missing"), -1);
  }
  EXPECT_EQ(cubin_register_count({}, "heavy"), -1);
  // Without a report: registers and frame from the cubin, and an empty frame means no spills.
  NvrtcOutput out = nvrtc_compile(source, "light", "sm_100a");
  KernelResources none;
  complete_resources_from_cubin(none, out.cubin, "light");
  EXPECT_EQ(none.registers, cubin_register_count(out.cubin, "light"));
  EXPECT_EQ(none.stack_frame_bytes, 0);
  EXPECT_EQ(none.spill_store_bytes, 0);
  EXPECT_EQ(none.spill_load_bytes, 0);
  KernelResources framed;
  framed.stack_frame_bytes = 64;  // a frame: whether it holds spills is the report's to say
  complete_resources_from_cubin(framed, out.cubin, "light");
  EXPECT_EQ(framed.spill_store_bytes, -1);
  EXPECT_EQ(cubin_register_count(std::vector<char>(100, 'x'), "heavy"), -1);
}

TEST(Nvrtc, RejectsMalformedArch) {
  REQUIRE_NVRTC();
  std::string msg = message_of<NvrtcError>([] { nvrtc_compile("", "k", "hopper"); });
  EXPECT_NE(msg.find("'hopper'"), std::string::npos) << msg;
}

TEST(Nvrtc, EmbedsTheDeviceLibrary) {
  ASSERT_EQ(device_headers().size(), 1u);
  EXPECT_EQ(device_headers()[0].first, "tilus/device.h");
  EXPECT_NE(device_headers()[0].second.find("namespace tilus"), std::string::npos);
  REQUIRE_NVRTC();
  EXPECT_GE(nvrtc_version(), 11000);
  auto options = nvrtc_options("sm_90a");
  EXPECT_NE(std::find(options.begin(), options.end(), "-lineinfo"), options.end());
  EXPECT_NE(std::find(options.begin(), options.end(), "-arch=sm_90a"), options.end());
}

TEST(Runtime, SecondCompileComesFromTheDiskCache) {
  REQUIRE_NVRTC();
  TempDir dir("runtime");
  DiskCache cache(dir.path.string());
  CompiledKernel first = compile_vector_add(&cache);
  EXPECT_FALSE(first.from_cache);
  EXPECT_GT(first.compile_ms, 0.0);
  CompiledKernel second = compile_vector_add(&cache);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.compile_ms, 0.0);
  EXPECT_EQ(first.cubin, second.cubin);
  // The entry's metadata describes the kernel.
  int entries = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.path().filename() == "meta.json") {
      ++entries;
      std::ifstream in(e.path());
      std::string meta((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(meta.find("\"name\": \"n\", \"dtype\": \"int32\""), std::string::npos) << meta;
      EXPECT_NE(meta.find("\"block_threads\": 128"), std::string::npos) << meta;
      EXPECT_NE(meta.find("\"arch\": \"sm_80\""), std::string::npos) << meta;
      // The argument contract: who writes, and each view's extent over the scalars.
      EXPECT_NE(meta.find("\"name\": \"a\", \"dtype\": \"float32*\", \"writes\": null, \"views\": [{\"at\": "),
                std::string::npos) << meta;
      EXPECT_NE(meta.find("\"name\": \"c\", \"dtype\": \"float32*\", \"writes\": \"store_global at "),
                std::string::npos) << meta;
      EXPECT_NE(meta.find("\"type\": \"global float32[n]\", \"extent\": \"select(int64(n) > 0_int64, int64(n), "
                          "0_int64)\", \"strides\": [\"1\"], \"row_major\": true}"),
                std::string::npos) << meta;
    }
  EXPECT_EQ(entries, 1);
  // A kernel from the cache carries the same contract (it is the traced kernel's, never the
  // entry's): c is written, a is not, each viewed as float32[n].
  for (const CompiledKernel* k : {&first, &second}) {
    const auto& params = k->source.params;
    ASSERT_EQ(params.size(), 4u);
    EXPECT_FALSE(params[1].contract.writes());
    EXPECT_EQ(params[3].contract.write_inst, "store_global");
    ASSERT_EQ(params[1].contract.views.size(), 1u);
    EXPECT_EQ(params[1].contract.views[0].type, "global float32[n]");
    EXPECT_TRUE(params[1].contract.views[0].row_major);
    EXPECT_EQ(to_string(params[1].contract.views[0].extent), "select(int64(n) > 0_int64, int64(n), 0_int64)");
  }
  // Another arch is another entry.
  compile_program(trace(examples::VectorAdd{}), "sm_90a", &cache);
  entries = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.path)) entries += e.path().filename() == "meta.json";
  EXPECT_EQ(entries, 2);
}

TEST(Runtime, CorruptCacheEntryIsRebuilt) {
  REQUIRE_NVRTC();
  TempDir dir("runtime");
  DiskCache cache(dir.path.string());
  CompiledKernel first = compile_vector_add(&cache);
  for (auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.path().filename() == "kernel.cubin") fs::resize_file(e.path(), 10);
  CompiledKernel again = compile_vector_add(&cache);
  EXPECT_FALSE(again.from_cache);
  EXPECT_EQ(again.cubin, first.cubin);
  EXPECT_TRUE(compile_vector_add(&cache).from_cache);
}

TEST(Runtime, ArgumentsAreCheckedBeforeLaunching) {
  REQUIRE_NVRTC();
  Launcher launcher(compile_vector_add(nullptr));
  auto p = KernelArg::typed_pointer(0x1000, dtypes::float32);
  auto expect_error = [&](const std::vector<KernelArg>& args, const std::string& part) {
    std::string msg = message_of<ArgumentError>([&] { launcher.launch(args); });
    EXPECT_NE(msg.find(part), std::string::npos) << "got: '" << msg << "', want: " << part;
    EXPECT_NE(msg.find("kernel VectorAdd"), std::string::npos) << msg;
  };
  expect_error({int64_t(10), p, p}, "takes 4 arguments (n: int32, a: float32*, b: float32*, c: float32*), got 3");
  expect_error({int64_t(10), p, KernelArg::pointer(0), p}, "argument 2 ('b': float32*): null pointer");
  expect_error({int64_t(10), p, p, KernelArg::typed_pointer(0x1000, dtypes::float16)},
               "argument 3 ('c': float32*): points to float16 data, the kernel reads float32");
  expect_error({p, p, p, p}, "argument 0 ('n': int32): expected an integer, got a pointer");
  expect_error({2.5, p, p, p}, "argument 0 ('n': int32): expected an integer, got a float");
  expect_error({int64_t(1) << 40, p, p, p}, "1099511627776 is out of the range of int32");
  expect_error({int64_t(10), int64_t(5), p, p}, "argument 1 ('a': float32*): expected a pointer, got an integer");
  // An empty grid launches nothing, and so needs no GPU.
  EXPECT_NO_THROW(launcher.launch({int64_t(0), p, p, p}));
  // Untyped pointers are taken on trust; without a GPU the launch then fails in the driver.
  if (!gpu_available()) {
    std::string msg = message_of<RuntimeError>([&] { launcher.launch({int64_t(10), p, KernelArg::pointer(0x2000), p}); });
    EXPECT_NE(msg.find("no GPU available"), std::string::npos) << msg;
  }
}

TEST(Runtime, GridIsEvaluatedFromTheArguments) {
  REQUIRE_NVRTC();
  Launcher launcher(compile_vector_add(nullptr));
  auto p = KernelArg::pointer(0x1000);
  EXPECT_EQ(launcher.grid({int64_t(1), p, p, p}), (std::array<uint32_t, 3>{1, 1, 1}));
  EXPECT_EQ(launcher.grid({int64_t(1024), p, p, p}), (std::array<uint32_t, 3>{1, 1, 1}));
  EXPECT_EQ(launcher.grid({int64_t(1025), p, p, p}), (std::array<uint32_t, 3>{2, 1, 1}));
  EXPECT_EQ(launcher.grid({int64_t(0), p, p, p}), (std::array<uint32_t, 3>{0, 1, 1}));
}

TEST(Runtime, SpecializationFacts) {
  std::vector<KernelArg> args = {int64_t(32), int64_t(33), KernelArg::pointer(0x1000), KernelArg::pointer(0x1004),
                                 2.0};
  auto facts = specialization_of(args);
  EXPECT_EQ(facts, (std::map<int, int64_t>{{0, 16}, {2, 16}}));
  EXPECT_EQ(specialization_key(facts), "0:16;2:16;");
}

TEST(Runtime, JitCompilesEachSpecializationOnce) {
  REQUIRE_NVRTC();
  auto kernel = jit(examples::VectorAdd{}, {.arch = "sm_80", .disk_cache = false});
  auto aligned = KernelArg::pointer(0x1000);
  const Launcher& a = kernel.launcher({int64_t(4096), aligned, aligned, aligned});
  const Launcher& b = kernel.launcher({int64_t(2048), aligned, aligned, aligned});
  const Launcher& c = kernel.launcher({int64_t(1000), aligned, aligned, aligned});
  EXPECT_EQ(&a, &b);  // both divisible by 16: one variant
  EXPECT_NE(&a, &c);
  // The specialized variant knows n % 16 == 0 and aligned pointers, and vectorizes.
  EXPECT_NE(a.kernel().source.source.find("tilus::load_vec<16>"), std::string::npos);
  EXPECT_EQ(c.kernel().source.source.find("tilus::load_vec"), std::string::npos);
}

TEST(Runtime, GpuAvailabilityIsReportedWithAReason) {
  if (gpu_available()) {
    EXPECT_EQ(gpu_unavailable_reason(), "");
    EXPECT_GE(current_device().compute_capability, 70);
  } else {
    EXPECT_FALSE(gpu_unavailable_reason().empty());
    EXPECT_THROW(device_alloc(16), RuntimeError);
  }
}
