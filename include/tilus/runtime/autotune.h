// Autotuning from C++: the equivalent of Python's @tilus.autotune (docs/python.md).
//
//   tilus::TuneSpace space;
//   space.add("block_m, block_n", {{64, 128}, {128, 128}}).add("stages", {{2}, {3}});
//   tilus::Autotuned<MatmulPipelined> kernel("MatmulPipelined", space, [](const tilus::TuneConfig& c) {
//     MatmulPipelined k;
//     k.block_m = c.at("block_m"); k.block_n = c.at("block_n"); k.stages = c.at("stages");
//     return k;
//   });
//   kernel({m, n, k, a.arg(), b.arg(), c.arg()});   // tunes on the first call for this key
//
// The first call for a tuning key compiles every config in parallel threads, skips the ones
// that fail to compile or launch, times the rest with CUDA events after an L2 flush (median of
// `repeat` runs) and launches the fastest; the winner and all timings are written atomically to
// <cache dir>/autotune/<hash>.txt, so a later process launches the winner with no tuning. The
// key: the script name, the specialization facts, every integer argument bucketed to the next
// power of two, the GPU name and arch, the driver and NVRTC versions and the tilus version.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "tilus/lang/script.h"
#include "tilus/runtime/jit.h"

namespace tilus {

using TuneConfig = std::map<std::string, int64_t>;

class TuneSpace {
 public:
  // Names ("a, b") and their points (each as many values as names). CompileError for an empty
  // list, a point of the wrong length or a name already tuned.
  TuneSpace& add(const std::string& names, std::vector<std::vector<int64_t>> points,
                 std::source_location loc = std::source_location::current());
  // The product of the dimensions, with `fixed` names projected out.
  std::vector<TuneConfig> configs(const TuneConfig& fixed = {}) const;

 private:
  std::vector<std::pair<std::vector<std::string>, std::vector<std::vector<int64_t>>>> dims_;
};

// The tuning bucket of an integer size: the next power of two (0 and 1 stay themselves).
int64_t tune_bucket(int64_t n);

struct TuneResult {
  TuneConfig config;
  std::optional<double> ms;  // empty: skipped
  std::string error;
};

struct TuneEntry {
  std::string key;       // the full key text
  TuneConfig winner;
  std::vector<TuneResult> results;
  double tuning_s = 0;
};

// The key text of a launch (see the header comment); `arch` empty: the current GPU.
std::string tune_key(const std::string& script, const std::vector<KernelArg>& args, const std::string& arch);
// Persistence (<cache dir>/autotune/<hash of key>.txt). load() returns nothing for a missing,
// corrupt or stale (different key) entry.
void store_tune_entry(const TuneEntry& e, const std::string& cache_dir);
std::optional<TuneEntry> load_tune_entry(const std::string& key, const std::string& cache_dir);
// A table of configs and times, the winner marked.
std::string tune_report(const TuneEntry& e);

struct TuneOptions {
  int repeat = 10;
  std::string arch;  // "" = the current GPU; set to compile only (with `timer`) on machines without one
  std::function<double(const TuneConfig&)> timer;  // replaces GPU timing (tests)
  std::string cache_dir;  // "" = default_cache().dir()
};

// Tunes one call: `programs[i]` is the traced program of `configs[i]`.
TuneEntry tune(const std::string& key, const std::vector<TuneConfig>& configs, const std::vector<Program>& programs,
               const std::vector<KernelArg>& args, const TuneOptions& opts);

template <class K>
class Autotuned {
 public:
  Autotuned(std::string name, TuneSpace space, std::function<K(const TuneConfig&)> make, TuneOptions opts = {})
      : name_(std::move(name)), configs_(space.configs()), make_(std::move(make)), opts_(std::move(opts)) {}

  void operator()(const std::vector<KernelArg>& args, Stream stream = nullptr) {
    JitKernel<K>& k = winner(args);
    if (opts_.arch.empty()) k(args, stream);
  }

  // The kernel that runs for these arguments (tuning first if needed).
  JitKernel<K>& winner(const std::vector<KernelArg>& args) {
    std::string key = tune_key(name_, args, opts_.arch);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = winners_.find(key);
    if (it != winners_.end()) return *it->second;
    std::string dir = opts_.cache_dir.empty() ? default_cache().dir() : opts_.cache_dir;
    std::optional<TuneEntry> entry = load_tune_entry(key, dir);
    if (!entry) {
      std::vector<Program> programs;
      for (auto& c : configs_) {
        Program p = trace(make_(c));
        for (auto& [index, d] : specialization_of(args))
          if (index < int(p.kernels[0].params.size())) p.kernels[0].param_divisibility[index] = d;
        programs.push_back(std::move(p));
      }
      entry = tune(key, configs_, programs, args, opts_);
      store_tune_entry(*entry, dir);
    }
    entries_[key] = *entry;
    JitOptions jo;
    jo.arch = opts_.arch;
    auto k = std::make_unique<JitKernel<K>>(make_(entry->winner), jo);
    return *(winners_[key] = std::move(k));
  }

  // The tuning results of a key this object tuned or loaded.
  const TuneEntry* entry(const std::vector<KernelArg>& args) const {
    auto it = entries_.find(tune_key(name_, args, opts_.arch));
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  std::string name_;
  std::vector<TuneConfig> configs_;
  std::function<K(const TuneConfig&)> make_;
  TuneOptions opts_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<JitKernel<K>>> winners_;
  std::map<std::string, TuneEntry> entries_;
};

}  // namespace tilus
