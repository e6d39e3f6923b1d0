// Prints the layout of kgen's kernel parameter structs as JSON, compiled against kgen's own
// headers, so the emulator's driver packs kernel arguments at the offsets the kernels were built
// with: {"Struct": {"size": N, "fields": [[name, offset, size, kind], ...]}}, kind one of ptr,
// i32, i64, f32; the fields of a nested AttentionTensorArg as "q.data", "q.stride_b", .... Also the
// launch geometry of the backward's row kernels and query-major dQ kernel, from the same headers:
// {"backward_rows": {"<warps>:<head_dim>": [preprocess_block_rows, row_block_rows]},
//  "mfma_dq_block_m": rows}. VariantArgs (a variant kernel's second parameter: packed batches'
// cu_seqlens) with its alignment; its array fields have kind "zeros" (the driver leaves them 0).
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <type_traits>

#include "kgen_device/attention/backward_config.h"
#include "kgen_device/attention/backward_params.h"
#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/attention/variant_args.h"

namespace {

template <class M>
const char* kind() {
  if constexpr (std::is_array_v<M>) return "zeros";
  else if constexpr (std::is_pointer_v<M>) return "ptr";
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
// The four fields of a nested AttentionTensorArg, at their offsets in S.
#define KGEN_TENSOR(S, t)                                                                                          \
  do {                                                                                                             \
    using A = kgen::AttentionTensorArg;                                                                            \
    field(#t ".data", offsetof(S, t) + offsetof(A, data), sizeof(A::data), kind<decltype(A::data)>());             \
    field(#t ".stride_b", offsetof(S, t) + offsetof(A, stride_b), sizeof(A::stride_b), kind<decltype(A::stride_b)>()); \
    field(#t ".stride_h", offsetof(S, t) + offsetof(A, stride_h), sizeof(A::stride_h), kind<decltype(A::stride_h)>()); \
    field(#t ".stride_n", offsetof(S, t) + offsetof(A, stride_n), sizeof(A::stride_n), kind<decltype(A::stride_n)>()); \
  } while (0)

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
  std::printf("]}");

  using B = kgen::AttentionBackwardParams;
  static_assert(sizeof(kgen::AttentionTensorArg) == 32, "AttentionTensorArg: four 8-byte fields");
  std::printf(", \"AttentionBackwardParams\": {\"size\": %zu, \"fields\": [", sizeof(B));
  first_field = true;
  KGEN_TENSOR(B, q); KGEN_TENSOR(B, k); KGEN_TENSOR(B, v); KGEN_TENSOR(B, o); KGEN_TENSOR(B, d_o);
  KGEN_TENSOR(B, dq); KGEN_TENSOR(B, dk); KGEN_TENSOR(B, dv);
  KGEN_TENSOR(B, gq); KGEN_TENSOR(B, gk); KGEN_TENSOR(B, gv);
  KGEN_TENSOR(B, q_bar); KGEN_TENSOR(B, k_bar); KGEN_TENSOR(B, v_bar); KGEN_TENSOR(B, do_bar);
  KGEN_FIELD(B, lse); KGEN_FIELD(B, lse_stride_b); KGEN_FIELD(B, lse_stride_h);
  KGEN_FIELD(B, lse2); KGEN_FIELD(B, delta); KGEN_FIELD(B, row_r); KGEN_FIELD(B, row_c); KGEN_FIELD(B, dq_accum);
  KGEN_FIELD(B, batch); KGEN_FIELD(B, heads_q); KGEN_FIELD(B, heads_kv); KGEN_FIELD(B, n_q); KGEN_FIELD(B, n_k);
  KGEN_FIELD(B, head_dim); KGEN_FIELD(B, head_group); KGEN_FIELD(B, scale); KGEN_FIELD(B, scale_log2);
  KGEN_FIELD(B, stats_splits); KGEN_FIELD(B, dkv_accum);
  std::printf("]}");

  using V = kgen::VariantArgs;
  std::printf(", \"VariantArgs\": {\"size\": %zu, \"align\": %zu, \"fields\": [", sizeof(V), alignof(V));
  first_field = true;
  KGEN_FIELD(V, real); KGEN_FIELD(V, integer); KGEN_FIELD(V, tensor); KGEN_FIELD(V, stride); KGEN_FIELD(V, grad);
  KGEN_FIELD(V, grad_stride); KGEN_FIELD(V, sinks); KGEN_FIELD(V, sinks_grad); KGEN_FIELD(V, cu_seqlens_q);
  KGEN_FIELD(V, cu_seqlens_k); KGEN_FIELD(V, block_table); KGEN_FIELD(V, table_stride); KGEN_FIELD(V, page_shift);
  KGEN_FIELD(V, seqused_k); KGEN_FIELD(V, range); KGEN_FIELD(V, range_len); KGEN_FIELD(V, range_rows);
  KGEN_FIELD(V, range_lead);
  std::printf("]}");

  // Every head dim: the simt kernels (and the double backward's preprocess) take any d <= 256.
  std::printf(", \"backward_rows\": {");
  const char* sep = "";
  for (int warps : {1, 2, 4, 8})
    for (int d = 1; d <= 256; ++d) {
      std::printf("%s\"%d:%d\": [%d, %d]", sep, warps, d, kgen::attention_bwd::preprocess_block_rows(warps, d),
                  kgen::attention_bwd::row_block_rows(warps, d));
      sep = ", ";
    }
  std::printf("}, \"mfma_dq_block_m\": %d}\n", kgen::attention_mfma::kDqWaves * kgen::attention_mfma::kWaveRows);
  return 0;
}
