#include "tilus/runtime/autotune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "tilus/codegen/nvrtc.h"

namespace tilus {

namespace {

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

std::string config_str(const TuneConfig& c) {
  std::string s;
  for (auto& [k, v] : c) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

TuneConfig parse_config(std::istringstream& in) {
  TuneConfig c;
  std::string item;
  while (in >> item) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw std::runtime_error("bad config item");
    c[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
  }
  return c;
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

}  // namespace

TuneSpace& TuneSpace::add(const std::string& names, std::vector<std::vector<int64_t>> points, std::source_location loc) {
  SourceLoc where = SourceLoc::from(loc);
  auto ns = split_names(names);
  if (ns.empty()) throw CompileError("autotune: no parameter names", where);
  if (points.empty()) throw CompileError(fmt::format("autotune({}): an empty list of values", names), where);
  for (auto& p : points)
    if (p.size() != ns.size())
      throw CompileError(fmt::format("autotune({}): a point has {} values, expected {}", names, p.size(), ns.size()),
                         where);
  for (auto& [prior, _] : dims_)
    for (auto& n : ns)
      if (std::find(prior.begin(), prior.end(), n) != prior.end())
        throw CompileError(fmt::format("autotune: '{}' is already tuned by another dimension", n), where);
  dims_.emplace_back(std::move(ns), std::move(points));
  return *this;
}

std::vector<TuneConfig> TuneSpace::configs(const TuneConfig& fixed) const {
  std::vector<TuneConfig> out{fixed};
  for (auto& [names, points] : dims_) {
    std::vector<TuneConfig> next;
    std::set<std::vector<int64_t>> seen;
    for (auto& p : points) {
      std::vector<int64_t> projected;
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

int64_t tune_bucket(int64_t n) {
  if (n <= 1) return n;
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

std::string tune_key(const std::string& script, const std::vector<KernelArg>& args, const std::string& arch) {
  std::string sizes;
  for (auto& a : args)
    if (a.kind == KernelArg::Kind::Int) sizes += fmt::format("{}{}", sizes.empty() ? "" : ",", tune_bucket(a.i));
  std::string gpu;
  if (arch.empty()) {
    const DeviceInfo& d = current_device();
    gpu = fmt::format("gpu={} arch={} driver={}", d.name, d.arch(), d.driver_version);
  } else {
    gpu = fmt::format("gpu=compile-only arch={} driver=0", arch);
  }
  return fmt::format("script={} specialization={} sizes=[{}] {} nvrtc={} tilus={}", script,
                     specialization_key(specialization_of(args)), sizes, gpu,
                     nvrtc_available() ? nvrtc_version() : 0, TILUS_VERSION);
}

void store_tune_entry(const TuneEntry& e, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::path(cache_dir) / "autotune";
  fs::create_directories(dir, ec);
  fs::path final_path = dir / (hash_hex(e.key) + ".txt");
  fs::path tmp = dir / fmt::format(".tmp-{}-{}", hash_hex(e.key), std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp);
    if (!out) return;  // an unwritable cache: the winner is simply not remembered
    out << "tilus-autotune 1\n" << "key " << e.key << "\n" << "tuning_s " << fmt::format("{:.6f}", e.tuning_s) << "\n";
    out << "winner " << config_str(e.winner) << "\n";
    for (auto& r : e.results) {
      if (r.ms) out << "result " << fmt::format("{:.6f}", *r.ms) << " " << config_str(r.config) << "\n";
      else out << "skipped " << config_str(r.config) << "\n";
    }
    out << "end\n";
  }
  fs::rename(tmp, final_path, ec);
}

std::optional<TuneEntry> load_tune_entry(const std::string& key, const std::string& cache_dir) {
  std::ifstream in(std::filesystem::path(cache_dir) / "autotune" / (hash_hex(key) + ".txt"));
  if (!in) return std::nullopt;
  TuneEntry e;
  std::string line;
  bool complete = false;
  try {
    if (!std::getline(in, line) || line != "tilus-autotune 1") return std::nullopt;
    while (std::getline(in, line)) {
      if (line == "end") {
        complete = true;
        break;
      }
      size_t sp = line.find(' ');
      std::string tag = line.substr(0, sp), rest = sp == std::string::npos ? "" : line.substr(sp + 1);
      std::istringstream s(rest);
      if (tag == "key") e.key = rest;
      else if (tag == "tuning_s") s >> e.tuning_s;
      else if (tag == "winner") e.winner = parse_config(s);
      else if (tag == "result") {
        TuneResult r;
        double ms;
        s >> ms;
        r.ms = ms;
        r.config = parse_config(s);
        e.results.push_back(r);
      } else if (tag == "skipped") {
        TuneResult r;
        r.config = parse_config(s);
        r.error = "skipped";
        e.results.push_back(r);
      }
    }
  } catch (const std::exception&) {
    return std::nullopt;  // corrupt: retune
  }
  if (!complete || e.key != key || e.winner.empty()) return std::nullopt;
  return e;
}

std::string tune_report(const TuneEntry& e) {
  std::string out = fmt::format("{} (tuned in {:.2f} s)\n", e.key, e.tuning_s);
  std::vector<const TuneResult*> rows;
  for (auto& r : e.results) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) {
    return a->ms.value_or(1e300) < b->ms.value_or(1e300);
  });
  for (auto* r : rows)
    out += fmt::format("  {} {}  {}\n", r->config == e.winner ? "*" : " ", config_str(r->config),
                       r->ms ? fmt::format("{:.4f} ms", *r->ms) : "skipped: " + r->error);
  return out;
}

TuneEntry tune(const std::string& key, const std::vector<TuneConfig>& configs, const std::vector<Program>& programs,
               const std::vector<KernelArg>& args, const TuneOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  TuneEntry e;
  e.key = key;
  size_t n = configs.size();
  std::vector<std::optional<CompiledKernel>> compiled(n);
  std::vector<std::string> errors(n);
  std::string arch = opts.arch.empty() ? current_device().arch() : opts.arch;
  // Compile in parallel (NVRTC is thread-safe); each worker takes the next config.
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        compiled[i] = compile_program(programs[i], arch, &default_cache());
      } catch (const Error& err) {
        errors[i] = err.what();
      }
    }
  };
  unsigned threads = std::max(1u, std::min<unsigned>(unsigned(n), std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  std::unique_ptr<DeviceBuffer> flush;
  for (size_t i = 0; i < n; ++i) {
    TuneResult r;
    r.config = configs[i];
    r.error = errors[i];
    if (compiled[i]) {
      try {
        if (opts.timer) {
          r.ms = opts.timer(configs[i]);
        } else {
          Launcher launcher(*compiled[i]);
          if (!flush) flush = std::make_unique<DeviceBuffer>(dtypes::uint8, int64_t(256) << 20);
          launcher.launch(args);
          synchronize();
          std::vector<double> times;
          EventTimer timer;
          for (int k = 0; k < std::max(1, opts.repeat); ++k) {
            device_memset(flush->ptr(), uint8_t(k), size_t(flush->bytes()));
            timer.start();
            launcher.launch(args);
            times.push_back(timer.stop_ms());
          }
          std::sort(times.begin(), times.end());
          r.ms = times[times.size() / 2];
        }
      } catch (const Error& err) {
        r.error = err.what();
      }
    }
    e.results.push_back(std::move(r));
  }
  const TuneResult* best = nullptr;
  for (auto& r : e.results)
    if (r.ms && (!best || *r.ms < *best->ms)) best = &r;
  if (!best) {
    std::string list;
    for (auto& r : e.results) list += fmt::format("\n  {}: {}", config_str(r.config), r.error);
    throw CompileError(fmt::format("autotune: no config compiled and ran:{}", list));
  }
  e.winner = best->config;
  e.tuning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace tilus
