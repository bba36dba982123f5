// Golden IR of every C++ example: as traced and after each pass of the pipeline.
#include <gtest/gtest.h>

#include "../../examples/cpp/matmul_naive.h"
#include "../../examples/cpp/matmul_shared.h"
#include "../../examples/cpp/softmax.h"
#include "../../examples/cpp/vector_add.h"
#include "golden.h"

using namespace tilus;

namespace {
std::string stages(const Program& traced) {
  std::string out = "---- traced ----\n" + print(traced);
  PipelineOptions opts;
  opts.after_pass = [&](const std::string& pass, const Program& p) { out += "---- after " + pass + " ----\n" + print(p); };
  run_pipeline(traced, opts);
  return out;
}
}  // namespace

TEST(ExamplesIR, VectorAdd) { EXPECT_TRUE(matches_golden("vector_add", stages(trace(examples::VectorAdd{})))); }
TEST(ExamplesIR, MatmulNaive) { EXPECT_TRUE(matches_golden("matmul_naive", stages(trace(examples::MatmulNaive{})))); }
TEST(ExamplesIR, MatmulShared) { EXPECT_TRUE(matches_golden("matmul_shared", stages(trace(examples::MatmulShared{})))); }
TEST(ExamplesIR, Softmax) { EXPECT_TRUE(matches_golden("softmax", stages(trace(examples::Softmax{})))); }

// Every example's final IR gives every register tensor a layout that the verifier accepts.
TEST(ExamplesIR, LayoutsComplete) {
  VerifyOptions strict;
  strict.require_layouts = true;
  PipelineOptions options;  // not a default argument's temporary: GCC 12 took its string for uninitialized
  for (Program p : {trace(examples::VectorAdd{}), trace(examples::MatmulNaive{}), trace(examples::MatmulShared{}),
                    trace(examples::Softmax{})}) {
    Program lowered = run_pipeline(p, options);
    EXPECT_NO_THROW(verify(lowered, strict)) << print(lowered);
  }
}
