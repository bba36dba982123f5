/* The runtime of a tilus ahead-of-time bundle: loading the bundle's cubins into the current
 * CUDA context, checking pointers, the memory of global tensors, TMA tensor maps and launching.
 * Every bundle's generated .c file includes this file once; its functions are static, so bundles
 * made by different tilus versions link into one program side by side. It needs a C11 compiler
 * (GCC or Clang), libdl and pthreads; the CUDA driver (libcuda.so.1) is loaded at the first
 * launch, so a program runs (and gets TILUS_AOT_ERROR_CUDA) on a machine without one.
 * Written by tilus; do not edit. */
#ifndef TILUS_AOT_RUNTIME_H
#define TILUS_AOT_RUNTIME_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tilus_cu_types.h"

typedef struct {
  int loaded;
  char why[256];
  tilus_cu_result (*cuInit)(unsigned);
  tilus_cu_result (*cuCtxGetCurrent)(tilus_cu_context*);
  tilus_cu_result (*cuCtxSetCurrent)(tilus_cu_context);
  tilus_cu_result (*cuCtxGetDevice)(tilus_cu_device*);
  tilus_cu_result (*cuCtxSynchronize)(void);
  tilus_cu_result (*cuDeviceGet)(tilus_cu_device*, int);
  tilus_cu_result (*cuDeviceGetCount)(int*);
  tilus_cu_result (*cuDeviceGetAttribute)(int*, int, tilus_cu_device);
  tilus_cu_result (*cuDevicePrimaryCtxRetain)(tilus_cu_context*, tilus_cu_device);
  tilus_cu_result (*cuModuleLoadData)(tilus_cu_module*, const void*);
  tilus_cu_result (*cuModuleGetFunction)(tilus_cu_function*, tilus_cu_module, const char*);
  tilus_cu_result (*cuFuncSetAttribute)(tilus_cu_function, int, int);
  tilus_cu_result (*cuMemAlloc)(tilus_cu_ptr*, size_t);
  tilus_cu_result (*cuMemFree)(tilus_cu_ptr);
  tilus_cu_result (*cuMemsetD8)(tilus_cu_ptr, unsigned char, size_t);
  tilus_cu_result (*cuMemGetAddressRange)(tilus_cu_ptr*, size_t*, tilus_cu_ptr);
  tilus_cu_result (*cuLaunchKernel)(tilus_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, void*, void**, void**);
  tilus_cu_result (*cuLaunchKernelEx)(const tilus_cu_launch_config*, tilus_cu_function, void**, void**);
  tilus_cu_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, tilus_cu_function, int, size_t);
  tilus_cu_result (*cuTensorMapEncodeTiled)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*,
                                            const uint32_t*, const uint32_t*, int, int, int, int);
  tilus_cu_result (*cuTensorMapEncodeIm2col)(void*, int, uint32_t, void*, const uint64_t*, const uint64_t*, const int*,
                                             const int*, uint32_t, uint32_t, const uint32_t*, int, int, int, int);
  tilus_cu_result (*cuGetErrorName)(tilus_cu_result, const char**);
  tilus_cu_result (*cuGetErrorString)(tilus_cu_result, const char**);
} tilus_aot_driver_t;

#define TILUS_AOT_MAX_CONTEXTS 16
/* The runtime's functions: static, and not every bundle uses each. */
#define TILUS_AOT_STATIC static __attribute__((unused))

static tilus_aot_driver_t tilus_aot_driver;
static pthread_once_t tilus_aot_driver_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t tilus_aot_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char tilus_aot_error[1024];
TILUS_AOT_STATIC int tilus_aot_checks = 1;

/* Records this thread's error message and returns its status. */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_fail(tilus_aot_status status, const char* format, ...)
    __attribute__((format(printf, 2, 3)));
TILUS_AOT_STATIC tilus_aot_status tilus_aot_fail(tilus_aot_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(tilus_aot_error, sizeof(tilus_aot_error), format, args);
  va_end(args);
  return status;
}

TILUS_AOT_STATIC const char* tilus_aot_cu_error(tilus_cu_result r) {
  static _Thread_local char text[256];
  const char *name = "?", *what = "?";
  if (tilus_aot_driver.cuGetErrorName) tilus_aot_driver.cuGetErrorName(r, &name);
  if (tilus_aot_driver.cuGetErrorString) tilus_aot_driver.cuGetErrorString(r, &what);
  snprintf(text, sizeof(text), "%s (%d): %s", name, r, what);
  return text;
}

