#include "tilus/runtime/driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "aot/tilus_cu_types.h"

namespace tilus {

namespace {

// The Driver API's types and constants, shared with ahead-of-time bundles (aot/tilus_cu_types.h).
using CUresult = tilus_cu_result;
using CUdevice = tilus_cu_device;
using CUcontext = tilus_cu_context;
using CUmodule = tilus_cu_module;
using CUfunction = tilus_cu_function;
using CUevent = void*;
using CUlaunchAttribute = tilus_cu_launch_attribute;
using CUlaunchConfig = tilus_cu_launch_config;
static_assert(sizeof(CUlaunchAttribute) == 72);
constexpr int kAttrMultiprocessors = TILUS_CU_ATTR_MULTIPROCESSORS;
constexpr int kAttrCcMajor = TILUS_CU_ATTR_CC_MAJOR;
constexpr int kAttrCcMinor = TILUS_CU_ATTR_CC_MINOR;
constexpr int kAttrSharedOptin = TILUS_CU_ATTR_SHARED_OPTIN;
constexpr int kFuncAttrMaxDynamicShared = TILUS_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED;
constexpr int kLaunchAttrCooperative = TILUS_CU_LAUNCH_ATTR_COOPERATIVE;
constexpr int kLaunchAttrClusterDimension = TILUS_CU_LAUNCH_ATTR_CLUSTER_DIMENSION;

struct Driver {
  bool loaded = false;
  std::string why;  // when !loaded
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(DevicePtr*, size_t);
  CUresult (*cuMemFree)(DevicePtr);
  CUresult (*cuMemcpyHtoD)(DevicePtr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, DevicePtr, size_t);
  CUresult (*cuMemcpyDtoD)(DevicePtr, DevicePtr, size_t);
  CUresult (*cuMemsetD8)(DevicePtr, unsigned char, size_t);
  CUresult (*cuMemGetAddressRange)(DevicePtr*, size_t*, DevicePtr);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
  // Optional (CUDA 12.0 drivers and newer): only cluster launches need it.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  // Cooperative launches (sync_grid): the older entry point, and the occupancy they are checked by.
  CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, void*, void**) = nullptr;
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, void*);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuTensorMapEncodeTiled)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                                     const uint32_t*, int, int, int, int) = nullptr;
  CUresult (*cuTensorMapEncodeIm2col)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*, const int*,
                                      const int*, uint32_t, uint32_t, const uint32_t*, int, int, int, int) = nullptr;

  CUcontext context = nullptr;
  DeviceInfo info;
};

template <class F>
bool bind(void* lib, F& fn, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* p = dlsym(lib, n)) {
      fn = reinterpret_cast<F>(p);
      return true;
    }
  return false;
}

std::string error_text(const Driver& d, CUresult r) {
  const char* name = "?";
  const char* text = "?";
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  return fmt::format("{} ({}): {}", name, r, text);
}

