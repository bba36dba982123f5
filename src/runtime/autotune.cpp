#include "tilus/runtime/autotune.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "tilus/codegen/nvrtc.h"

namespace tilus {

const std::string& l2_flush_source() {
  // Each thread xors 16-byte words of the buffer with a stride of the grid; the one store is
  // guarded by a test of the (zero) buffer's xor that never holds, so the loads stay and
  // nothing is written.
  static const std::string src = R"(extern "C" __global__ void tilus_l2_flush(const uint4* __restrict__ p, unsigned long long n,
                                           unsigned* sink) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
)";
  return src;
}

namespace {

// 3: timed after a clean L2 flush (a read; 2 flushed by a fill): winners timed under a fill are
// tuned again.
constexpr const char* kHeader = "tilus-autotune 3";

// The L2 flush before each timed launch on the GPU: a kernel that reads a 256 MB buffer (zeroed
// once) and stores nothing, so that L2 is left holding clean lines, as bench/run.py's flush does.
// A fill (cuMemset) would leave L2 full of dirty lines, whose write-back slows the timed kernel's
// own reads: on an H200 a plain read of 34 MB ran 20-23 % slower after a fill than after a read,
// a W4A16 kernel 5-8 % (README, "Latest figures"), so a fill would time memory-bound configs
// under conditions they never meet behind ordinary kernels.
class CleanL2Flush {
 public:
  static constexpr int64_t kBytes = int64_t(256) << 20;
  CleanL2Flush() : buffer_(dtypes::uint8, kBytes), sink_(dtypes::uint32, 1) {
    device_memset(buffer_.ptr(), 0, size_t(kBytes));
    // compiled once a process (the device's arch does not change), loaded once a tuning
    static const std::vector<char> cubin =
        nvrtc_compile(l2_flush_source(), "tilus_l2_flush", current_device().arch()).cubin;
    module_ = std::make_unique<LoadedModule>(cubin, "tilus_l2_flush", 0);
    synchronize();
  }
  void run() const {
    DevicePtr p = buffer_.ptr(), sink = sink_.ptr();
    uint64_t n = uint64_t(kBytes / 16);
    void* args[] = {&p, &n, &sink};
    const uint32_t grid[3] = {uint32_t(std::max(1, current_device().multiprocessors) * 4), 1, 1};
    module_->launch(grid, 512, args, nullptr);
  }

 private:
  DeviceBuffer buffer_, sink_;
  std::unique_ptr<LoadedModule> module_;
};

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    size_t b = cur.find_first_not_of(" \t"), e = cur.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(cur.substr(b, e - b + 1));
    cur.clear();
  };
  for (char c : names) {
    if (c == ',') flush();
    else cur += c;
  }
  flush();
  return out;
}

// The stored format is line based: text that ends a line (a key, an error) escapes `\` and
// line breaks; a config is space-separated name=value tokens, whose values also escape spaces
// and tabs (a tab separates a skipped config from its error).
std::string escape(const std::string& s, bool token) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += token ? "\\t" : "\t"; break;
      case ' ': out += token ? "\\s" : " "; break;
      default: out += c;
    }
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) throw std::runtime_error("a dangling escape");
    switch (s[i]) {
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 's': out += ' '; break;
      default: throw std::runtime_error("an unknown escape");
    }
  }
  return out;
}

std::string config_tokens(const TuneConfig& c) {
  std::string s;
  for (auto& [k, v] : c) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, escape(v.text(), true));
  return s;
}

TuneConfig parse_config(const std::string& text) {
  TuneConfig c;
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw std::runtime_error("a config item without a name");
    c[item.substr(0, eq)] = TuneValue::from_text(unescape(item.substr(eq + 1)));
  }
  return c;
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) : line;
}

std::string hash_hex(const std::string& s) {
  // FNV-1a, twice with different seeds: a file name, not a security boundary.
  uint64_t a = 1469598103934665603ull, b = 1099511628211ull * 31;
  for (unsigned char c : s) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0x100000001b3ull + 7;
  }
  return fmt::format("{:016x}{:016x}", a, b);
}

