// Prints the layout of kgen's kernel parameter structs as JSON, compiled against kgen's own
// headers, so the emulator's driver packs kernel arguments at the offsets the kernels were built
// with: {"Struct": {"size": N, "fields": [[name, offset, size, kind], ...]}}, kind one of ptr,
// i32, i64, f32.
#include <cstddef>
#include <cstdio>
#include <type_traits>

#include "kgen_device/attention/params.h"

namespace {

template <class M>
const char* kind() {
  if constexpr (std::is_pointer_v<M>) return "ptr";
  else if constexpr (std::is_same_v<M, float>) return "f32";
  else if constexpr (std::is_integral_v<M> && sizeof(M) == 8) return "i64";
  else if constexpr (std::is_integral_v<M> && sizeof(M) == 4) return "i32";
  else return "unknown";
}

bool first_field = true;
void field(const char* name, std::size_t offset, std::size_t size, const char* k) {
  std::printf("%s[\"%s\", %zu, %zu, \"%s\"]", first_field ? "" : ", ", name, offset, size, k);
  first_field = false;
}

}  // namespace

#define KGEN_FIELD(S, f) field(#f, offsetof(S, f), sizeof(S::f), kind<decltype(S::f)>())

int main() {
  using F = kgen::AttentionForwardParams;
  std::printf("{\"AttentionForwardParams\": {\"size\": %zu, \"fields\": [", sizeof(F));
  KGEN_FIELD(F, q); KGEN_FIELD(F, k); KGEN_FIELD(F, v); KGEN_FIELD(F, o); KGEN_FIELD(F, lse);
  KGEN_FIELD(F, q_stride_b); KGEN_FIELD(F, q_stride_h); KGEN_FIELD(F, q_stride_n);
  KGEN_FIELD(F, k_stride_b); KGEN_FIELD(F, k_stride_h); KGEN_FIELD(F, k_stride_n);
  KGEN_FIELD(F, v_stride_b); KGEN_FIELD(F, v_stride_h); KGEN_FIELD(F, v_stride_n);
  KGEN_FIELD(F, o_stride_b); KGEN_FIELD(F, o_stride_h); KGEN_FIELD(F, o_stride_n);
  KGEN_FIELD(F, lse_stride_b); KGEN_FIELD(F, lse_stride_h);
  KGEN_FIELD(F, batch); KGEN_FIELD(F, heads_q); KGEN_FIELD(F, heads_kv); KGEN_FIELD(F, n_q); KGEN_FIELD(F, n_k);
  KGEN_FIELD(F, head_dim); KGEN_FIELD(F, head_group); KGEN_FIELD(F, scale); KGEN_FIELD(F, scale_log2);
  std::printf("]}}\n");
  return 0;
}
