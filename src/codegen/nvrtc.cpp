#include "tilus/codegen/nvrtc.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#ifdef TILUS_HAVE_NVRTC
#include <dlfcn.h>
#include <nvrtc.h>
#endif

namespace tilus {

namespace detail {
const std::vector<std::pair<std::string, std::string>>& embedded_device_headers();
}

const std::vector<std::pair<std::string, std::string>>& device_headers() { return detail::embedded_device_headers(); }

#ifdef TILUS_HAVE_NVRTC
namespace {
// NVRTC is loaded with dlopen at its first use, not linked: `import tilus` and programs that
// only use the CPU backend then work where the CUDA toolkit is absent. The library tilus was
// built against is tried first, then the usual sonames.
struct Nvrtc {
  bool loaded = false;
  std::string error;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
};

const Nvrtc& nvrtc() {
  static const Nvrtc lib = [] {
    Nvrtc n;
    std::vector<std::string> names;
#ifdef TILUS_NVRTC_LIBRARY
    names.push_back(TILUS_NVRTC_LIBRARY);
#endif
    for (const char* s : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(s);
    void* h = nullptr;
    for (auto& name : names)
      if ((h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      n.error = fmt::format("the NVRTC library could not be loaded (tried {}; {})", fmt::join(names, ", "), dlerror());
      return n;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && n.error.empty()) n.error = fmt::format("the NVRTC library lacks {}", name);
    };
    sym(n.version, "nvrtcVersion");
    sym(n.error_string, "nvrtcGetErrorString");
    sym(n.create, "nvrtcCreateProgram");
    sym(n.destroy, "nvrtcDestroyProgram");
    sym(n.compile, "nvrtcCompileProgram");
    sym(n.log_size, "nvrtcGetProgramLogSize");
    sym(n.log, "nvrtcGetProgramLog");
    sym(n.cubin_size, "nvrtcGetCUBINSize");
    sym(n.cubin, "nvrtcGetCUBIN");
    sym(n.ptx_size, "nvrtcGetPTXSize");
    sym(n.ptx, "nvrtcGetPTX");
    n.loaded = n.error.empty();
    return n;
  }();
  return lib;
}

const Nvrtc& need_nvrtc(const std::string& what) {
  const Nvrtc& n = nvrtc();
  if (!n.loaded) throw NvrtcError(fmt::format("cannot {}: {}", what, n.error));
  return n;
}
}  // namespace
#endif

bool nvrtc_available() {
#ifdef TILUS_HAVE_NVRTC
  return nvrtc().loaded;
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
  if (r != NVRTC_SUCCESS) throw NvrtcError(fmt::format("NVRTC {} failed: {}", what, nvrtc().error_string(r)));
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
  if (nvrtc_available() && nvrtc_version() >= 12000) options.push_back("--ptxas-options=-v");
#endif
  return options;
}

std::string KernelResources::str() const {
  return fmt::format("{} registers, {} bytes stack frame, {} bytes spill stores, {} bytes spill loads", registers,
                     stack_frame_bytes, spill_store_bytes, spill_load_bytes);
}

int cubin_register_count(const std::vector<char>& cubin, const std::string& kernel) {
  // ELF64: the ".nv.info" section is a list of attributes {u8 format, u8 attribute, u16 size,
  // payload}; EIATTR_REGCOUNT (0x2f, format 0x04: sized) holds {u32 symbol, u32 registers}.
  auto u16 = [&](size_t at) -> uint64_t { uint16_t v = 0; if (at + 2 <= cubin.size()) std::memcpy(&v, &cubin[at], 2); return v; };
  auto u32 = [&](size_t at) -> uint64_t { uint32_t v = 0; if (at + 4 <= cubin.size()) std::memcpy(&v, &cubin[at], 4); return v; };
  auto u64 = [&](size_t at) -> uint64_t { uint64_t v = 0; if (at + 8 <= cubin.size()) std::memcpy(&v, &cubin[at], 8); return v; };
  if (cubin.size() < 64 || std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0 || cubin[4] != 2) return -1;
  uint64_t shoff = u64(0x28), shentsize = u16(0x3a), shnum = u16(0x3c), shstrndx = u16(0x3e);
  auto section = [&](uint64_t i, size_t field) { return shoff + i * shentsize + field; };
  auto name_at = [&](uint64_t strtab, uint64_t offset) {
    size_t at = size_t(u64(section(strtab, 0x18)) + offset);
    return at < cubin.size() ? std::string(&cubin[at], strnlen(&cubin[at], cubin.size() - at)) : std::string();
  };
  int64_t info = -1, symtab = -1;
  for (uint64_t i = 0; i < shnum; ++i) {
    if (name_at(shstrndx, u32(section(i, 0))) == ".nv.info") info = int64_t(i);
    if (u32(section(i, 4)) == 2) symtab = int64_t(i);  // SHT_SYMTAB
  }
  if (info < 0 || symtab < 0) return -1;
  uint64_t strtab = u32(section(uint64_t(symtab), 0x28));
  uint64_t begin = u64(section(uint64_t(info), 0x18)), end = begin + u64(section(uint64_t(info), 0x20));
  for (uint64_t at = begin; at + 4 <= end && at + 4 <= cubin.size();) {
    uint64_t format = uint8_t(cubin[at]), attribute = uint8_t(cubin[at + 1]);
    uint64_t size = format == 0x04 ? u16(at + 2) : 0;
    if (format == 0x04 && attribute == 0x2f && size >= 8) {
      uint64_t symbol = u32(at + 4), registers = u32(at + 8);
      uint64_t sym = u64(section(uint64_t(symtab), 0x18)) + symbol * 24;
      if (name_at(strtab, u32(sym)) == kernel) return int(registers);
    }
    at += 4 + size;
  }
  return -1;
}

KernelResources parse_ptxas_report(const std::string& full, const std::string& kernel) {
  KernelResources r;
  std::smatch m;
  // With a kernel name: only its part of the report (from "entry function '<kernel>'" to the next).
  std::string log = full;
  if (!kernel.empty()) {
    size_t at = full.find("entry function '" + kernel + "'");
    if (at == std::string::npos) return r;
    size_t next = full.find("Compiling entry function", at + 1);
    log = full.substr(at, next == std::string::npos ? std::string::npos : next - at);
  }
  if (std::regex_search(log, m, std::regex("Used (\\d+) registers"))) r.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, std::regex("(\\d+) bytes stack frame, (\\d+) bytes spill stores, (\\d+) bytes spill loads"))) {
    r.stack_frame_bytes = std::stoll(m[1]);
    r.spill_store_bytes = std::stoll(m[2]);
    r.spill_load_bytes = std::stoll(m[3]);
  }
  return r;
}