TILUS_AOT_STATIC int tilus_aot_bind(void* lib, void* fn, const char* name) {
  void* p = dlsym(lib, name);
  if (p) memcpy(fn, &p, sizeof(p));
  return p != NULL;
}

TILUS_AOT_STATIC void tilus_aot_load_driver(void) {
  tilus_aot_driver_t* d = &tilus_aot_driver;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    snprintf(d->why, sizeof(d->why), "the CUDA driver could not be loaded (%s)", e ? e : "libcuda.so.1 not found");
    return;
  }
  int ok = tilus_aot_bind(lib, &d->cuInit, "cuInit") && tilus_aot_bind(lib, &d->cuCtxGetCurrent, "cuCtxGetCurrent") &&
           tilus_aot_bind(lib, &d->cuCtxSetCurrent, "cuCtxSetCurrent") &&
           tilus_aot_bind(lib, &d->cuCtxGetDevice, "cuCtxGetDevice") &&
           tilus_aot_bind(lib, &d->cuCtxSynchronize, "cuCtxSynchronize") &&
           tilus_aot_bind(lib, &d->cuDeviceGet, "cuDeviceGet") &&
           tilus_aot_bind(lib, &d->cuDeviceGetCount, "cuDeviceGetCount") &&
           tilus_aot_bind(lib, &d->cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
           tilus_aot_bind(lib, &d->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
           tilus_aot_bind(lib, &d->cuModuleLoadData, "cuModuleLoadData") &&
           tilus_aot_bind(lib, &d->cuModuleGetFunction, "cuModuleGetFunction") &&
           tilus_aot_bind(lib, &d->cuFuncSetAttribute, "cuFuncSetAttribute") &&
           tilus_aot_bind(lib, &d->cuMemAlloc, "cuMemAlloc_v2") && tilus_aot_bind(lib, &d->cuMemFree, "cuMemFree_v2") &&
           tilus_aot_bind(lib, &d->cuMemsetD8, "cuMemsetD8_v2") &&
           tilus_aot_bind(lib, &d->cuMemGetAddressRange, "cuMemGetAddressRange_v2") &&
           tilus_aot_bind(lib, &d->cuLaunchKernel, "cuLaunchKernel") &&
           tilus_aot_bind(lib, &d->cuGetErrorName, "cuGetErrorName") &&
           tilus_aot_bind(lib, &d->cuGetErrorString, "cuGetErrorString");
  /* Optional: cluster and cooperative launches, occupancy, TMA (CUDA 12 drivers have them). */
  tilus_aot_bind(lib, &d->cuLaunchKernelEx, "cuLaunchKernelEx");
  tilus_aot_bind(lib, &d->cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  tilus_aot_bind(lib, &d->cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  tilus_aot_bind(lib, &d->cuTensorMapEncodeIm2col, "cuTensorMapEncodeIm2col");
  if (!ok) {
    snprintf(d->why, sizeof(d->why), "libcuda.so.1 lacks a Driver API entry point the bundle needs (driver too old?)");
    return;
  }
  tilus_cu_result r = d->cuInit(0);
  if (r != 0) {
    snprintf(d->why, sizeof(d->why), "cuInit failed: %s", tilus_aot_cu_error(r));
    return;
  }
  d->loaded = 1;
}

/* What the runtime knows of a context: its device's compute capability and SM count. */
typedef struct {
  tilus_cu_context context;
  int major, minor, multiprocessors, shared_optin;
} tilus_aot_device_t;
static tilus_aot_device_t tilus_aot_devices[TILUS_AOT_MAX_CONTEXTS];
TILUS_AOT_STATIC int tilus_aot_device_count;

/* The current context (the primary context of device 0 made current when the thread has none,
 * as the CUDA runtime does) and its device. */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_current(const char* fn, const tilus_aot_device_t** out) {
  pthread_once(&tilus_aot_driver_once, tilus_aot_load_driver);
  tilus_aot_driver_t* d = &tilus_aot_driver;
  if (!d->loaded) return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: no GPU: %s", fn, d->why);
  tilus_cu_context ctx = NULL;
  tilus_cu_result r = d->cuCtxGetCurrent(&ctx);
  if (r == 0 && !ctx) {
    int count = 0;
    tilus_cu_device dev = 0;
    if (d->cuDeviceGetCount(&count) != 0 || count == 0)
      return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: no GPU: no CUDA device is present", fn);
    r = d->cuDeviceGet(&dev, 0);
    if (r == 0) r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == 0) r = d->cuCtxSetCurrent(ctx);
  }
  if (r != 0) return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: no current CUDA context: %s", fn, tilus_aot_cu_error(r));
  pthread_mutex_lock(&tilus_aot_mutex);
  for (int i = 0; i < tilus_aot_device_count; ++i)
    if (tilus_aot_devices[i].context == ctx) {
      *out = &tilus_aot_devices[i];
      pthread_mutex_unlock(&tilus_aot_mutex);
      return TILUS_AOT_SUCCESS;
    }
  pthread_mutex_unlock(&tilus_aot_mutex);
  tilus_aot_device_t info;
  memset(&info, 0, sizeof(info));
  info.context = ctx;
  tilus_cu_device dev = 0;
  r = d->cuCtxGetDevice(&dev);
  if (r == 0) r = d->cuDeviceGetAttribute(&info.major, TILUS_CU_ATTR_CC_MAJOR, dev);
  if (r == 0) r = d->cuDeviceGetAttribute(&info.minor, TILUS_CU_ATTR_CC_MINOR, dev);
  if (r == 0) r = d->cuDeviceGetAttribute(&info.multiprocessors, TILUS_CU_ATTR_MULTIPROCESSORS, dev);
  if (r == 0) r = d->cuDeviceGetAttribute(&info.shared_optin, TILUS_CU_ATTR_SHARED_OPTIN, dev);
  if (r != 0) return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: querying the device: %s", fn, tilus_aot_cu_error(r));
  pthread_mutex_lock(&tilus_aot_mutex);
  if (tilus_aot_device_count == TILUS_AOT_MAX_CONTEXTS) {
    pthread_mutex_unlock(&tilus_aot_mutex);
    return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: more than %d CUDA contexts used the bundle", fn,
                          TILUS_AOT_MAX_CONTEXTS);
  }
  tilus_aot_devices[tilus_aot_device_count] = info;
  *out = &tilus_aot_devices[tilus_aot_device_count++];
  pthread_mutex_unlock(&tilus_aot_mutex);
  return TILUS_AOT_SUCCESS;
}

/* One compiled kernel of the bundle: a cubin for one arch and one specialization. */
typedef struct {
  const char* function; /* the extern "C" kernel in the cubin */
  const char* arch;     /* "sm_90a", "sm_80", ... */
  int major, minor;     /* the arch's compute capability */
  int arch_specific;    /* an "a" target: only that exact compute capability runs it */
  const unsigned char* cubin;
  unsigned block_threads, shared_bytes, cluster[3];
  int cooperative;
} tilus_aot_variant_t;

/* Whether a variant's cubin runs on a device: the same major version and a minor at least its
 * own (exactly its own for an arch-specific target). */
TILUS_AOT_STATIC int tilus_aot_runs_on(const tilus_aot_variant_t* v, const tilus_aot_device_t* dev) {
  if (v->major != dev->major) return 0;
  return v->arch_specific ? v->minor == dev->minor : v->minor <= dev->minor;
}

typedef struct {
  tilus_cu_context context;
  tilus_cu_function function;
  long long resident_blocks; /* cooperative kernels: the blocks the device holds at once */
} tilus_aot_loaded_t;
/* Per variant: the contexts it was loaded into. */
typedef struct {
  int count;
  tilus_aot_loaded_t loaded[TILUS_AOT_MAX_CONTEXTS];
} tilus_aot_modules_t;

/* The variant's function in the current context, loaded on first use. */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_load(const char* fn, const tilus_aot_variant_t* v, tilus_aot_modules_t* m,
                                       const tilus_aot_device_t* dev, const tilus_aot_loaded_t** out) {
  tilus_aot_driver_t* d = &tilus_aot_driver;
  tilus_aot_status status = TILUS_AOT_SUCCESS;
  pthread_mutex_lock(&tilus_aot_mutex);
  for (int i = 0; i < m->count; ++i)
    if (m->loaded[i].context == dev->context) {
      *out = &m->loaded[i];
      pthread_mutex_unlock(&tilus_aot_mutex);
      return TILUS_AOT_SUCCESS;
    }
  tilus_aot_loaded_t l;
  memset(&l, 0, sizeof(l));
  l.context = dev->context;
  tilus_cu_module module = NULL;
  tilus_cu_result r = d->cuModuleLoadData(&module, v->cubin);
  if (r != 0) {
    status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: loading kernel %s (%s): %s", fn, v->function, v->arch,
                            tilus_aot_cu_error(r));
  } else if ((r = d->cuModuleGetFunction(&l.function, module, v->function)) != 0) {
    status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: finding kernel %s in its cubin: %s", fn, v->function,
                            tilus_aot_cu_error(r));
  } else if (v->shared_bytes > 48 * 1024 && (int)v->shared_bytes > dev->shared_optin) {
    status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: kernel %s needs %u bytes of shared memory; the device allows %d",
                            fn, v->function, v->shared_bytes, dev->shared_optin);
  } else if (v->shared_bytes > 48 * 1024 &&
             (r = d->cuFuncSetAttribute(l.function, TILUS_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)v->shared_bytes)) != 0) {
    status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: raising the shared memory limit of kernel %s to %u bytes: %s",
                            fn, v->function, v->shared_bytes, tilus_aot_cu_error(r));
  } else if (v->cooperative) {
    int per_sm = 0;
    if (!d->cuOccupancyMaxActiveBlocksPerMultiprocessor || !d->cuLaunchKernelEx)
      status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: kernel %s synchronizes its grid, which needs a CUDA 12 driver",
                              fn, v->function);
    else if ((r = d->cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.function, (int)v->block_threads,
                                                                 v->shared_bytes)) != 0)
      status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: the occupancy of kernel %s: %s", fn, v->function,
                              tilus_aot_cu_error(r));
    l.resident_blocks = (long long)per_sm * dev->multiprocessors;
  }
  if (status == TILUS_AOT_SUCCESS) {
    if (m->count == TILUS_AOT_MAX_CONTEXTS) {
      status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: more than %d CUDA contexts used the bundle", fn,
                              TILUS_AOT_MAX_CONTEXTS);
    } else {
      m->loaded[m->count] = l;
      *out = &m->loaded[m->count++];
    }
  }
  pthread_mutex_unlock(&tilus_aot_mutex);
  return status;
}

