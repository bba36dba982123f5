#include "tilus/codegen/nvrtc.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <fmt/ranges.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

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
  // Precompiled headers (NVRTC 12.8 and newer; null before, and then no PCH is used).
  nvrtcResult (*pch_create_status)(nvrtcProgram) = nullptr;
  nvrtcResult (*pch_heap_size_required)(nvrtcProgram, size_t*) = nullptr;
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
    n.pch_create_status = reinterpret_cast<decltype(n.pch_create_status)>(dlsym(h, "nvrtcGetPCHCreateStatus"));
    n.pch_heap_size_required =
        reinterpret_cast<decltype(n.pch_heap_size_required)>(dlsym(h, "nvrtcGetPCHHeapSizeRequired"));
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
  // -minimal (NVRTC 12.4+) leaves out of NVRTC's builtin header what tilus never uses (textures
  // and surfaces, cudadevrt, device-side launches, the runtime API's types): about 6 ms less
  // front end per compile on the dev machine, the same cubins (every example and golden, bit for
  // bit; tests/cpp/test_nvrtc.cpp).
  if (nvrtc_available() && nvrtc_version() >= 12040) options.push_back("-minimal");
#endif
  return options;
}

std::string KernelResources::str() const {
  return fmt::format("{} registers, {} bytes stack frame, {} bytes spill stores, {} bytes spill loads{}", registers,
                     stack_frame_bytes, spill_store_bytes, spill_load_bytes,
                     wgmma_serialized.empty() ? "" : ", wgmma serialized (" + wgmma_serialized + ")");
}

namespace {
// ELF64: the ".nv.info" section is a list of attributes {u8 format, u8 attribute, u16 size,
// payload}; the per-kernel ones of format 0x04 (sized) hold {u32 symbol, u32 value}:
// EIATTR_REGCOUNT (0x2f) the registers, EIATTR_FRAME_SIZE (0x11) the stack frame bytes.
int64_t cubin_kernel_attribute(const std::vector<char>& cubin, const std::string& kernel, uint8_t wanted) {
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
    if (format == 0x04 && attribute == wanted && size >= 8) {
      uint64_t symbol = u32(at + 4), value = u32(at + 8);
      uint64_t sym = u64(section(uint64_t(symtab), 0x18)) + symbol * 24;
      if (name_at(strtab, u32(sym)) == kernel) return int64_t(value);
    }
    at += 4 + size;
  }
  return -1;
}
}  // namespace

int cubin_register_count(const std::vector<char>& cubin, const std::string& kernel) {
  return int(cubin_kernel_attribute(cubin, kernel, 0x2f));
}
int64_t cubin_frame_bytes(const std::vector<char>& cubin, const std::string& kernel) {
  return cubin_kernel_attribute(cubin, kernel, 0x11);
}

void complete_resources_from_cubin(KernelResources& r, const std::vector<char>& cubin, const std::string& kernel) {
  if (r.registers < 0) r.registers = cubin_register_count(cubin, kernel);
  if (r.stack_frame_bytes < 0) r.stack_frame_bytes = cubin_frame_bytes(cubin, kernel);
  if (r.stack_frame_bytes == 0) {
    if (r.spill_store_bytes < 0) r.spill_store_bytes = 0;
    if (r.spill_load_bytes < 0) r.spill_load_bytes = 0;
  }
}

