// Attention forward on AMD CDNA matrix cores (MFMA), fp16/bf16 inputs, fp32 accumulation,
// online softmax; the same parameters, masking (bottom-right causal, rows past n_q, keys past
// n_k) and outputs (O, natural-log LSE) as the other forward families (docs/attention.md §2).
//
// Work split. Grid (ceil(n_q / BM), heads_q, batch); BM / 32 waves of 64 lanes, each owning 32
// query rows. The block stages K and V tiles of BN keys in LDS, static (their size depends on the
// target): unpadded and swizzled on gfx90a and gfx942 (two blocks of d = 128, 64 keys per compute
// unit), padded on gfx950 (mfma_config.h's SwizzledLds and PaddedLds). Per wave, with
// the queries as the MFMA's N dimension throughout:
//   Sᵀ (BN x 32)  = K · Qᵀ      A = K rows from LDS, B = Qᵀ kept in registers for the kernel
//   Oᵀ (D x 32)  += Vᵀ · Pᵀ     A = V read transposed from LDS, B = Pᵀ chained from Sᵀ's
//                               accumulators (mfma_layout.h's chain order, no data movement)
// In the C layout a lane owns one query (lane mod 32) and 16 keys (or head-dim columns) per 32,
// so the row max and sum are in-lane over the keys plus one exchange between the wavefront's
// halves, and the rescale of O is per lane. Softmax in the log2 domain with the scale folded in,
// as the simt kernel (m = running max of raw scores; 0 replaces an all −inf reference).
#pragma once

#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/attention/mfma_tile.cuh"
#include "kgen_device/attention/params.h"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/mfma.cuh"
#include "kgen_device/core/types.cuh"

namespace kgen {

// T: half_t or bfloat16_t. D: head dim (64 or 128; p.head_dim == D). BM: query rows per block
// (32 per wave). BN: keys per tile (a multiple of 32). Causal: bottom-right aligned mask.
template <class T, int D, int BM, int BN, bool Causal>
__device__ __forceinline__ void attention_forward_mfma(const AttentionForwardParams& p) {
  static_assert(D % 32 == 0 && BM % attention_mfma::kWaveRows == 0 && BN % 32 == 0, "32-row MFMA tiles");
  constexpr int kWaves = BM / attention_mfma::kWaveRows;
  constexpr int kThreads = attention_mfma::threads(kWaves);
  constexpr int kKSteps = D / kMfmaK;      // k-steps of K·Qᵀ over the head dim
  constexpr int kKeyBlocks = BN / 32;      // 32-key blocks of a tile
  constexpr int kColBlocks = D / 32;       // 32-column blocks of O
  constexpr int kChainSteps = 32 / kMfmaK; // k-steps of Vᵀ·Pᵀ over one key block
  // The LDS operands read in groups, one wait per group (operands_together). gfx950: 4 of K's
  // and 4 Vᵀ operands (every column block of one chain step at d = 128, of both at d = 64); main
  // loop, non-MFMA instructions per MFMA (with the row sum's dot products below): d = 128 7.97 →
  // 7.41 (waits 35 → 12 per tile), d = 64 with 128-key tiles 10.22 → 9.81 (waits 29 → 13), where
  // one read a wait gives 10.22 and other groups 7.41-7.53 and 9.88-10.06. gfx90a: 4 of K's (two
  // 16-byte reads), bf16 d = 128 4.63 → 4.47, fp16 d = 128 causal 4.38 → 4.23, d = 64 6.25 → 6.16
  // and 5.77 → 5.66; at d = 64 8 (a key block's four reads), 6.09 and 5.59 (at d = 128 16 B of
  // scratch; Vᵀ operands in groups too: more). gfx942 keeps one read a wait: groups cost it more
  // than the waits they save (bf16 d = 64 6.08 → 6.27, d = 128 4.34 → 4.63).
#if defined(__gfx942__)
  constexpr int kKGroup = 2;
#elif defined(__gfx90a__)
  constexpr int kKGroup = D == 64 ? 8 : 4;
#else
  constexpr int kKGroup = 4;
#endif
  constexpr int kChainGroup = 4 / kColBlocks;  // gfx950: chain steps of a group of Vᵀ operands
  static_assert(kColBlocks * kChainGroup == 4 && (32 / kMfmaK) % kChainGroup == 0, "whole groups of 4 Vᵀ operands");
#if defined(__gfx950__)
  using Lds = attention_mfma::PaddedLds;
#else
  using Lds = attention_mfma::SwizzledLds;
#endif
  constexpr int kKTile = Lds::kSwizzled ? BN * D : BN * attention_mfma::lds_row(D);
  constexpr int kLdsElements = attention_mfma::forward_lds_bytes(D, BN, Lds::kSwizzled) / 2;
  static_assert(kKTile + (Lds::kSwizzled ? D * BN : D * attention_mfma::lds_row_transposed(BN)) == kLdsElements,
                "LDS layout must match forward_lds_bytes");

  __shared__ __attribute__((aligned(16))) unsigned short lds[kLdsElements];
  unsigned short* k_s = lds;            // BN x D, row-major
  unsigned short* vt_s = lds + kKTile;  // D x BN: V transposed

  mfma_detail::QueryWave w = mfma_detail::query_wave<BM, Causal>(p.n_q, p.n_k, p.head_group);
  // Wave-uniform (run() branches on it around barriers): from the wave index in a scalar register.
  w.active = w.m0 + wave_uniform(w.wave) * attention_mfma::kWaveRows < p.n_q;
  const int lane = w.lane;
  const int n_q = p.n_q, n_k = p.n_k;
  const float scale_log2 = p.scale_log2;

  const T* q_ptr = static_cast<const T*>(p.q) + w.batch * p.q_stride_b + w.head * p.q_stride_h;
  const T* k_ptr = static_cast<const T*>(p.k) + w.batch * p.k_stride_b + w.kv_head * p.k_stride_h;
  const T* v_ptr = static_cast<const T*>(p.v) + w.batch * p.v_stride_b + w.kv_head * p.v_stride_h;

  mfma_operand q_frag[kKSteps];
#pragma unroll
  for (int t = 0; t < kKSteps; ++t) {
    // The K tile's k-steps: in column order (padded), in 16-byte reads' order (swizzled).
    int col0 = t * kMfmaK;
#if !defined(__gfx950__)
    col0 = mfma_detail::k_unit_column(t, lane) - mfma::a_k(kMfmaK, lane, 0);
#endif
    q_frag[t] = mfma_detail::global_operand(q_ptr, p.q_stride_n, w.q0, n_q, col0, lane);
  }
  mfma_acc o[kColBlocks];
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb) o[cb] = mfma_zero();
  float row_max = -infinity_f32();  // running max of this lane's query's raw scores
  float row_sum = 0.f;              // this lane's part of l (its half's keys)

