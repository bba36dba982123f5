// Internal to src/passes: a pass that runs one mutator over every kernel of a program.
#pragma once

#include "tilus/ir/functor.h"

namespace tilus {

// Every kernel of a program through a fresh Mutator (a StmtMutator).
template <class Mutator>
Program mutate_kernels(const Program& program) {
  Program out = program;
  for (auto& k : out.kernels) k = Mutator().mutate(k);
  return out;
}

}  // namespace tilus