KernelResources parse_ptxas_report(const std::string& full, const std::string& kernel) {
  KernelResources r;
  std::smatch m;
  // ptxas names the function of a C7510 line, which comes before its "Compiling entry function".
  static const std::regex serialized("wgmma\\.mma_async instructions are serialized due to (.*) in the function '([^']*)'");
  for (auto it = std::sregex_iterator(full.begin(), full.end(), serialized); it != std::sregex_iterator(); ++it)
    if (kernel.empty() || (*it)[2] == kernel) r.wgmma_serialized = (*it)[1];
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

const char* to_string(PchUse use) {
  switch (use) {
    case PchUse::None: return "none";
    case PchUse::Created: return "created";
    case PchUse::Used: return "used";
  }
  return "?";
}

std::vector<std::string> device_header_defines(const std::string& source) {
  auto has = [&](const char* s) { return source.find(s) != std::string::npos; };
  bool bf16 = has("bfloat16") || has("bf16");
  bool fp16 = bf16 || has("half") || has("__h");
  std::vector<std::string> defines;
  if (!bf16) defines.push_back("-DTILUS_DEVICE_NO_BF16");
  if (!fp16) defines.push_back("-DTILUS_DEVICE_NO_FP16");
  return defines;
}

#ifdef TILUS_HAVE_NVRTC
namespace {

namespace fs = std::filesystem;

// --- precompiled headers ----------------------------------------------------------------------
// NVRTC (12.8+) writes a PCH with --create-pch=<file> and reads one with --use-pch=<file>. What it
// captures is the source's leading #include directives, so every tilus source (which starts with
// `#include "tilus/device.h"`) can share one per option set. Two properties of NVRTC 13.0 decide
// the design (measured; tests/cpp/test_nvrtc.cpp keeps them honest):
//  - A PCH holds pointers into NVRTC's PCH heap, which is mmapped wherever the kernel puts it:
//    another process (ASLR) rejects the file (warning #20282) and parses the headers itself. So a
//    PCH serves the process that made it (and its forks) only: the file is named after the host
//    and pid and removed at exit; files of dead processes are removed when a process makes its
//    first one.
//  - NVRTC does not check that the headers behind a PCH are unchanged (an edited tilus/device.h
//    would be silently ignored), and it crashes (SIGSEGV) on a corrupted file that passes its
//    heap check. So the file's name carries a hash of everything that went into it (NVRTC
//    version, options, header texts), and before each use the file must be the one this process
//    wrote (device, inode, size, mtime, ctime): anything else is not handed to NVRTC.

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
};

std::optional<FileIdentity> identity_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  FileIdentity id;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  std::string h;
  for (char* c = buf; *c; ++c) h += std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' ? *c : '_';
  return h.empty() ? "host" : h;
}

struct PchEntry {
  enum class State { Creating, Ready, Broken };
  State state = State::Creating;
  std::string path;
  FileIdentity identity;
  pid_t creator = 0;
};

// The process's PCH files, by what went into them. Removes the files this process made when it
// exits (a fork's copy of the registry leaves its parent's files alone).
struct PchRegistry {
  std::mutex mutex;
  std::map<std::string, PchEntry> entries;
  std::set<std::string> pruned_dirs, warned;
  ~PchRegistry() {
    for (auto& [key, e] : entries)
      if (e.creator == getpid() && e.state != PchEntry::State::Broken) {
        std::error_code ec;
        fs::remove(e.path, ec);
      }
  }
  static PchRegistry& get() {
    static PchRegistry registry;
    return registry;
  }
};

// Once per directory and process: removes this host's PCH files whose process is gone, and any
// PCH file untouched for a week (another host's, on a shared home directory).
void prune_pch_dir(const std::string& dir, const std::string& host) {
  std::error_code ec;
  static const std::regex name("tilus-[0-9a-f]{16}-(.+)-(\\d+)\\.pch");
  auto now = fs::file_time_type::clock::now();
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string file = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(file, m, name)) continue;
    long long pid = std::strtoll(m[2].str().c_str(), nullptr, 10);
    bool dead = m[1] == host && pid != getpid() && pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
    auto written = fs::last_write_time(it->path(), ec);
    bool old = !ec && now - written > std::chrono::hours(24 * 7);
    if (dead || old) fs::remove(it->path(), ec);
    ec.clear();
  }
}

// Whether the source starts (after comments and blank lines) with the device header's include,
// the prefix a PCH captures.
bool starts_with_device_include(const std::string& source) {
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line.compare(b, 2, "//") == 0) continue;
    return line.compare(b, std::string::npos, "#include \"tilus/device.h\"") == 0;
  }
  return false;
}

