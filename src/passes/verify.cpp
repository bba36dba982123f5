#include "tilus/passes/verify.h"

#include "tilus/ir/verifier.h"

namespace tilus {

Program verify_program(const Program& program, const Target& target) {
  VerifyOptions opts;
  opts.shared_memory_limit = target.shared_memory_per_block;
  verify(program, opts);
  return program;
}

}  // namespace tilus
