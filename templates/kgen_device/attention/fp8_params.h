// Kernel parameters and shared-memory sizes of the FP8 (E4M3) attention forward: forward_ws.cuh
// with E4m3In, and its first kernel, the V transposition of forward_fp8.cuh. Included by device
// templates and host code alike, so it uses only built-in types.
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/params.h"
#include "kgen_device/core/host_device.h"

namespace kgen {

// The descale factor of one E4M3 tensor: its stored values times
// ptr[batch · stride_b + kv_head · stride_h] are the real ones (FlashAttention-3's convention;
// both strides 0: one factor for the tensor). ptr null: 1.
struct Fp8Descale {
  const float* ptr;
  long long stride_b, stride_h;
};

// Parameters of the FP8 forward: q_map and k_map view the E4M3 q and k as 16-bit elements (two
// values each, half the head dim); v_map views the transposed V (AttentionFp8VParams.vt) the same
// way, (n_pad / 2, head_dim, heads_kv, batch) in boxes of fp8_vt_row_bytes(block_n) / 2 by head_dim;
// o_map the 16-bit o.
struct AttentionForwardFp8Params : AttentionForwardTmaParams {
  Fp8Descale descale_q, descale_k, descale_v;
};

// V of an FP8 forward transposed for its P·V product: vt is (batch, heads_kv, head_dim, n_pad)
// E4M3, contiguous, n_pad = n_k rounded up to attention_fwd::kFp8KeyTile; key n of v goes to
// column 32·(n / 32) + p, where p is the k position that stands for n in the 8-bit wgmma A
// fragment (wgmma::pack_a8), and the columns past n_k are zero. v's strides are in elements.
struct AttentionFp8VParams {
  const void* v;
  void* vt;
  long long v_stride_b, v_stride_h, v_stride_n;
  int batch, heads_kv, n_k, head_dim, n_pad;
};

namespace attention_fwd {

// The FP8 forward's tiles: 128 query rows (two consumer warpgroups) by 128 keys at both head
// dims, or by 192 keys at head dim 128. The transposed V's keys are padded to a multiple of
// kFp8KeyTile.
constexpr int kFp8KeyTile = 128;
KGEN_HOST_DEVICE constexpr bool fp8_tile_fits(int block_m, int block_n, int head_dim) {
  return block_m == 128 && (block_n == kFp8KeyTile || (block_n == 192 && head_dim == 128));
}
// The bytes of one row of a transposed V tile's column block: a tile of whole 128-key blocks in the
// 128-byte swizzle, else (192 keys) blocks of 64 keys in the 64-byte swizzle (forward_ws.cuh's
// VtTile8); v_map's box is that many bytes wide.
KGEN_HOST_DEVICE constexpr int fp8_vt_row_bytes(int block_n) { return block_n % 128 == 0 ? 128 : 64; }
// Its dynamic shared memory (one Q buffer of 128 rows, 16-bit because the epilogue stages O there;
// `stages` E4M3 K and V tiles of block_n keys), as ws_smem_bytes counts it.
KGEN_HOST_DEVICE constexpr int fp8_ws_smem_bytes(int head_dim, int stages, int block_n = kFp8KeyTile) {
  return 1024 + 128 * head_dim * 2 + stages * 2 * block_n * head_dim + kWsBarrierBytes;
}

}  // namespace attention_fwd
}  // namespace kgen
