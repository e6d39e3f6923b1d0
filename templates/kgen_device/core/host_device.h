// KGEN_HOST_DEVICE: marks the plain constexpr helpers that host code and device templates share
// (tile geometry, MFMA lane layouts). Under NVRTC/nvcc they must be __host__ __device__; on the
// host, and in clang's HIP compiles (where constexpr functions serve both sides), it is empty.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KGEN_HOST_DEVICE __host__ __device__
#else
#define KGEN_HOST_DEVICE
#endif
