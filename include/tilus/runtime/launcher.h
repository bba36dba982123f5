// Compiling a KernelSource (through the disk cache) and launching it with checked arguments.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "tilus/codegen/kernel_source.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/cache.h"
#include "tilus/runtime/driver.h"

namespace tilus {

// A launch whose arguments do not fit the kernel: wrong count, a scalar where a pointer
// is expected (or the reverse), a null pointer, a pointer to the wrong dtype, an integer
// out of its parameter's range, an array that breaks the kernel's argument contract (not
// contiguous, other strides than the kernel declares, too small, read-only but written,
// another byte order). The message names the kernel and the parameter.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// One argument of a launch.
struct KernelArg {
  enum class Kind { Int, Float, Pointer, Blob } kind = Kind::Int;
  int64_t i = 0;
  double f = 0.0;
  DevicePtr ptr = 0;
  DataType pointee;  // for pointers from typed buffers: checked against the parameter
  bool typed = false;
  int64_t bytes = -1;  // bytes addressable from ptr (buffers set it; -1: unknown, not size-checked)
  // What the front end knows of the array behind a pointer, checked against the kernel's
  // argument contract (KernelParam::contract) at every launch:
  bool read_only = false;           // it may not be written (numpy's writeable flag, ...)
  bool foreign_byte_order = false;  // its elements are not in the host's byte order
  // Its shape (elements) and strides (bytes, numpy's convention). No strides: a dense
  // row-major buffer of `bytes` bytes (C++ buffers, raw pointers).
  std::vector<int64_t> shape, byte_strides;
  std::vector<uint8_t> blob;  // Kind::Blob: the value of a by-value parameter, byte for byte
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
  // The bytes of a by-value parameter (KernelParam::blob), e.g. a CUtensorMap.
  static KernelArg by_value(const void* data, size_t n) {
    KernelArg a;
    a.kind = Kind::Blob;
    a.blob.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    return a;
  }
  template <class T>
  static KernelArg by_value(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "a by-value argument is copied byte for byte");
    return by_value(&value, sizeof(T));
  }
};

// Where each parameter's value lies in the buffer a launch's kernelParams point into:
// scalars and pointers in 8-byte slots (their C type's bits, little-endian, so the low bytes
// are a narrower type's value), by-value blobs at their own alignment. A kernel with only
// scalars and pointers has slot i at byte 8 * i, so front ends may fill a uint64_t array.
struct ArgumentLayout {
  std::vector<uint32_t> offsets;  // per parameter, from the buffer's start
  size_t bytes = 0;               // the buffer's size
  size_t alignment = 8;           // the buffer's alignment (the largest parameter's)
  bool slots_only = true;         // no blobs: offsets[i] == 8 * i
};
ArgumentLayout argument_layout(const std::vector<KernelParam>& params);
// The parameters a launch passes: the kernel's, then one 128-byte slot per TMA tensor map.
std::vector<KernelParam> launch_params(const KernelSource& s);

// Storage for one launch's argument buffer, aligned for its layout: inline (no allocation on
// the hot path) up to kInlineBytes, on the heap beyond. Not initialized.
class ArgumentBuffer {
 public:
  static constexpr size_t kInlineBytes = 1024;
  static constexpr size_t kInlineAlignment = 64;
  explicit ArgumentBuffer(const ArgumentLayout& layout);
  ArgumentBuffer(const ArgumentBuffer&) = delete;
  ArgumentBuffer& operator=(const ArgumentBuffer&) = delete;
  uint8_t* data() { return data_; }

 private:
  alignas(kInlineAlignment) uint8_t inline_[kInlineBytes];
  std::unique_ptr<uint8_t[]> heap_;
  uint8_t* data_ = inline_;
};

// Writes checked arguments into `buffer` (layout.bytes, aligned to layout.alignment) where
// `layout` places them, each in its parameter's C type.
void pack_arguments(const KernelSource& s, const std::vector<KernelArg>& args, const ArgumentLayout& layout,
                    uint8_t* buffer);
// cuLaunchKernel's kernelParams for a packed buffer: out[i] = buffer + layout.offsets[i].
void kernel_param_pointers(const ArgumentLayout& layout, uint8_t* buffer, void** out);

