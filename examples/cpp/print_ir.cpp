// Traces every C++ example and prints its IR after each pass of the pipeline, or (--cuda
// ARCH) the CUDA source the emitter writes for it. Needs no GPU.
//   print_ir [--cuda sm_90a] [--divisible] [example-name ...]
// --divisible specializes every parameter as a launch with 16-divisible sizes and 16-byte
// aligned pointers would.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "matmul_copy.h"
#include "matmul_mma.h"
#include "matmul_naive.h"
#include "matmul_pipelined.h"
#include "matmul_shared.h"
#include "softmax.h"
#include "tilus/runtime/jit.h"
#include "vector_add.h"

int main(int argc, char** argv) {
  using namespace tilus;
  struct Example {
    const char* name;
    std::function<Program()> trace;
  };
  std::vector<Example> examples = {
      {"vector_add", [] { return trace(examples::VectorAdd{}); }},
      {"matmul_naive", [] { return trace(examples::MatmulNaive{}); }},
      {"matmul_shared", [] { return trace(examples::MatmulShared{}); }},
      {"softmax", [] { return trace(examples::Softmax{}); }},
      {"matmul_mma", [] { return trace(examples::MatmulMma{}); }},
      {"matmul_pipelined", [] { return trace(examples::MatmulPipelined{}); }},
      {"matmul_copy", [] { return trace(examples::MatmulCopy{}); }},
  };
  std::vector<std::string> wanted;
  std::string cuda_arch;
  bool divisible = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cuda" && i + 1 < argc) cuda_arch = argv[++i];
    else if (a == "--divisible") divisible = true;
    else wanted.push_back(a);
  }
  for (auto& w : wanted)
    if (std::none_of(examples.begin(), examples.end(), [&](const Example& e) { return w == e.name; })) {
      std::fprintf(stderr, "print_ir: no example named '%s'\n", w.c_str());
      return 2;
    }
  int failures = 0;
  for (auto& ex : examples) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), ex.name) == wanted.end()) continue;
    std::printf("==================== %s ====================\n", ex.name);
    try {
      Program p = ex.trace();
      if (divisible)
        for (size_t i = 0; i < p.kernels[0].params.size(); ++i) p.kernels[0].param_divisibility[int(i)] = 16;
      if (!cuda_arch.empty()) {
        std::printf("%s", compile_program(p, cuda_arch, nullptr).source.source.c_str());
        continue;
      }
      std::printf("---- traced ----\n%s", print(p).c_str());
      PipelineOptions opts;
      opts.after_pass = [](const std::string& pass, const Program& q) {
        std::printf("---- after %s ----\n%s", pass.c_str(), print(q).c_str());
      };
      run_pipeline(p, opts);
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