/* A pointer argument: not null and, with checks on, device memory whose allocation holds the
 * `need` bytes the kernel may reach from it (`what` says which elements). */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_check_pointer(const char* fn, const char* param, const void* p, long long need,
                                                const char* what) {
  if (!p) return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, "%s: argument '%s' is a null pointer", fn, param);
  if (!tilus_aot_checks || need <= 0) return TILUS_AOT_SUCCESS;
  tilus_cu_ptr base = 0;
  size_t size = 0;
  tilus_cu_ptr ptr = (tilus_cu_ptr)(uintptr_t)p;
  tilus_cu_result r = tilus_aot_driver.cuMemGetAddressRange(&base, &size, ptr);
  if (r != 0)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                          "%s: argument '%s' (%p) is not device memory of the current CUDA context (%s)", fn, param, p,
                          tilus_aot_cu_error(r));
  unsigned long long have = (unsigned long long)(base + size - ptr);
  if ((unsigned long long)need > have)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                          "%s: argument '%s': the kernel reaches %lld bytes from the pointer (%s), but its allocation "
                          "has %llu bytes from there",
                          fn, param, need, what, have);
  return TILUS_AOT_SUCCESS;
}

/* A grid dimension from its value (`bad`: it divided by zero). */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_grid(const char* fn, int dim, const char* text, long long value, int bad,
                                       unsigned cluster, unsigned* out) {
  static const long long limits[3] = {2147483647LL, 65535, 65535};
  if (bad) return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, "%s: grid dimension %d (%s) divides by zero", fn, dim, text);
  if (value < 0 || value > limits[dim])
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, "%s: grid dimension %d (%s) is %lld, outside [0, %lld]", fn, dim,
                          text, value, limits[dim]);
  if (value % cluster != 0)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                          "%s: grid dimension %d (%s) is %lld, not a multiple of the kernel's cluster of %u", fn, dim,
                          text, value, cluster);
  *out = (unsigned)value;
  return TILUS_AOT_SUCCESS;
}

