#pragma once

#include "tilus/ir/program.h"
#include "tilus/ir/target.h"

namespace tilus {

// The verify pass (DESIGN 6.1): every rule of ir/verifier.h plus the target's
// shared-memory budget. Returns the program unchanged or throws CompileError.
Program verify_program(const Program& program, const Target& target);

}  // namespace tilus