  // The next tile's K and V in registers: loaded while the block computes on the current one.
#if !defined(__gfx950__)
  const mfma_detail::SwizzledReads<D, BN> reads(lane);
#endif
  mfma_detail::TileStage<BN, D, kThreads, false, Lds> k_next;
  mfma_detail::TileStage<BN, D, kThreads, true, Lds> v_next;
  if (w.n_end > 0) {
    k_next.load(k_ptr, p.k_stride_n, 0, n_k, w.tid);
    v_next.load(v_ptr, p.v_stride_n, 0, n_k, w.tid);
  }

  // One tile: its K and V into LDS, the next tile's loads issued, then Sᵀ, the online softmax of
  // this lane's query and Oᵀ += Vᵀ·Pᵀ. The general step masks keys past n_k and above the causal
  // diagonal (−inf) and clamps the next tile's rows at n_k; a whole tile (below) needs neither,
  // and its wave is active and sees every key of it.
  auto tile = [&](int n0, auto whole, const auto& offsets) {
    __syncthreads();  // every wave finished the previous tile
    k_next.store(k_s, w.tid);
    v_next.store(vt_s, w.tid);
    __syncthreads();
    if (decltype(whole)::value || n0 + BN < w.n_end) {
      if constexpr (decltype(offsets.narrow)::value) {
        if constexpr (decltype(whole)::value) {
          k_next.load_whole(k_ptr + (n0 + BN) * p.k_stride_n, offsets.k, w.tid);
          v_next.load_whole(v_ptr + (n0 + BN) * p.v_stride_n, offsets.v, w.tid);
        } else {
          const int rows_left = n_k - 1 - (n0 + BN);
          k_next.load(k_ptr + (n0 + BN) * p.k_stride_n, p.k_stride_n, rows_left, offsets.k, w.tid);
          v_next.load(v_ptr + (n0 + BN) * p.v_stride_n, p.v_stride_n, rows_left, offsets.v, w.tid);
        }
      } else {
        k_next.load(k_ptr, p.k_stride_n, n0 + BN, n_k, w.tid);
        v_next.load(v_ptr, p.v_stride_n, n0 + BN, n_k, w.tid);
      }
    }
    if (!decltype(whole)::value && (!w.active || n0 >= w.wave_end)) return;  // wave-uniform

    mfma_acc s[kKeyBlocks];
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
#if defined(__gfx950__)
      s[nb] = mfma_detail::lds_rows_times<T, D, kKGroup>(k_s, nb * 32, q_frag, lane);
#else
      s[nb] = reads.template k_rows_times<T, kKGroup>(k_s, nb * 32, q_frag);
#endif
    }

