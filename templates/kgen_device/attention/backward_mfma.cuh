// Attention backward on AMD CDNA matrix cores (MFMA), fp16/bf16, fp32 accumulation
// (docs/attention.md §3). The call's other kernels are the row helpers of backward_rows.cuh
// (preprocess, dq_convert); the workspace rows and dQ accumulator follow backward_params.h.
//
// Key-major kernel (attention_backward_mfma_kv). Grid (ceil(n_k / (32·Waves)), heads_kv, batch);
// each wave owns 32 keys, whose K and V rows it keeps in registers as MFMA operands (loaded
// once); the block walks every query tile (BM rows, staged in LDS with their lse2 and delta) of
// every query head of its kv group, so GQA sums dK and dV in registers. Q and dO are staged
// twice from one set of loads: row-major (k = head dim) and transposed (k = query rows), so every
// operand read from LDS is 4 (gfx950: 8) consecutive elements. Per wave and 32-query block, keys
// as the MFMA's N:
//   S (32 x 32)  = Q · Kᵀ,  dP = dO · Vᵀ        A = Q / dO rows (LDS), B = the wave's K / V rows (registers)
//   P = exp2(S·scale_log2 − lse2), dS = P ∘ (dP − delta)   (in the accumulators)
//   dVᵀ += dOᵀ · P,  dKᵀ += Qᵀ · dS              A = the transposed dO / Q tiles, B chained from P / dS
// With AtomicDQ the block writes dS to LDS and computes dQ = dS · K per (32-query, 32-column)
// block (K from a transposed tile, written once), the blocks spread over the waves, adding them
// into the fp32 accumulator with atomics.
// Splits = 2 (where one block's dK/dV accumulators would not fit its VGPRs): two blocks share a
// key block (blockIdx.x = key block · 2 + split); both compute S and dP over the whole head dim,
// and split s keeps the columns [s·D/2, s·D/2 + D/2) of dK, dV and dQ.
//
// Query-major dQ kernel of the deterministic mode (attention_backward_mfma_dq): the forward's
// shape (attention_mfma::kDqWaves waves of 32 queries, K/V tiles of BN keys in LDS, queries as N):
// Sᵀ = K · Qᵀ, dPᵀ = V · dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − delta), dQᵀ += Kᵀ · dSᵀ; writes dq = scale · dQ.
#pragma once

#include "kgen_device/attention/backward_params.h"
#include "kgen_device/attention/backward_rows.cuh"
#include "kgen_device/attention/mfma_config.h"
#include "kgen_device/attention/mfma_tile.cuh"
#include "kgen_device/core/atomic.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/mfma.cuh"
#include "kgen_device/core/types.cuh"

