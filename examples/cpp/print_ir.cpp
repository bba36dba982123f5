// Traces every C++ example and prints its IR after each pass of the pipeline.
//   print_ir [example-name ...]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "matmul_naive.h"
#include "matmul_shared.h"
#include "softmax.h"
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
  };
  std::vector<std::string> wanted(argv + 1, argv + argc);
  int failures = 0;
  for (auto& ex : examples) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), ex.name) == wanted.end()) continue;
    std::printf("==================== %s ====================\n", ex.name);
    try {
      Program p = ex.trace();
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
