#include "tilus/codegen/nvrtc.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#ifdef TILUS_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace tilus {

namespace detail {
const std::vector<std::pair<std::string, std::string>>& embedded_device_headers();
}

const std::vector<std::pair<std::string, std::string>>& device_headers() { return detail::embedded_device_headers(); }

bool nvrtc_available() {
#ifdef TILUS_HAVE_NVRTC
  return true;
#else
  return false;
#endif
}

namespace {

// The numbered source lines around each line the NVRTC log names ("name(LINE): error").
std::string source_context(const std::string& source, const std::string& name, const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(source);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::set<int> reported;
  std::regex pattern("\\((\\d+)\\): (error|warning)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), pattern); it != std::sregex_iterator(); ++it)
    if ((*it)[2] == "error") reported.insert(std::stoi((*it)[1]));
  std::string out;
  int shown = 0;
  for (int line : reported) {
    if (++shown > 5) break;
    out += fmt::format("\n--- {} around line {} ---\n", name, line);
    for (int i = std::max(1, line - 3); i <= std::min<int>(lines.size(), line + 3); ++i)
      out += fmt::format("{}{:5} | {}\n", i == line ? ">" : " ", i, lines[i - 1]);
  }
  return out;
}

#ifdef TILUS_HAVE_NVRTC
void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw NvrtcError(fmt::format("NVRTC {} failed: {}", what, nvrtcGetErrorString(r)));
}

// Where cuda_fp16.h lives: $CUDA_HOME/include, $CUDA_PATH/include, the toolkit tilus was
// built against, /usr/local/cuda/include (first that exists). Looked up once: every compile
// needs it twice (the cache key and NVRTC's options).
const std::string& cuda_include_dir() {
  static const std::string dir = [] {
    std::vector<std::string> candidates;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v) candidates.push_back(std::string(v) + "/include");
#ifdef TILUS_CUDA_INCLUDE
    candidates.push_back(TILUS_CUDA_INCLUDE);
#endif
    candidates.push_back("/usr/local/cuda/include");
    for (auto& c : candidates) {
      std::error_code ec;
      if (std::filesystem::exists(c + "/cuda_fp16.h", ec)) return c;
    }
    return std::string();
  }();
  return dir;
}
#endif

}  // namespace

std::vector<std::string> nvrtc_options(const std::string& arch) {
  std::vector<std::string> options = {"-arch=" + arch, "-std=c++17", "-lineinfo"};
#ifdef TILUS_HAVE_NVRTC
  if (const std::string& inc = cuda_include_dir(); !inc.empty()) options.push_back("-I" + inc);
#endif
  return options;
}

int nvrtc_version() {
#ifdef TILUS_HAVE_NVRTC
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "version query");
  return major * 1000 + minor * 10;
#else
  return 0;
#endif
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& extra_options) {
#ifndef TILUS_HAVE_NVRTC
  throw NvrtcError(fmt::format("cannot compile {}: tilus was built without NVRTC (CUDA toolkit not found)", name));
#else
  if (!std::regex_match(arch, std::regex("sm_\\d+[af]?")))
    throw NvrtcError(fmt::format("cannot compile {}: arch '{}' is not of the form sm_<cc> (e.g. sm_80, sm_90a)", name, arch));
  NvrtcOutput out;
  out.options = nvrtc_options(arch);
  out.options.insert(out.options.end(), extra_options.begin(), extra_options.end());

  const auto& headers = device_headers();
  std::vector<const char*> header_texts, header_names;
  for (auto& [n, text] : headers) {
    header_names.push_back(n.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), int(headers.size()), header_texts.data(),
                           header_names.data()),
        "program creation");
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};

  std::vector<const char*> opts;
  for (auto& o : out.options) opts.push_back(o.c_str());
  nvrtcResult result = nvrtcCompileProgram(prog, int(opts.size()), opts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  out.log.resize(log_size);
  if (log_size) nvrtcGetProgramLog(prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (result != NVRTC_SUCCESS)
    throw NvrtcError(fmt::format("NVRTC could not compile kernel {} for {} ({}):\n{}{}", name, arch,
                                 nvrtcGetErrorString(result), out.log, source_context(source, name, out.log)));
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog, &size), "cubin size query");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(prog, out.cubin.data()), "cubin retrieval");
  return out;
#endif
}

}  // namespace tilus
