// The CUDA driver API, loaded with dlopen at first use so that kgen runs (compile-only) on a
// machine with no driver. Types come from the toolkit's cuda.h; no library is linked.
#pragma once

#include <cuda.h>

#include <string>

namespace kgen {

#define KGEN_CUDA_DRIVER_FUNCTIONS(X)                                   \
  X(cuInit, "cuInit")                                                   \
  X(cuDriverGetVersion, "cuDriverGetVersion")                           \
  X(cuGetErrorString, "cuGetErrorString")                               \
  X(cuGetErrorName, "cuGetErrorName")                                   \
  X(cuDeviceGetCount, "cuDeviceGetCount")                               \
  X(cuDeviceGet, "cuDeviceGet")                                         \
  X(cuDeviceGetName, "cuDeviceGetName")                                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                       \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2")                            \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")               \
  X(cuCtxGetCurrent, "cuCtxGetCurrent")                                 \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                 \
  X(cuCtxGetDevice, "cuCtxGetDevice")                                   \
  X(cuCtxSynchronize, "cuCtxSynchronize")                               \
  X(cuModuleLoadData, "cuModuleLoadData")                               \
  X(cuModuleUnload, "cuModuleUnload")                                   \
  X(cuModuleGetFunction, "cuModuleGetFunction")                         \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                           \
  X(cuFuncGetAttribute, "cuFuncGetAttribute")                           \
  X(cuLaunchKernel, "cuLaunchKernel")                                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                        \
    "cuOccupancyMaxActiveBlocksPerMultiprocessor")                      \
  X(cuMemAlloc, "cuMemAlloc_v2")                                        \
  X(cuMemFree, "cuMemFree_v2")                                          \
  X(cuMemFreeAsync, "cuMemFreeAsync")                                   \
  X(cuMemPoolCreate, "cuMemPoolCreate")                                 \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute")                     \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")                 \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")                          \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                                    \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2")                                    \
  X(cuMemsetD8, "cuMemsetD8_v2")                                        \
  X(cuMemsetD32, "cuMemsetD32_v2")                                      \
  X(cuMemsetD32Async, "cuMemsetD32Async")                               \
  X(cuPointerGetAttribute, "cuPointerGetAttribute")                     \
  X(cuStreamCreate, "cuStreamCreate")                                   \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                              \
  X(cuStreamSynchronize, "cuStreamSynchronize")                         \
  X(cuEventCreate, "cuEventCreate")                                     \
  X(cuEventDestroy, "cuEventDestroy_v2")                                \
  X(cuEventRecord, "cuEventRecord")                                     \
  X(cuEventSynchronize, "cuEventSynchronize")                           \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2")                       \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")

// Function table of the loaded driver.
struct CudaDriver {
#define KGEN_DECLARE(name, symbol) decltype(&::name) name = nullptr;
  KGEN_CUDA_DRIVER_FUNCTIONS(KGEN_DECLARE)
#undef KGEN_DECLARE
  // Optional (null on drivers without it or before 12.3): launches with attributes, for
  // programmatic dependent launches (GpuDriver::launch_after_prior).
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;
};

// The driver, loaded and initialised once (cuInit). Throws kgen::Error(no_device) with one
// sentence saying why when libcuda cannot be loaded or no GPU is usable.
const CudaDriver& cuda_driver();

// Whether a driver and at least one GPU are usable (never throws).
bool cuda_available(std::string* why_not = nullptr);

// Throws kgen::Error(cuda_error) naming `what` and the driver's message unless r is success.
void cuda_check(CUresult r, const char* what);

}  // namespace kgen