int nvrtc_version() {
#ifdef TILUS_HAVE_NVRTC
  int major = 0, minor = 0;
  check(need_nvrtc("query the NVRTC version").version(&major, &minor), "version query");
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
  const Nvrtc& lib = need_nvrtc(fmt::format("compile kernel {}", name));
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
  check(lib.create(&prog, source.c_str(), (name + ".cu").c_str(), int(headers.size()), header_texts.data(),
                           header_names.data()),
        "program creation");
  struct Destroy {
    nvrtcProgram* p;
    decltype(&::nvrtcDestroyProgram) fn;
    ~Destroy() { fn(p); }
  } destroy{&prog, lib.destroy};

  std::vector<const char*> opts;
  for (auto& o : out.options) opts.push_back(o.c_str());
  nvrtcResult result = lib.compile(prog, int(opts.size()), opts.data());
  size_t log_size = 0;
  lib.log_size(prog, &log_size);
  out.log.resize(log_size);
  if (log_size) lib.log(prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  // ptxas's report ("ptxas info : ...", "ptxas . ...") is not a warning: it becomes `resources`.
  {
    std::istringstream lines(out.log);
    std::string report, rest;
    static const std::regex info("^ptxas( info|\\s+\\.)");  // ptxas errors and warnings stay in the log
    for (std::string l; std::getline(lines, l);) (std::regex_search(l, info) ? report : rest) += l + "\n";
    while (!rest.empty() && rest.back() == '\n') rest.pop_back();
    out.resources = parse_ptxas_report(report, name);
    spdlog::trace("tilus: ptxas report for {}:\n{}", name, report);
    out.log = std::move(rest);
  }
  if (result != NVRTC_SUCCESS)
    throw NvrtcError(fmt::format("NVRTC could not compile kernel {} for {} ({}):\n{}{}", name, arch,
                                 lib.error_string(result), out.log, source_context(source, name, out.log)));
  size_t size = 0;
  check(lib.cubin_size(prog, &size), "cubin size query");
  out.cubin.resize(size);
  check(lib.cubin(prog, out.cubin.data()), "cubin retrieval");
  // Some NVRTC builds leave ptxas's report out of the log; the cubin still records the registers.
  if (out.resources.registers < 0) out.resources.registers = cubin_register_count(out.cubin, name);
  size_t ptx_size = 0;
  if (lib.ptx_size(prog, &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
    out.ptx.resize(ptx_size);
    if (lib.ptx(prog, out.ptx.data()) != NVRTC_SUCCESS) out.ptx.clear();
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  return out;
#endif
}

}  // namespace tilus
