// bench_cpu: the CPU backend's half of bench/run_cpu.py (which times Triton's interpreter on
// the same matmul in the same run). Prints one JSON line per matmul example:
//   bench_cpu [size=500] [threads=0]
// f16 inputs, f32 accumulation, f16 output, m = n = k = size; "first_ms" is the first call
// (pass pipeline, LLVM, JIT and the run), "ms" the median of later runs, "checked_ms" the
// same in checked mode, "max_err" against a double-precision reference.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "../examples/cpp/matmul_copy.h"
#include "../examples/cpp/matmul_mma.h"
#include "../examples/cpp/matmul_pipelined.h"
#include "../examples/cpp/matmul_shared.h"
#include "tilus/runtime/jit.h"

using namespace tilus;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class Script>
void bench(const char* name, Script script, int64_t s, int threads, const std::vector<double>& ha,
           const std::vector<double>& hb, const std::vector<double>& want) {
  DeviceBuffer a(dtypes::float16, s * s, Backend::Cpu), b(dtypes::float16, s * s, Backend::Cpu),
      c(dtypes::float16, s * s, Backend::Cpu);
  a.upload(ha);
  b.upload(hb);
  auto timed = [&](bool checked, double* first) {
    JitOptions o;
    o.backend = Backend::Cpu;
    o.cpu.checked = checked;
    o.cpu.threads = threads;
    auto kernel = jit(script, o);
    std::vector<KernelArg> args = {s, s, s, a.arg(), b.arg(), c.arg()};
    double t0 = now_ms();
    kernel(args);
    if (first) *first = now_ms() - t0;
    std::vector<double> times;
    for (int i = 0; i < 7; ++i) {
      double t = now_ms();
      kernel(args);
      times.push_back(now_ms() - t);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  double first = 0;
  double ms = timed(false, &first);
  auto got = c.download();
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  double checked_ms = timed(true, nullptr);
  std::printf("{\"kernel\": \"%s\", \"size\": %lld, \"first_ms\": %.2f, \"ms\": %.3f, \"checked_ms\": %.3f, "
              "\"max_err\": %.4g}\n",
              name, (long long)s, first, ms, checked_ms, err);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t s = argc > 1 ? std::atoll(argv[1]) : 500;
  int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (!cpu_backend_available()) {
    std::printf("{\"error\": \"%s\"}\n", cpu_unavailable_reason().c_str());
    return 1;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> ha(s * s), hb(s * s);
  for (auto& v : ha) v = dtypes::float16.decode_float(dtypes::float16.encode_float(dist(rng)));
  for (auto& v : hb) v = dtypes::float16.decode_float(dtypes::float16.encode_float(dist(rng)));
  std::vector<double> want(s * s, 0.0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t k = 0; k < s; ++k)
      for (int64_t j = 0; j < s; ++j) want[i * s + j] += ha[i * s + k] * hb[k * s + j];
  for (auto& v : want) v = dtypes::float16.decode_float(dtypes::float16.encode_float(v));
  try {
    bench("matmul_shared", examples::MatmulShared{}, s, threads, ha, hb, want);
    bench("matmul_mma", examples::MatmulMma{}, s, threads, ha, hb, want);
    bench("matmul_pipelined", examples::MatmulPipelined{}, s, threads, ha, hb, want);
    bench("matmul_copy", examples::MatmulCopy{}, s, threads, ha, hb, want);
  } catch (const Error& e) {
    std::printf("{\"error\": \"%s\"}\n", e.what());
    return 1;
  }
  return 0;
}