struct PchPlan {
  PchUse mode = PchUse::None;  // Created: this compile makes it; Used: it reads it
  std::string key, path;
};

void warn_pch_once(PchRegistry& r, const std::string& path, const std::string& message) {
  if (r.warned.insert(path).second) spdlog::warn("tilus: {}", message);
}

// Decides whether this compile makes the PCH, uses it, or goes without.
PchPlan plan_pch(const std::string& dir, const std::string& source, const std::vector<std::string>& options,
                 const std::vector<std::pair<std::string, std::string>>& headers) {
  PchPlan plan;
  if (dir.empty() || !nvrtc().pch_create_status || !starts_with_device_include(source)) return plan;
  std::string what = fmt::format("{}\n{}\n{}", dir, nvrtc_version(), fmt::join(options, "\n"));
  for (auto& [name, text] : headers) what += fmt::format("\n{}:{}\n{}:{}", name.size(), name, text.size(), text);
  static const std::string host = host_name();
  plan.key = what;
  plan.path = (fs::path(dir) / fmt::format("tilus-{:016x}-{}-{}.pch", fnv1a(what), host, getpid())).string();
  PchRegistry& r = PchRegistry::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.find(plan.key);
  if (it != r.entries.end()) {
    PchEntry& e = it->second;
    if (e.state != PchEntry::State::Ready) return plan;  // being made by another thread, or unusable
    auto now = identity_of(e.path);
    if (now && *now == e.identity) {
      plan.mode = PchUse::Used;
      plan.path = e.path;
      return plan;
    }
    // Deleted (the cache directory may be removed at any time): made again, quietly. Changed: a
    // file NVRTC could crash on; not used, made again, and said once.
    if (now)
      warn_pch_once(r, e.path,
                    fmt::format("the precompiled device header {} was changed by something other than this process; "
                                "not using it (a new one is made)",
                                e.path));
    else
      spdlog::debug("tilus: the precompiled device header {} is gone; making it again", e.path);
    std::error_code ec;
    if (now) fs::remove(e.path, ec);
    r.entries.erase(it);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    spdlog::debug("tilus: no precompiled device headers: cannot create {}", dir);
    r.entries[plan.key] = PchEntry{PchEntry::State::Broken, plan.path, {}, getpid()};
    return PchPlan{};
  }
  if (r.pruned_dirs.insert(dir).second) prune_pch_dir(dir, host);
  fs::remove(plan.path, ec);  // a leftover of a process that had this pid
  r.entries[plan.key] = PchEntry{PchEntry::State::Creating, plan.path, {}, getpid()};
  plan.mode = PchUse::Created;
  return plan;
}

// Records what became of the PCH the compile made or used.
void finish_pch(const PchPlan& plan, bool ok, bool pch_fault, bool used, const std::string& status,
                const std::string& why) {
  if (plan.mode == PchUse::None) return;
  PchRegistry& r = PchRegistry::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.entries.find(plan.key);
  if (it == r.entries.end()) return;
  PchEntry& e = it->second;
  if (plan.mode == PchUse::Used) {
    if (pch_fault || (ok && !used)) {
      e.state = PchEntry::State::Broken;
      warn_pch_once(r, e.path,
                    fmt::format("NVRTC could not use the precompiled device header {} ({}); compiling without one",
                                e.path, why.empty() ? "no reason given" : why));
    }
    return;
  }
  // Created.
  auto id = identity_of(e.path);
  if (ok && status.empty() && id) {
    e.state = PchEntry::State::Ready;
    e.identity = *id;
    spdlog::debug("tilus: made the precompiled device header {} ({} bytes)", e.path, id->size);
    return;
  }
  std::error_code ec;
  fs::remove(e.path, ec);
  if (!ok && !pch_fault) {  // the source was at fault: the next compile tries again
    r.entries.erase(it);
    return;
  }
  e.state = PchEntry::State::Broken;
  if (!ok)  // the compile failed for the PCH's sake (and succeeded without it): worth a word
    warn_pch_once(r, e.path,
                  fmt::format("NVRTC could not make the precompiled device header {} ({}); compiling without one "
                              "from now on (is the file system of the cache directory full? TILUS_NVRTC_PCH=0 "
                              "turns precompiled headers off)",
                              e.path, why.empty() ? "no reason given" : why));
  else
    spdlog::debug("tilus: no precompiled device header in {}: {}", e.path, !status.empty() ? status : why);
}