namespace kgen {

// T: half_t or bfloat16_t. D: head dim (64 or 128). BM: query rows per tile (a multiple of 32).
// Waves: waves per block, 32 keys each. Causal: bottom-right aligned. AtomicDQ: also add dQ into
// p.dq_accum (unscaled), else leave dQ to attention_backward_mfma_dq. Splits: 1 or 2 (above).
template <class T, int D, int BM, int Waves, bool Causal, bool AtomicDQ, int Splits = 1>
__device__ __forceinline__ void attention_backward_mfma_kv(const AttentionBackwardParams& p) {
  constexpr int BN = Waves * attention_mfma::kWaveRows;
  constexpr int kThreads = attention_mfma::threads(Waves);
  constexpr int kQueryBlocks = BM / 32;
  constexpr int kColBlocks = D / 32 / Splits;  // 32-column blocks of dK, dV and dQ this block keeps
  constexpr int kChainSteps = 32 / kMfmaK;
  static_assert(D % 32 == 0 && BM % 32 == 0, "32-row MFMA tiles");
  static_assert(Splits == 1 || (Splits == 2 && D % 64 == 0), "one or two column splits");
  constexpr int kQTile = BM * attention_mfma::lds_row(D);
  constexpr int kQTileT = D * attention_mfma::lds_row_transposed(BM);
  constexpr int kDsTile = AtomicDQ ? BM * attention_mfma::lds_row(BN) : 0;
  constexpr int kKtTile = AtomicDQ ? D * attention_mfma::lds_row_transposed(BN) : 0;
  static_assert((2 * kQTile + 2 * kQTileT + kDsTile + kKtTile) * 2 + 2 * BM * 4 ==
                    attention_mfma::kv_lds_bytes(D, BM, BN, AtomicDQ),
                "LDS layout must match kv_lds_bytes");

  // lse2 and delta first: their writes' offsets fit ds_write2_b32's 8-bit fields.
  float* lse2_s = reinterpret_cast<float*>(dynamic_smem());
  float* delta_s = lse2_s + BM;
  unsigned short* qt_s = reinterpret_cast<unsigned short*>(delta_s + BM);  // D x BM: Q transposed
  unsigned short* dot_s = qt_s + kQTileT;                                  // D x BM: dO transposed
  unsigned short* q_s = dot_s + kQTileT;
  unsigned short* do_s = q_s + kQTile;
  unsigned short* ds_s = do_s + kQTile;  // AtomicDQ only
  unsigned short* kt_s = ds_s + kDsTile;                                   // AtomicDQ only: D x BN, K transposed

  const int tid = threadIdx.x;
  const int wave = wave_uniform(tid / 64);  // in a scalar register: the dQ blocks' loop branches on it
  const int lane = tid % 64;
  const int key0 = blockIdx.x / Splits * BN;
  const int cb0 = blockIdx.x % Splits * kColBlocks;  // first column block of this split
  const int kw = wave * attention_mfma::kWaveRows;  // this wave's first key in the block's tiles
  const int key = key0 + kw + mfma::c_col(lane);    // this lane's key (C and B layouts)
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  const int n_q = p.n_q, n_k = p.n_k, d = p.head_dim;
  const int diag = n_k - n_q;
  const float scale_log2 = p.scale_log2;

  const T* k_ptr = bwd_detail::head_ptr<const T>(p.k, batch, kv_head);
  const T* v_ptr = bwd_detail::head_ptr<const T>(p.v, batch, kv_head);
  // The wave's K and V rows as the B operands of S and dP, in registers for the whole kernel
  // (keys past n_k zero).
  mfma_operand k_frag[D / kMfmaK], v_frag[D / kMfmaK];
#pragma unroll
  for (int t = 0; t < D / kMfmaK; ++t) {
    k_frag[t] = mfma_detail::global_operand_vector(k_ptr, p.k.stride_n, key0 + kw, n_k, t * kMfmaK, lane);
    v_frag[t] = mfma_detail::global_operand_vector(v_ptr, p.v.stride_n, key0 + kw, n_k, t * kMfmaK, lane);
  }
  if constexpr (AtomicDQ) {
    // Kᵀ for dQ's B operand (rows past n_k repeat the last key, whose dS is 0); the first tile
    // step's barriers order it before its reads.
    mfma_detail::TileStage<BN, D, kThreads, true> kt;
    kt.load(k_ptr, p.k.stride_n, key0, n_k, tid);
    kt.store(kt_s, tid);
  }
  mfma_acc dk[kColBlocks], dv[kColBlocks];
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb) dk[cb] = dv[cb] = mfma_zero();

  // Causal: query rows before the first that sees key0 (i + diag >= key0) see none of the block.
  int m_begin = 0;
  if constexpr (Causal) m_begin = imax(0, key0 - diag) / BM * BM;

