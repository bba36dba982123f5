// The pass pipeline: the one place that lists the passes, in order (src/passes/pipeline.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tilus/ir/program.h"
#include "tilus/passes/lower_dots_to_wgmma.h"
#include "tilus/ir/target.h"

namespace tilus {

struct PipelineOptions {
  Target target;
  // Directory to write the IR into after every pass, one folder per kernel specialization
  // (ir_dump_dirs); empty: the TILUS_DUMP_IR environment variable, if set.
  std::string dump_dir;
  // Called with (pass name, program) after every pass, for tools that show the stages.
  std::function<void(const std::string&, const Program&)> after_pass;
  // A shared-memory access that needs a copy_async wait the kernel does not have is an
  // error (naming the copy and the access) instead of getting the wait inserted.
  bool strict_async_waits = false;
  // Where a dot may become wgmma (lower_dots_to_wgmma); TILUS_DOT_WGMMA by default.
  DotWgmma dot_wgmma = dot_wgmma_from_env();
};

// The names of the passes, in the order they run.
std::vector<std::string> pass_names();
// Runs every tile-level pass on the program.
Program run_pipeline(const Program& program, const PipelineOptions& options = {});
// Where run_pipeline writes each kernel's IR when dumping (empty when not): a folder per
// specialization, <dump dir>/<kernel>-<target>[-dotwgmma0|1][-<param><divisor>...][-<constant>=<value>...]-<hash
// of the traced kernel>, so that specializations, targets and hyperparameters never overwrite
// each other. The backends put their output there too (cpu.ll, kernel.cu).
std::vector<std::string> ir_dump_dirs(const Program& traced, const PipelineOptions& options);

}  // namespace tilus