// Where NVRTC's --time report goes for one compile.
std::string time_file() {
  static std::atomic<uint64_t> counter{0};
  return (fs::temp_directory_path() / fmt::format("tilus-nvrtc-time-{}-{}.csv", getpid(), counter++)).string();
}

NvrtcTiming read_timing(const std::string& file) {
  NvrtcTiming t;
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);  // "File name, phase name, metric, unit"
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string c; std::getline(row, c, ',');) {
      size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(" \r");
      cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    if (cells.size() < 3) continue;
    double ms = std::strtod(cells[2].c_str(), nullptr);
    if (cells.size() > 3 && cells[3] == "s") ms *= 1000;
    t.phases.emplace_back(cells[1], ms);
    auto add = [&](double& field) { field = (field < 0 ? 0 : field) + ms; };
    if (cells[1] == "CUDA C++ Frontend") add(t.front_end_ms);
    else if (cells[1] == "NVVM Optimizer") add(t.optimizer_ms);
    else if (cells[1] == "PTX Translation") add(t.ptxas_ms);
  }
  std::error_code ec;
  fs::remove(file, ec);
  return t;
}

}  // namespace
#endif

std::vector<std::string> nvrtc_pch_files() {
  std::vector<std::string> files;
#ifdef TILUS_HAVE_NVRTC
  PchRegistry& r = PchRegistry::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [key, e] : r.entries)
    if (e.state == PchEntry::State::Ready) files.push_back(e.path);