Driver load_driver() {
  Driver d{};
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    d.why = fmt::format("the CUDA driver could not be loaded ({})", e ? e : "libcuda.so.1 not found");
    return d;
  }
  bool ok = bind(lib, d.cuInit, {"cuInit"}) && bind(lib, d.cuDriverGetVersion, {"cuDriverGetVersion"}) &&
            bind(lib, d.cuDeviceGetCount, {"cuDeviceGetCount"}) && bind(lib, d.cuDeviceGet, {"cuDeviceGet"}) &&
            bind(lib, d.cuDeviceGetName, {"cuDeviceGetName"}) &&
            bind(lib, d.cuDeviceGetAttribute, {"cuDeviceGetAttribute"}) &&
            bind(lib, d.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}) &&
            bind(lib, d.cuCtxSetCurrent, {"cuCtxSetCurrent"}) && bind(lib, d.cuCtxGetCurrent, {"cuCtxGetCurrent"}) &&
            bind(lib, d.cuCtxSynchronize, {"cuCtxSynchronize"}) && bind(lib, d.cuMemAlloc, {"cuMemAlloc_v2"}) &&
            bind(lib, d.cuMemFree, {"cuMemFree_v2"}) && bind(lib, d.cuMemcpyHtoD, {"cuMemcpyHtoD_v2"}) &&
            bind(lib, d.cuMemcpyDtoH, {"cuMemcpyDtoH_v2"}) && bind(lib, d.cuMemcpyDtoD, {"cuMemcpyDtoD_v2"}) &&
            bind(lib, d.cuMemsetD8, {"cuMemsetD8_v2"}) &&
            bind(lib, d.cuMemGetAddressRange, {"cuMemGetAddressRange_v2"}) &&
            bind(lib, d.cuModuleLoadData, {"cuModuleLoadData"}) && bind(lib, d.cuModuleUnload, {"cuModuleUnload"}) &&
            bind(lib, d.cuModuleGetFunction, {"cuModuleGetFunction"}) &&
            bind(lib, d.cuFuncSetAttribute, {"cuFuncSetAttribute"}) &&
            bind(lib, d.cuLaunchKernel, {"cuLaunchKernel"}) && bind(lib, d.cuEventCreate, {"cuEventCreate"}) &&
            bind(lib, d.cuEventRecord, {"cuEventRecord"}) && bind(lib, d.cuEventSynchronize, {"cuEventSynchronize"}) &&
            bind(lib, d.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}) &&
            bind(lib, d.cuEventDestroy, {"cuEventDestroy_v2"}) && bind(lib, d.cuGetErrorName, {"cuGetErrorName"}) &&
            bind(lib, d.cuGetErrorString, {"cuGetErrorString"});
  bind(lib, d.cuLaunchKernelEx, {"cuLaunchKernelEx"});
  bind(lib, d.cuTensorMapEncodeTiled, {"cuTensorMapEncodeTiled"});
  bind(lib, d.cuTensorMapEncodeIm2col, {"cuTensorMapEncodeIm2col"});
  bind(lib, d.cuLaunchCooperativeKernel, {"cuLaunchCooperativeKernel"});
  bind(lib, d.cuOccupancyMaxActiveBlocksPerMultiprocessor, {"cuOccupancyMaxActiveBlocksPerMultiprocessor"});
  if (!ok) {
    d.why = "libcuda.so.1 lacks a Driver API entry point tilus needs (driver too old?)";
    return d;
  }
  if (CUresult r = d.cuInit(0); r != 0) {
    d.why = fmt::format("cuInit failed: {}", error_text(d, r));
    return d;
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) {
    d.why = "no CUDA device is present";
    return d;
  }
  CUdevice dev = 0;
  char name[256] = {};
  int major = 0, minor = 0;
  int sms = 0, optin = 0;
  if (d.cuDeviceGet(&dev, 0) != 0 || d.cuDeviceGetName(name, sizeof(name), dev) != 0 ||
      d.cuDeviceGetAttribute(&major, kAttrCcMajor, dev) != 0 ||
      d.cuDeviceGetAttribute(&minor, kAttrCcMinor, dev) != 0 ||
      d.cuDeviceGetAttribute(&sms, kAttrMultiprocessors, dev) != 0 ||
      d.cuDeviceGetAttribute(&optin, kAttrSharedOptin, dev) != 0) {
    d.why = "device 0 could not be queried";
    return d;
  }
  // The primary context is the one the CUDA runtime (and so torch) uses: memory is shared.
  if (CUresult r = d.cuDevicePrimaryCtxRetain(&d.context, dev); r != 0) {
    d.why = fmt::format("the primary context of device 0 could not be retained: {}", error_text(d, r));
    return d;
  }
  d.info.name = name;
  d.info.compute_capability = major * 10 + minor;
  d.info.multiprocessors = sms;
  d.info.shared_memory_per_block_optin = optin;
  d.cuDriverGetVersion(&d.info.driver_version);
  d.loaded = true;
  return d;
}

Driver& driver_state() {
  static Driver d = load_driver();
  return d;
}

// The loaded driver with the primary context current on this thread; throws otherwise.
const Driver& driver() {
  Driver& d = driver_state();
  if (!d.loaded) throw RuntimeError(fmt::format("no GPU available: {}", d.why));
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) != 0 || current != d.context) d.cuCtxSetCurrent(d.context);
  return d;
}

void check(CUresult r, const std::string& what) {
  if (r != 0) throw RuntimeError(fmt::format("{} failed: {}", what, error_text(driver_state(), r)));
}

}  // namespace

bool gpu_available() { return driver_state().loaded; }
std::string gpu_unavailable_reason() { return driver_state().loaded ? "" : driver_state().why; }

std::string DeviceInfo::arch() const {
  // Hopper's wgmma / setmaxnreg need the arch-specific target.
  if (compute_capability == 90) return "sm_90a";
  return fmt::format("sm_{}", compute_capability);
}

const DeviceInfo& current_device() { return driver().info; }

