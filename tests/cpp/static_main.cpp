// The entry of tilus_cpu_static: test_differential and bench_cpu in one binary, built with
// LLVM linked statically (-DTILUS_LLVM_STATIC=ON) for machines without LLVM (the GPU machine),
// so that one copy of LLVM travels there instead of two.
//   tilus_cpu_static test [gtest flags]     the differential tests (GPU vs CPU backend)
//   tilus_cpu_static bench [size [threads]] bench_cpu
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

int bench_cpu_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) return bench_cpu_main(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "test") == 0) {
    argv[1] = argv[0];
    int n = argc - 1;
    testing::InitGoogleTest(&n, argv + 1);
    return RUN_ALL_TESTS();
  }
  std::fprintf(stderr, "usage: %s test [gtest flags] | bench [size [threads]]\n", argv[0]);
  return 2;
}