#endif
  return files;
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& extra_options, const NvrtcCompileOptions& compile_options) {
#ifndef TILUS_HAVE_NVRTC
  throw NvrtcError(fmt::format("cannot compile {}: tilus was built without NVRTC (CUDA toolkit not found)", name));
#else
  if (!std::regex_match(arch, std::regex("sm_\\d+[af]?")))
    throw NvrtcError(fmt::format("cannot compile {}: arch '{}' is not of the form sm_<cc> (e.g. sm_80, sm_90a)", name, arch));
  const std::string what = fmt::format("compile kernel {}", name);  // a named string: no temporary behind the reference
  const Nvrtc& lib = need_nvrtc(what);
  NvrtcOutput out;
  out.options = nvrtc_options(arch);
  out.options.insert(out.options.end(), extra_options.begin(), extra_options.end());
  if (compile_options.minimal_header)
    for (auto& d : device_header_defines(source)) out.options.push_back(d);

  const auto& headers = compile_options.headers ? *compile_options.headers : device_headers();
  PchPlan plan = plan_pch(compile_options.pch_dir, source, out.options, headers);
  std::vector<std::string> run_options = out.options;
  if (plan.mode == PchUse::Created) run_options.push_back("--create-pch=" + plan.path);
  if (plan.mode == PchUse::Used) run_options.push_back("--use-pch=" + plan.path);
  if (plan.mode != PchUse::None) run_options.push_back("--pch-messages=true");
  std::string timing_file;
  if (compile_options.time_phases) {
    timing_file = time_file();
    run_options.push_back("--time=" + timing_file);
  }

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
  for (auto& o : run_options) opts.push_back(o.c_str());
  auto t0 = std::chrono::steady_clock::now();
  nvrtcResult result = lib.compile(prog, int(opts.size()), opts.data());
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!timing_file.empty()) out.timing = read_timing(timing_file);
  size_t log_size = 0;
  lib.log_size(prog, &log_size);
  out.log.resize(log_size);
  if (log_size) lib.log(prog, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  // ptxas's report ("ptxas info : ...", "ptxas . ...") is not a warning: it becomes `resources`.
  // NVRTC's PCH messages and warnings are tilus's business, not the kernel's: they leave the log.
  bool pch_used = false, pch_fault = false;
  std::string pch_why;
  {
    std::istringstream lines(out.log);
    std::string report, rest;
    static const std::regex info("^ptxas( info|\\s+\\.)");  // ptxas errors and warnings stay in the log
    static const std::regex pch_note("^\"[^\"]*\": (creating|using) precompiled header file ");
    bool other_warnings = false;
    std::vector<std::string> kept;
    for (std::string l; std::getline(lines, l);) {
      if (std::regex_search(l, info)) {
        report += l + "\n";
      } else if (std::smatch m; std::regex_search(l, m, pch_note)) {
        pch_used |= m[1] == "using";
      } else if (plan.mode != PchUse::None && l.find("precompiled header") != std::string::npos) {
        pch_fault = true;
        if (pch_why.empty()) pch_why = l;
      } else {
        other_warnings |= l.find("arning") != std::string::npos;
        kept.push_back(l);
      }
    }
    for (auto& l : kept)
      if (other_warnings || !(l.rfind("Remark: The warnings can be suppressed", 0) == 0)) rest += l + "\n";
    while (!rest.empty() && (rest.back() == '\n' || rest.front() == '\n')) {
      if (rest.back() == '\n') rest.pop_back();
      else rest.erase(0, 1);
    }
    out.resources = parse_ptxas_report(report, name);
    spdlog::trace("tilus: ptxas report for {}:\n{}", name, report);
    out.log = std::move(rest);
  }
  std::string status;
  if (plan.mode == PchUse::Created && result == NVRTC_SUCCESS) {
    nvrtcResult s = lib.pch_create_status(prog);
    if (s == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
      size_t need = 0;
      if (lib.pch_heap_size_required) lib.pch_heap_size_required(prog, &need);
      status = fmt::format("NVRTC's PCH heap is too small ({} bytes needed; nvrtcSetPCHHeapSize)", need);
    } else if (s != NVRTC_SUCCESS) {
      status = lib.error_string(s);
    }
  }
  if (result != NVRTC_SUCCESS && plan.mode != PchUse::None) {
    // A failure with a PCH in play: once more without one. When that compiles, the PCH failed
    // the compile (NVRTC could not write or map it: a full file system, a file-size limit, a PCH
    // it rejects), whatever its message said; otherwise the source did, and its error is the
    // compile's without the PCH.
    NvrtcCompileOptions without = compile_options;
    without.pch_dir.clear();
    NvrtcOutput plain;
    try {
      plain = nvrtc_compile(source, name, arch, extra_options, without);
    } catch (const NvrtcError&) {
      finish_pch(plan, false, false, pch_used, status, pch_why);
      throw;
    }
    if (pch_why.empty()) {  // the log's first line names what went wrong
      pch_why = out.log.substr(0, out.log.find('\n'));
      static const std::regex catastrophic("^Catastrophic error: ");
      pch_why = std::regex_replace(pch_why, catastrophic, "");
    }
    finish_pch(plan, false, true, pch_used, status, pch_why);
    return plain;
  }
  finish_pch(plan, result == NVRTC_SUCCESS, pch_fault, pch_used, status, pch_why);
  if (result == NVRTC_SUCCESS && (plan.mode == PchUse::Created ? status.empty() : pch_used)) {
    out.pch = plan.mode;
    out.pch_file = plan.path;
  }
  if (result != NVRTC_SUCCESS)
    throw NvrtcError(fmt::format("NVRTC could not compile kernel {} for {} ({}):\n{}{}", name, arch,
                                 lib.error_string(result), out.log, source_context(source, name, out.log)));
  size_t size = 0;
  check(lib.cubin_size(prog, &size), "cubin size query");
  out.cubin.resize(size);
  check(lib.cubin(prog, out.cubin.data()), "cubin retrieval");
  // Some NVRTC builds leave ptxas's report out of the log; the cubin still records the registers
  // and the stack frame.
  complete_resources_from_cubin(out.resources, out.cubin, name);
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