  // Q and dO of a query tile: one transposed stage each (TileStage<…, true>), whose loads take
  // 32-bit offsets from one scalar base per tile where the strides allow (every offset inside a
  // tile below 2^32 bytes; NarrowOffsets' k and v: Q's and dO's), 64-bit row addresses otherwise.
  // The walk is forced inline: hiprtc 5.2 (gfx90a) left one of its two calls outlined at fp16
  // d = 64 mfma:bm64:bn64:w2 and kept the arrays it captures in 1416 B of scratch per lane.
  // gfx950 at 32-query tiles: the transposed tiles in ChainPairLds (their operands one 16-byte
  // read each); else padded (8-byte reads).
#if defined(__gfx950__)
  constexpr bool kChainPairs = BM == 32;
#else
  constexpr bool kChainPairs = false;
#endif
  using QtLayout = typename mfma_detail::PickLayout<kChainPairs, attention_mfma::ChainPairLds, attention_mfma::PaddedLds>::type;
  using QStage = mfma_detail::TileStage<BM, D, kThreads, true, QtLayout>;
  // Chain step c of Zᵀ's operand (lds_transposed_operand) from the transposed tile tile_t.
  auto transposed_operand = [&](const unsigned short* tile_t, int row0, int col0, int c) __attribute__((always_inline)) {
#if defined(__gfx950__)
    if constexpr (kChainPairs) return mfma_detail::lds_chain_pair_operand<BM>(tile_t, row0, col0, c, lane);
#endif
    return mfma_detail::lds_transposed_operand<BM>(tile_t, row0, col0, c, lane);
  };
  auto walk = [&](const auto& offsets) __attribute__((always_inline)) {
    for (int head = kv_head * p.head_group; head < (kv_head + 1) * p.head_group; ++head) {
      const T* q_ptr = bwd_detail::head_ptr<const T>(p.q, batch, head);
      const T* do_ptr = bwd_detail::head_ptr<const T>(p.d_o, batch, head);
      const float* lse2_head = p.lse2 + bwd_detail::stat_row(p, batch, head, 0);
      const float* delta_head = p.delta + bwd_detail::stat_row(p, batch, head, 0);
      // One query tile against the block's keys. Masked: keys past n_k and above the causal
      // diagonal get P = 0; unmasked tiles (below) have none.
      // q_tile, do_tile: rows m0 of Q and dO (the narrow loads' tile bases), advanced by the walk
      // below one tile at a time rather than recomputed from m0.
      auto step = [&](int m0, const T* q_tile, const T* do_tile, auto masked) {
        // Q and dO in both layouts from one set of loads (rows past n_q repeat row n_q − 1: their
        // lse2 is +inf, so P and dS are 0 there), issued before the barrier.
        QStage qst, dost;
        if constexpr (decltype(offsets.narrow)::value) {
          const int rows_left = n_q - 1 - m0;
          qst.load(q_tile, p.q.stride_n, rows_left, offsets.k, tid);
          dost.load(do_tile, p.d_o.stride_n, rows_left, offsets.v, tid);
        } else {
          qst.load(q_ptr, p.q.stride_n, m0, n_q, tid);
          dost.load(do_ptr, p.d_o.stride_n, m0, n_q, tid);
        }
        // lse2 and delta of the tile's rows (rows past n_q: +inf and 0). With atomic dQ they are
        // loaded with Q and dO, by every thread (thread t stages row t mod BM, from row n_q − 1
        // past n_q; threads past BM write the same values again): no branch, and no wait for them
        // inside the tile. The deterministic kernel keeps the loads after the barrier in threads
        // below BM: there clang places that branch outside the tile loop, which the other form
        // lengthens (tests/amdemu/instruction_budgets.json).
        constexpr int kStatIters = AtomicDQ ? (BM + kThreads - 1) / kThreads : 0;
        float lse2_v[kStatIters + 1], delta_v[kStatIters + 1];
#pragma unroll
        for (int j = 0; j < kStatIters; ++j) {
          const int i = (tid + j * kThreads) % BM;
          const unsigned at = 4u * static_cast<unsigned>(imin(m0 + i, n_q - 1));
          // The loaded values made opaque in place, so that the compiler keeps the loads
          // unconditional (it would branch around them) and selects after.
          const float l = __builtin_bit_cast(float, opaque_u32_in_place(*reinterpret_cast<const unsigned*>(
                                                         reinterpret_cast<const char*>(lse2_head) + at)));
          const float dl = __builtin_bit_cast(float, opaque_u32_in_place(*reinterpret_cast<const unsigned*>(
                                                          reinterpret_cast<const char*>(delta_head) + at)));
          lse2_v[j] = m0 + i < n_q ? l : infinity_f32();
          delta_v[j] = m0 + i < n_q ? dl : 0.f;
        }
        __syncthreads();  // the previous tile's Q, dO, dS, lse2 and delta are consumed
        qst.store_rows(q_s, tid);
        qst.store(qt_s, tid);
        dost.store_rows(do_s, tid);
        dost.store(dot_s, tid);
        if constexpr (AtomicDQ) {
#pragma unroll
          for (int j = 0; j < kStatIters; ++j) {
            const int i = (tid + j * kThreads) % BM;
            lse2_s[i] = lse2_v[j];
            delta_s[i] = delta_v[j];
          }
        } else {
          for (int i = tid; i < BM; i += kThreads) {
            const bool valid = m0 + i < n_q;
            const long long row = bwd_detail::stat_row(p, batch, head, valid ? m0 + i : 0);
            lse2_s[i] = valid ? p.lse2[row] : infinity_f32();
            delta_s[i] = valid ? p.delta[row] : 0.f;
          }
        }
        __syncthreads();

        // One 32-query block at a time: S, dP, then P and dS in their accumulators.
        for (int qb = 0; qb < kQueryBlocks; ++qb) {
          mfma_acc pm = mfma_detail::lds_rows_times<T, D>(q_s, qb * 32, k_frag, lane);
          mfma_acc ds = mfma_detail::lds_rows_times<T, D>(do_s, qb * 32, v_frag, lane);
#pragma unroll
          for (int r = 0; r < mfma::kAccRegisters; ++r) {
            const int i = qb * 32 + mfma::c_row(lane, r);
            float pv;
            if constexpr (decltype(masked)::value)
              pv = mfma_detail::visible<Causal>(key, m0 + i, n_k, diag) ? exp2_approx(pm[r] * scale_log2 - lse2_s[i]) : 0.f;
            else
              pv = exp2_approx(pm[r] * scale_log2 - lse2_s[i]);
            ds[r] = pv * (ds[r] - delta_s[i]);
            pm[r] = pv;
          }
          mfma_operand ds_t[kChainSteps];  // dS rounded to T, as the chain steps take it
#pragma unroll
          for (int c = 0; c < kChainSteps; ++c) {
            const mfma_operand pb = mfma_detail::chained_probabilities<T>(pm, c);
            const mfma_operand db = mfma_detail::chained_operand<T>(ds, c);
            ds_t[c] = db;
#pragma unroll
            for (int cb = 0; cb < kColBlocks; ++cb) {
              dv[cb] = mfma_32x32<T>(transposed_operand(dot_s, qb * 32, (cb0 + cb) * 32, c), pb, dv[cb]);
              dk[cb] = mfma_32x32<T>(transposed_operand(qt_s, qb * 32, (cb0 + cb) * 32, c), db, dk[cb]);
            }
          }
          if constexpr (AtomicDQ) {
            // dS for dQ from the chained operands' rounded elements (gfx950 rounds a pair in one
            // instruction there): element e of step c is register chain_register(K, c, e).
#pragma unroll
            for (int c = 0; c < kChainSteps; ++c)
#pragma unroll
              for (int e = 0; e < kMfmaElements; ++e)
                ds_s[(qb * 32 + mfma::c_row(lane, mfma::chain_register(kMfmaK, c, e))) * attention_mfma::lds_row(BN) + kw +
                     mfma::c_col(lane)] = static_cast<unsigned short>(ds_t[c][e]);
          }
        }

        if constexpr (AtomicDQ) {
          __syncthreads();
          // dQ (BM x D) = dS (BM x BN) · K (BN x D), one 32x32 block per wave at a time; k runs
          // over the block's keys in the chain order of each 32-key block (the same for A and B).
          float* dq_accum = p.dq_accum + bwd_detail::stat_row(p, batch, head, 0) * d;
          for (int blk = wave; blk < kQueryBlocks * kColBlocks; blk += Waves) {
            const int qb = blk / kColBlocks, cb = cb0 + blk % kColBlocks;
            mfma_acc acc = mfma_zero();
            for (int kb = 0; kb < Waves; ++kb)
#pragma unroll
              for (int c = 0; c < kChainSteps; ++c)
                acc = mfma_32x32<T>(mfma_detail::lds_operand_chained<BN>(ds_s, qb * 32, kb * 32, c, lane),
                                    mfma_detail::lds_transposed_operand<BN>(kt_s, kb * 32, cb * 32, c, lane), acc);
#pragma unroll
            for (int r = 0; r < mfma::kAccRegisters; ++r) {
              const int row = m0 + qb * 32 + mfma::c_row(lane, r);
              if (row < n_q) red_add(dq_accum + static_cast<long long>(row) * d + cb * 32 + mfma::c_col(lane), acc[r]);
            }
          }
        }
      };
      // Query tiles from m_whole on see every key of the block (none past n_k; causal: the tile's
      // first row m0 sees the block's last key, m0 + diag ≥ key0 + BN − 1); those before are masked.
      int m_whole = n_q;
      if (key0 + BN <= n_k) m_whole = Causal ? imax(m_begin, (imax(0, key0 + BN - 1 - diag) + BM - 1) / BM * BM) : m_begin;
      int m0 = m_begin;
      // The tile bases in bytes (a step of 2·BM·stride): no shift per tile.
      const char* q_tile = reinterpret_cast<const char*>(q_ptr + m0 * p.q.stride_n);
      const char* do_tile = reinterpret_cast<const char*>(do_ptr + m0 * p.d_o.stride_n);
      const long long q_step = 2 * BM * p.q.stride_n, do_step = 2 * BM * p.d_o.stride_n;
      for (; m0 < imin(m_whole, n_q); m0 += BM, q_tile += q_step, do_tile += do_step)
        step(m0, reinterpret_cast<const T*>(q_tile), reinterpret_cast<const T*>(do_tile), mfma_detail::Flag<true>{});
      for (; m0 < n_q; m0 += BM, q_tile += q_step, do_tile += do_step)
        step(m0, reinterpret_cast<const T*>(q_tile), reinterpret_cast<const T*>(do_tile), mfma_detail::Flag<false>{});
    }
  };
  if constexpr (QStage::kNarrow) {
    if (QStage::Offsets::fits(p.q.stride_n) && QStage::Offsets::fits(p.d_o.stride_n))
      walk(mfma_detail::NarrowOffsets<QStage, QStage>{{p.q.stride_n, tid}, {p.d_o.stride_n, tid}});
    else
      walk(mfma_detail::WideOffsets{});
  } else {
    walk(mfma_detail::WideOffsets{});
  }

