// Autotuning: the one tuner behind Python's @tilus.autotune (docs/python.md) and C++'s
// Autotuned (docs/gpu.md).
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
// The first call for a tuning key traces and compiles every config in parallel threads, skips
// (and lists on stderr) the ones that fail to trace, compile or launch, times the rest with
// CUDA events after a clean L2 flush (a 256 MB read, l2_flush_source; median of `repeat` runs
// taken in rounds, every config once a round; the CPU backend: the wall clock) and
// launches the fastest; the winner and all timings are written atomically to
// <cache dir>/autotune/<hash>.txt (the format: docs/gpu.md), so a later process launches the
// winner with no tuning. The key: the script name, the space, the caller-fixed hyperparameters,
// the compile-time constants, the specialization facts, every integer argument bucketed to the
// next power of two, the device (GPU name and arch, or the CPU backend), the driver and NVRTC
// versions and the tilus version.
#pragma once

#include <compare>
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <source_location>
#include <string>
#include <vector>

#include "tilus/lang/script.h"
#include "tilus/runtime/jit.h"

namespace tilus {

// One hyperparameter value in its stored form: the text of a literal. C++ integers are their
// decimal text and convert back implicitly (`k.block_m = config.at("block_m")`); the Python
// front end stores repr() of any constant (64, True, 'row', (1, 2)) and maps the text back to
// the value of its space.
class TuneValue {
 public:
  TuneValue() = default;
  TuneValue(int64_t v);  // NOLINT: implicit, so spaces and configs are written with plain ints
  static TuneValue from_text(std::string text);

  const std::string& text() const { return text_; }
  // The integer the text spells; CompileError when it spells something else.
  int64_t as_int() const;
  operator int64_t() const { return as_int(); }  // NOLINT: implicit, see above

  friend bool operator==(const TuneValue&, const TuneValue&) = default;
  friend auto operator<=>(const TuneValue&, const TuneValue&) = default;
  template <std::integral T>
  friend bool operator==(const TuneValue& a, T b) {
    return a == TuneValue(int64_t(b));
  }
  friend std::ostream& operator<<(std::ostream& os, const TuneValue& v) { return os << v.text_; }