/* Memory for global tensors: one buffer per (context, stream, requires_clean), grown when a
 * launch needs more and kept for the process; a clean buffer is zeroed when it is allocated
 * (every kernel leaves its part zero). */
typedef struct {
  tilus_cu_context context;
  void* stream;
  int clean;
  tilus_cu_ptr ptr;
  size_t bytes;
} tilus_aot_scratch_t;
static tilus_aot_scratch_t tilus_aot_scratch_buffers[64];
TILUS_AOT_STATIC int tilus_aot_scratch_count;

TILUS_AOT_STATIC tilus_aot_status tilus_aot_scratch(const char* fn, const tilus_aot_device_t* dev, void* stream, int clean,
                                          long long bytes, unsigned long long* out) {
  tilus_aot_driver_t* d = &tilus_aot_driver;
  tilus_aot_status status = TILUS_AOT_SUCCESS;
  pthread_mutex_lock(&tilus_aot_mutex);
  tilus_aot_scratch_t* b = NULL;
  for (int i = 0; i < tilus_aot_scratch_count && !b; ++i) {
    tilus_aot_scratch_t* s = &tilus_aot_scratch_buffers[i];
    if (s->context == dev->context && s->stream == stream && s->clean == clean) b = s;
  }
  if (!b && tilus_aot_scratch_count < 64) {
    b = &tilus_aot_scratch_buffers[tilus_aot_scratch_count++];
    memset(b, 0, sizeof(*b));
    b->context = dev->context;
    b->stream = stream;
    b->clean = clean;
  }
  if (!b) {
    status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: more than 64 (context, stream) pairs used global tensors", fn);
  } else if (b->bytes < (size_t)bytes) {
    /* Launches in flight may still use the old buffer: wait for them before replacing it. */
    size_t n = (size_t)bytes > 2 * b->bytes ? (size_t)bytes : 2 * b->bytes;
    n = (n + 65535) / 65536 * 65536;
    tilus_cu_result r = d->cuCtxSynchronize();
    if (r == 0 && b->ptr) r = d->cuMemFree(b->ptr);
    b->ptr = 0;
    b->bytes = 0;
    if (r == 0) r = d->cuMemAlloc(&b->ptr, n);
    if (r == 0 && clean) r = d->cuMemsetD8(b->ptr, 0, n);
    if (r == 0 && clean) r = d->cuCtxSynchronize();
    if (r != 0)
      status = tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: allocating %zu bytes for global tensors: %s", fn, n,
                              tilus_aot_cu_error(r));
    else
      b->bytes = n;
  }
  if (status == TILUS_AOT_SUCCESS) *out = b->ptr;
  pthread_mutex_unlock(&tilus_aot_mutex);
  return status;
}

