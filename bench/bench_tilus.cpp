// The tilus side of bench/run.py: times tilus kernels on the GPU and prints one JSON object
// per line for run.py to compare with torch and Triton measured in the same run.
//   bench_tilus vector_add N            f32 c = a + b over N elements
//   bench_tilus matmul M N K            f16 matmul, every tile config of the list below
//   bench_tilus startup M N K           time to the first matmul result in a new process
//                                       (trace, passes, codegen, NVRTC or cache, load, run)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../examples/cpp/matmul_mma.h"
#include "../examples/cpp/matmul_copy.h"
#include "../examples/cpp/matmul_pipelined.h"
#include "../examples/cpp/vector_add.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

// Median of `repeat` event-timed launches, each after an L2 flush (a 256 MB memset), so no
// run reads operands the previous one left in L2.
template <class F>
double median_ms(F&& launch, int repeat) {
  static DeviceBuffer scrub(dtypes::uint8, 256 << 20);
  launch();
  synchronize();
  std::vector<double> times;
  EventTimer timer;
  for (int i = 0; i < repeat; ++i) {
    device_memset(scrub.ptr(), uint8_t(i), scrub.bytes());
    timer.start();
    launch();
    times.push_back(timer.stop_ms());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void fill(DeviceBuffer& b) {
  std::vector<uint16_t> v(b.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = dtypes::float16.encode_float(double(int64_t(i * 2654435761u % 17) - 8) / 8);
  b.upload_bytes(v.data(), v.size() * 2);
}

int vector_add(int64_t n) {
  DeviceBuffer a(dtypes::float32, n), b(dtypes::float32, n), c(dtypes::float32, n);
  device_memset(a.ptr(), 0, a.bytes());
  device_memset(b.ptr(), 0, b.bytes());
  auto kernel = jit(examples::VectorAdd{});
  double ms = median_ms([&] { kernel({n, a.arg(), b.arg(), c.arg()}); }, 50);
  std::printf("{\"bench\": \"vector_add\", \"impl\": \"tilus\", \"n\": %ld, \"ms\": %.5f, \"gbps\": %.1f}\n", n, ms,
              3.0 * n * 4 / ms / 1e6);
  return 0;
}

struct Config {
  int64_t bm, bn, bk, warps, stages;
};
const std::vector<Config> kConfigs = {
    {128, 128, 32, 8, 3}, {128, 128, 32, 8, 4}, {128, 128, 64, 8, 3}, {128, 256, 32, 8, 3}, {256, 128, 32, 8, 3},
    {128, 64, 32, 4, 4},  {128, 256, 32, 8, 4}, {128, 256, 64, 8, 3},
};

int matmul(int64_t m, int64_t n, int64_t k) {
  DeviceBuffer a(dtypes::float16, m * k), b(dtypes::float16, k * n), c(dtypes::float16, m * n);
  fill(a);
  fill(b);
  for (const Config& cfg : kConfigs) {
    std::string name = fmt::format("{}x{}x{} w{} s{}", cfg.bm, cfg.bn, cfg.bk, cfg.warps, cfg.stages);
    try {
      auto kernel = jit(examples::MatmulMma(cfg.bm, cfg.bn, cfg.bk, cfg.warps, cfg.stages));
      double ms = median_ms([&] { kernel({m, n, k, a.arg(), b.arg(), c.arg()}); }, 30);
      std::printf("{\"bench\": \"matmul\", \"impl\": \"tilus\", \"config\": \"%s\", \"m\": %ld, \"n\": %ld, \"k\": %ld, "
                  "\"ms\": %.5f, \"tflops\": %.1f}\n",
                  name.c_str(), m, n, k, ms, 2.0 * m * n * k / ms / 1e9);
    } catch (const Error& e) {
      std::string what = e.what();
      std::replace(what.begin(), what.end(), '"', '\'');
      std::replace(what.begin(), what.end(), '\n', ' ');
      std::printf("{\"bench\": \"matmul\", \"impl\": \"tilus\", \"config\": \"%s\", \"error\": \"%.200s\"}\n",
                  name.c_str(), what.c_str());
    }
    std::fflush(stdout);
  }
  // The same kernel with no wait or sync written (the passes insert them), with copy_async
  // and with every move a `copy`.
  auto row = [&](auto kernel, const char* config) {
    double ms = median_ms([&] { kernel({m, n, k, a.arg(), b.arg(), c.arg()}); }, 30);
    std::printf("{\"bench\": \"matmul\", \"impl\": \"tilus\", \"config\": \"%s\", \"m\": %ld, \"n\": %ld, "
                "\"k\": %ld, \"ms\": %.5f, \"tflops\": %.1f}\n",
                config, m, n, k, ms, 2.0 * m * n * k / ms / 1e9);
  };
  row(jit(examples::MatmulPipelined{}), "pipelined 128x256x32 w8 s3, no manual waits/syncs");
  row(jit(examples::MatmulCopy{}), "copy 128x256x32 w8 s3, every move a copy, no waits/syncs");
  return 0;
}

int startup(int64_t m, int64_t n, int64_t k) {
  auto t0 = std::chrono::steady_clock::now();
  DeviceBuffer a(dtypes::float16, m * k), b(dtypes::float16, k * n), c(dtypes::float16, m * n);
  auto t_ctx = std::chrono::steady_clock::now();
  auto kernel = jit(examples::MatmulMma{});
  std::vector<KernelArg> args = {m, n, k, a.arg(), b.arg(), c.arg()};
  const Launcher& launcher = kernel.launcher(args);
  auto t_compiled = std::chrono::steady_clock::now();
  launcher.launch(args);
  synchronize();
  auto t1 = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf("{\"bench\": \"startup\", \"impl\": \"tilus\", \"from_cache\": %s, \"nvrtc_ms\": %.1f, \"context_ms\": "
              "%.1f, \"compile_ms\": %.1f, \"first_result_ms\": %.1f}\n",
              launcher.kernel().from_cache ? "true" : "false", launcher.kernel().compile_ms, ms(t_ctx - t0),
              ms(t_compiled - t_ctx), ms(t1 - t0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (!gpu_available()) {
    std::fprintf(stderr, "bench_tilus: no GPU (%s)\n", gpu_unavailable_reason().c_str());
    return 2;
  }
  try {
    if (a.size() == 2 && a[0] == "vector_add") return vector_add(std::stoll(a[1]));
    if (a.size() == 4 && a[0] == "matmul") return matmul(std::stoll(a[1]), std::stoll(a[2]), std::stoll(a[3]));
    if (a.size() == 4 && a[0] == "startup") return startup(std::stoll(a[1]), std::stoll(a[2]), std::stoll(a[3]));
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tilus: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: bench_tilus vector_add N | matmul M N K | startup M N K\n");
  return 2;
}