DevicePtr device_alloc(size_t bytes) {
  DevicePtr p = 0;
  check(driver().cuMemAlloc(&p, bytes), fmt::format("cuMemAlloc of {} bytes", bytes));
  return p;
}
void device_free(DevicePtr p) { check(driver().cuMemFree(p), "cuMemFree"); }
void copy_to_device(DevicePtr dst, const void* src, size_t bytes) {
  check(driver().cuMemcpyHtoD(dst, src, bytes), fmt::format("copying {} bytes to the device", bytes));
}
void copy_to_host(void* dst, DevicePtr src, size_t bytes) {
  check(driver().cuMemcpyDtoH(dst, src, bytes), fmt::format("copying {} bytes to the host", bytes));
}
void copy_on_device(DevicePtr dst, DevicePtr src, size_t bytes) {
  check(driver().cuMemcpyDtoD(dst, src, bytes), fmt::format("copying {} bytes on the device", bytes));
}
void device_memset(DevicePtr dst, uint8_t value, size_t bytes) {
  check(driver().cuMemsetD8(dst, value, bytes), "cuMemsetD8");
}
std::optional<int64_t> device_bytes_from(DevicePtr p) {
  if (!gpu_available()) return std::nullopt;
  DevicePtr base = 0;
  size_t size = 0;
  if (driver().cuMemGetAddressRange(&base, &size, p) != 0 || p < base || p - base > size) return std::nullopt;
  return int64_t(base + size - p);
}
void synchronize() { check(driver().cuCtxSynchronize(), "synchronizing the device"); }

LoadedModule::LoadedModule(const std::vector<char>& cubin, const std::string& function, int64_t dynamic_shared_bytes,
                           std::array<int64_t, 3> cluster, bool cooperative)
    : name_(function), shared_bytes_(dynamic_shared_bytes), cooperative_(cooperative) {
  const Driver& d = driver();
  if (cooperative && !d.cuLaunchKernelEx && (!d.cuLaunchCooperativeKernel || cluster != std::array<int64_t, 3>{1, 1, 1}))
    throw RuntimeError(fmt::format("kernel {} synchronizes its grid (sync_grid), which needs a cooperative launch; the "
                                   "CUDA driver (version {}) lacks the entry point for it",
                                   function, d.info.driver_version));
  for (int i = 0; i < 3; ++i) cluster_[i] = uint32_t(cluster[i]);
  clustered_ = cluster != std::array<int64_t, 3>{1, 1, 1};
  if (clustered_ && !d.cuLaunchKernelEx)
    throw RuntimeError(fmt::format("kernel {} runs in clusters of {}x{}x{} blocks, which needs cuLaunchKernelEx; the "
                                   "CUDA driver (version {}) lacks it (a CUDA 12.0 driver or newer has it)",
                                   function, cluster[0], cluster[1], cluster[2], d.info.driver_version));
  check(d.cuModuleLoadData(&module_, cubin.data()), fmt::format("loading the module of kernel {}", function));
  if (CUresult r = d.cuModuleGetFunction(&function_, module_, function.c_str()); r != 0) {
    d.cuModuleUnload(module_);
    check(r, fmt::format("finding kernel {} in its module", function));
  }
  // Above 48 KB, dynamic shared memory must be opted into, once per function.
  if (dynamic_shared_bytes > 48 * 1024) {
    if (dynamic_shared_bytes > d.info.shared_memory_per_block_optin)
      throw RuntimeError(fmt::format("kernel {} needs {} bytes of shared memory; {} allows {}", function,
                                     dynamic_shared_bytes, d.info.name, d.info.shared_memory_per_block_optin));
    check(d.cuFuncSetAttribute(function_, kFuncAttrMaxDynamicShared, int(dynamic_shared_bytes)),
          fmt::format("raising the shared memory limit of kernel {} to {} bytes", function, dynamic_shared_bytes));
  }
}

LoadedModule::~LoadedModule() {
  if (module_ && driver_state().loaded) driver_state().cuModuleUnload(module_);
}

int64_t LoadedModule::resident_blocks(uint32_t block_threads) const {
  const Driver& d = driver();
  if (!d.cuOccupancyMaxActiveBlocksPerMultiprocessor)
    throw RuntimeError(fmt::format("kernel {}: the CUDA driver lacks cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                   name_));
  int per_sm = 0;
  check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, function_, int(block_threads), size_t(shared_bytes_)),
        fmt::format("the occupancy of kernel {}", name_));
  return int64_t(per_sm) * d.info.multiprocessors;
}

