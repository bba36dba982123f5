// A C++ program using the installed tilus: a Script traced, lowered to CUDA (NVRTC needs no GPU),
// run on the CPU backend when the installation has it, and written into a bundle (argv[1]).
#include <cstdio>

#include "tilus/tilus.h"

using namespace tilus;

struct Axpy : Script {
  static constexpr const char* param_names = "n, alpha, x, y";
  void operator()(Int32 n, Float32 alpha, Ptr<f32> x, Ptr<f32> y) {
    attrs.blocks = {cdiv(n, 256)};
    attrs.warps = 4;
    auto gx = global_view(x, {n});
    auto gy = global_view(y, {n});
    Expr offset = let("offset", blockIdx.x * 256);
    auto a = load_global(gx, {.offsets = {offset}, .shape = {256}});
    auto b = load_global(gy, {.offsets = {offset}, .shape = {256}});
    store_global(gy, a * alpha + b, {.offsets = {offset}});
  }
};

int main(int argc, char** argv) {
  Program p = trace(Axpy{});
  std::printf("%s", print(p).c_str());
#ifdef HAS_CPU_BACKEND
  auto k = jit(Axpy{}, {.backend = Backend::Cpu});
  DeviceBuffer x(dtypes::float32, 1000, Backend::Cpu), y(dtypes::float32, 1000, Backend::Cpu);
  std::vector<double> xs(1000), ys(1000);
  for (int i = 0; i < 1000; ++i) xs[size_t(i)] = i, ys[size_t(i)] = 1;
  x.upload(xs);
  y.upload(ys);
  k({1000, 2.0, x.arg(), y.arg()});
  std::vector<double> out = y.download();
  for (int i = 0; i < 1000; ++i)
    if (out[size_t(i)] != 2.0 * i + 1) {
      std::printf("wrong result at %d: %g\n", i, out[size_t(i)]);
      return 1;
    }
  std::printf("cpu backend: ok\n");
#endif
  if (argc > 1 && nvrtc_available()) {
    AotBundle bundle("user_kernels");
    bundle.add("axpy", p, {"sm_80", "sm_90a"});
    bundle.write(argv[1]);
    std::printf("bundle: %s\n", argv[1]);
  }
  return 0;
}
