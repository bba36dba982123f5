#include "tilus/passes/verify_program.h"

#include <fmt/format.h>

#include "tilus/ir/functor.h"
#include "tilus/ir/verifier.h"

namespace tilus {

namespace {
// What the target must support: setmaxnreg exists on the architecture-specific targets of
// sm_90 and newer (sm_90a, sm_100a, ...). The CPU target stands for sm_90a.
void check_target(const Kernel& k, const Target& target) {
  struct Walk : StmtVisitor {
    const Target* target;
    void visit_inst(const InstNode& i) override {
      if (i.kind() != InstKind::SetMaxNReg || target->is_cpu()) return;
      if (target->sm < 90 || target->arch.back() != 'a')
        throw CompileError(fmt::format("{}: setmaxnreg needs an architecture-specific sm_90a (or newer 'a') target, "
                                       "not {}",
                                       i.display_name(), target->arch),
                           i.loc);
    }
  } w;
  w.target = &target;
  w.visit(k.body);
}
}  // namespace

Program verify_program(const Program& program, const Target& target) {
  // The shared-memory budget is checked by plan_shared_memory, which knows which tensors
  // are live at once; the verifier's sum of every allocation would reject kernels that
  // fit by freeing tensors. (verify() keeps that conservative rule for direct callers.)
  verify(program, VerifyOptions{});
  for (auto& k : program.kernels) check_target(k, target);
  return program;
}

}  // namespace tilus