    float mx = row_max;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb)
#pragma unroll
      for (int r = 0; r < mfma::kAccRegisters; ++r) {
        if constexpr (!decltype(whole)::value)
          if (!mfma_detail::visible<Causal>(n0 + nb * 32 + mfma::c_row(lane, r), w.query, n_k, w.diag))
            s[nb][r] = -infinity_f32();
        mx = fmaxf(mx, s[nb][r]);
      }
    mx = fmaxf(mx, swap_wave_halves(mx));
    const float ref = mx == -infinity_f32() ? 0.f : mx * scale_log2;
    const float alpha = exp2_approx(row_max * scale_log2 - ref);
    row_max = mx;
    row_sum *= alpha;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) o[cb] *= alpha;
    // P = 2^(s·scale − ref), two at a time (packed fp32 FMA), each pair rounded to T into one
    // register (the chained operands' words). The row sum: on gfx950 of the rounded pairs, one
    // dot product with (1, 1) a pair (add_pair: v_dot2c_f32_bf16 / _f16, which LLVM does not
    // split into halves next to an MFMA as it does packed sums), in two partial sums, so that l
    // sums the probabilities O is weighted by; elsewhere of P unrounded, a packed sum a pair.
    // gfx942 keeps two partial sums, pair by pair, which leaves clang independent pairs to
    // interleave: gfx942's main loop bf16 d = 128 4.55 → 4.34 non-MFMA instructions per MFMA, fp16
    // d = 128 causal 4.63 → 4.38, d = 64 (128-key tiles) 6.56 → 6.08 and 6.52 → 6.06. gfx90a's
    // code is the same at d = 128 and at d = 64 longer with fp16 (5.77 → 5.88): one sum there.
    unsigned pw[kKeyBlocks][mfma::kAccRegisters / 2];
#if defined(__gfx950__)
    float part[2] = {row_sum, 0.f};
#else
#if defined(__gfx90a__)
    constexpr int kSums = 1;
#else
    constexpr int kSums = 2;
#endif
    mfma_detail::mfma_f32x2 sum2[kSums];
#pragma unroll
    for (int i = 0; i < kSums; ++i) sum2[i] = {i == 0 ? row_sum : 0.f, 0.f};
#endif
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb)
#pragma unroll
      for (int r = 0; r < mfma::kAccRegisters; r += 2) {
        mfma_detail::mfma_f32x2 x = mfma_detail::mfma_f32x2{s[nb][r], s[nb][r + 1]} * scale_log2 - ref;
        x = mfma_detail::mfma_f32x2{exp2_approx(x[0]), exp2_approx(x[1])};
#if defined(__gfx950__)
        pw[nb][r / 2] = mfma_detail::pack_probabilities<T>(x);
        part[r / 2 % 2] = add_pair<T>(pw[nb][r / 2], part[r / 2 % 2]);
#else
        sum2[r / 2 % kSums] += x;
        pw[nb][r / 2] = mfma_detail::pack_probabilities<T>(x);
#endif
      }
#if defined(__gfx950__)
    row_sum = part[0] + part[1];
#else
#pragma unroll
    for (int i = 1; i < kSums; ++i) sum2[0] += sum2[i];
    row_sum = sum2[0][0] + sum2[0][1];
#endif

    // Oᵀ += Vᵀ · Pᵀ, Pᵀ chained from the score accumulators.