/* Encodes a TMA tensor map (tiled, no interleave, 128-byte L2 promotion, zero fill) of a global
 * view: `dims`, `strides` (elements) and `box` outermost first, the innermost stride 1. With
 * `im2col` ({lower, upper, traversal stride} of the spatial dims' pixel box; c2d_im2col), an
 * im2col map of box[0] pixels x box[1] channels per load instead. */
TILUS_AOT_STATIC tilus_aot_status tilus_aot_tensor_map(const char* fn, const char* copy, const char* param, int elem_bytes,
                                             int rank, unsigned long long address, const long long* dims,
                                             const long long* strides, const unsigned* box, int swizzle_bytes,
                                             const int* im2col, int bad, void* out) {
  tilus_aot_driver_t* d = &tilus_aot_driver;
  uint64_t g_dims[5], g_strides[4];
  uint32_t g_box[5], element_strides[5];
  if (bad)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, "%s: %s: the view of '%s' divides by zero for these arguments", fn,
                          copy, param);
  if (im2col ? !d->cuTensorMapEncodeIm2col : !d->cuTensorMapEncodeTiled)
    return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: the CUDA driver has no %s (TMA needs CUDA 12)", fn,
                          im2col ? "cuTensorMapEncodeIm2col" : "cuTensorMapEncodeTiled");
  if (address % 16)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                          "%s: %s: parameter '%s' cannot be copied by TMA: its address %#llx is not 16-byte aligned", fn,
                          copy, param, address);
  for (int k = 0; k < rank; ++k) {
    int dim = rank - 1 - k; /* the driver takes the innermost dim first */
    if (dims[dim] < 1 || dims[dim] > (1LL << 32))
      return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                            "%s: %s: parameter '%s' cannot be copied by TMA: dim %d has %lld elements, TMA takes 1 to "
                            "2^32",
                            fn, copy, param, dim, dims[dim]);
    g_dims[k] = (uint64_t)dims[dim];
    g_box[k] = im2col ? 1u : box[dim]; /* an im2col box is {pixels, channels} */
    element_strides[k] = 1;
    if (k == 0) continue;
    long long stride = strides[dim] * elem_bytes;
    if (stride <= 0 || stride % 16 || stride >= (1LL << 40))
      return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                            "%s: %s: parameter '%s' cannot be copied by TMA: the stride of dim %d is %lld bytes; TMA "
                            "needs a positive multiple of 16 below 2^40",
                            fn, copy, param, dim, stride);
    g_strides[k - 1] = (uint64_t)stride;
  }
  int type = elem_bytes == 1 ? 0 : elem_bytes == 2 ? 1 : elem_bytes == 4 ? 2 : 4;
  int swizzle = swizzle_bytes == 0 ? 0 : swizzle_bytes == 32 ? 1 : swizzle_bytes == 64 ? 2 : 3;
  tilus_cu_result r;
  if (im2col) {
    int lower[3], upper[3];
    for (int k = 0; k + 2 < rank; ++k) {
      lower[k] = im2col[0];
      upper[k] = im2col[1];
      element_strides[k + 1] = (uint32_t)im2col[2];
    }
    r = d->cuTensorMapEncodeIm2col(out, type, (uint32_t)rank, (void*)(uintptr_t)address, g_dims, g_strides, lower,
                                   upper, box[1], box[0], element_strides, 0, swizzle, 2, 0);
  } else {
    r = d->cuTensorMapEncodeTiled(out, type, (uint32_t)rank, (void*)(uintptr_t)address, g_dims, g_strides, g_box,
                                  element_strides, 0, swizzle, 2, 0);
  }
  if (r != 0)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, "%s: %s: encoding the TMA map of '%s': %s", fn, copy, param,
                          tilus_aot_cu_error(r));
  return TILUS_AOT_SUCCESS;
}

