#pragma once

#include "tilus/ir/program.h"

namespace tilus {

// The simplify pass: simplifies every expression with the ranges the program implies
// (loop variables, block and thread indices, register-tensor axes), propagates lets of
// constants and variables, folds branches and loops with constant conditions or trip
// counts, and removes instructions whose results are never used.
Program simplify_program(const Program& program);

}  // namespace tilus