#if defined(__gfx950__)
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb)
#pragma unroll
      for (int c0 = 0; c0 < kChainSteps; c0 += kChainGroup) {
        mfma_operand vt[kChainGroup * kColBlocks];
#pragma unroll
        for (int c = 0; c < kChainGroup; ++c)
#pragma unroll
          for (int cb = 0; cb < kColBlocks; ++cb)
            vt[c * kColBlocks + cb] = mfma_detail::lds_transposed_operand<BN>(vt_s, nb * 32, cb * 32, c0 + c, lane);
        operands_together(vt);
#pragma unroll
        for (int c = 0; c < kChainGroup; ++c) {
          const mfma_operand pt = mfma_detail::chained_words(pw[nb], c0 + c);
#pragma unroll
          for (int cb = 0; cb < kColBlocks; ++cb) o[cb] = mfma_32x32<T>(vt[c * kColBlocks + cb], pt, o[cb]);
        }
      }
#else
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb)
#pragma unroll
      for (int c = 0; c < kChainSteps; ++c) {
        const mfma_operand pt = mfma_detail::chained_words(pw[nb], c);
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb) {
          const mfma_operand vt = reads.vt_operand(vt_s, nb * 32, cb * 32, c);
          o[cb] = mfma_32x32<T>(vt, pt, o[cb]);
        }
      }
#endif
  };

  // Tiles [0, n_full) are whole for every row of the block: no key past n_k, none above the
  // causal diagonal of the block's first row (key ≤ m0 + diag). The rest are masked per element.
  int n_full = n_k / BN * BN;
  if constexpr (Causal) n_full = imin(n_full, imax(w.m0 + w.diag + 1, 0) / BN * BN);
  n_full = imin(n_full, w.n_end / BN * BN);
  // Whole tiles: an active wave's tiles below n_full that a tile below n_end follows (the next
  // tile's rows are all below n_k); it sees every key of them (n0 < n_full implies n0 < wave_end).
  // The other tiles (at most one more per block without causal masking, about (BM + BN) / BN
  // with it) take the general step, as does every tile of an inactive wave (the same barriers; it
  // returns after the loads).
  const int n_whole = imin(n_full, w.n_end - 2 * BN + 1);
  // The next tile's loads take 32-bit offsets from one scalar base per tile where the strides
  // allow (every offset inside a tile below 2^32 bytes), 64-bit addresses per row otherwise.
  auto run = [&](auto offsets) {
    int n0 = 0;
    if (w.active)  // wave-uniform
      for (; n0 < n_whole; n0 += BN) {
        if constexpr (decltype(offsets.narrow)::value) {
          offsets.k.make_opaque();
          offsets.v.make_opaque();
        }
        tile(n0, mfma_detail::Flag<true>{}, offsets);
      }
    for (; n0 < w.n_end; n0 += BN) tile(n0, mfma_detail::Flag<false>{}, offsets);
  };
  if constexpr (decltype(k_next)::kNarrow && decltype(v_next)::kNarrow) {
    if (decltype(k_next)::Offsets::fits(p.k_stride_n) && decltype(v_next)::Offsets::fits(p.v_stride_n))
      run(mfma_detail::NarrowOffsets<decltype(k_next), decltype(v_next)>{{p.k_stride_n, w.tid}, {p.v_stride_n, w.tid}});
    else
      run(mfma_detail::WideOffsets{});
  } else {
    run(mfma_detail::WideOffsets{});
  }

  const float l = row_sum + swap_wave_halves(row_sum);
  if (!w.active || w.query >= n_q) return;
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
  T* o_ptr = static_cast<T*>(p.o) + w.batch * p.o_stride_b + w.head * p.o_stride_h + static_cast<long long>(w.query) * p.o_stride_n;
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
    for (int r = 0; r < mfma::kAccRegisters; ++r) o_ptr[cb * 32 + mfma::c_row(lane, r)] = from_float<T>(o[cb][r] * inv_l);
  if (p.lse != nullptr && lane < 32)
    p.lse[w.batch * p.lse_stride_b + w.head * p.lse_stride_h + w.query] =
        l > 0.f ? (row_max * scale_log2 + log2_approx(l)) * kLn2 : -infinity_f32();
}

}  // namespace kgen