/* The last map a TMA view of a variant encoded: a call with the same context, address and sizes
 * reuses it instead of encoding again. */
typedef struct {
  int valid;
  tilus_cu_context context;
  unsigned long long address;
  long long dims[5], strides[5];
  _Alignas(64) unsigned char map[128];
} tilus_aot_map_cache_t;

TILUS_AOT_STATIC tilus_aot_status tilus_aot_tensor_map_cached(tilus_aot_map_cache_t* cache,
                                                              const tilus_aot_device_t* dev, const char* fn,
                                                              const char* copy, const char* param, int elem_bytes,
                                                              int rank, unsigned long long address,
                                                              const long long* dims, const long long* strides,
                                                              const unsigned* box, int swizzle_bytes,
                                                              const int* im2col, int bad, void* out) {
  size_t n = (size_t)rank * sizeof(long long);
  if (!bad) {
    pthread_mutex_lock(&tilus_aot_mutex);
    int hit = cache->valid && cache->context == dev->context && cache->address == address &&
              memcmp(cache->dims, dims, n) == 0 && memcmp(cache->strides, strides, n) == 0;
    if (hit) memcpy(out, cache->map, 128);
    pthread_mutex_unlock(&tilus_aot_mutex);
    if (hit) return TILUS_AOT_SUCCESS;
  }
  tilus_aot_status s = tilus_aot_tensor_map(fn, copy, param, elem_bytes, rank, address, dims, strides, box,
                                            swizzle_bytes, im2col, bad, out);
  if (s != TILUS_AOT_SUCCESS) return s;
  pthread_mutex_lock(&tilus_aot_mutex);
  cache->valid = 1;
  cache->context = dev->context;
  cache->address = address;
  memcpy(cache->dims, dims, n);
  memcpy(cache->strides, strides, n);
  memcpy(cache->map, out, 128);
  pthread_mutex_unlock(&tilus_aot_mutex);
  return TILUS_AOT_SUCCESS;
}

