// Compiling Scripts for the GPU and launching them from C++.
//
//   auto kernel = tilus::jit(MatmulShared{});          // nothing is compiled yet
//   kernel({m, n, k, a.arg(), b.arg(), c.arg()});      // first call: trace, passes, NVRTC
//   kernel({m, n, k, a.arg(), b.arg(), c.arg()});      // later calls: a map lookup + launch
//
// Each call specializes on facts of its arguments: integers divisible by 16 and pointers
// aligned to 16 bytes (so vector widths are legal without user hints); each combination is
// compiled once per JitKernel (and cached on disk across processes).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tilus/lang/script.h"
#include "tilus/runtime/launcher.h"

namespace tilus {

struct JitOptions {
  Constants constants;     // values of the compile-time parameters
  std::string arch;        // "" = the current GPU's
  bool disk_cache = true;  // use default_cache()
};

// Runs the pass pipeline on a traced program's kernel, emits CUDA and compiles it (through
// the disk cache when `cache` is set). Needs no GPU.
CompiledKernel compile_program(const Program& traced, const std::string& arch, DiskCache* cache);

// The specialization facts of a launch's arguments: param index -> divisor / alignment.
std::map<int, int64_t> specialization_of(const std::vector<KernelArg>& args);
std::string specialization_key(const std::map<int, int64_t>& facts);

// A device buffer of n elements of a dtype (tests, examples, benchmarks).
class DeviceBuffer {
 public:
  DeviceBuffer(DataType dtype, int64_t n);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DevicePtr ptr() const { return ptr_; }
  int64_t size() const { return n_; }
  DataType dtype() const { return dtype_; }
  int64_t bytes() const { return dtype_.storage_bytes(n_); }
  KernelArg arg() const { return KernelArg::typed_pointer(ptr_, dtype_); }
  // Host values as doubles, converted to/from the dtype (floats rounded like the GPU).
  void upload(const std::vector<double>& values);
  std::vector<double> download() const;
  void upload_bytes(const void* data, size_t bytes);
  void download_bytes(void* data, size_t bytes) const;

 private:
  DataType dtype_;
  int64_t n_ = 0;
  DevicePtr ptr_ = 0;
};

template <class K>
class JitKernel {
 public:
  explicit JitKernel(K script, JitOptions opts = {}) : script_(std::move(script)), opts_(std::move(opts)) {}

  void operator()(const std::vector<KernelArg>& args, Stream stream = nullptr) { launcher(args).launch(args, stream); }

  // The launcher for these arguments' specialization (compiled on first use).
  const Launcher& launcher(const std::vector<KernelArg>& args) {
    auto facts = specialization_of(args);
    std::string key = specialization_key(facts);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = variants_.find(key);
    if (it != variants_.end()) return *it->second;
    Program p = trace(script_, opts_.constants);
    for (auto& [index, d] : facts)
      if (index < int(p.kernels[0].params.size())) p.kernels[0].param_divisibility[index] = d;
    std::string arch = opts_.arch.empty() ? current_device().arch() : opts_.arch;
    auto launcher = std::make_unique<Launcher>(compile_program(p, arch, opts_.disk_cache ? &default_cache() : nullptr));
    return *(variants_[key] = std::move(launcher));
  }

 private:
  K script_;
  JitOptions opts_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Launcher>> variants_;
};

template <class K>
JitKernel<K> jit(K script, JitOptions opts = {}) {
  return JitKernel<K>(std::move(script), std::move(opts));
}

}  // namespace tilus