void LoadedModule::launch(const uint32_t grid[3], uint32_t block_threads, void** args, Stream stream) const {
  const Driver& d = driver();
  CUresult r;
  if (clustered_ || (cooperative_ && d.cuLaunchKernelEx)) {
    CUlaunchAttribute attrs[2]{};
    unsigned n = 0;
    if (clustered_) {
      attrs[n].id = kLaunchAttrClusterDimension;
      attrs[n++].value.cluster_dim = {cluster_[0], cluster_[1], cluster_[2]};
    }
    if (cooperative_) {
      attrs[n].id = kLaunchAttrCooperative;
      attrs[n++].value.cooperative = 1;
    }
    CUlaunchConfig config{grid[0], grid[1], grid[2], block_threads, 1, 1, unsigned(shared_bytes_), stream, attrs, n};
    r = d.cuLaunchKernelEx(&config, function_, args, nullptr);
  } else if (cooperative_) {
    r = d.cuLaunchCooperativeKernel(function_, grid[0], grid[1], grid[2], block_threads, 1, 1, unsigned(shared_bytes_),
                                    stream, args);
  } else {
    r = d.cuLaunchKernel(function_, grid[0], grid[1], grid[2], block_threads, 1, 1, unsigned(shared_bytes_), stream,
                         args, nullptr);
  }
  // The message is only built on failure: a launch is on the hot path.
  if (r != 0)
    check(r, fmt::format("launching kernel {} (grid {}x{}x{}, cluster {}x{}x{}, {} threads, {} shared bytes{})", name_,
                         grid[0], grid[1], grid[2], cluster_[0], cluster_[1], cluster_[2], block_threads,
                         shared_bytes_, cooperative_ ? ", cooperative" : ""));
}

EventTimer::EventTimer() {
  check(driver().cuEventCreate(&begin_, 0), "cuEventCreate");
  check(driver().cuEventCreate(&end_, 0), "cuEventCreate");
}
EventTimer::~EventTimer() {
  if (driver_state().loaded) {
    driver_state().cuEventDestroy(begin_);
    driver_state().cuEventDestroy(end_);
  }
}
void EventTimer::start(Stream stream) { check(driver().cuEventRecord(begin_, stream), "cuEventRecord"); }
float EventTimer::stop_ms(Stream stream) {
  const Driver& d = driver();
  check(d.cuEventRecord(end_, stream), "cuEventRecord");
  check(d.cuEventSynchronize(end_), "cuEventSynchronize");
  float ms = 0;
  check(d.cuEventElapsedTime(&ms, begin_, end_), "cuEventElapsedTime");
  return ms;
}

void encode_tensor_map(void* map128, int elem_bytes, const std::vector<uint64_t>& dims,
                       const std::vector<uint64_t>& byte_strides, const std::vector<uint32_t>& box, int swizzle_bytes,
                       DevicePtr address, const Im2colBox* im2col) {
  const Driver& d = driver();
  const char* entry = im2col ? "cuTensorMapEncodeIm2col" : "cuTensorMapEncodeTiled";
  if (im2col ? !d.cuTensorMapEncodeIm2col : !d.cuTensorMapEncodeTiled)
    throw RuntimeError(fmt::format("the CUDA driver has no {} (TMA needs a CUDA 12 driver)", entry));
  // CU_TENSOR_MAP_DATA_TYPE_UINT8 / UINT16 / UINT32 / UINT64.
  int type = elem_bytes == 1 ? 0 : elem_bytes == 2 ? 1 : elem_bytes == 4 ? 2 : 4;
  int swizzle = swizzle_bytes == 0 ? 0 : swizzle_bytes == 32 ? 1 : swizzle_bytes == 64 ? 2 : 3;
  std::vector<uint32_t> element_strides(dims.size(), 1);
  // No interleave, L2 promotion of 128 bytes, zero fill.
  CUresult r;
  if (im2col) {
    // The spatial dims (all but the channels, innermost, and the images, outermost) walk with
    // the conv stride through the same pixel box.
    std::vector<int> lower(dims.size() - 2, int(im2col->lower)), upper(dims.size() - 2, int(im2col->upper));
    for (size_t k = 1; k + 1 < dims.size(); ++k) element_strides[k] = uint32_t(im2col->stride);
    r = d.cuTensorMapEncodeIm2col(map128, type, uint32_t(dims.size()), reinterpret_cast<void*>(address), dims.data(),
                                  byte_strides.data(), lower.data(), upper.data(), uint32_t(im2col->channels),
                                  uint32_t(im2col->pixels), element_strides.data(), 0, swizzle, 2, 0);
  } else {
    r = d.cuTensorMapEncodeTiled(map128, type, uint32_t(dims.size()), reinterpret_cast<void*>(address), dims.data(),
                                 byte_strides.data(), box.data(), element_strides.data(), 0, swizzle, 2, 0);
  }
  if (r != 0) throw RuntimeError(fmt::format("{} failed: {}", entry, error_text(d, r)));
}

}  // namespace tilus
