/* The few CUDA Driver API types and constants tilus uses, declared here so that neither tilus
 * (src/runtime/driver.cpp) nor an ahead-of-time bundle (tilus_aot_runtime.h) needs CUDA headers
 * to build: the driver is loaded with dlopen. C and C++. Written by tilus; do not edit. */
#ifndef TILUS_CU_TYPES_H
#define TILUS_CU_TYPES_H

typedef int tilus_cu_result;
typedef int tilus_cu_device;
typedef void* tilus_cu_context;
typedef void* tilus_cu_module;
typedef void* tilus_cu_function;
typedef unsigned long long tilus_cu_ptr;
/* cuLaunchKernelEx's arguments, laid out as cuda.h's CUlaunchAttribute and CUlaunchConfig. */
typedef struct {
  int id;
  char pad[4];
  union {
    char pad[64];
    struct {
      unsigned x, y, z;
    } cluster_dim;
    int cooperative;
  } value;
} tilus_cu_launch_attribute;
typedef struct {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  void* stream;
  tilus_cu_launch_attribute* attrs;
  unsigned num_attrs;
} tilus_cu_launch_config;

#define TILUS_CU_ATTR_MULTIPROCESSORS 16        /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
#define TILUS_CU_ATTR_CC_MAJOR 75               /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define TILUS_CU_ATTR_CC_MINOR 76               /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
#define TILUS_CU_ATTR_SHARED_OPTIN 97           /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
#define TILUS_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define TILUS_CU_LAUNCH_ATTR_COOPERATIVE 2      /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
#define TILUS_CU_LAUNCH_ATTR_CLUSTER_DIMENSION 4 /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */

#endif /* TILUS_CU_TYPES_H */
