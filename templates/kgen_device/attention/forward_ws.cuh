// Warp-specialised Hopper attention forward (sm_90a): a producer warpgroup loads Q, K and V with
// TMA into an mbarrier ring, two or three consumer warpgroups run the wgmma main loop of
// forward_wgmma.cuh.
//
// Work split. Grid (ceil(n_q / BM), heads_q, batch) with BM = 64 · Consumers query rows, and
// 128 · (1 + Consumers) threads: warpgroup 0 is the producer (one thread issues the copies, with
// paged K/V the lanes of one warp; the warpgroup gives its registers to the consumers with
// setmaxnreg), warpgroup 1 + c is consumer c, owning query rows [64·c, 64·c + 64) of the tile.
// Causal grids walk the query tiles from the last (most keys) to the first.
//
// Shared memory (dynamic, base rounded up to 1024 bytes for the 128-byte swizzle):
//   [Q: BM x D][K_0: BN x D][V_0: BN x D] ... [K_{Stages-1}][V_{Stages-1}][barriers]
// each tile a wgmma::Sw128 layout, which is what a TMA copy with the 128-byte swizzle writes for
// a box of 64 columns (one column block). Barriers (8 bytes each): q_full, then per stage
// k_full, v_full (one arrival: the producer's expect_tx; the copies complete them) and k_empty,
// v_empty (one arrival per consumer warp once its warpgroup's wgmma have read the stage).
// Out-of-bounds rows and the columns from the head dim to D arrive as zeros from TMA.
//
// Consumer main loop (per warpgroup, intra-warpgroup overlap): Q·Kᵀ of tile j+1 and P·V of tile
// j are issued together; the softmax of tile j+1 runs while P·V is on the tensor cores; O is
// rescaled after it. With PingPong the consumers take turns to issue their wgmma (named
// barriers 1 .. Consumers, round robin), so one warpgroup's softmax runs while another's GEMMs
// occupy the tensor cores.
//
// With SplitKeys, a consumer whose rows all lie past n_q only keeps the ring and the turns going.
//
// Epilogue: O / l in 16 bits into the warpgroup's own Q rows, then one TMA store per 64-column
// block (rows past n_q and columns past the head dim are not written); LSE in the natural log,
// −inf (and O = 0) for rows that saw no key.
//
// Persistent: a grid of one block per SM walks every query tile, round by round (causal calls
// in pairs of tiles of equal key count; the others in the order of the non-persistent grid). Q
// has two buffers where they fit in shared memory (attention_fwd::ws_q_buffers), so the
// producer loads the next tile's Q and K/V while the consumers still compute and store the
// current one; with one buffer the next tile's Q and K/V wait for the current tile's stores.
// The K/V ring's stages and phases run on across tiles. A consumer arrives on q_empty once its
// TMA store has read its rows of the buffer. The ping-pong turns pass from one tile to the next
// without a break. A packed batch (alone, no variant beside it) walks the compact grid's indices
// (packed_grid.cuh) in the order a counter hands them out (Params = AttentionForwardStreamParams,
// whose flags hold the counter): the producer's warp draws and searches each tile, skips indices
// without one, and leaves it in its Q buffer's slot for the consumers (see packed_slot).
//
// Stream-K (StreamK, persistent without a mask): a grid of G blocks over T query tiles of K key
// tiles each leaves the last round of tiles to T mod G blocks. Instead each block first takes
// ⌊T / G⌋ − 1 rounds of whole tiles, strided as in the plain persistent grid (so the blocks at
// work at one time share a few heads' K and V in L2), and the (query tile, key tile) units of
// the G + T mod G tiles left are laid end to end, tile-major, and cut into G even ranges
// (⌊U / G⌋ of those U units each, one more for the first U mod G blocks). Every block's range
// holds at least K units, so a query tile spans at most two blocks. (Cutting all T·K units
// evenly instead gave each block a contiguous run of tiles, 132 heads' K and V at once: 30 %
// slower at d = 128 on an H200.)
// A block's range can begin inside a query tile (keys [j, K)): that first part's O / l and
// lse2 go to the block's slot of the workspace, and each consumer sets its flag (zeroed by the
// host before the launch). A range can end inside one (keys [0, j)): after that last part the
// block waits for the next block's flags and merges its slot into the rows before the
// epilogue. The next block wrote that slot first in its range and waits on nobody before it,
// so no block waits long or forever.
//
// SplitKeys (AttentionForwardSplitParams): the grid has tp.splits blocks per query tile, and
// block x walks the x % splits-th of ceil(num_tiles / splits) consecutive key tiles (the last
// ranges may be short or empty). Its epilogue writes the rows' O / l in fp32 and lse2 (log2
// domain, −inf for a row that saw no key) to the workspace instead of o and lse;
// attention_forward_combine (forward_combine.cuh) merges the ranges. Decode-like calls use it,
// whose few query tiles would leave most SMs idle.
//
// HeadDimV (MLA, docs/kernels/mla.md): v's and o's head dim when it is below q's, a multiple of 8,
// on the plain grid without a variant. V tiles and the epilogue's boxes cover DV = HeadDimV
// rounded up to 64 columns; Q and K keep D. With any head dims, O's accumulators and the P·V
// wgmma's N cover HeadDimV rounded up to 16 (wgmma::head_dim_width), not DV: V's columns past it are
// zero-filled and never stored.
//
// Requirements (checked by the host): 16-byte aligned pointers and strides, contiguous last
// dimension, p.head_dim == HeadDim, D a multiple of 64.
#pragma once

#include "kgen_device/attention/forward_config.h"
#include "kgen_device/attention/forward_ws_config.h"
#include "kgen_device/attention/forward_wgmma.cuh"
#include "kgen_device/attention/fp8_params.h"
#include "kgen_device/attention/packed_grid.cuh"
#include "kgen_device/core/counter.cuh"
#include "kgen_device/attention/params.h"
#include "kgen_device/attention/variant.cuh"
#include "kgen_device/core/block.cuh"
#include "kgen_device/core/flag.cuh"
#include "kgen_device/core/grid_dependency.cuh"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/schedule.cuh"
#include "kgen_device/core/tma.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/core/wgmma.cuh"
#include "kgen_device/core/wgmma_fp8.cuh"
#include "kgen_device/core/wgmma_cols.cuh"