std::string text_of(const TuneConfig& c) {
  std::string s;
  for (auto& [k, v] : c) s += fmt::format("{}{}={}", s.empty() ? "" : ", ", k, v.text());
  return "{" + s + "}";
}

// "compile 3/16" on a terminal, redrawn in place.
class Progress {
 public:
  Progress(std::string name, size_t total) : name_(std::move(name)), total_(total), tty_(isatty(2)) {}
  ~Progress() { finish(); }
  void finish() {
    if (tty_ && shown_) std::fputs("\n", stderr);
    shown_ = false;
  }
  void show(const char* what, size_t done) {
    if (!tty_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::fprintf(stderr, "\rtilus autotune %s: %s %zu/%zu   ", name_.c_str(), what, done, total_);
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  std::string name_;
  size_t total_;
  bool tty_, shown_ = false;
  std::mutex mutex_;
};

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TuneValue::TuneValue(int64_t v) : text_(std::to_string(v)) {}

TuneValue TuneValue::from_text(std::string text) {
  TuneValue v;
  v.text_ = std::move(text);
  return v;
}

int64_t TuneValue::as_int() const {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), v);
  if (ec != std::errc() || end != text_.data() + text_.size() || text_.empty())
    throw CompileError(fmt::format("autotune: the value {} is not an integer", text_));
  return v;
}

std::string to_string(const TuneConfig& c) {
  std::string s;
  for (auto& [k, v] : c) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v.text());
  return s;
}

TuneSpace& TuneSpace::add(const std::string& names, std::vector<std::vector<TuneValue>> points,
                          std::source_location loc) {
  return add(names, std::move(points), SourceLoc::from(loc));
}

TuneSpace& TuneSpace::add(const std::string& names, std::vector<std::vector<TuneValue>> points, SourceLoc where) {
  auto ns = split_names(names);
  if (ns.empty()) throw CompileError("autotune: no parameter names", where);
  for (size_t i = 0; i < ns.size(); ++i)
    if (std::find(ns.begin(), ns.begin() + i, ns[i]) != ns.begin() + i)
      throw CompileError(fmt::format("autotune: '{}' is repeated in ({})", ns[i], names), where);
  if (points.empty()) throw CompileError(fmt::format("autotune({}): an empty list of values", names), where);
  for (auto& p : points)
    if (p.size() != ns.size()) {
      std::string value;
      for (auto& v : p) value += (value.empty() ? "" : ", ") + v.text();
      throw CompileError(fmt::format("autotune({}): value ({}) has {} entries, expected {}", names, value, p.size(),
                                     ns.size()),
                         where);
    }
  for (auto& [prior, _] : dims_)
    for (auto& n : ns)
      if (std::find(prior.begin(), prior.end(), n) != prior.end())
        throw CompileError(fmt::format("autotune: '{}' is already tuned by another decorator or dimension", n), where);
  dims_.emplace_back(std::move(ns), std::move(points));
  return *this;
}

std::vector<TuneConfig> TuneSpace::configs(const TuneConfig& fixed) const {
  std::vector<TuneConfig> out{fixed};
  for (auto& [names, points] : dims_) {
    std::vector<TuneConfig> next;
    std::set<std::vector<TuneValue>> seen;
    for (auto& p : points) {
      std::vector<TuneValue> projected;
      for (size_t i = 0; i < names.size(); ++i)
        if (!fixed.count(names[i])) projected.push_back(p[i]);
      if (!seen.insert(projected).second) continue;
      for (const TuneConfig& base : out) {
        TuneConfig c = base;
        for (size_t i = 0; i < names.size(); ++i)
          if (!fixed.count(names[i])) c[names[i]] = p[i];
        next.push_back(std::move(c));
      }
    }
    out = std::move(next);
  }
  return out;
}

