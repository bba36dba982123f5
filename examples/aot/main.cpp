// A C++ program deployed with a tilus ahead-of-time bundle: it links kernels (the C sources
// build_bundle.py wrote) and the CUDA driver, and nothing of tilus, NVRTC or Python. It runs the
// bundle's vector add and matmuls on random data, checks them against the host, times them with
// CUDA events, and shows an argument the bundle refuses. `aot_demo --small` runs small sizes only
// (for compute-sanitizer).
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels.h"

namespace {

void check_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* text = "?";
  cuGetErrorString(r, &text);
  std::fprintf(stderr, "aot_demo: %s failed: %s\n", what, text);
  std::exit(1);
}

void check(tilus_aot_status s) {
  if (s == TILUS_AOT_SUCCESS) return;
  std::fprintf(stderr, "aot_demo: %s\n", kernels_last_error());
  std::exit(1);
}

// float <-> IEEE half bits (round to nearest even; the values here are normal or zero).
uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
  if (e < 103) return uint16_t(sign);
  if (e < 113) {  // a half subnormal
    m |= 0x800000u;
    int shift = int(126 - e);
    uint32_t h = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((e - 112) << 10) | (m >> 13), rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return uint16_t(sign | std::min<uint32_t>(h, 0x7c00u));
}
float from_half(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
  if (e == 0) {
    float v = std::ldexp(float(m), -24);
    return sign ? -v : v;
  }
  x = sign | ((e == 31 ? 255 : e + 112) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

struct Device {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  explicit Device(size_t n) : bytes(n) { check_cu(cuMemAlloc(&ptr, n), "cuMemAlloc"); }
  ~Device() { cuMemFree(ptr); }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(ptr); }
  void upload(const void* src) { check_cu(cuMemcpyHtoD(ptr, src, bytes), "cuMemcpyHtoD"); }
  void download(void* dst) const { check_cu(cuMemcpyDtoH(dst, ptr, bytes), "cuMemcpyDtoH"); }
};

// The median time of `launch` over 20 runs, in ms (after one warm-up run, which also loads the
// bundle's cubin into the context).
double time_ms(const std::function<void()>& launch) {
  CUevent begin, end;
  check_cu(cuEventCreate(&begin, 0), "cuEventCreate");
  check_cu(cuEventCreate(&end, 0), "cuEventCreate");
  launch();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    check_cu(cuEventRecord(begin, nullptr), "cuEventRecord");
    launch();
    check_cu(cuEventRecord(end, nullptr), "cuEventRecord");
    check_cu(cuEventSynchronize(end), "cuEventSynchronize");
    float t = 0;
    check_cu(cuEventElapsedTime(&t, begin, end), "cuEventElapsedTime");
    ms.push_back(t);
  }
  cuEventDestroy(begin);
  cuEventDestroy(end);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::mt19937 rng(2026);

std::vector<uint16_t> random_half(size_t n) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_half(u(rng));
  return v;
}

