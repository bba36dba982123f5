// The CUDA Driver API, loaded with dlopen at first use: tilus links no libcuda, so the
// library, its tests and the CPU backend work on machines without a GPU or a driver.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/error.h"

namespace tilus {

// A failure of the driver or the GPU (not the user's Script).
class RuntimeError : public Error {
 public:
  using Error::Error;
};

using DevicePtr = uint64_t;  // CUdeviceptr
using Stream = void*;        // CUstream (nullptr: the default stream)

// True when libcuda loads and at least one device is present.
bool gpu_available();
// Why gpu_available() is false ("" when it is true); for skip messages.
std::string gpu_unavailable_reason();

struct DeviceInfo {
  std::string name;
  int compute_capability = 0;  // major*10 + minor
  int multiprocessors = 0;
  int64_t shared_memory_per_block_optin = 0;
  int driver_version = 0;      // cuDriverGetVersion
  std::string arch() const;    // "sm_90a" on Hopper, "sm_<cc>" elsewhere
};
// The current device (device 0, primary context made current). Throws RuntimeError.
const DeviceInfo& current_device();

// Device memory helpers for tests and examples.
DevicePtr device_alloc(size_t bytes);
void device_free(DevicePtr p);
void copy_to_device(DevicePtr dst, const void* src, size_t bytes);
void copy_to_host(void* dst, DevicePtr src, size_t bytes);
void copy_on_device(DevicePtr dst, DevicePtr src, size_t bytes);
void device_memset(DevicePtr dst, uint8_t value, size_t bytes);
// The bytes from p to the end of the device allocation holding it (cuMemGetAddressRange);
// nullopt where p is not in a driver allocation (host memory, a foreign allocator's pool).
std::optional<int64_t> device_bytes_from(DevicePtr p);
void synchronize();

// cuTensorMapEncodeTiled for a box of `elem_bytes`-byte elements (moved as unsigned integers
// of that size): dims and box innermost first, byte strides of the dims after the first,
// swizzle 0 / 32 / 64 / 128 bytes, out-of-bounds elements zero. Throws RuntimeError with the
// driver's message when the driver refuses.
// With `im2col`: cuTensorMapEncodeIm2col instead (box unused), the spatial dims' pixel box
// [lower, size - 1 + upper] walked with the traversal stride, `pixels` x `channels` per load.
struct Im2colBox {
  int64_t pixels = 0, channels = 0, lower = 0, upper = 0, stride = 1;
};
void encode_tensor_map(void* map128, int elem_bytes, const std::vector<uint64_t>& dims,
                       const std::vector<uint64_t>& byte_strides, const std::vector<uint32_t>& box, int swizzle_bytes,
                       DevicePtr address, const Im2colBox* im2col = nullptr);

// A loaded cubin (CUmodule) and one of its functions.
class LoadedModule {
 public:
  // cluster: the thread-block cluster shape every launch uses ({1, 1, 1}: none); cooperative:
  // launched cooperatively (its grid synchronizes: sync_grid).
  LoadedModule(const std::vector<char>& cubin, const std::string& function, int64_t dynamic_shared_bytes,
               std::array<int64_t, 3> cluster = {1, 1, 1}, bool cooperative = false);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  // Launches with args[i] pointing at each argument's value (cuLaunchKernel's kernelParams);
  // a cluster launch goes through cuLaunchKernelEx with the cluster-dimension attribute.
  void launch(const uint32_t grid[3], uint32_t block_threads, void** args, Stream stream) const;
  const std::string& function_name() const { return name_; }
  // Blocks of `block_threads` threads (and the module's shared memory) the GPU holds at once:
  // the occupancy per multiprocessor times the multiprocessors.
  int64_t resident_blocks(uint32_t block_threads) const;

 private:
  void* module_ = nullptr;
  void* function_ = nullptr;
  std::string name_;
  int64_t shared_bytes_ = 0;
  std::array<uint32_t, 3> cluster_{1, 1, 1};
  bool clustered_ = false;
  bool cooperative_ = false;
};

// GPU timing with CUDA events: milliseconds for `fn` (enqueued on `stream`).
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  void start(Stream stream = nullptr);
  float stop_ms(Stream stream = nullptr);  // records, synchronizes, returns elapsed ms

 private:
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace tilus