std::vector<std::string> TuneSpace::names() const {
  std::vector<std::string> out;
  for (auto& [names, _] : dims_) out.insert(out.end(), names.begin(), names.end());
  return out;
}

int64_t tune_bucket(int64_t n) {
  if (n <= 1) return n;
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

bool tune_compile_only(const TuneOptions& opts) { return !opts.arch.empty() && opts.arch != "cpu"; }

std::string tune_space_id(const std::vector<TuneConfig>& configs) {
  std::string space;
  for (auto& c : configs) space += config_tokens(c) + "\n";
  return hash_hex(space);
}

std::string tune_key(const std::string& script, const std::vector<KernelArg>& args, const std::string& arch,
                     const std::string& space, const TuneConfig& fixed, const TuneConfig& constants) {
  std::string sizes;
  for (auto& a : args)
    if (a.kind == KernelArg::Kind::Int) sizes += fmt::format("{}{}", sizes.empty() ? "" : ",", tune_bucket(a.i));
  std::string device;
  if (arch.empty()) {
    const DeviceInfo& d = current_device();
    device = fmt::format("device={} arch={} driver={}", d.name, d.arch(), d.driver_version);
  } else if (arch == "cpu") {
    device = "device=cpu arch=cpu driver=0";
  } else {
    device = fmt::format("device=compile-only arch={} driver=0", arch);
  }
  return fmt::format("script={} space={} fixed={} constants={} specialization={} sizes=[{}] {} nvrtc={} tilus={}",
                     script, space, text_of(fixed), text_of(constants),
                     specialization_key(specialization_of(args)), sizes, device,
                     nvrtc_available() ? nvrtc_version() : 0, TILUS_VERSION);
}

void store_tune_entry(const TuneEntry& e, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::path(cache_dir) / "autotune";
  fs::create_directories(dir, ec);
  fs::path final_path = dir / (hash_hex(e.key) + ".txt");
  fs::path tmp = dir / fmt::format(".tmp-{}-{}-{}", hash_hex(e.key), getpid(),
                                   std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp);
    if (!out) {
      spdlog::warn("tilus: autotune results not saved: cannot write {}", tmp.string());
      return;  // the winner is simply not remembered
    }
    out << kHeader << "\n"
        << "key " << escape(e.key, false) << "\n"
        << fmt::format("compile_s {:.6f}\ntuning_s {:.6f}\n", e.compile_s, e.tuning_s)
        << "winner " << config_tokens(e.winner) << "\n";
    for (auto& r : e.results) {
      if (r.ms) out << fmt::format("result {:.6f} {}\n", *r.ms, config_tokens(r.config));
      else out << "skipped " << config_tokens(r.config) << "\t" << escape(r.error, false) << "\n";
    }
    out << "end\n";
  }
  fs::rename(tmp, final_path, ec);
  if (ec) fs::remove(tmp, ec);
}

std::optional<TuneEntry> load_tune_entry(const std::string& key, const std::string& cache_dir) {
  std::ifstream in(std::filesystem::path(cache_dir) / "autotune" / (hash_hex(key) + ".txt"));
  if (!in) return std::nullopt;
  TuneEntry e;
  std::string line;
  bool complete = false, has_winner = false;
  try {
    if (!std::getline(in, line) || line != kHeader) return std::nullopt;
    while (std::getline(in, line)) {
      if (line == "end") {
        complete = true;
        break;
      }
      size_t sp = line.find(' ');
      std::string tag = line.substr(0, sp), rest = sp == std::string::npos ? "" : line.substr(sp + 1);
      if (tag == "key") {
        e.key = unescape(rest);
      } else if (tag == "compile_s") {
        e.compile_s = std::stod(rest);
      } else if (tag == "tuning_s") {
        e.tuning_s = std::stod(rest);
      } else if (tag == "winner") {
        e.winner = parse_config(rest);
        has_winner = true;
      } else if (tag == "result") {
        size_t end = 0;
        TuneResult r;
        r.ms = std::stod(rest, &end);
        r.config = parse_config(rest.substr(end));
        e.results.push_back(std::move(r));
      } else if (tag == "skipped") {
        size_t tab = rest.find('\t');
        if (tab == std::string::npos) return std::nullopt;
        TuneResult r;
        r.config = parse_config(rest.substr(0, tab));
        r.error = unescape(rest.substr(tab + 1));
        e.results.push_back(std::move(r));
      } else {
        return std::nullopt;  // not this format
      }
    }
  } catch (const std::exception&) {
    return std::nullopt;  // corrupt: retune
  }
  // The winner must be a config that ran: anything else is an entry no tuning wrote.
  bool winner_ran = false;
  for (auto& r : e.results) winner_ran |= r.ms && r.config == e.winner;
  if (!complete || e.key != key || !has_winner || !winner_ran) return std::nullopt;
  return e;
}