// Checks a launch's arguments against a kernel's parameters: count, scalar vs pointer vs
// by-value blob, null pointers, element dtype of typed pointers, integer ranges, blob sizes,
// then each array against its parameter's argument contract (ir/contract.h): byte order,
// writability, C-contiguity or the declared strides, and its size against the extent of every
// global view of it, evaluated from the scalar arguments (ArgumentError naming the kernel and
// the parameter). Shared by the GPU launcher and the CPU backend.
void check_arguments(const KernelSource& s, const std::vector<KernelArg>& args);
// Evaluates an expression over a kernel's parameters (a grid dimension, a contract's extent or
// stride) from a launch's arguments; nullopt when it cannot be.
std::optional<int64_t> evaluate_int(const KernelSource& s, const std::vector<KernelArg>& args, const Expr& e);
// The bytes a kernel's global tensor takes for a launch's arguments (ArgumentError when its size
// cannot be evaluated or is negative). Shared by the GPU launcher and the CPU backend.
int64_t global_tensor_bytes(const KernelSource& s, const std::vector<KernelArg>& args, const GlobalScratch& g);
// The grid a launch's arguments give (ArgumentError when it cannot be evaluated, is too big, or
// is not a multiple of the kernel's cluster shape).
std::array<uint32_t, 3> launch_grid(const KernelSource& s, const std::vector<KernelArg>& args);

struct CompiledKernel {
  KernelSource source;
  std::vector<char> cubin;
  bool from_cache = false;
  double compile_ms = 0.0;  // NVRTC time (0 on a cache hit)
  PchUse pch = PchUse::None;  // what the compile did with the process's precompiled device header
  // Registers, stack and spills per thread, as ptxas reported them (kept in the cache entry);
  // logged at TILUS_LOG_LEVEL=info.
  KernelResources resources;
};

// Compiles with NVRTC, or loads the cubin from `cache` (nullptr: no cache) when an entry
// for the same source, arch, NVRTC version, options, device header library and tilus version
// exists. NVRTC keeps its precompiled device headers in `<cache dir>/pch` (the default cache's
// without a cache), unless TILUS_NVRTC_PCH=0 (nvrtc_pch_dir).
CompiledKernel compile_kernel(const KernelSource& source, DiskCache* cache);
// Where compile_kernel keeps precompiled device headers for `cache` ("" when TILUS_NVRTC_PCH is
// 0, off or false).
std::string nvrtc_pch_dir(const DiskCache* cache);
// The SHA-256 of the embedded device header library, part of every cubin cache key (and of a
// given one: a changed header has another digest).
const std::string& device_headers_digest();
std::string device_headers_digest(const std::vector<std::pair<std::string, std::string>>& headers);

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
  // already in its C type's bits where layout() places it, the grid already evaluated (by
  // launch_grid, which also checks it against the cluster shape).
  void launch_raw(const std::array<uint32_t, 3>& grid, uint8_t* arguments, Stream stream = nullptr) const;
  const CompiledKernel& kernel() const { return kernel_; }
  const ArgumentLayout& layout() const { return layout_; }

 private:
  // The scalars and pointers packed in `arguments`, as arguments.
  std::vector<KernelArg> arguments_of(const uint8_t* arguments) const;
  // Points the slots of the kernel's global tensors (after the parameters) into the memory the
  // runtime keeps for `stream`, sized for these arguments.
  void fill_global_tensors(const std::vector<KernelArg>& args, uint8_t* arguments, Stream stream) const;
  // Encodes the kernel's TMA tensor maps for these arguments into their slots (after the
  // global tensors'); each map is re-encoded only when its address or sizes change.
  void fill_tensor_maps(const std::vector<KernelArg>& args, uint8_t* arguments) const;

  CompiledKernel kernel_;
  ArgumentLayout layout_;
  mutable std::once_flag loaded_;
  mutable std::unique_ptr<LoadedModule> module_;
  struct EncodedMap {
    bool valid = false;
    DevicePtr address = 0;
    std::vector<uint64_t> dims, strides;
    std::array<uint8_t, 128> bytes{};
  };
  mutable std::mutex maps_mutex_;
  mutable std::vector<EncodedMap> maps_;
  mutable int64_t resident_blocks_ = 0;  // cooperative kernels: the blocks the GPU holds at once
};

}  // namespace tilus