  if (key >= n_k) return;
  T* dk_ptr = bwd_detail::head_ptr<T>(p.dk, batch, kv_head) + static_cast<long long>(key) * p.dk.stride_n;
  T* dv_ptr = bwd_detail::head_ptr<T>(p.dv, batch, kv_head) + static_cast<long long>(key) * p.dv.stride_n;
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
    for (int r = 0; r < mfma::kAccRegisters; ++r) {
      const int col = (cb0 + cb) * 32 + mfma::c_row(lane, r);
      dk_ptr[col] = from_float<T>(p.scale * dk[cb][r]);
      dv_ptr[col] = from_float<T>(dv[cb][r]);
    }
}

// Query-major dQ kernel (deterministic mode). T, D, Causal as above; BN: keys per tile.
template <class T, int D, int BN, bool Causal>
__device__ __forceinline__ void attention_backward_mfma_dq(const AttentionBackwardParams& p) {
  constexpr int kWaves = attention_mfma::kDqWaves;
  constexpr int BM = kWaves * attention_mfma::kWaveRows;
  constexpr int kThreads = attention_mfma::threads(kWaves);
  constexpr int kKSteps = D / kMfmaK;
  constexpr int kKeyBlocks = BN / 32;
  constexpr int kColBlocks = D / 32;
  constexpr int kChainSteps = 32 / kMfmaK;
  static_assert(D % 32 == 0 && BN % 32 == 0, "32-row MFMA tiles");

  unsigned short* k_s = reinterpret_cast<unsigned short*>(dynamic_smem());
  unsigned short* v_s = k_s + BN * attention_mfma::lds_row(D);
  unsigned short* kt_s = v_s + BN * attention_mfma::lds_row(D);  // D x BN: K transposed
  static_assert(attention_mfma::kv_tiles_lds_bytes(D, BN) + D * attention_mfma::lds_row_transposed(BN) * 2 ==
                    attention_mfma::dq_lds_bytes(D, BN),
                "LDS layout must match dq_lds_bytes");

  const mfma_detail::QueryWave w = mfma_detail::query_wave<BM, Causal>(p.n_q, p.n_k, p.head_group);
  const int lane = w.lane, query = w.query;
  const int n_q = p.n_q, n_k = p.n_k;
  const float scale_log2 = p.scale_log2;

  const T* q_ptr = bwd_detail::head_ptr<const T>(p.q, w.batch, w.head);
  const T* do_ptr = bwd_detail::head_ptr<const T>(p.d_o, w.batch, w.head);
  const T* k_ptr = bwd_detail::head_ptr<const T>(p.k, w.batch, w.kv_head);
  const T* v_ptr = bwd_detail::head_ptr<const T>(p.v, w.batch, w.kv_head);

  mfma_operand q_frag[kKSteps], do_frag[kKSteps];
#pragma unroll
  for (int t = 0; t < kKSteps; ++t) {
    q_frag[t] = mfma_detail::global_operand(q_ptr, p.q.stride_n, w.q0, n_q, t * kMfmaK, lane);
    do_frag[t] = mfma_detail::global_operand(do_ptr, p.d_o.stride_n, w.q0, n_q, t * kMfmaK, lane);
  }
  const bool valid = query < n_q;
  const long long row = bwd_detail::stat_row(p, w.batch, w.head, valid ? query : 0);
  const float lse2 = valid ? p.lse2[row] : infinity_f32();
  const float delta = valid ? p.delta[row] : 0.f;
  mfma_acc dq[kColBlocks];
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb) dq[cb] = mfma_zero();

  // K in both layouts (K for Sᵀ, Kᵀ for dQ's A operand) from one set of loads, and V, issued
  // before the tile's first barrier (rows past n_k repeat the last key, whose P and dS are 0), on
  // 32-bit offsets from one scalar base per tile where the strides allow (NarrowOffsets' k and v,
  // as in the kv kernel's walk), 64-bit row addresses otherwise: two copies of the walk, chosen
  // once per kernel.
  using KStage = mfma_detail::TileStage<BN, D, kThreads, true>;
  using VStage = mfma_detail::TileStage<BN, D, kThreads, false>;
  auto walk = [&](const auto& offsets) __attribute__((always_inline)) {
    // One key tile: K, V and Kᵀ into LDS, then Sᵀ, dPᵀ, dS and dQᵀ += Kᵀ·dSᵀ. Masked: keys past
    // n_k and above the causal diagonal get P = 0; unmasked tiles (below) have none.
    auto tile = [&](int n0, auto masked) {
      {
        KStage kt;
        VStage vt;
        if constexpr (decltype(offsets.narrow)::value) {
          const int rows_left = n_k - 1 - n0;
          kt.load(k_ptr + n0 * p.k.stride_n, p.k.stride_n, rows_left, offsets.k, w.tid);
          vt.load(v_ptr + n0 * p.v.stride_n, p.v.stride_n, rows_left, offsets.v, w.tid);
        } else {
          kt.load(k_ptr, p.k.stride_n, n0, n_k, w.tid);
          vt.load(v_ptr, p.v.stride_n, n0, n_k, w.tid);
        }
        __syncthreads();  // the previous tile's K, V and Kᵀ are consumed
        kt.store_rows(k_s, w.tid);
        kt.store(kt_s, w.tid);
        vt.store_rows(v_s, w.tid);
      }
      __syncthreads();
      if (!w.active || n0 >= w.wave_end) return;  // wave-uniform
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; ++nb) {
        const mfma_acc st = mfma_detail::lds_rows_times<T, D>(k_s, nb * 32, q_frag, lane);
        mfma_acc dst = mfma_detail::lds_rows_times<T, D>(v_s, nb * 32, do_frag, lane);
#pragma unroll
        for (int r = 0; r < mfma::kAccRegisters; ++r) {
          // The select, not an exponent computed first and zeroed after: hiprtc 5.2 (gfx90a) then
          // gathers the transposed operands of the backward's kv kernel three times over.
          float pv;
          if constexpr (decltype(masked)::value)
            pv = mfma_detail::visible<Causal>(n0 + nb * 32 + mfma::c_row(lane, r), query, n_k, w.diag)
                     ? exp2_approx(st[r] * scale_log2 - lse2)
                     : 0.f;
          else
            pv = exp2_approx(st[r] * scale_log2 - lse2);
          dst[r] = pv * (dst[r] - delta);
        }
#pragma unroll
        for (int c = 0; c < kChainSteps; ++c) {
          const mfma_operand db = mfma_detail::chained_operand<T>(dst, c);
#pragma unroll
          for (int cb = 0; cb < kColBlocks; ++cb)
            dq[cb] = mfma_32x32<T>(mfma_detail::lds_transposed_operand<BN>(kt_s, nb * 32, cb * 32, c, lane), db, dq[cb]);
        }
      }
    };

    // Tiles [0, n_full) are whole for every row of the block (the forward's rule): no key past
    // n_k, none above the causal diagonal of the block's first row. The rest are masked per element.
    int n_full = n_k / BN * BN;
    if constexpr (Causal) n_full = imin(n_full, imax(w.m0 + w.diag + 1, 0) / BN * BN);
    n_full = imin(n_full, w.n_end / BN * BN);
    int n0 = 0;
    for (; n0 < n_full; n0 += BN) tile(n0, mfma_detail::Flag<false>{});
    for (; n0 < w.n_end; n0 += BN) tile(n0, mfma_detail::Flag<true>{});
  };
  if constexpr (KStage::kNarrow && VStage::kNarrow) {
    if (KStage::Offsets::fits(p.k.stride_n) && VStage::Offsets::fits(p.v.stride_n))
      walk(mfma_detail::NarrowOffsets<KStage, VStage>{{p.k.stride_n, w.tid}, {p.v.stride_n, w.tid}});
    else
      walk(mfma_detail::WideOffsets{});
  } else {
    walk(mfma_detail::WideOffsets{});
  }

  if (!valid) return;
  T* dq_ptr = bwd_detail::head_ptr<T>(p.dq, w.batch, w.head) + static_cast<long long>(query) * p.dq.stride_n;
#pragma unroll
  for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
    for (int r = 0; r < mfma::kAccRegisters; ++r) dq_ptr[cb * 32 + mfma::c_row(lane, r)] = from_float<T>(p.scale * dq[cb][r]);
}

}  // namespace kgen