namespace kgen {
namespace wgmma_fwd_detail {

// S = Q·Kᵀ for E4M3 Q and K (issue_qk's 8-bit form): HeadDim / 32 k-steps of 32 bytes per row,
// four to a 128-byte column block; issued and not committed.
template <class QTile, class KTile, int HeadDim, int N>
__device__ __forceinline__ void issue_qk8(float (&acc)[N], unsigned long long q_desc, unsigned smem_k) {
  const unsigned long long k_desc = wgmma::desc_sw128(smem_k, 16, 1024);
  auto k_step = [](int kk, int block_bytes) { return (kk / 4) * block_bytes + (kk % 4) * 32; };
#pragma unroll
  for (int kk = 0; kk < HeadDim / 32; ++kk)
    wgmma::Mma8<2 * N>::ss(acc, q_desc + (k_step(kk, QTile::kBlockBytes) >> 4),
                           k_desc + (k_step(kk, KTile::kBlockBytes) >> 4), kk > 0);
}

// The FP8 forward's transposed V tile: D head-dim rows of BN key bytes, K-major, as column blocks
// of D rows. A tile of whole 128-key blocks takes the 128-byte swizzle (Sw128's layout, four
// k-steps of 32 keys per row); any other multiple of 64 keys (192) takes blocks of 64-byte rows in
// the 64-byte swizzle (wgmma::desc_sw64, two k-steps per row). The producer loads one TMA box per
// block; the host encodes v_map's swizzle and box to match (attention_fwd::fp8_vt_row_bytes).
template <int D, int BN>
struct VtTile8 {
  static constexpr int kRowBytes = attention_fwd::fp8_vt_row_bytes(BN);
  static constexpr int kBlockBytes = D * kRowBytes;
  static constexpr int kBlocks = BN / kRowBytes;
  static constexpr int kBytes = D * BN;
  static_assert(BN % 64 == 0, "the transposed V tile is whole 64-key blocks");
  // The descriptor of k-step kk (keys 32·kk ..) of the tile at `smem_vt`.
  __device__ __forceinline__ static unsigned long long desc(unsigned smem_vt, int kk) {
    constexpr int kSteps = kRowBytes / 32;
    const unsigned block = smem_vt + (kk / kSteps) * kBlockBytes;
    const unsigned long long d = kRowBytes == 128 ? wgmma::desc_sw128(block, 16, 1024) : wgmma::desc_sw64(block);
    return d + (((kk % kSteps) * 32) >> 4);
  }
};

// The V tile of the warp-specialised forward: Sw128 of BN rows by DV columns, or with E4M3 the
// transposed VtTile8.
template <bool Fp8, int D, int BN, int DV>
struct ws_v_tile {
  using type = wgmma::Sw128<BN, DV>;
};
template <int D, int BN, int DV>
struct ws_v_tile<true, D, BN, DV> {
  using type = VtTile8<D, BN>;
};

// O += P·V for E4M3 as one committed group: A = P packed to E4M3 in registers (KSteps steps of 32
// keys, wgmma::pack_a8), B = the transposed V tile (VtTile) at `smem_vt` (head-dim rows of the
// tile's key bytes in pack_a8's order, K-major).
template <class VtTile, int N, int KSteps>
__device__ __forceinline__ void issue_pv8(float (&o)[N], const unsigned (&pa)[KSteps][4], unsigned smem_vt) {
  wgmma::fence_operand(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) wgmma::Mma8<2 * N>::rs(o, pa[kk], VtTile::desc(smem_vt, kk), 1);
  wgmma::commit();
}

}  // namespace wgmma_fwd_detail

// The FP8 forward's element type: q, k and v in E4M3 (float8_e4m3_t), o in Out (half_t or
// bfloat16_t). With it the kernel reads q and k as 16-bit pairs of bytes (their TMA maps view
// two E4M3 values as one 16-bit element), runs Q·Kᵀ and P·V on the 8-bit wgmma (m64nNk32), takes
// V transposed (AttentionFp8VParams: head-dim rows of key bytes, the tile a K-major B operand)
// and multiplies the scores by descale_q · descale_k and O by descale_v
// (AttentionForwardFp8Params). Plain or causal attention on the plain grid, D = 128 or 256, the
// tiles of attention_fwd::fp8_tile_fits.
template <class Out>
struct E4m3In {};
template <class T>
struct ws_elements {
  using In = T;
  using Out = T;
  static constexpr bool kFp8 = false;
};
template <class O>
struct ws_elements<E4m3In<O>> {
  using In = float8_e4m3_t;
  using Out = O;
  static constexpr bool kFp8 = true;
};

// T: half_t or bfloat16_t, or E4m3In<half_t or bfloat16_t> (above). D: the tile's head dim (64 .. 256). BN: keys per tile. Stages: K/V
// buffers in the ring. Causal: bottom-right mask. HeadDim: the tensors' head dim, a multiple of
// 8 in (D − 64, D]. PingPong: the consumers take turns to issue their wgmma. SplitKeys: one key
// range per block, partial results to the workspace (Params = AttentionForwardSplitParams).
// Persistent: the grid's blocks walk the query tiles (not with SplitKeys; a packed batch's take
// their tiles from a counter: Params = AttentionForwardStreamParams). Consumers: 2 or 3
// warpgroups of 64 query rows (three only where 160 registers hold a consumer: the 64-column tile).
// StreamK: a persistent grid without a mask cuts the key tiles of its last query tiles evenly over
// its blocks (Params = AttentionForwardStreamParams; see "Stream-K" above). Variant: the score
// step's modification, mask and sinks (variant.cuh), with its inputs `va` (not with StreamK; no
// sinks with SplitKeys, whose combine kernel does not add them).
template <class T, int D, int BN, int Stages, bool Causal, int HeadDim = D, bool PingPong = true, bool SplitKeys = false,
          bool Persistent = false, int Consumers = 2, bool StreamK = false, class Variant = NoVariant,
          int HeadDimV = HeadDim, class Params>
__device__ __forceinline__ void attention_forward_ws(const Params& tp, const VariantArgs* va = nullptr) {
  using TI = typename ws_elements<T>::In;    // q, k and v
  using TO = typename ws_elements<T>::Out;   // o
  constexpr bool kFp8 = ws_elements<T>::kFp8;
  static_assert(is_same<TO, half_t>::value || is_same<TO, bfloat16_t>::value,
                "the warp-specialised kernel writes half_t or bfloat16_t");
  static_assert(D % 64 == 0 && D <= 256, "D must be a multiple of 64");
  static_assert(!kFp8 || (D % 128 == 0 && HeadDim == D && attention_fwd::fp8_tile_fits(64 * Consumers, BN, D) &&
                          !SplitKeys && !Persistent && !StreamK && is_same<Variant, NoVariant>::value),
                "the FP8 forward runs D = 128 or 256 on its tiles (attention_fwd::fp8_tile_fits), plain or causal, on "
                "the plain grid");
  static_assert(HeadDim % 8 == 0 && HeadDim > D - 64 && HeadDim <= D, "HeadDim must pad to D");
  static_assert(HeadDimV % 8 == 0 && HeadDimV > 0 && HeadDimV <= HeadDim, "HeadDimV must be a multiple of 8 up to HeadDim");
  static_assert(HeadDimV == HeadDim || (!kFp8 && !SplitKeys && !Persistent && is_same<Variant, NoVariant>::value),
                "v's own head dim runs plain or causal attention on the plain grid");
  static_assert(BN == 64 || BN == 80 || BN == 96 || BN == 112 || BN == 128 || BN == 176 || BN == 192,
                "BN must be 64, 80, 96, 112, 128, 176 or 192");
  static_assert(Stages >= 2 && Stages <= 4, "the ring keeps 2 to 4 K/V stages");
  static_assert(!(Persistent && SplitKeys), "a persistent grid does not split keys");
  static_assert(Consumers == 2 || Consumers == 3, "two or three consumer warpgroups");
  static_assert(!StreamK || (Persistent && !Causal), "stream-K runs on a persistent grid without a mask");
  static_assert(!StreamK || !(kVariantScores<Variant> || Variant::kSinks), "stream-K runs plain attention only");
  static_assert(!SplitKeys || !Variant::kSinks, "a split-keys launch does not add sinks");
  static_assert(!Variant::kPacked || !(SplitKeys || StreamK), "packed batches run on the plain or persistent grid");
  static_assert(!(Variant::kPacked && Persistent) || !(kVariantScores<Variant> || Variant::kMask || Variant::kSinks),
                "a packed batch runs on the persistent grid without a variant beside it");
  static_assert(!Variant::kPaged || !Persistent, "paged K/V runs on the plain or split-keys grid");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kConsumers = Consumers;
  constexpr int BM = 64 * kConsumers;
  constexpr int kConsumerWarps = 4 * kConsumers;
  constexpr int DV = attention_fwd::ws_v_cols(D, HeadDim, HeadDimV);  // V's and O's columns
  constexpr int kQBuffers = attention_fwd::ws_q_buffers_v(D, DV, BN, Stages, BM, Persistent);
  // The Q buffer holds the 16-bit O rows of the epilogue; Q and K take D · bytes / 2 columns of
  // 16 bits (E4M3: two values per column); V is BN x D, or with E4M3 transposed, D rows of BN bytes.
  constexpr int kInBytes = element_traits<TI>::bytes;
  constexpr int DU = D * kInBytes / 2;
  using QTile = wgmma::Sw128<BM, D>;
  using QInTile = wgmma::Sw128<BM, DU>;  // the bytes a Q load brings
  using KTile = wgmma::Sw128<BN, DU>;
  using VTile = typename wgmma_fwd_detail::ws_v_tile<kFp8, D, BN, DV>::type;
  static_assert(1024 + kQBuffers * QTile::kBytes + Stages * (KTile::kBytes + VTile::kBytes) +
                        attention_fwd::kWsBarrierBytes ==
                    (kFp8 ? attention_fwd::fp8_ws_smem_bytes(D, Stages, BN)
                          : attention_fwd::ws_smem_bytes_v(D, DV, BN, Stages, kQBuffers, BM)),
                "shared memory layout must match ws_smem_bytes_v");
  constexpr int kSRegs = BN / 2;
  // O's accumulators: P·V's columns (E4M3's P·V reads V transposed, all D columns).
  constexpr int kORegs = (kFp8 ? DV : wgmma::head_dim_width(HeadDimV)) / 2;
  constexpr int kBoxBytes64 = 64 * 128;  // one 64-row box of a column block

  const AttentionForwardParams& p = tp.a;
  const int tid = threadIdx.x;
  // On the 64-column tile the warpgroup index, proven warp-uniform to ptxas, schedules 2–4.5 %
  // faster (H100); at D = 128 the same shuffle cost 0.4–1.7 %, so only D = 64 takes it.
  const int wg = D == 64 ? shfl32(tid / 128, 0) : tid / 128;
  int splits = 1;
  if constexpr (SplitKeys) {
    splits = tp.splits;
    allow_dependent_grid();  // the combine kernel may be scheduled (it waits for this grid)
  }
  // The block's query tiles: one (blockIdx) or, persistent, rounds of the grid over every
  // query tile. Without a mask round r takes tile r·gridDim.x + blockIdx.x (query tiles fastest,
  // then heads, then batches). Causal tiles go in pairs of equal key count, x and
  // q_tiles − 1 − x of one head (the middle tile alone when q_tiles is odd): the block takes
  // pair (r / 2)·gridDim.x + blockIdx.x, its heavier tile in round r and its lighter one in
  // round r + 1, so every block gets about the same number of key tiles, and the blocks at work
  // at one time share a few heads' K and V in L2.
  const int q_tiles = (p.n_q + BM - 1) / BM;
  wgmma_fwd_detail::QueryBlock qb;
  // Packed batches: the block's sequence (offsets of its rows in the tensors; see variant.cuh).
  // Dense batches keep it zero and address the TMA boxes by batch.
  SequenceRows seq{0, 0, 0, 0, 0};
  auto slot = [&](const wgmma_fwd_detail::QueryBlock& qb) { return Variant::kPacked ? 0 : qb.batch; };
  // A packed batch's tile (sequence, head, tile in the sequence's order): three ints after the
  // shared key range's slot (below; kWsBarrierBytes leaves room for both after the barriers),
  // written before the barriers' initialisation. On a persistent grid the producer's warp walks
  // the compact grid's indices and hands each tile to the consumers in the slot of its Q buffer
  // (three ints per buffer), written before the Q load's arrival on q_full; a sequence of −1
  // (a plain arrival) ends the walk.
  volatile int* packed_slot = nullptr;
  PackedTile packed_next{-1, 0, 0};  // the producer's tile, for the slot of its Q buffer
  unsigned packed_ahead = 0;  // the producer's next draw from the tile counter (below)
  const unsigned smem_raw = smem_u32(dynamic_smem());
  const unsigned smem_q0 = (smem_raw + 1023u) & ~1023u;
  auto smem_q = [&](int buf) { return smem_q0 + buf * QTile::kBytes; };
  auto smem_k = [&](int stage) {
    return smem_q0 + kQBuffers * QTile::kBytes + stage * (KTile::kBytes + VTile::kBytes);
  };
  auto smem_v = [&](int stage) { return smem_k(stage) + KTile::kBytes; };
  const unsigned bars = smem_k(Stages);
  auto k_full = [&](int stage) { return bars + 8 * (1 + stage); };
  auto v_full = [&](int stage) { return bars + 8 * (1 + Stages + stage); };
  auto k_empty = [&](int stage) { return bars + 8 * (1 + 2 * Stages + stage); };
  auto v_empty = [&](int stage) { return bars + 8 * (1 + 3 * Stages + stage); };
  // Q buffer `buf`: q_full first (bars), the second buffer's and both q_empty after the ring's.
  auto q_full = [&](int buf) { return buf == 0 ? bars : bars + 8 * (1 + 4 * Stages); };
  auto q_empty = [&](int buf) { return bars + 8 * (2 + 4 * Stages + buf); };
  // A masked variant's key range on a grid of one query tile per block: the first consumer thread
  // narrows it (its warp's lanes share the work, variant_narrow) and hands it to the producer
  // through two ints after the barriers and range_full, so the producer's single thread neither
  // repeats the narrowing nor holds its state in its 24 registers; it loads Q meanwhile.
  constexpr bool kSharedRange = Variant::kMask && !Persistent && !StreamK;
  auto range_full = [&] { return bars + 8 * (4 + 4 * Stages); };
  volatile int* const range_slot =
      reinterpret_cast<volatile int*>(dynamic_smem() + (bars + 8 * (5 + 4 * Stages) - smem_raw));
  packed_slot = range_slot + 2;
  // Stream-K: the current part's key tiles [part_first, part_first + part_tiles).
  int part_first = 0, part_tiles = 0;
  // Sets qb to the block's next query tile and advances `round`; false when there is none.
  auto next_tile = [&](int& round) {
    if constexpr (StreamK) {
      // `round` counts the units this block has done: first dp_rounds whole tiles, strided as
      // in the plain persistent grid, then its even share of the U units of the tiles left after
      // them (⌊U / G⌋, one more for the first U mod G blocks).
      // The host keeps T·K below 2^31 (a call with more runs plain persistent rounds).
      const int key_tiles = (p.n_k + BN - 1) / BN, grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
      const int tiles = q_tiles * p.heads_q * p.batch, dp_rounds = imax(tiles / grid - 1, 0);
      int w;
      if (round < dp_rounds * key_tiles) {
        w = round / key_tiles * grid + b;
        part_first = 0, part_tiles = key_tiles;
        round += key_tiles;
      } else {
        const int base = dp_rounds * grid * key_tiles, units = tiles * key_tiles - base;
        const int per_block = units / grid, extra = units - per_block * grid;  // the first `extra` take one more
        const int begin = base + b * per_block + imin(b, extra), end = begin + per_block + (b < extra);
        const int unit = begin + round - dp_rounds * key_tiles;
        if (unit >= end) return false;
        w = unit / key_tiles;
        part_first = unit - w * key_tiles;
        part_tiles = imin(key_tiles - part_first, end - unit);
        round += part_tiles;
      }
      qb = wgmma_fwd_detail::QueryBlock::at<BM, BN, Causal>(p, w % q_tiles, w / q_tiles % p.heads_q,
                                                           w / q_tiles / p.heads_q);
      return true;
    } else if constexpr (Variant::kPacked) {
      // The compact grid's tile (packed_tile); a causal sequence's heaviest tile first. One block
      // per index: found by the first warp before the barriers' initialisation. Persistent: the
      // producer's warp draws the indices and searches them (indices without a tile skipped); the
      // consumers read the tile from their Q buffer's slot once it is full.
      PackedTile pt;
      if constexpr (Persistent) {
        if (wg == 0) {
          // The block's first index is blockIdx.x, every later one the grid's size plus the next
          // value of a counter (zero at launch, in tp.flags), so a block takes the next tile when
          // it is ready for one. Static rounds (blockIdx.x + r·gridDim.x) give blocks unequal work
          // where a head's index count divides the grid (a block then meets the same place of every
          // head: its heaviest causal tile, or its idle index) and where lengths vary. The next
          // index is drawn before this one's search, so the draw's latency passes under the tile.
          const long long total = p.batch > 0 ? static_cast<long long>(p.heads_q) * (p.n_q / BM + p.batch) : 0;
          for (;;) {
            const unsigned drawn = static_cast<unsigned>(shfl32(static_cast<int>(packed_ahead), 0));
            const long long w = round == 0 ? static_cast<long long>(blockIdx.x) : gridDim.x + static_cast<long long>(drawn);
            ++round;
            if (w >= total) return false;
            if (tid == 0) packed_ahead = fetch_add_relaxed(reinterpret_cast<unsigned*>(tp.flags), 1u);
            pt = packed_tile<BM>(va->cu_seqlens_q, p.batch, p.heads_q, w);
            if (pt.seq >= 0) break;
          }
          packed_next = pt;
        } else {
          const int buf = round % kQBuffers;
          tma::wait(q_full(buf), (round / kQBuffers) & 1);
          pt = {packed_slot[3 * buf], packed_slot[3 * buf + 1], packed_slot[3 * buf + 2]};
          if (pt.seq < 0) return false;
          ++round;
        }
      } else {
        if (round++ > 0 || packed_slot[0] < 0) return false;
        pt = {packed_slot[0], packed_slot[1], packed_slot[2]};
      }
      seq = sequence_rows<Variant>(va, pt.seq, p.n_q, p.n_k);
      qb = wgmma_fwd_detail::QueryBlock::at<BM, BN, Causal>(p, Causal ? (seq.n_q + BM - 1) / BM - 1 - pt.tile : pt.tile,
                                                           pt.lane, pt.seq);
      qb.set_lengths<BM, BN, Causal>(seq.n_q, seq.n_k);
      return true;
    } else if constexpr (!Persistent) {
      qb = wgmma_fwd_detail::QueryBlock::of<BM, BN, Causal, !SplitKeys>(p, splits);
      if constexpr (Variant::kPaged) {
        seq = sequence_rows<Variant>(va, qb.batch, p.n_q, p.n_k);
        qb.set_lengths<BM, BN, Causal>(seq.n_q, seq.n_k);
      }
      return round++ == 0;
    } else {
      const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
      if constexpr (Causal) {
        const int pairs = (q_tiles + 1) / 2;
        for (;; ++round) {
          const int pair = (round >> 1) * grid + b;
          if (pair >= pairs * p.heads_q * p.batch) return false;
          const int lighter = pair % pairs, rest = pair / pairs;
          const int x = round & 1 ? lighter : q_tiles - 1 - lighter;
          if ((round & 1) && x == q_tiles - 1 - lighter) continue;  // the middle tile has no partner
          ++round;
          qb = wgmma_fwd_detail::QueryBlock::at<BM, BN, Causal>(p, x, rest % p.heads_q, rest / p.heads_q);
          return true;
        }
      } else {
        const int w = round * grid + b;
        if (w >= q_tiles * p.heads_q * p.batch) return false;
        ++round;
        qb = wgmma_fwd_detail::QueryBlock::at<BM, BN, Causal>(p, w % q_tiles, w / q_tiles % p.heads_q,
                                                             w / q_tiles / p.heads_q);
        return true;
      }
    }
  };
  // The key tiles [first_tile, first_tile + num_tiles) of a query block.
  int split = 0;
  if constexpr (SplitKeys) split = blockIdx.x % splits;
  // The score step's context of a query block (variants only).
  auto variant_at = [&](const wgmma_fwd_detail::QueryBlock& qb) {
    return VariantAt{qb.batch, qb.head, qb.n_q, qb.n_k, p.scale, 1.f / p.scale};
  };
  // warp: every lane of the caller's warp calls it together (variant_narrow).
  auto key_range = [&](const wgmma_fwd_detail::QueryBlock& qb, int& first_tile, int& num_tiles, bool warp) {
    first_tile = 0, num_tiles = qb.num_tiles;
    if constexpr (Variant::kMask) {
      // The tiles between the first and the last that the mask does not prove empty.
      int end = qb.num_tiles;
      const int q1 = imin(qb.m0 + BM, qb.n_q) - 1;
      if (warp) variant_key_tiles<Variant, BN, true>(*va, variant_at(qb), qb.m0, q1, first_tile, end);
      else variant_key_tiles<Variant, BN>(*va, variant_at(qb), qb.m0, q1, first_tile, end);
      num_tiles = imax(end - first_tile, 0);
    }
    if constexpr (StreamK) first_tile = part_first, num_tiles = part_tiles;
    if constexpr (SplitKeys) {
      const int begin = first_tile, tiles = num_tiles;
      const int per_split = (tiles + splits - 1) / splits;
      first_tile = begin + imin(split * per_split, tiles);
      num_tiles = imin(per_split, tiles - (first_tile - begin));
    }
  };

  // Q tile `qb` into the buffer of the block's local-th tile.
  auto load_q = [&](const wgmma_fwd_detail::QueryBlock& qb, int local) {
    const int buf = local % kQBuffers;
    if (Persistent && local >= kQBuffers) tma::wait(q_empty(buf), (local / kQBuffers - 1) & 1);
    if constexpr (Variant::kPacked && Persistent)
      packed_slot[3 * buf] = packed_next.seq, packed_slot[3 * buf + 1] = packed_next.lane,
                      packed_slot[3 * buf + 2] = packed_next.tile;
    tma::arrive_expect_tx(q_full(buf), QInTile::kBytes);
#pragma unroll
    for (int b = 0; b < DU / 64; ++b)
#pragma unroll
      for (int c = 0; c < kConsumers; ++c)
        tma::load_4d(smem_q(buf) + b * QTile::kBlockBytes + c * kBoxBytes64, &tp.q_map, 64 * b,
                     sequence_row0<Variant>(va, qb.batch) + qb.m0 + 64 * c, qb.head, slot(qb), q_full(buf));
  };

  if constexpr (Variant::kPacked && !Persistent) {
    if (tid < 32) {
      const PackedTile pt = packed_tile<BM>(va->cu_seqlens_q, p.batch, p.heads_q, packed_block());
      if (tid == 0) packed_slot[0] = pt.seq, packed_slot[1] = pt.lane, packed_slot[2] = pt.tile;
    }
  }
  if (tid == 0) {
    for (int b = 0; b < kQBuffers; ++b) tma::barrier_init(q_full(b), 1);
    if constexpr (Persistent)
      for (int b = 0; b < kQBuffers; ++b) tma::barrier_init(q_empty(b), kConsumers);
    if constexpr (kSharedRange) tma::barrier_init(range_full(), 1);
    for (int s = 0; s < Stages; ++s) {
      tma::barrier_init(k_full(s), 1);
      tma::barrier_init(v_full(s), 1);
      tma::barrier_init(k_empty(s), kConsumerWarps);
      tma::barrier_init(v_empty(s), kConsumerWarps);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer: one thread issues the copies; the ring's stage s of its g-th tile waits for
    // the consumers to release tile g − Stages; a Q buffer waits for the stores of its last tile.
    // Paged K/V: the whole first warp runs the loop, its lanes issuing the K/V boxes (below); a
    // packed batch on a persistent grid: the whole warp, which searches the tiles together ----
    tma::release_registers<24>();
    constexpr bool kWarpProducer = Variant::kPaged || (Variant::kPacked && Persistent);
    if (kWarpProducer ? tid < 32 : tid == 0) {
      const bool issuer = !kWarpProducer || tid == 0;  // the thread that issues copies and arrivals
      int ring = 0;  // K/V tiles loaded so far
      int local = 0;
      for (int round = 0; next_tile(round); ++local) {
        int first_tile, num_tiles;
        if constexpr (kSharedRange) {
          if (issuer) load_q(qb, local);  // under the consumer's narrowing
          tma::wait(range_full(), 0);
          first_tile = range_slot[0], num_tiles = range_slot[1];
        } else {
          key_range(qb, first_tile, num_tiles, false);
        }
        const int kv_head = qb.head / p.head_group;
        if constexpr (!kSharedRange)
          if (issuer) load_q(qb, local);
        // Paged K/V: the tile at key n0 takes one box of min(BN, page_size) rows (the map's) per
        // page it spans and column block. The warp's lanes issue the boxes together, box
        // j = 32·r + lane in round r (page j / (D / 64), column block j % (D / 64)), and read their
        // pages from the block table a tile ahead, so the reads' latency passes under the waits.
        constexpr int kBoxRounds = Variant::kPaged ? (BN / 16 * (D / 64) + 31) / 32 : 1;
        const int box_rows = Variant::kPaged ? imin(BN, 1 << va->page_shift) : BN;
        struct Pages {
          int of[kBoxRounds];
        };
        auto read_pages = [&](int n0) -> Pages {
          Pages pages{};
          if constexpr (Variant::kPaged) {
#pragma unroll
            for (int r = 0; r < kBoxRounds; ++r) {
              const int i = (32 * r + tid) / (D / 64);
              if (i * box_rows < BN) pages.of[r] = paged_row(va, qb.batch, n0 + i * box_rows, qb.n_k - 1).page;
            }
          }
          return pages;
        };
        // The K or V tile at key n0: one box per column block (`v_tile`: V's DV columns), or with
        // paged K/V one per page and column block (every lane of the warp calling).
        auto load_kv = [&](const TensorMapBytes* map, unsigned dst, int n0, unsigned bar, const Pages& pages,
                           bool v_tile) {
          if constexpr (Variant::kPaged) {
            const int row = n0 & ((1 << va->page_shift) - 1);
#pragma unroll
            for (int r = 0; r < kBoxRounds; ++r) {
              const int j = 32 * r + tid, i = j / (D / 64), b = j % (D / 64);
              if (i * box_rows < BN)
                tma::load_4d(dst + b * KTile::kBlockBytes + i * box_rows * 128, map, 64 * b, row, kv_head, pages.of[r],
                             bar);
            }
          } else if (issuer) {
#pragma unroll
            for (int b = 0; b < (v_tile ? DV : DU) / 64; ++b)
              tma::load_4d(dst + b * KTile::kBlockBytes, map, 64 * b, sequence_row0<Variant, true>(va, qb.batch) + n0,
                           kv_head, slot(qb), bar);
          }
        };
        // The E4M3 V tile at key n0: one box of the transposed V per column block, its D rows of
        // the block's key bytes.
        auto load_v = [&](unsigned dst, int n0, unsigned bar, const Pages& pages) {
          if constexpr (kFp8) {
#pragma unroll
            for (int b = 0; b < VTile::kBlocks; ++b)
              tma::load_4d(dst + b * VTile::kBlockBytes, &tp.v_map, (n0 + b * VTile::kRowBytes) / 2, 0, kv_head,
                           qb.batch, bar);
          } else {
            load_kv(&tp.v_map, dst, n0, bar, pages, true);
          }
        };
        Pages next_pages = num_tiles > 0 ? read_pages(first_tile * BN) : Pages{};
        for (int tile = 0; tile < num_tiles; ++tile, ++ring) {
          const int stage = ring % Stages, use = ring / Stages;
          const int n0 = (first_tile + tile) * BN;
          const Pages pages = next_pages;
          if (tile + 1 < num_tiles) next_pages = read_pages(n0 + BN);
          if (use > 0) tma::wait(k_empty(stage), (use - 1) & 1);
          if (issuer) tma::arrive_expect_tx(k_full(stage), KTile::kBytes);
          load_kv(&tp.k_map, smem_k(stage), n0, k_full(stage), pages, false);
          if (use > 0) tma::wait(v_empty(stage), (use - 1) & 1);
          if (issuer) tma::arrive_expect_tx(v_full(stage), VTile::kBytes);
          load_v(smem_v(stage), n0, v_full(stage), pages);
        }
      }
      if constexpr (Variant::kPacked && Persistent) {
        // The end of the walk: sequence −1 in the next Q buffer's slot, once its last tile's
        // consumers are done with it.
        const int buf = local % kQBuffers;
        if (issuer) {
          if (local >= kQBuffers) tma::wait(q_empty(buf), (local / kQBuffers - 1) & 1);
          packed_slot[3 * buf] = -1;
          tma::arrive(q_full(buf));
        }
      }
    }
    return;
  }

  // ---- consumers ----
  // 24 + 2·240 or 24 + 3·160 registers per thread index: within the 64K register file.
  tma::claim_registers<kConsumers == 2 ? 240 : 160>();
  const int cw = wg - 1;  // consumer index: query rows [64·cw, 64·cw + 64) of the tile
  const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  // The scores' units (E4M3: times the block's descale_q · descale_k, set per query tile).
  float scale_log2 = variant_softmax_log2<Variant>(p.scale_log2);

  // Ping-pong: consumer c waits at barrier 1 + c before issuing wgmma and lets the next one
  // (c + 1 modulo the consumers) go after. The last consumer opens the first turn for consumer
  // 0; the turns then go round through every tile of the block. The last consumer's last
  // hand-over has no issue to wait for it: consumer 0 takes it at the end, so every arrival is
  // matched by a wait.
  auto begin_issue = [&] {
    if constexpr (PingPong) tma::barrier_sync(1 + cw, 2 * 128);
  };
  auto end_issue = [&] {
    if constexpr (PingPong) {
      if constexpr (kConsumers == 2) tma::barrier_arrive(2 - cw, 2 * 128);
      else tma::barrier_arrive(cw == kConsumers - 1 ? 1 : 2 + cw, 2 * 128);
    }
  };
  if constexpr (PingPong)
    if (cw == kConsumers - 1) tma::barrier_arrive(1, 2 * 128);
  // A stage is released once every warp of every consumer has passed its wgmma wait.
  auto release = [&](unsigned bar) {
    __syncwarp();
    if (lane == 0) tma::arrive(bar);
  };
  auto parity = [](int ring) { return static_cast<unsigned>((ring / Stages) & 1); };

  int ring = 0;  // K/V tiles consumed before this query tile
  for (int round = 0, local = 0; next_tile(round); ++local) {
    const int m0 = qb.m0, head = qb.head, batch = qb.batch, n_q = qb.n_q, n_k = qb.n_k, diag = qb.diag;
    // E4M3: the factors of this (batch, kv head).
    auto descale = [&](const Fp8Descale& f) {
      return f.ptr == nullptr ? 1.f : f.ptr[batch * f.stride_b + (head / p.head_group) * f.stride_h];
    };
    if constexpr (kFp8) scale_log2 = p.scale_log2 * descale(tp.descale_q) * descale(tp.descale_k);
    int first_tile, num_tiles;
    key_range(qb, first_tile, num_tiles, true);
    if constexpr (kSharedRange)
      if (tid == 128) {
        range_slot[0] = first_tile, range_slot[1] = num_tiles;
        tma::arrive(range_full());
      }
    const int buf = local % kQBuffers;
    const int wg_row0 = m0 + cw * 64;
    const int row0 = wg_row0 + warp * 16 + g;  // this thread's first fragment row (the other: + 8)

    if ((SplitKeys || kConsumers == 3) && wg_row0 >= n_q) {
      // ---- a consumer whose 64 rows all lie past n_q (decode calls of up to 64 rows with
      // SplitKeys, the last query tile with three consumers): it computes and stores nothing, but
      // takes its ping-pong turns and releases each stage once it was filled, so the ring's phases
      // stay those of the other consumers; in a persistent grid it gives its Q rows back as soon
      // as that Q has arrived.
      // (Two-consumer kernels without SplitKeys keep their code as measured: their idle rows are
      // computed and never stored.) ----
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = (ring + tile) % Stages;
        begin_issue();
        end_issue();
        tma::wait(k_full(stage), parity(ring + tile));
        release(k_empty(stage));
        tma::wait(v_full(stage), parity(ring + tile));
        release(v_empty(stage));
      }
      if (num_tiles > 0) {
        begin_issue();
        end_issue();
      }
      ring += num_tiles;
      if constexpr (Persistent) {
        // After this tile's Q has arrived: an arrival can then never count toward the buffer's
        // earlier use, even where the tiles have no keys and no turns hold this consumer back.
        tma::wait(q_full(buf), (local / kQBuffers) & 1);
        if (tid % 128 == 0) tma::arrive(q_empty(buf));
      }
      continue;
    }

    const unsigned long long q_desc = wgmma::desc_sw128(smem_q(buf) + cw * kBoxBytes64, 16, 1024);
    float o[kORegs];
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
    auto issue_s = [&](float (&acc)[kSRegs], int stage) {
      if constexpr (kFp8) wgmma_fwd_detail::issue_qk8<QTile, KTile, HeadDim>(acc, q_desc, smem_k(stage));
      else wgmma_fwd_detail::issue_qk<T, QTile, KTile, HeadDim>(acc, q_desc, smem_k(stage));
    };
    // P's k-steps: 16 keys each, or 32 with E4M3.
    constexpr int kPSteps = BN / (32 / kInBytes);
    auto issue_pv = [&](const unsigned (&pa)[kPSteps][4], int stage) {
      if constexpr (kFp8) wgmma_fwd_detail::issue_pv8<VTile>(o, pa, smem_v(stage));
      else wgmma_fwd_detail::issue_pv<T, VTile>(o, pa, smem_v(stage));
    };
    // P into the fragment of the next P·V: 16 bits, or E4M3 in pack_a8's order.
    auto pack_p = [&](unsigned (&pa)[kPSteps][4], const float (&s)[kSRegs]) {
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        if constexpr (kFp8) wgmma::pack_a8(pa[kk], s, kk);
        else wgmma::pack_a<T>(pa[kk], s, kk);
      }
    };
    auto needs_mask = [&](int n0) { return n0 + BN > n_k || (Causal && n0 + BN - 1 > wg_row0 + diag); };

    float row_max[2] = {-infinity_f32(), -infinity_f32()};
    float row_sum[2] = {0.f, 0.f};
    VariantAt at{};
    if constexpr (kVariantScores<Variant> || Variant::kSinks) at = variant_at(qb);
    VariantFullSpan full;  // the key tiles this consumer's rows see in full (variants with a mask)
    if constexpr (Variant::kMask)
      full = variant_full_key_tiles<Variant, BN>(*va, at, wg_row0, imin(wg_row0 + 63, n_q - 1), first_tile,
                                                 first_tile + num_tiles, false);
    // The score step of key tile `kt`: the variant (if any), then the mask and the online softmax.
    auto score_step = [&](float (&s)[kSRegs], float (&alpha)[2], int kt) {
      const int n0 = kt * BN;
      if constexpr (kVariantScores<Variant>) {
        const bool masked = needs_mask(n0) || variant_partial<Variant>(full, kt);
        variant_fragment<Variant, Causal, BN / 8>(
            *va, at, [&](int j, int i) -> float& { return s[4 * j + i]; }, row0, n0, t, masked);
        wgmma_fwd_detail::mask_softmax<BN, Causal, kFp8>(s, row_max, row_sum, alpha, n0, n_k, row0, diag, t,
                                                         scale_log2, false);
      } else {
        wgmma_fwd_detail::mask_softmax<BN, Causal, kFp8>(s, row_max, row_sum, alpha, n0, n_k, row0, diag, t,
                                                         scale_log2, needs_mask(n0));
      }
    };

    unsigned pa[kPSteps][4];
    tma::wait(q_full(buf), (local / kQBuffers) & 1);
    if (num_tiles > 0) {
      const int stage = ring % Stages;
      tma::wait(k_full(stage), parity(ring));
      float s[kSRegs];
      begin_issue();
      wgmma::fence();
      issue_s(s, stage);
      wgmma::commit();
      end_issue();
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      release(k_empty(stage));
      float alpha[2];
      score_step(s, alpha, first_tile);
      pack_p(pa, s);
    }
    for (int tile = 0; tile + 1 < num_tiles; ++tile) {
      const int next = (ring + tile + 1) % Stages, stage = (ring + tile) % Stages;
      tma::wait(k_full(next), parity(ring + tile + 1));
      float s[kSRegs];
      begin_issue();
      wgmma::fence();
      issue_s(s, next);
      wgmma::commit();
      tma::wait(v_full(stage), parity(ring + tile));
      issue_pv(pa, stage);
      end_issue();
      wgmma::wait<1>();  // Q·Kᵀ of tile + 1 done; P·V of tile may still run
      wgmma::fence_operand(s);
      release(k_empty(next));
      float alpha[2];
      score_step(s, alpha, first_tile + tile + 1);
      // E4M3: the score step under this tile's P·V (the row sums depend on every exponential); in
      // 16 bits the other consumer's matrix products cover it, and ptxas's order was faster.
      if constexpr (kFp8) end_block_after(row_sum[0]);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      release(v_empty(stage));
      wgmma_fwd_detail::scale_rows<kFp8>(o, alpha);
      pack_p(pa, s);
    }
    if (num_tiles > 0) {  // P·V of the last tile
      const int stage = (ring + num_tiles - 1) % Stages;
      tma::wait(v_full(stage), parity(ring + num_tiles - 1));
      begin_issue();
      issue_pv(pa, stage);
      end_issue();
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      if constexpr (Persistent) release(v_empty(stage));
    }
    ring += num_tiles;

    if constexpr (StreamK) {
      // A part that begins inside its query tile (keys [j, K)) writes the slot; one that ends
      // inside it (keys [0, j)) merges the next block's.
      const bool part_writes = first_tile > 0, part_merges = first_tile == 0 && num_tiles < qb.num_tiles;
      if (part_writes || part_merges) {
        // ---- a query tile cut between two blocks: this block's slot (a range that begins inside
        // the tile) or the next block's (one that ends inside it), rows of the tile, D columns ----
        const unsigned slot = blockIdx.x + (part_merges ? 1u : 0u);
        float* const o_slot = tp.o_partial + static_cast<long long>(slot) * BM * D;
        float* const lse_slot = tp.lse_partial + static_cast<long long>(slot) * BM;
        unsigned long long* flag = tp.flags + slot * kConsumers + cw;
        const int slot_row0 = cw * 64 + warp * 16 + g;
        if (part_writes) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(row_sum[h]);
            const float inv_l = l > 0.f ? 1.f / l : 0.f;
            float* out = o_slot + (slot_row0 + 8 * h) * D;
#pragma unroll
            for (int j = 0; j < kORegs / 4; ++j)
              *reinterpret_cast<float2*>(out + 8 * j + 2 * t) =
                  make_float2(o[4 * j + 2 * h] * inv_l, o[4 * j + 2 * h + 1] * inv_l);
            if (t == 0)
              lse_slot[slot_row0 + 8 * h] =
                  l > 0.f ? row_max[h] * scale_log2 + log2_approx(l) : -infinity_f32();
          }
          fence_gpu();
          tma::barrier_sync(1 + kConsumers + cw, 128);
          if (tid % 128 == 0) {
            flag_publish(flag, 1);
            tma::arrive(q_empty(buf));
          }
          continue;
        }
        // Merge the next block's part: both parts rescaled to the larger of their lse2.
        if (tid % 128 == 0) flag_wait(flag, 1);
        tma::barrier_sync(1 + kConsumers + cw, 128);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = slot_row0 + 8 * h;
          const float own = row_max[h] * scale_log2, other = ld_global_gpu_f1(lse_slot + r);
          const float top = fmaxf(own, other);
          const bool none = top == -infinity_f32();
          const float keep = none ? 0.f : exp2_approx(own - top), take = none ? 0.f : exp2_approx(other - top);
          row_sum[h] = row_sum[h] * keep + (t == 0 ? take : 0.f);
#pragma unroll
          for (int j = 0; j < kORegs / 4; ++j) {
            float x, y;
            ld_global_gpu_f2(o_slot + r * D + 8 * j + 2 * t, x, y);
            o[4 * j + 2 * h] = o[4 * j + 2 * h] * keep + x * take;
            o[4 * j + 2 * h + 1] = o[4 * j + 2 * h + 1] * keep + y * take;
          }
          if (!none) row_max[h] = top / scale_log2;
        }
      }
    }

    if constexpr (SplitKeys) {
      // ---- split epilogue: this range's O / l and lse2 of the rows below n_q, fp32 ----
      wgmma_fwd_detail::store_split_rows<HeadDim>(tp, o, row_sum, row_max, split, batch, head, row0, n_q, t, scale_log2);
      continue;
    }

    // ---- epilogue: O / l into this consumer's Q rows, one TMA store per column block; LSE ----
    if constexpr (kFp8) {
      const float dv = descale(tp.descale_v);
#pragma unroll
      for (int i = 0; i < kORegs; ++i) o[i] *= dv;
    }
    const int q0 = sequence_row0<Variant>(va, batch);
    float* lse_ptr = p.lse == nullptr ? nullptr : p.lse + batch * p.lse_stride_b + head * p.lse_stride_h + q0;
    wgmma_fwd_detail::stage_output<TO, QTile, kORegs, Variant>(smem_q(buf), o, row_sum, row_max, cw * 64 + warp * 16 + g,
                                                             t, m0, n_q, scale_log2, lse_ptr, va, head);
    if constexpr (Variant::kPacked) {
      // A packed sequence's last rows: a TMA box would run into the next sequence's rows, so each
      // warp stores its own staged rows below n_q.
      if (wg_row0 + 64 > n_q) {
        __syncwarp();
        TO* o_ptr = static_cast<TO*>(p.o) + head * p.o_stride_h + static_cast<long long>(q0) * p.o_stride_n;
        wgmma_fwd_detail::store_warp_rows<TO, QTile, D, HeadDim>(smem_q(buf), o_ptr, p.o_stride_n,
                                                               cw * 64 + warp * 16, m0, n_q, lane);
        if constexpr (Persistent) {
          // The buffer goes back once the warpgroup's four warps have read their rows (before
          // the next Q's copy writes it).
          tma::fence_proxy_async();
          tma::barrier_sync(1 + kConsumers + cw, 128);
          if (tid % 128 == 0) tma::arrive(q_empty(buf));
        }
        continue;
      }
    }
    tma::fence_proxy_async();
    tma::barrier_sync(1 + kConsumers + cw, 128);
    if (tid % 128 == 0) {
#pragma unroll
      for (int b = 0; b < DV / 64; ++b)
        tma::store_4d(&tp.o_map, smem_q(buf) + b * QTile::kBlockBytes + cw * kBoxBytes64, 64 * b, q0 + wg_row0,
                      head, slot(qb));
      tma::store_commit();
      tma::store_wait_read();
      if constexpr (Persistent) tma::arrive(q_empty(buf));
    }
  }
  // The last consumer's last hand-over (see the turns above).
  if constexpr (PingPong)
    if (cw == 0) tma::barrier_sync(1, 2 * 128);
#endif
}

}  // namespace kgen
