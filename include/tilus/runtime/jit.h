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

#include "tilus/codegen/cuda.h"
#include "tilus/lang/script.h"
#include "tilus/runtime/cpu_kernel.h"
#include "tilus/runtime/launcher.h"

namespace tilus {

// Where a kernel runs and where a buffer lives.
enum class Backend {
  Gpu,  // CUDA: NVRTC, the driver API
  Cpu,  // LLVM ORC JIT on the host (tilus/runtime/cpu_kernel.h)
};
const char* to_string(Backend b);
// Gpu when a GPU can be used, Cpu otherwise; TILUS_TARGET=cpu / gpu overrides.
Backend default_backend();

struct JitOptions {
  Constants constants;     // values of the compile-time parameters
  std::string arch;        // "" = the current GPU's
  bool disk_cache = true;  // use default_cache()
  Backend backend = Backend::Gpu;
  CpuOptions cpu;          // the CPU backend's options (checked mode, threads)
  CudaOptions cuda = CudaOptions::from_env();  // the CUDA emitter's (TILUS_DEBUG_BOUNDS)
};

// Runs the pass pipeline on a traced program's kernel for `arch` and emits its CUDA (written
// next to the TILUS_DUMP_IR pass dumps when dumping). Needs neither a GPU nor NVRTC.
KernelSource cuda_source(const Program& traced, const std::string& arch,
                         const CudaOptions& options = CudaOptions::from_env());
// The kernel of cuda_source, compiled with NVRTC (through the disk cache when `cache` is set).
// Needs no GPU. The emitter's options default to the environment's (TILUS_DEBUG_BOUNDS).
CompiledKernel compile_program(const Program& traced, const std::string& arch, DiskCache* cache,
                               const CudaOptions& options = CudaOptions::from_env());

// The one rule of specialization, for both front ends and the torch fast path: an integer
// argument divisible by 16, or a pointer aligned to 16 bytes, is specialized on (vector and
// cp.async widths are then legal without hints).
constexpr int64_t kSpecializationDivisor = 16;
constexpr bool is_specialized(uint64_t value) { return value % kSpecializationDivisor == 0; }
// The specialization facts of a launch's arguments: param index -> divisor / alignment.
std::map<int, int64_t> specialization_of(const std::vector<KernelArg>& args);
std::string specialization_key(const std::map<int, int64_t>& facts);
// Hands the facts to a traced program's kernel (its parameters' divisors and alignments).
void specialize(Program& traced, const std::map<int, int64_t>& facts);
// The backend a launch's arguments ask for: TILUS_TARGET when set, else where their pointers
// live (ArgumentError naming `kernel` when they mix host and device memory), else
// default_backend().
Backend backend_for(const std::string& kernel, const std::vector<KernelArg>& args);

// A buffer of n elements of a dtype (tests, examples, benchmarks): device memory, or host
// memory for the CPU backend. Its arg() carries the dtype and the byte size.
class DeviceBuffer {
 public:
  DeviceBuffer(DataType dtype, int64_t n, Backend backend = Backend::Gpu);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DevicePtr ptr() const { return ptr_; }
  int64_t size() const { return n_; }
  DataType dtype() const { return dtype_; }
  Backend backend() const { return backend_; }
  int64_t bytes() const { return dtype_.storage_bytes(n_); }
  KernelArg arg() const {
    KernelArg a = KernelArg::typed_pointer(ptr_, dtype_);
    a.bytes = bytes();
    a.memory = backend_ == Backend::Cpu ? KernelArg::Memory::Host : KernelArg::Memory::Device;
    return a;
  }
  // Host values as doubles, converted to/from the dtype (floats rounded like the GPU).
  void upload(const std::vector<double>& values);
  std::vector<double> download() const;
  void upload_bytes(const void* data, size_t bytes);
  void fill_bytes(uint8_t value);  // every byte
  void download_bytes(void* data, size_t bytes) const;

 private:
  DataType dtype_;
  int64_t n_ = 0;
  DevicePtr ptr_ = 0;
  Backend backend_ = Backend::Gpu;
};

template <class K>
class JitKernel {
 public:
  explicit JitKernel(K script, JitOptions opts = {}) : script_(std::move(script)), opts_(std::move(opts)) {}

  // Launches on the GPU (on `stream`), or runs on the CPU and returns when done.
  void operator()(const std::vector<KernelArg>& args, Stream stream = nullptr) {
    if (opts_.backend == Backend::Cpu) cpu_kernel(args).launch(args);
    else launcher(args).launch(args, stream);
  }

  // The CPU kernel for these arguments' specialization (compiled on first use).
  const CpuKernel& cpu_kernel(const std::vector<KernelArg>& args) {
    return variant(cpu_variants_, args, [&](const Program& p) { return CpuKernel::compile(p, opts_.cpu); });
  }

  // The launcher for these arguments' specialization (compiled on first use).
  const Launcher& launcher(const std::vector<KernelArg>& args) {
    return variant(variants_, args, [&](const Program& p) {
      std::string arch = opts_.arch.empty() ? current_device().arch() : opts_.arch;
      return std::make_unique<Launcher>(
          compile_program(p, arch, opts_.disk_cache ? &default_cache() : nullptr, opts_.cuda));
    });
  }

 private:
  // The entry of `variants` for these arguments' specialization, made by `make` on first use.
  template <class Map, class Make>
  const typename Map::mapped_type::element_type& variant(Map& variants, const std::vector<KernelArg>& args, Make make) {
    auto facts = specialization_of(args);
    std::string key = specialization_key(facts);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = variants.find(key);
    if (it != variants.end()) return *it->second;
    return *(variants[key] = make(specialized(facts)));
  }

  Program specialized(const std::map<int, int64_t>& facts) {
    Program p = trace(script_, opts_.constants);
    specialize(p, facts);
    return p;
  }

  K script_;
  JitOptions opts_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Launcher>> variants_;
  std::map<std::string, std::shared_ptr<const CpuKernel>> cpu_variants_;
};

template <class K>
JitKernel<K> jit(K script, JitOptions opts = {}) {
  return JitKernel<K>(std::move(script), std::move(opts));
}

}  // namespace tilus
