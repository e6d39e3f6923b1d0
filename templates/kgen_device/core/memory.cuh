// Shared-memory plumbing: the dynamic smem base, 32-bit shared addresses, 16-byte moves.
#pragma once

namespace kgen {

// Base of the kernel's dynamic shared memory (128-byte aligned). Every template declares it the
// same way so several can live in one translation unit.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char kgen_dynamic_smem[];
  return kgen_dynamic_smem;
}

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

__device__ __forceinline__ void st_shared_4(unsigned smem_addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_global_16(void* ptr, const u32x4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

}  // namespace kgen
