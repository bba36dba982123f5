// Compiling a KernelSource (through the disk cache) and launching it with checked arguments.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tilus/codegen/kernel_source.h"
#include "tilus/runtime/cache.h"
#include "tilus/runtime/driver.h"

namespace tilus {

// A launch whose arguments do not fit the kernel: wrong count, a scalar where a pointer
// is expected (or the reverse), a null pointer, a pointer to the wrong dtype, an integer
// out of its parameter's range. The message names the kernel and the parameter.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// One argument of a launch.
struct KernelArg {
  enum class Kind { Int, Float, Pointer } kind = Kind::Int;
  int64_t i = 0;
  double f = 0.0;
  DevicePtr ptr = 0;
  DataType pointee;  // for pointers from typed buffers: checked against the parameter
  bool typed = false;
  int64_t bytes = -1;  // bytes addressable from ptr (buffers set it; the CPU's checked mode uses it)
  // Where a pointer points, when the caller knows (buffers and the Python front end say): it
  // picks the backend of a launch (backend_for in tilus/runtime/jit.h).
  enum class Memory { Unknown, Host, Device } memory = Memory::Unknown;

  KernelArg() = default;
  KernelArg(int v) : kind(Kind::Int), i(v) {}
  KernelArg(int64_t v) : kind(Kind::Int), i(v) {}
  KernelArg(double v) : kind(Kind::Float), f(v) {}
  KernelArg(float v) : kind(Kind::Float), f(v) {}
  static KernelArg pointer(DevicePtr p) {
    KernelArg a;
    a.kind = Kind::Pointer;
    a.ptr = p;
    return a;
  }
  static KernelArg typed_pointer(DevicePtr p, DataType elem) {
    KernelArg a = pointer(p);
    a.pointee = elem;
    a.typed = true;
    return a;
  }
};

// Checks a launch's arguments against a kernel's parameters: count, scalar vs pointer, null
// pointers, element dtype of typed pointers, integer ranges (ArgumentError naming the kernel
// and the parameter). Shared by the GPU launcher and the CPU backend.
void check_arguments(const KernelSource& s, const std::vector<KernelArg>& args);
// The grid a launch's arguments give (ArgumentError when it cannot be evaluated or is too big).
std::array<uint32_t, 3> launch_grid(const KernelSource& s, const std::vector<KernelArg>& args);

struct CompiledKernel {
  KernelSource source;
  std::vector<char> cubin;
  bool from_cache = false;
  double compile_ms = 0.0;  // NVRTC time (0 on a cache hit)
};

// Compiles with NVRTC, or loads the cubin from `cache` (nullptr: no cache) when an entry
// for the same source, arch, NVRTC version, options and tilus version exists.
CompiledKernel compile_kernel(const KernelSource& source, DiskCache* cache);

// A compiled kernel ready to launch: the module is loaded at the first launch.
class Launcher {
 public:
  explicit Launcher(CompiledKernel kernel);
  // Checks the arguments (count, scalar vs pointer, null pointers, element dtype of typed
  // pointers; errors name the kernel and the parameter), evaluates the grid from them and
  // launches on `stream`.
  void launch(const std::vector<KernelArg>& args, Stream stream = nullptr) const;
  // The grid the arguments give (for tests and tools).
  std::array<uint32_t, 3> grid(const std::vector<KernelArg>& args) const;
  // The hot path for front ends that checked the arguments themselves: each parameter's value
  // already in its C type's bits (8-byte slots), the grid already evaluated.
  void launch_raw(const std::array<uint32_t, 3>& grid, uint64_t* slots, Stream stream = nullptr) const;
  const CompiledKernel& kernel() const { return kernel_; }

 private:
  CompiledKernel kernel_;
  mutable std::once_flag loaded_;
  mutable std::unique_ptr<LoadedModule> module_;
};

}  // namespace tilus
