// Explicit memory instructions: 32-bit shared addresses, 16-byte shared and global moves, and
// global stores predicated without a branch. On AMD st_global_if and st_global_16 are plain
// vector stores (under `if`, which the compiler turns into an exec-mask predicate); the
// shared-window forms (smem_u32, ld_shared_16, st_shared_4, st_shared_8f, add_shared_16f, st_shared_16) serve only the
// NVIDIA ldmatrix / cp.async / TMA kernels and have no AMD body.
#pragma once

#include "kgen_device/core/vendor.cuh"

namespace kgen {

#if KGEN_AMD
struct u32x4 {
  unsigned x, y, z, w;
};

template <int Words>
struct global_words {
  typedef unsigned type __attribute__((ext_vector_type(Words)));
};
template <>
struct global_words<1> {
  typedef unsigned type;
};

__device__ __forceinline__ void st_global_16(void* ptr, const u32x4& v) {
  *static_cast<typename global_words<4>::type*>(ptr) = {v.x, v.y, v.z, v.w};
}

// *ptr = w (Words = 1, 2 or 4 32-bit words, ptr aligned to their size) where pred holds.
template <int Words>
__device__ __forceinline__ void st_global_if(void* ptr, const unsigned (&w)[Words], bool pred) {
  static_assert(Words == 1 || Words == 2 || Words == 4, "1, 2 or 4 words");
  typename global_words<Words>::type v;
  if constexpr (Words == 1) {
    v = w[0];
  } else {
#pragma unroll
    for (int i = 0; i < Words; ++i) v[i] = w[i];
  }
  if (pred) *static_cast<typename global_words<Words>::type*>(ptr) = v;
}
#else

// 32-bit shared-window address of a generic pointer into shared memory (ldmatrix, cp.async).
__device__ __forceinline__ unsigned smem_u32(const void* ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}

struct u32x4 {
  unsigned x, y, z, w;
};

__device__ __forceinline__ u32x4 ld_shared_16(unsigned smem_addr) {
  u32x4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_shared_16(unsigned smem_addr, const u32x4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(smem_addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void st_shared_4(unsigned smem_addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_8f(unsigned smem_addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1,%2};" ::"r"(smem_addr), "f"(a), "f"(b) : "memory");
}

// The four floats at smem_addr (16-byte aligned) += v.
__device__ __forceinline__ void add_shared_16f(unsigned smem_addr, const float4& v) {
  float4 x;
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "r"(smem_addr) : "memory");
  asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};" ::"r"(smem_addr), "f"(x.x + v.x), "f"(x.y + v.y), "f"(x.z + v.z),
               "f"(x.w + v.w)
               : "memory");
}

__device__ __forceinline__ void st_global_16(void* ptr, const u32x4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// *ptr = w (Words = 1, 2 or 4 32-bit words, ptr aligned to their size) where pred holds, as one
// predicated global store: a C++ `if` around the store compiles to a branch with a convergence
// barrier (~4 instructions per store at sm_90a).
template <int Words>
__device__ __forceinline__ void st_global_if(void* ptr, const unsigned (&w)[Words], bool pred) {
  static_assert(Words == 1 || Words == 2 || Words == 4, "1, 2 or 4 words");
  if constexpr (Words == 4) {
    asm volatile("{\n .reg .pred p;\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n setp.ne.b32 p, %5, 0;\n"
                 " @p st.global.v4.b32 [g], {%1, %2, %3, %4};\n}"
                 :: "l"(ptr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(int(pred)) : "memory");
  } else if constexpr (Words == 2) {
    asm volatile("{\n .reg .pred p;\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n setp.ne.b32 p, %3, 0;\n"
                 " @p st.global.v2.b32 [g], {%1, %2};\n}"
                 :: "l"(ptr), "r"(w[0]), "r"(w[1]), "r"(int(pred)) : "memory");
  } else {
    asm volatile("{\n .reg .pred p;\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n setp.ne.b32 p, %2, 0;\n"
                 " @p st.global.b32 [g], %1;\n}"
                 :: "l"(ptr), "r"(w[0]), "r"(int(pred)) : "memory");
  }
}
#endif  // KGEN_AMD

}  // namespace kgen
