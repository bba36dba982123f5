// The tile-level pass pipeline, top to bottom. Each pass is one .h/.cpp pair with one
// public function; this file is the only place that decides their order.
#include "tilus/passes/pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tilus/ir/printer.h"
#include "tilus/passes/choose_shared_layouts.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/passes/insert_async_waits.h"
#include "tilus/passes/insert_barriers.h"
#include "tilus/passes/insert_bounds_predicates.h"
#include "tilus/passes/insert_wgmma_fences.h"
#include "tilus/passes/keep_wgmma_loops_rolled.h"
#include "tilus/passes/order_thread_groups.h"
#include "tilus/passes/order_wgmma_waits.h"
#include "tilus/passes/pipeline_loops.h"
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
      {"choose_shared_layouts", [](const Program& p, const PipelineOptions&) { return choose_shared_layouts(p); }},
      {"lower_dots_to_wgmma",
       [](const Program& p, const PipelineOptions& o) { return lower_dots_to_wgmma(p, o.target, o.dot_wgmma); }},
      {"pipeline_loops", [](const Program& p, const PipelineOptions& o) { return pipeline_loops(p, o.target); }},
      {"infer_layouts", [](const Program& p, const PipelineOptions& o) { return infer_layouts(p, o.target); }},
      {"insert_bounds_predicates",
       [](const Program& p, const PipelineOptions&) { return insert_bounds_predicates(p); }},
      {"select_instructions",
       [](const Program& p, const PipelineOptions& o) { return select_instructions(p, o.target); }},
      {"plan_shared_memory",
       [](const Program& p, const PipelineOptions& o) { return plan_shared_memory(p, o.target); }},
      // Both after planning, unlike DESIGN's order: tensors the planner puts on the same bytes
      // are hazards too (a copy still landing in a pipeline buffer whose bytes an epilogue
      // tensor reuses), and only the planned offsets show them.
      {"insert_async_waits",
       [](const Program& p, const PipelineOptions& o) { return insert_async_waits(p, o.strict_async_waits); }},
      {"insert_barriers", [](const Program& p, const PipelineOptions&) { return insert_barriers(p); }},
      {"insert_wgmma_fences", [](const Program& p, const PipelineOptions&) { return insert_wgmma_fences(p); }},
      {"order_thread_groups",
       [](const Program& p, const PipelineOptions& o) { return order_thread_groups(p, o.target); }},
      {"keep_wgmma_loops_rolled",
       [](const Program& p, const PipelineOptions& o) { return keep_wgmma_loops_rolled(p, o.target); }},
      {"order_wgmma_waits", [](const Program& p, const PipelineOptions& o) { return order_wgmma_waits(p, o.target); }},
  };
  return list;
}

std::string dump_dir(const PipelineOptions& o) {
  if (!o.dump_dir.empty()) return o.dump_dir;
  const char* env = std::getenv("TILUS_DUMP_IR");
  return env ? env : "";
}

// Each kernel's folder: named by the traced kernel, which the passes do not rename.
void dump(const std::vector<std::string>& folders, int index, const std::string& stage, const Program& p) {
  namespace fs = std::filesystem;
  PrintOptions opts;
  opts.locations = true;
  for (size_t i = 0; i < p.kernels.size() && i < folders.size(); ++i) {
    const Kernel& k = p.kernels[i];
    fs::path d = folders[i];
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

std::string dump_folder(const Kernel& traced, const PipelineOptions& options) {
  std::string name = traced.name + "-" + options.target.arch;
  if (options.dot_wgmma != DotWgmma::Auto) name += options.dot_wgmma == DotWgmma::Never ? "-dotwgmma0" : "-dotwgmma1";
  for (auto& [index, d] : traced.param_divisibility)
    if (index < int(traced.params.size())) name += fmt::format("-{}{}", traced.params[index].name(), d);
  for (auto& [n, v] : traced.constants) name += fmt::format("-{}={}", n, v);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '=' && c != '.') c = '_';
  if (name.size() > 120) name.resize(120);
  // Hyperparameters change the body, not the name: a hash of the traced IR tells them apart.
  Program single;
  single.kernels.push_back(traced);
  return fmt::format("{}-{:08x}", name, std::hash<std::string>()(print(single)) & 0xffffffffu);
}

std::vector<std::string> ir_dump_dirs(const Program& traced, const PipelineOptions& options) {
  std::string dir = dump_dir(options);
  std::vector<std::string> out;
  if (dir.empty()) return out;
  for (const Kernel& k : traced.kernels) out.push_back((std::filesystem::path(dir) / dump_folder(k, options)).string());
  return out;
}

Program run_pipeline(const Program& program, const PipelineOptions& options) {
  std::vector<std::string> dirs = ir_dump_dirs(program, options);
  bool dumping = !dirs.empty();
  if (dumping) dump(dirs, 0, "traced", program);
  Program p = program;
  int index = 1;
  for (auto& pass : passes()) {
    p = pass.run(p, options);
    if (dumping) dump(dirs, index, pass.name, p);
    if (options.after_pass) options.after_pass(pass.name, p);
    ++index;
  }
  return p;
}

}  // namespace tilus