 private:
  std::string text_;
};

using TuneConfig = std::map<std::string, TuneValue>;
std::string to_string(const TuneConfig& c);  // "block_m=64 stages=2"

class TuneSpace {
 public:
  // Names ("a, b") and their points (each as many values as names). CompileError at `loc` for
  // no names, a repeated name, an empty list, a point of the wrong length or a name already
  // tuned by another dimension.
  TuneSpace& add(const std::string& names, std::vector<std::vector<TuneValue>> points,
                 std::source_location loc = std::source_location::current());
  TuneSpace& add(const std::string& names, std::vector<std::vector<TuneValue>> points, SourceLoc loc);
  // The product of the dimensions, the first added varying fastest; `fixed` names are
  // projected out (their values put into every config) and repeated projections dropped.
  std::vector<TuneConfig> configs(const TuneConfig& fixed = {}) const;
  // Every tuned name, in the order added.
  std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::vector<std::string>, std::vector<std::vector<TuneValue>>>> dims_;
};

// The tuning bucket of an integer size: the next power of two (0 and 1 stay themselves).
int64_t tune_bucket(int64_t n);

struct TuneResult {
  TuneConfig config;
  std::optional<double> ms;  // empty: skipped
  std::string error;         // why it was skipped (its first line)
};

struct TuneEntry {
  std::string key;  // the full key text
  TuneConfig winner;
  std::vector<TuneResult> results;
  double compile_s = 0;  // tracing and compiling all configs
  double tuning_s = 0;   // the whole tuning
};

// What the key says of the space being tuned: a hash of its configs (computed once per space,
// as keys are built at every call).
std::string tune_space_id(const std::vector<TuneConfig>& configs);
// The key text of a launch (see the header comment). `arch`: "" the current GPU, "cpu" the
// CPU backend, another arch a compile-only target. `space` is tune_space_id() of the configs
// tuned, `fixed` the hyperparameters the caller fixed and `constants` the compile-time
// constants, as text.
std::string tune_key(const std::string& script, const std::vector<KernelArg>& args, const std::string& arch,
                     const std::string& space = "", const TuneConfig& fixed = {}, const TuneConfig& constants = {});
// Persistence (<cache dir>/autotune/<hash of key>.txt, written to a temporary and renamed).
// load() returns nothing for a missing, corrupt, truncated or stale (different key) entry.
void store_tune_entry(const TuneEntry& e, const std::string& cache_dir);
std::optional<TuneEntry> load_tune_entry(const std::string& key, const std::string& cache_dir);
// A table of configs and times, fastest first, the winner marked `*`.
std::string tune_report(const TuneEntry& e);

struct TuneOptions {
  int repeat = 10;  // timed runs per config (the median counts)
  // "" = the current GPU; "cpu" = the CPU backend (timed with the wall clock); another arch
  // ("sm_90a") compiles for it only, `timer` giving the times (tests; no GPU needed).
  std::string arch;
  std::function<double(const TuneConfig&)> timer;  // replaces the timing (tests)
  std::string cache_dir;                           // "" = default_cache().dir()
  CpuOptions cpu;                                  // the CPU backend's options
  std::string name;                                // the script as messages name it
  SourceLoc where;                                 // named when no config runs (the space's declaration)
};

// True when `opts` only compiles (a named arch other than the CPU backend's).
bool tune_compile_only(const TuneOptions& opts);
// The CUDA source of the tuner's L2 flush before each timed GPU launch: a kernel that reads a
// 256 MB buffer and stores nothing, so L2 is left holding clean lines (a fill would leave dirty
// lines whose write-back slows the timed kernel's reads).
const std::string& l2_flush_source();

// Tunes one call: `trace(configs[i])` is the traced program of config i (called from several
// threads at once); it is specialized on `args` like any launch. CompileError (at opts.where)
// when no config compiles and runs.
using TraceConfig = std::function<Program(const TuneConfig&)>;
TuneEntry tune(const std::string& key, const std::vector<TuneConfig>& configs, const TraceConfig& trace,
               const std::vector<KernelArg>& args, const TuneOptions& opts);

template <class K>
class Autotuned {
 public:
  Autotuned(std::string name, TuneSpace space, std::function<K(const TuneConfig&)> make, TuneOptions opts = {})
      : name_(std::move(name)),
        configs_(space.configs()),
        space_(tune_space_id(configs_)),
        make_(std::move(make)),
        opts_(std::move(opts)) {
    if (opts_.name.empty()) opts_.name = name_;
  }

  void operator()(const std::vector<KernelArg>& args, Stream stream = nullptr) {
    JitKernel<K>& k = winner(args);
    if (!tune_compile_only(opts_)) k(args, stream);
  }

  // The kernel that runs for these arguments (tuning first if needed).
  JitKernel<K>& winner(const std::vector<KernelArg>& args) {
    std::string key = tune_key(name_, args, opts_.arch, space_);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = winners_.find(key);
    if (it != winners_.end()) return *it->second;
    std::string dir = opts_.cache_dir.empty() ? default_cache().dir() : opts_.cache_dir;
    std::optional<TuneEntry> entry = load_tune_entry(key, dir);
    if (!entry) {
      entry = tune(key, configs_, [&](const TuneConfig& c) { return trace(make_(c)); }, args, opts_);
      store_tune_entry(*entry, dir);
    }
    entries_[key] = *entry;
    JitOptions jo;
    if (opts_.arch == "cpu") {
      jo.backend = Backend::Cpu;
      jo.cpu = opts_.cpu;
    } else {
      jo.arch = opts_.arch;
    }
    auto k = std::make_unique<JitKernel<K>>(make_(entry->winner), jo);
    return *(winners_[key] = std::move(k));
  }

  // The tuning results of a key this object tuned or loaded.
  const TuneEntry* entry(const std::vector<KernelArg>& args) const {
    auto it = entries_.find(tune_key(name_, args, opts_.arch, space_));
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  std::string name_;
  std::vector<TuneConfig> configs_;
  std::string space_;  // tune_space_id(configs_)
  std::function<K(const TuneConfig&)> make_;
  TuneOptions opts_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<JitKernel<K>>> winners_;
  std::map<std::string, TuneEntry> entries_;
};

}  // namespace tilus