std::string tune_report(const TuneEntry& e) {
  std::string out = fmt::format("{} (tuned in {:.2f} s, compile {:.2f} s)\n", e.key, e.tuning_s, e.compile_s);
  std::vector<const TuneResult*> rows;
  for (auto& r : e.results) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) {
    return a->ms.value_or(1e300) < b->ms.value_or(1e300);
  });
  for (auto* r : rows)
    out += fmt::format("  {} {}  {}\n", r->config == e.winner ? "*" : " ", to_string(r->config),
                       r->ms ? fmt::format("{:.4f} ms", *r->ms) : "skipped: " + r->error);
  return out;
}

TuneEntry tune(const std::string& key, const std::vector<TuneConfig>& configs, const TraceConfig& trace,
               const std::vector<KernelArg>& args, const TuneOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  TuneEntry e;
  e.key = key;
  size_t n = configs.size();
  bool on_cpu = opts.arch == "cpu";
  std::string arch = opts.arch.empty() ? current_device().arch() : opts.arch;
  std::map<int, int64_t> facts = specialization_of(args);
  std::vector<std::unique_ptr<Launcher>> gpu_kernels(n);
  std::vector<std::shared_ptr<const CpuKernel>> cpu_kernels(n);
  std::vector<std::string> errors(n);
  Progress progress(opts.name, n);

  // Trace and compile in parallel (tracing is per thread, NVRTC and ORC are thread-safe); each
  // worker takes the next config. Errors of tilus skip the config; anything else (a bug in a
  // front end's callback) stops the tuning once every worker is done.
  std::atomic<size_t> next{0}, done{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        Program p = trace(configs[i]);
        specialize(p, facts);
        if (on_cpu) cpu_kernels[i] = CpuKernel::compile(p, opts.cpu);
        else gpu_kernels[i] = std::make_unique<Launcher>(compile_program(p, arch, &default_cache()));
      } catch (const Error& err) {
        errors[i] = first_line(err.what());
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        errors[i] = "failed";
      }
      progress.show("compile", ++done);
    }
  };
  unsigned threads = std::max(1u, std::min<unsigned>(unsigned(n), std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  e.compile_s = seconds_since(t0);

  // The configs run on copies of the arrays a config writes (each restored before the config
  // runs), so that tuning leaves the caller's data as it was (a kernel that updates a state in
  // place, or accumulates into its output, must not see the candidates' launches).
  std::vector<bool> written(args.size(), false);
  for (size_t i = 0; i < n; ++i) {
    const KernelSource* s = gpu_kernels[i] ? &gpu_kernels[i]->kernel().source
                            : cpu_kernels[i] ? &cpu_kernels[i]->signature()
                                             : nullptr;
    for (size_t j = 0; s && j < s->params.size() && j < args.size(); ++j)
      written[j] = written[j] || s->params[j].contract.writes();
  }
  std::vector<KernelArg> bench_args = args;
  std::vector<std::pair<size_t, std::unique_ptr<DeviceBuffer>>> copies;
  for (size_t j = 0; j < args.size() && !opts.timer; ++j) {
    if (!written[j] || args[j].kind != KernelArg::Kind::Pointer || args[j].bytes <= 0) continue;
    auto copy = std::make_unique<DeviceBuffer>(dtypes::uint8, args[j].bytes, on_cpu ? Backend::Cpu : Backend::Gpu);
    bench_args[j].ptr = copy->ptr();
    copies.emplace_back(j, std::move(copy));
  }
  auto restore = [&] {
    for (auto& [j, copy] : copies) {
      if (on_cpu) std::memcpy(reinterpret_cast<void*>(copy->ptr()), reinterpret_cast<const void*>(args[j].ptr), size_t(args[j].bytes));
      else copy_on_device(copy->ptr(), args[j].ptr, size_t(args[j].bytes));
    }
  };

  // Timed in rounds, every config once a round (each after a warm-up launch), rather than one
  // config's runs in a row: a GPU's clock follows its recent load, so a config timed first (on a
  // cold, boosting GPU) or last would gain or lose against the others by when it ran. Each launch
  // runs on restored copies after an L2 flush (CleanL2Flush: a 256 MB read); a config that fails
  // to launch drops out with its error.
  std::unique_ptr<CleanL2Flush> flush;
  int repeat = std::max(1, opts.repeat);
  e.results.resize(n);
  std::vector<std::vector<double>> times(n);
  auto run = [&](size_t i, int round) {  // round -1: the warm-up, untimed
    TuneResult& r = e.results[i];
    if (!r.error.empty()) return;
    try {
      if (opts.timer) {
        if (round == 0) times[i].push_back(opts.timer(configs[i]));
        return;
      }
      restore();
      if (on_cpu) {
        auto start = std::chrono::steady_clock::now();
        cpu_kernels[i]->launch(bench_args);
        if (round >= 0) times[i].push_back(seconds_since(start) * 1e3);
        return;
      }
      const Launcher& launcher = *gpu_kernels[i];
      if (round < 0) {
        launcher.launch(bench_args);
        synchronize();
        return;
      }
      if (!flush) flush = std::make_unique<CleanL2Flush>();
      flush->run();
      EventTimer timer;
      timer.start();
      launcher.launch(bench_args);
      times[i].push_back(timer.stop_ms());
    } catch (const Error& err) {
      r.error = first_line(err.what());
    }
  };
  size_t benched = 0;
  for (size_t i = 0; i < n; ++i) {
    e.results[i].config = configs[i];
    e.results[i].error = errors[i];
    if (errors[i].empty()) progress.show("bench", ++benched);
    run(i, -1);
  }
  for (int round = 0; round < (opts.timer ? 1 : repeat); ++round)
    for (size_t i = 0; i < n; ++i) run(i, round);
  for (size_t i = 0; i < n; ++i)
    if (e.results[i].error.empty() && !times[i].empty()) e.results[i].ms = median(std::move(times[i]));

  progress.finish();

  const TuneResult* best = nullptr;
  std::vector<const TuneResult*> skipped;
  for (auto& r : e.results) {
    if (r.ms && (!best || *r.ms < *best->ms)) best = &r;
    if (!r.ms) skipped.push_back(&r);
  }
  if (!best) {
    std::string list;
    for (auto& r : e.results) list += fmt::format("\n  {}: {}", to_string(r.config), r.error);
    throw CompileError(fmt::format("autotune {}: no config compiled and ran:{}", opts.name, list), opts.where);
  }
  if (!skipped.empty()) {
    std::string list;
    for (auto* r : skipped) list += fmt::format("  {}: {}\n", to_string(r->config), r->error);
    std::fprintf(stderr, "tilus autotune %s: skipped %zu of %zu configs:\n%s", opts.name.c_str(), skipped.size(), n,
                 list.c_str());
  }
  e.winner = best->config;
  e.tuning_s = seconds_since(t0);
  return e;
}

}  // namespace tilus
