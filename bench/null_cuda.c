/* A CUDA driver that does nothing (bench/launch_host_cost.py, docs/python.md "Launch overhead").
 *
 * It exports the Driver API entry points tilus loads from libcuda.so.1 (src/runtime/driver.cpp)
 * and answers every call with success: one device (an sm_90 GPU of 132 multiprocessors),
 * "device memory" that is host memory, modules and functions that are dummy handles, launches
 * that only count themselves (null_cuda_launches). Built as a shared library whose soname is
 * libcuda.so.1 and loaded before tilus first asks for the driver, it is the library tilus's
 * dlopen("libcuda.so.1") finds, so a machine without a GPU measures the host side of a launch:
 * everything a call costs but the real driver's cuLaunchKernel. Nothing here runs a kernel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static unsigned long long launches = 0;
static int handle = 1;
static float elapsed_ms = 0.01f;

unsigned long long null_cuda_launches(void) { return launches; }

CUresult cuInit(unsigned flags) { return 0; }
/* NVRTC asks the driver for its private tables (and goes on without them when refused). */
CUresult cuGetExportTable(const void** table, const void* id) { *table = NULL; return 801; /* not supported */ }
CUresult cuDriverGetVersion(int* v) { *v = 12080; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return 0; }
CUresult cuDeviceGetName(char* name, int len, int d) {
  strncpy(name, "null CUDA driver (bench/null_cuda.c)", (size_t)len - 1);
  return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  switch (attr) {
    case 16: *v = 132; break;     /* multiprocessors */
    case 75: *v = 9; break;       /* compute capability major */
    case 76: *v = 0; break;       /* minor */
    case 97: *v = 232448; break;  /* shared memory per block, opt-in */
    default: *v = 0;
  }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { *c = &handle; return 0; }
CUresult cuCtxSetCurrent(void* c) { return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = &handle; return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { *p = (CUdeviceptr)(uintptr_t)calloc(1, n ? n : 1); return *p ? 0 : 2; }
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)(uintptr_t)p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)(uintptr_t)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
  memmove((void*)(uintptr_t)d, (void*)(uintptr_t)s, n);
  return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void*)(uintptr_t)d, v, n); return 0; }
/* Every address is the start of a 1 TB allocation (the AOT bundle checks its pointers so). */
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  *base = p;
  *size = (size_t)1 << 40;
  return 0;
}
CUresult cuModuleLoadData(void** m, const void* image) { *m = &handle; return 0; }
CUresult cuModuleUnload(void* m) { return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) { *f = &handle; return 0; }
CUresult cuFuncSetAttribute(void* f, int attr, int v) { return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  ++launches;
  return 0;
}
CUresult cuLaunchKernelEx(const void* config, void* f, void** params, void** extra) { ++launches; return 0; }
CUresult cuLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, void* stream, void** params) {
  ++launches;
  return 0;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t shared) { *n = 1; return 0; }
CUresult cuEventCreate(void** e, unsigned flags) { *e = &handle; return 0; }
CUresult cuEventRecord(void* e, void* stream) { return 0; }
CUresult cuEventSynchronize(void* e) { return 0; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { *ms = elapsed_ms; return 0; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) { *ms = elapsed_ms; return 0; }
CUresult cuEventDestroy_v2(void* e) { return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = "NULL_CUDA_ERROR"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = "an error of the null CUDA driver"; return 0; }
CUresult cuTensorMapEncodeTiled(void* map, int type, uint32_t rank, void* addr, const uint64_t* dims,
                                const uint64_t* strides, const uint32_t* box, const uint32_t* estrides, int il, int sw,
                                int l2, int oob) {
  memset(map, 0, 128);
  return 0;
}
CUresult cuTensorMapEncodeIm2col(void* map, int type, uint32_t rank, void* addr, const uint64_t* dims,
                                 const uint64_t* strides, const int* lo, const int* hi, uint32_t c, uint32_t p,
                                 const uint32_t* estrides, int il, int sw, int l2, int oob) {
  memset(map, 0, 128);
  return 0;
}
