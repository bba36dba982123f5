// The tile-level pass pipeline, top to bottom. Each pass is one .h/.cpp pair with one
// public function; this file is the only place that decides their order.
#include "tilus/passes/pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tilus/ir/printer.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/passes/insert_async_waits.h"
#include "tilus/passes/insert_barriers.h"
#include "tilus/passes/insert_bounds_predicates.h"
#include "tilus/passes/plan_shared_memory.h"
#include "tilus/passes/select_instructions.h"
#include "tilus/passes/simplify_program.h"
#include "tilus/passes/verify_program.h"

namespace tilus {

namespace {

struct Pass {
  const char* name;
  std::function<Program(const Program&, const PipelineOptions&)> run;
};

const std::vector<Pass>& passes() {
  static const std::vector<Pass> list = {
      {"verify", [](const Program& p, const PipelineOptions& o) { return verify_program(p, o.target); }},
      {"simplify", [](const Program& p, const PipelineOptions&) { return simplify_program(p); }},
      {"infer_layouts", [](const Program& p, const PipelineOptions&) { return infer_layouts(p); }},
      {"insert_bounds_predicates",
       [](const Program& p, const PipelineOptions&) { return insert_bounds_predicates(p); }},
      {"select_instructions",
       [](const Program& p, const PipelineOptions& o) { return select_instructions(p, o.target); }},
      {"insert_async_waits",
       [](const Program& p, const PipelineOptions& o) { return insert_async_waits(p, o.strict_async_waits); }},
      {"plan_shared_memory",
       [](const Program& p, const PipelineOptions& o) { return plan_shared_memory(p, o.target); }},
      // After planning, unlike DESIGN's order: tensors the planner puts on the same bytes
      // are hazards too, and only the planned offsets show them.
      {"insert_barriers", [](const Program& p, const PipelineOptions&) { return insert_barriers(p); }},
  };
  return list;
}

std::string dump_dir(const PipelineOptions& o) {
  if (!o.dump_dir.empty()) return o.dump_dir;
  const char* env = std::getenv("TILUS_DUMP_IR");
  return env ? env : "";
}

void dump(const std::string& dir, int index, const std::string& stage, const Program& p) {
  namespace fs = std::filesystem;
  PrintOptions opts;
  opts.locations = true;
  for (auto& k : p.kernels) {
    fs::path d = fs::path(dir) / k.name;
    std::error_code ec;
    fs::create_directories(d, ec);
    fs::path file = d / fmt::format("{:02d}_{}.tir", index, stage);
    std::ofstream out(file);
    if (!out) {
      spdlog::warn("TILUS_DUMP_IR: cannot write {}", file.string());
      continue;
    }
    Program single;
    single.kernels.push_back(k);
    out << print(single, opts);
  }
}

}  // namespace

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (auto& p : passes()) names.push_back(p.name);
  return names;
}

Program run_pipeline(const Program& program, const PipelineOptions& options) {
  std::string dir = dump_dir(options);
  if (!dir.empty()) dump(dir, 0, "traced", program);
  Program p = program;
  int index = 1;
  for (auto& pass : passes()) {
    p = pass.run(p, options);
    if (!dir.empty()) dump(dir, index, pass.name, p);
    if (options.after_pass) options.after_pass(pass.name, p);
    ++index;
  }
  return p;
}

}  // namespace tilus