// A matmul c[m, n] = a[m, k] @ (b_transposed ? b[n, k].T : b[k, n]) through `run`, checked at
// 2000 random elements against the host in double; returns false on a mismatch.
bool matmul(const char* name, int m, int n, int k, bool b_transposed,
            const std::function<tilus_aot_status(int, int, int, const void*, const void*, void*)>& run) {
  std::vector<uint16_t> a = random_half(size_t(m) * k), b = random_half(size_t(n) * k), c(size_t(m) * n);
  Device da(a.size() * 2), db(b.size() * 2), dc(c.size() * 2);
  da.upload(a.data());
  db.upload(b.data());
  double ms = time_ms([&] { check(run(m, n, k, da.as<void>(), db.as<void>(), dc.as<void>())); });
  dc.download(c.data());
  double worst = 0;
  std::uniform_int_distribution<int> ri(0, m - 1), rj(0, n - 1);
  for (int s = 0; s < 2000; ++s) {
    int i = ri(rng), j = rj(rng);
    double ref = 0;
    for (int q = 0; q < k; ++q)
      ref += double(from_half(a[size_t(i) * k + q])) *
             double(from_half(b_transposed ? b[size_t(j) * k + q] : b[size_t(q) * n + j]));
    worst = std::max(worst, std::abs(double(from_half(c[size_t(i) * n + j])) - ref) / (1 + std::abs(ref)));
  }
  bool ok = worst < 1e-2;
  std::printf("%-14s %5d x %5d x %5d  %8.3f ms  %7.1f TFLOP/s  max rel. error %.1e  %s\n", name, m, n, k, ms,
              2.0 * m * n * k / ms / 1e9, worst, ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  check_cu(cuInit(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check_cu(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check_cu(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check_cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  char name[256];
  int major = 0, minor = 0;
  cuDeviceGetName(name, sizeof(name), dev);
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  std::printf("%s (compute capability %d.%d)\n", name, major, minor);
  bool ok = true;

  // Vector add, 2^26 elements (the specialized variant) and 2^26 - 3 (the generic one).
  for (int n : {small ? 1 << 16 : 1 << 26, small ? 1000 : (1 << 26) - 3}) {
    const size_t count = size_t(n);
    std::vector<float> a(count), b(count), c(count);
    std::uniform_real_distribution<float> u(-1, 1);
    for (size_t i = 0; i < count; ++i) a[i] = u(rng), b[i] = u(rng);
    Device da(a.size() * 4), db(b.size() * 4), dc(c.size() * 4);
    da.upload(a.data());
    db.upload(b.data());
    double ms = time_ms([&] { check(kernels_vector_add(nullptr, n, da.as<float>(), db.as<float>(), dc.as<float>())); });
    dc.download(c.data());
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += c[i] != a[i] + b[i];
    std::printf("%-14s %23d  %8.3f ms  %7.1f GB/s        %zu wrong elements  %s\n", "vector_add", n, ms,
                3.0 * 4 * n / ms / 1e6, wrong, wrong ? "WRONG" : "ok");
    ok &= wrong == 0;
    // One element more than the arrays hold: the bundle refuses it and launches nothing.
    tilus_aot_status s = kernels_vector_add(nullptr, n + 1, da.as<float>(), db.as<float>(), dc.as<float>());
    std::printf("  n + 1 elements: status %d: %s\n", int(s), kernels_last_error());
    ok &= s == TILUS_AOT_ERROR_ARGUMENT;
  }

  // Launch overhead: the host time of a call of a one-block kernel, in batches of 200 calls
  // (fewer than the GPU's launch queue holds, so no call waits for the GPU) with a synchronize
  // between batches; the median batch, with the pointer checks on (the default) and off.
  {
    Device d(1024 * 4);
    for (int checks : {1, 0}) {
      tilus_aot_status s = TILUS_AOT_SUCCESS;
      kernels_set_checks(checks);
      std::vector<double> per_call;
      for (int batch = 0; batch < (small ? 5 : 50); ++batch) {
        check_cu(cuCtxSynchronize(), "cuCtxSynchronize");
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; ++i) s = kernels_vector_add(nullptr, 1024, d.as<float>(), d.as<float>(), d.as<float>());
        auto t1 = std::chrono::steady_clock::now();
        check(s);
        per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 200);
      }
      check_cu(cuCtxSynchronize(), "cuCtxSynchronize");
      std::sort(per_call.begin(), per_call.end());
      std::printf("launch overhead (checks %s): %.2f us per call (host time)\n", checks ? "on" : "off",
                  per_call[per_call.size() / 2]);
    }
    kernels_set_checks(1);
  }

  auto matmul_v3 = [](int m, int n, int k, const void* a, const void* b, void* c) {
    return kernels_matmul(nullptr, m, n, k, a, b, c);
  };
  ok &= small ? matmul("matmul", 256, 256, 256, false, matmul_v3) : matmul("matmul", 4096, 4096, 4096, false, matmul_v3);
  ok &= small ? matmul("matmul", 200, 136, 72, false, matmul_v3) : matmul("matmul", 1000, 1000, 1000, false, matmul_v3);
  if (major == 9 && minor == 0) {
    auto hopper = [](int m, int n, int k, const void* a, const void* b, void* c) {
      return kernels_hopper_matmul(nullptr, m, n, k, a, b, c);
    };
    if (small) {
      ok &= matmul("hopper_matmul", 512, 512, 256, true, hopper);
      ok &= matmul("hopper_matmul", 300, 520, 136, true, hopper);
    } else {
      ok &= matmul("hopper_matmul", 4096, 4096, 4096, true, hopper);
      ok &= matmul("hopper_matmul", 8192, 8192, 8192, true, hopper);
      ok &= matmul("hopper_matmul", 4000, 4000, 4000, true, hopper);
    }
  } else {
    std::printf("hopper_matmul: skipped (the bundle has it for sm_90a only)\n");
  }
  check_cu(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("%s\n", ok ? "all results correct" : "SOME RESULTS WRONG");
  return ok ? 0 : 1;
}
