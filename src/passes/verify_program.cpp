#include "tilus/passes/verify_program.h"

#include "tilus/ir/verifier.h"

namespace tilus {

Program verify_program(const Program& program, const Target& target) {
  // The shared-memory budget is checked by plan_shared_memory, which knows which tensors
  // are live at once; the verifier's sum of every allocation would reject kernels that
  // fit by freeing tensors. (verify() keeps that conservative rule for direct callers.)
  (void)target;
  verify(program, VerifyOptions{});
  return program;
}

}  // namespace tilus