TILUS_AOT_STATIC tilus_aot_status tilus_aot_launch(const char* fn, const tilus_aot_variant_t* v, const tilus_aot_loaded_t* l,
                                         const unsigned grid[3], void** params, void* stream) {
  tilus_aot_driver_t* d = &tilus_aot_driver;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return TILUS_AOT_SUCCESS; /* nothing to run */
  long long blocks = (long long)grid[0] * grid[1] * grid[2];
  if (v->cooperative && blocks > l->resident_blocks)
    return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT,
                          "%s: kernel %s synchronizes its whole grid, so all its blocks must be resident at once, but "
                          "the grid %ux%ux%u has %lld blocks and the device holds %lld of them",
                          fn, v->function, grid[0], grid[1], grid[2], blocks, l->resident_blocks);
  int clustered = v->cluster[0] != 1 || v->cluster[1] != 1 || v->cluster[2] != 1;
  tilus_cu_result r;
  if (clustered || v->cooperative) {
    if (!d->cuLaunchKernelEx)
      return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: kernel %s needs cuLaunchKernelEx (a CUDA 12 driver)", fn,
                            v->function);
    tilus_cu_launch_attribute attrs[2];
    memset(attrs, 0, sizeof(attrs));
    unsigned n = 0;
    if (clustered) {
      attrs[n].id = TILUS_CU_LAUNCH_ATTR_CLUSTER_DIMENSION;
      attrs[n].value.cluster_dim.x = v->cluster[0];
      attrs[n].value.cluster_dim.y = v->cluster[1];
      attrs[n++].value.cluster_dim.z = v->cluster[2];
    }
    if (v->cooperative) {
      attrs[n].id = TILUS_CU_LAUNCH_ATTR_COOPERATIVE;
      attrs[n++].value.cooperative = 1;
    }
    tilus_cu_launch_config config = {grid[0], grid[1], grid[2], v->block_threads, 1, 1, v->shared_bytes, stream,
                                     attrs, n};
    r = d->cuLaunchKernelEx(&config, l->function, params, NULL);
  } else {
    r = d->cuLaunchKernel(l->function, grid[0], grid[1], grid[2], v->block_threads, 1, 1, v->shared_bytes, stream,
                          params, NULL);
  }
  if (r != 0)
    return tilus_aot_fail(TILUS_AOT_ERROR_CUDA, "%s: launching kernel %s (%s; grid %ux%ux%u, %u threads, %u shared "
                          "bytes): %s", fn, v->function, v->arch, grid[0], grid[1], grid[2], v->block_threads,
                          v->shared_bytes, tilus_aot_cu_error(r));
  return TILUS_AOT_SUCCESS;
}

TILUS_AOT_STATIC tilus_aot_status tilus_aot_no_variant(const char* fn, const char* built_for, const tilus_aot_device_t* dev) {
  return tilus_aot_fail(TILUS_AOT_ERROR_NO_VARIANT,
                        "%s: the bundle has no kernel for this GPU (compute capability %d.%d) and these arguments; it "
                        "was compiled for %s",
                        fn, dev->major, dev->minor, built_for);
}

/* --- integer arithmetic of the kernel's expressions (as tilus evaluates them) ----------- */
static inline long long tilus_aot_div(long long a, long long b, int* bad) {
  if (b == 0) return *bad = 1, 0;
  return a == INT64_MIN && b == -1 ? a : a / b;
}
static inline long long tilus_aot_mod(long long a, long long b, int* bad) {
  if (b == 0) return *bad = 1, 0;
  return b == -1 ? 0 : a % b;
}
static inline long long tilus_aot_floordiv(long long a, long long b, int* bad) {
  long long q = tilus_aot_div(a, b, bad);
  return (b != 0 && b != -1 && (a % b != 0) && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline long long tilus_aot_floormod(long long a, long long b, int* bad) {
  long long r = tilus_aot_mod(a, b, bad);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline unsigned long long tilus_aot_udiv(unsigned long long a, unsigned long long b, int* bad) {
  if (b == 0) return *bad = 1, 0;
  return a / b;
}
static inline unsigned long long tilus_aot_umod(unsigned long long a, unsigned long long b, int* bad) {
  if (b == 0) return *bad = 1, 0;
  return a % b;
}
static inline long long tilus_aot_shl(long long a, long long b, int bits, int* bad) {
  if (b < 0 || b >= bits) return *bad = 1, 0;
  return (long long)((unsigned long long)a << b);
}
static inline long long tilus_aot_shr(long long a, long long b, int bits, int is_unsigned, int* bad) {
  if (b < 0 || b >= bits) return *bad = 1, 0;
  return is_unsigned ? (long long)((unsigned long long)a >> b) : a >> b;
}
static inline long long tilus_aot_min(long long a, long long b) { return a < b ? a : b; }
static inline long long tilus_aot_max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long tilus_aot_umin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long tilus_aot_umax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

#endif /* TILUS_AOT_RUNTIME_H */
