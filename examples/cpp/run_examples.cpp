// Runs every C++ example with random data of ragged sizes (not multiples of the tiles),
// checks each against a host reference and prints its speed.
//   run_examples [--cpu | --gpu] [--checked] [example-name ...]
//   run_examples --list | --help
// On the GPU when one is usable, on the CPU backend otherwise (TILUS_TARGET=cpu|gpu or the
// flags choose). --checked runs the CPU backend in checked mode. The *_large examples time a
// 4096^3 product on the GPU and a 512^3 one on the CPU. An unknown option or example name is
// an error (exit code 2) that lists what is accepted, before anything runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "matmul_auto.h"
#include "matmul_mma.h"
#include "matmul_naive.h"
#include "matmul_copy.h"
#include "hopper_matmul.h"
#include "matmul_pipelined.h"
#include "matmul_shared.h"
#include "softmax.h"
#include "tilus/runtime/jit.h"
#include "vector_add.h"

using namespace tilus;

namespace {

std::mt19937 rng(1234);
Backend backend = Backend::Gpu;
JitOptions jit_options;
int64_t large_size = 512;  // the *_large examples' m = n = k: 4096 on the GPU, 512 on the CPU

std::vector<double> random_values(int64_t n, DataType t, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = t.is_float() ? t.decode_float(t.encode_float(dist(rng))) : std::round(dist(rng));
  return v;
}

// Median milliseconds of `repeat` launches after a warm-up.
double time_ms(const std::function<void()>& launch, int repeat = 20) {
  launch();
  if (backend == Backend::Cpu) {
    std::vector<double> times;
    for (int i = 0; i < std::min(repeat, 5); ++i) {
      auto t0 = std::chrono::steady_clock::now();
      launch();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
  synchronize();
  std::vector<double> times;
  EventTimer timer;
  for (int i = 0; i < repeat; ++i) {
    timer.start();
    launch();
    times.push_back(timer.stop_ms());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Result {
  bool ok;
  std::string detail;
};

Result check(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol) {
  double worst = 0.0;
  int64_t bad = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    double tol = atol + rtol * std::fabs(want[i]);
    if (!(err <= tol) && bad < 0) bad = int64_t(i);
    worst = std::max(worst, err);
  }
  if (bad >= 0)
    return {false, fmt::format("element {}: got {} want {} (max abs err {:.3g})", bad, got[bad], want[bad], worst)};
  return {true, fmt::format("max abs err {:.3g}", worst)};
}

Result vector_add() {
  int64_t n = 1000003;
  auto ha = random_values(n, dtypes::float32), hb = random_values(n, dtypes::float32);
  DeviceBuffer a(dtypes::float32, n, backend), b(dtypes::float32, n, backend), c(dtypes::float32, n, backend);
  a.upload(ha);
  b.upload(hb);
  auto kernel = jit(examples::VectorAdd{}, jit_options);
  auto launch = [&] { kernel({n, a.arg(), b.arg(), c.arg()}); };
  launch();
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = double(float(ha[i]) + float(hb[i]));
  Result r = check(c.download(), want, 0, 0);
  double ms = time_ms(launch);
  r.detail += fmt::format(", {:.1f} GB/s", 3.0 * n * 4 / ms / 1e6);
  return r;
}

// c = a @ b with a [m, k] and b [k, n], or b [n, k] when b_nk (c = a @ b.T, as wgmma reads it).
template <class Script>
Result matmul(Script script, int64_t m, int64_t n, int64_t k, bool timed = false, bool b_nk = false) {
  auto ha = random_values(m * k, dtypes::float16), hb = random_values(k * n, dtypes::float16);
  DeviceBuffer a(dtypes::float16, m * k, backend), b(dtypes::float16, k * n, backend), c(dtypes::float16, m * n, backend);
  a.upload(ha);
  b.upload(hb);
  auto kernel = jit(script, jit_options);
  auto launch = [&] { kernel({m, n, k, a.arg(), b.arg(), c.arg()}); };
  launch();
  // The reference: every element of small products; 4096 random elements of large ones.
  std::vector<int64_t> rows, cols;
  if (m * n * k <= (int64_t(1) << 30)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) rows.push_back(i), cols.push_back(j);
  } else {
    for (int s = 0; s < 4096; ++s) rows.push_back(int64_t(rng() % m)), cols.push_back(int64_t(rng() % n));
  }
  std::vector<double> want(rows.size(), 0.0), got(rows.size());
  auto all = c.download();
  for (size_t s = 0; s < rows.size(); ++s) {
    for (int64_t kk = 0; kk < k; ++kk)
      want[s] += ha[rows[s] * k + kk] * (b_nk ? hb[cols[s] * k + kk] : hb[kk * n + cols[s]]);
    want[s] = dtypes::float16.decode_float(dtypes::float16.encode_float(want[s]));
    got[s] = all[rows[s] * n + cols[s]];
  }
  Result r = check(got, want, 1e-2, 1e-2);
  if (timed) {
    double ms = time_ms(launch);
    if (backend == Backend::Cpu)
      r.detail += fmt::format(", {}x{}x{} in {:.3f} ms = {:.1f} GFLOP/s", m, n, k, ms, 2.0 * m * n * k / ms / 1e6);
    else
      r.detail += fmt::format(", {}x{}x{} in {:.3f} ms = {:.1f} TFLOP/s", m, n, k, ms, 2.0 * m * n * k / ms / 1e9);
  }
  return r;
}

Result softmax() {
  int64_t m = 37, n = 1000;
  auto hx = random_values(m * n, dtypes::float32, -4, 4);
  DeviceBuffer x(dtypes::float32, m * n, backend), y(dtypes::float32, m * n, backend);
  x.upload(hx);
  auto kernel = jit(examples::Softmax{}, jit_options);
  kernel({m, n, x.arg(), y.arg()});
  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    double mx = -INFINITY, total = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, hx[i * n + j]);
    for (int64_t j = 0; j < n; ++j) total += std::exp(hx[i * n + j] - mx);
    for (int64_t j = 0; j < n; ++j) want[i * n + j] = std::exp(hx[i * n + j] - mx) / total;
  }
  return check(y.download(), want, 1e-6, 1e-4);
}

template <class Script>
Result matmul_large(Script script) {
  return matmul(script, large_size, large_size, large_size, true);
}

// The examples by name, in the order they run; the *_large ones time a product of large_size^3.
// gpu_only: warp-specialized kernels, whose thread groups wait on each other (the CPU backend
// runs a block's groups one after the other); not run on the CPU.
struct Example {
  const char* name;
  std::function<Result()> run;
  bool gpu_only = false;
};

examples::HopperMatmul hopper_matmul() {
  examples::HopperMatmul h;
  h.blocks = current_device().multiprocessors / 2 * 2;  // clusters of two
  return h;
}

std::vector<Example> all_examples() {
  return {
      {"vector_add", vector_add},
      {"matmul_naive", [] { return matmul(examples::MatmulNaive{}, 257, 383, 131); }},
      {"matmul_shared", [] { return matmul(examples::MatmulShared{}, 257, 383, 131); }},
      {"softmax", softmax},
      {"matmul_mma", [] { return matmul(examples::MatmulMma{}, 301, 517, 203); }},
      {"matmul_mma_large", [] { return matmul_large(examples::MatmulMma{}); }},
      {"matmul_pipelined", [] { return matmul(examples::MatmulPipelined{}, 301, 517, 203); }},
      {"matmul_pipelined_large", [] { return matmul_large(examples::MatmulPipelined{}); }},
      {"matmul_copy", [] { return matmul(examples::MatmulCopy{}, 301, 517, 203); }},
      {"matmul_copy_large", [] { return matmul_large(examples::MatmulCopy{}); }},
      // k a multiple of 8: rows of a multiple of 16 bytes, so the ring's loads are TMA on sm_90.
      {"matmul_auto", [] { return matmul(examples::MatmulAuto{}, 301, 517, 200, false, true); }},
      {"matmul_auto_large",
       [] { return matmul(examples::MatmulAuto{}, large_size, large_size, large_size, true, true); }},
      // k and n: rows of a multiple of 16 bytes, as TMA loads and stores need.
      {"hopper_matmul", [] { return matmul(hopper_matmul(), 301, 520, 200, false, true); }, true},
      {"hopper_matmul_large",
       [] { return matmul(hopper_matmul(), large_size, large_size, large_size, true, true); }, true},
  };
}

void print_usage(std::FILE* out, const std::vector<Example>& examples) {
  std::fprintf(out,
               "usage: run_examples [--cpu | --gpu] [--checked] [example-name ...]\n"
               "       run_examples --list | --help\n"
               "Runs the C++ examples (all of them without names) on random ragged data, checks each\n"
               "against a host reference and prints its speed.\n"
               "  --cpu      run on the CPU backend (LLVM ORC JIT)\n"
               "  --gpu      run on the GPU\n"
               "             (default: the GPU when one is usable, else the CPU; TILUS_TARGET=cpu|gpu)\n"
               "  --checked  run the CPU backend in checked mode (out-of-bounds accesses are errors)\n"
               "  --list     print the example names, one a line\n"
               "examples:");
  for (auto& ex : examples) std::fprintf(out, " %s", ex.name);
  std::fprintf(out, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Example> examples = all_examples();
  std::vector<std::string> wanted;
  backend = default_backend();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cpu") backend = Backend::Cpu;
    else if (a == "--gpu") backend = Backend::Gpu;
    else if (a == "--checked") jit_options.cpu.checked = true;
    else if (a == "-h" || a == "--help") {
      print_usage(stdout, examples);
      return 0;
    } else if (a == "--list") {
      for (auto& ex : examples) std::printf("%s\n", ex.name);
      return 0;
    } else if (a.starts_with("-")) {
      std::fprintf(stderr, "run_examples: unknown option '%s'\n", a.c_str());
      print_usage(stderr, examples);
      return 2;
    } else if (std::none_of(examples.begin(), examples.end(), [&](const Example& ex) { return a == ex.name; })) {
      std::fprintf(stderr, "run_examples: unknown example '%s'; the examples are:", a.c_str());
      for (auto& ex : examples) std::fprintf(stderr, " %s", ex.name);
      std::fprintf(stderr, " (run_examples --list)\n");
      return 2;
    } else {
      wanted.push_back(a);
    }
  }
  jit_options.backend = backend;
  if (backend == Backend::Gpu) {
    if (!gpu_available()) {
      std::printf("no GPU: %s\n", gpu_unavailable_reason().c_str());
      return 1;
    }
    std::printf("device: %s (%s)\n", current_device().name.c_str(), current_device().arch().c_str());
  } else {
    if (!cpu_backend_available()) {
      std::printf("skipped: no CPU backend (%s)\n", cpu_unavailable_reason().c_str());
      return 77;
    }
    std::printf("device: CPU backend (LLVM ORC JIT, %u threads)%s\n", std::thread::hardware_concurrency(),
                jit_options.cpu.checked ? ", checked mode" : "");
  }
  large_size = backend == Backend::Gpu ? 4096 : 512;
  int failures = 0;
  for (auto& ex : examples) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), ex.name) == wanted.end()) continue;
    if (ex.gpu_only && (backend != Backend::Gpu || current_device().arch() != "sm_90a")) {
      std::printf("%-22s not run: a warp-specialized wgmma kernel, for an sm_90a GPU\n", ex.name);
      if (!wanted.empty()) ++failures;  // asked for by name: it did not run
      continue;
    }
    try {
      auto start = std::chrono::steady_clock::now();
      Result r = ex.run();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%-22s %s  %s (%.2f s)\n", ex.name, r.ok ? "PASS" : "FAIL", r.detail.c_str(), s);
      failures += !r.ok;
    } catch (const Error& e) {
      std::printf("%-22s FAIL  %s\n", ex.name, e.what());
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
