// The stable text form of the IR, used by golden tests and TILUS_DUMP_IR.
#pragma once

#include <string>

#include "tilus/ir/program.h"

namespace tilus {

struct PrintOptions {
  bool locations = false;  // append "# file:line" to instructions
  bool layouts = true;     // print register and shared layouts of tensor definitions
};

std::string print(const Program& p, const PrintOptions& opts = {});
std::string print(const Kernel& k, const PrintOptions& opts = {});
std::string print(const Stmt& s, const PrintOptions& opts = {});
std::string print(const Inst& i, const PrintOptions& opts = {});

}  // namespace tilus
