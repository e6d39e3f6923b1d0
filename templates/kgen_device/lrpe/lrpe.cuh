// lrpe_cosine and md_lrpe_cosine kernels (docs/lrpe.md): o = [act(x)·cos Θ, act(x)·sin Θ]
// and its backward dx = act'(x) ⊙ (dO_cos·cos Θ + dO_sin·sin Θ), fp32 math.
//
// Work split. Grid (gridDim.x, heads | 1, slice groups); block (x, y, z) covers rows
// [x·rows_per_block, min(n, (x + 1)·rows_per_block)) of Fold slices (b, h): b = z·Fold + j with
// h = y, or (theta shared by heads, fold_heads) b·heads + h = z·Fold + j. The slices of a block
// share every angle (it does not depend on b, nor on h when theta is shared), so each thread
// computes the sin/cos of a row once and applies them to Fold rows of x: the transcendental
// cost per element is divided by Fold, and Rows·Fold independent 16-byte loads are in flight. Sequence-parallel ("sp")
// launches give each block one pass of Rows rows per thread; block-parallel ("bp") launches
// give each block a long stretch of the sequence (gridDim.x = splits) that it walks. Inside a
// block, row_group threads (a power of two <= 32, aligned lanes of one warp) share a row,
// lane i owning features [i·V, i·V + V); a block pass covers Threads / row_group rows, Rows
// passes of Fold slices are loaded before any is computed (Rows·Fold·V elements per thread in
// flight).
// Every thread runs the same number of passes (rows past the end load nothing and store
// nothing), so the row reductions of softmax over features can shuffle with a full mask.
//
// Softmax over the sequence needs whole columns: a first kernel (lrpe_column_stats) walks the
// block's rows keeping per-column online statistics (a lazily moved reference near the max and
// Σ e; for the backward also Σ e·g, from which c = Σ p·g follows), merges them over the block
// and writes one partial per (b, h, split, column); the apply kernel merges the splits'
// partials once per block and then normalises, walking the grid and each block's rows backwards
// so that it first reads the rows the statistics kernel read last (in L2). The forward's
// statistics kernel reads one slice per block (lrpe_stats_fold) and issues each step's loads
// before the previous step's exponentials.
#pragma once

#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/lrpe/params.h"
#include "kgen_device/lrpe/rotate.cuh"

namespace kgen {
namespace lrpe {

// Where the thread sits: its lane within the row, its row slot, the block's rows.
struct Placement {
  int lane, slot, rows_per_pass, row_begin, row_end;
};

// The block's grid coordinates. Reverse walks the grid backwards: the apply kernel of softmax over
// the sequence starts with the rows the statistics kernel read last, which L2 still holds.
struct BlockCoord {
  int x, y, z;
};

template <bool Reverse>
__device__ __forceinline__ BlockCoord block_coord() {
  if constexpr (Reverse)
    return {static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(gridDim.y - 1 - blockIdx.y),
            static_cast<int>(gridDim.z - 1 - blockIdx.z)};
  else
    return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
}

template <int Threads>
__device__ __forceinline__ Placement placement(const LrpeParams& p, int block_x) {
  Placement w;
  w.lane = threadIdx.x & (p.row_group - 1);
  w.slot = threadIdx.x >> p.row_group_log2;
  w.rows_per_pass = Threads >> p.row_group_log2;
  w.row_begin = block_x * p.rows_per_block;
  w.row_end = imin(p.n, w.row_begin + p.rows_per_block);
  return w;
}

// What every kernel of a block starts from: its placement, columns, and per slice its (b, h),
// whether it exists (the last group may be partial) and its row pointers (offset to the
// thread's first feature; slice 0's for slices that do not exist).
template <class T, int V, int Fold, bool Md>
struct BlockView {
  Placement w;
  int split;  // the block's stretch of the sequence (grid x)
  bool vec;
  Columns<V, Md> col;
  int b[Fold], h[Fold];
  bool ok[Fold];
  const T* x[Fold];
  const T* go[Fold];  // dO (backward)
  T* out[Fold];       // o or dx
};

template <class T, int V, int Threads, int Fold, bool Md>
__device__ __forceinline__ BlockView<T, V, Fold, Md> block_view(const LrpeParams& p, BlockCoord blk) {
  BlockView<T, V, Fold, Md> v;
  v.split = blk.x;
  v.w = placement<Threads>(p, blk.x);
  v.vec = p.vectorized != 0;
  v.col = load_columns<V, Md>(p, blk.y, v.w.lane);  // fold_heads: y = 0, theta has one row
#pragma unroll
  for (int j = 0; j < Fold; ++j) {
    const int f = blk.z * Fold + j;
    int b = f, h = blk.y;
    if (p.fold_heads) b = f / p.heads, h = f - b * p.heads;
    v.ok[j] = b < p.batch;
    if (!v.ok[j]) b = 0, h = p.fold_heads ? 0 : h;
    v.b[j] = b, v.h[j] = h;
    v.x[j] = static_cast<const T*>(p.x) + b * p.x_stride_b + h * p.x_stride_h + v.col.k0;
    v.go[j] = static_cast<const T*>(p.d_o) + b * p.do_stride_b + h * p.do_stride_h + v.col.k0;
    v.out[j] = static_cast<T*>(p.out) + b * p.out_stride_b + h * p.out_stride_h + v.col.k0;
  }
  return v;
}

// Row s of the block: its index, whether it exists.
__device__ __forceinline__ int row_of(const Placement& w, int base, int u) { return base + u * w.rows_per_pass + w.slot; }

// Per slice, a pointer to the thread's first row (row_begin + slot), advanced one loop step
// (Rows passes) at a time: loop-carried, so the compiler never rebuilds the slice offsets
// (b·stride_b + h·stride_h, 64-bit) inside the row loop. at(j, u) is row u of the step.
template <class P, int Fold>
struct SliceRows {
  P ptr[Fold];
  long long pass, step;  // elements between passes, between loop steps
  __device__ __forceinline__ SliceRows(P const (&first)[Fold], const Placement& w, long long stride_n, int rows) {
    pass = w.rows_per_pass * stride_n;
    step = pass * rows;
#pragma unroll
    for (int j = 0; j < Fold; ++j) ptr[j] = first[j] + (w.row_begin + w.slot) * stride_n;
  }
  __device__ __forceinline__ P at(int j, int u) const { return ptr[j] + u * pass; }
  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int j = 0; j < Fold; ++j) ptr[j] += step;
  }
  __device__ __forceinline__ void move(int steps) {
#pragma unroll
    for (int j = 0; j < Fold; ++j) ptr[j] += steps * step;
  }
};

// Calls body(base) for each loop step (Rows passes) of the block's rows, moving `rows` (SliceRows)
// along: from the first step, or with Backwards from the last, so that the apply kernel of softmax
// over the sequence first reads the rows that its statistics kernel read last, which L2 still holds.
template <bool Backwards, int Rows, class Body, class... R>
__device__ __forceinline__ void walk_steps(const Placement& w, Body&& body, R&... rows) {
  const int step = w.rows_per_pass * Rows;
  if constexpr (!Backwards) {
    for (int base = w.row_begin; base < w.row_end; base += step) {
      body(base);
      (rows.advance(), ...);
    }
  } else {
    if (w.row_end <= w.row_begin) return;  // block-uniform
    const int last = (w.row_end - 1 - w.row_begin) / step;
    (rows.move(last), ...);
    for (int base = w.row_begin + last * step; base >= w.row_begin; base -= step) {
      body(base);
      (rows.move(-1), ...);
    }
  }
}

// Running column statistics in the log2 domain: a reference r (max·log2e − kLazyLog2 <= r <= max·log2e, see
// column_stats_rows), l = Σ 2^(x·log2e − r), a = Σ 2^(x·log2e − r)·g. Empty: r = −inf, l = 0.
template <int V>
struct OnlineColumns {
  float m[V], l[V], a[V];
};

// (m, l, a) ← merge with (m2, l2, a2); empty sides have m = −inf.
__device__ __forceinline__ void merge_stats(float& m, float& l, float& a, float m2, float l2, float a2) {
  const float mn = fmaxf(m, m2);
  if (mn == -infinity_f32()) return;
  const float f1 = exp2_approx(m - mn), f2 = exp2_approx(m2 - mn);
  l = l * f1 + l2 * f2;
  a = a * f1 + a2 * f2;
  m = mn;
}

// Merges the statistics of the block's row slots, per column lane: first across the lanes of each
// warp that differ above the row group, then across warps through shared memory. The block's
// first row_group threads end up holding the block's statistics. Every thread of the block calls
// it (it synchronises the block); `keep` (block-uniform) false skips the cross-warp merge.
template <int V, int Threads>
__device__ __forceinline__ void merge_row_slots(OnlineColumns<V>& t, int row_group, int lane, bool keep) {
  constexpr int kWarps = Threads / 32;
  __shared__ float partial[3][kWarps][32 * V];
  const int warp = threadIdx.x / 32;
  for (int lane_bit = row_group; lane_bit < 32; lane_bit <<= 1)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float m2 = shfl_xor32(t.m[i], lane_bit);
      const float l2 = shfl_xor32(t.l[i], lane_bit);
      const float a2 = shfl_xor32(t.a[i], lane_bit);
      merge_stats(t.m[i], t.l[i], t.a[i], m2, l2, a2);
    }
  if ((threadIdx.x & 31) < row_group)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      partial[0][warp][lane * V + i] = t.m[i];
      partial[1][warp][lane * V + i] = t.l[i];
      partial[2][warp][lane * V + i] = t.a[i];
    }
  __syncthreads();
  if (keep && threadIdx.x < row_group)
    for (int other = 1; other < kWarps; ++other)
#pragma unroll
      for (int i = 0; i < V; ++i)
        merge_stats(t.m[i], t.l[i], t.a[i], partial[0][other][lane * V + i], partial[1][other][lane * V + i],
                    partial[2][other][lane * V + i]);
  __syncthreads();  // before the next call reuses `partial`
}

// Plane `plane` of the partial statistics of (b, h, split).
__device__ __forceinline__ float* stats_row(const LrpeParams& p, int plane, int b, int h, int split) {
  const long long rows = 1LL * p.batch * p.heads * gridDim.x;
  return p.stats + ((plane * rows + (1LL * b * p.heads + h) * gridDim.x + split) * p.d);
}

// cos and sin of the angles of row s for the thread's columns: computed, or (md cache
// backward) read back from the angles of head h. A row that does not exist gets angle 0.
template <int V, bool Md, bool ReadCache, bool Vec>
__device__ __forceinline__ void row_trig(float (&c)[V], float (&sn)[V], const Columns<V, Md>& col, const LrpeParams& p,
                                         int h, int s, bool row_ok) {
  float a[V];
  if constexpr (ReadCache) {
    RowIO<float, V>::template load<Vec>(a, p.angles + (1LL * h * p.n + s) * p.d + col.k0, row_ok ? col.valid : 0);
  } else {
    row_angles<V, Md>(a, col, p, s);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) c[i] = cos_approx(a[i]), sn[i] = sin_approx(a[i]);
}

// g = dO_cos·cos a + dO_sin·sin a.
template <int V>
__device__ __forceinline__ void rotate_back(float (&g)[V], const float (&gc)[V], const float (&gs)[V], const float (&c)[V],
                                            const float (&sn)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) g[i] = gc[i] * c[i] + gs[i] * sn[i];
}

// Lazy rescaling of the running statistics: the reference r of a column moves only when a value
// passes r + kLazyLog2 (log2 units), so that the row loop needs one FFMA, one MUFU and one add per
// element and one (rarely taken) branch per step; terms stay below 2^kLazyLog2 and sums of up to
// 2^24 rows below 2^32, far from fp32 overflow.
constexpr float kLazyLog2 = 8.f;
constexpr float kNoReference = -1e30f;

// The max of column i of slice j over the Rows rows of a step.
template <int Rows, int Fold, int V>
__device__ __forceinline__ float step_max(const float (&x)[Rows][Fold][V], int j, int i) {
  float mx = x[0][j][i];
#pragma unroll
  for (int u = 1; u < Rows; ++u) mx = fmaxf(mx, x[u][j][i]);
  return mx;
}

// The raw rows of one loop step of lrpe_column_stats: x, and for the backward dO's two halves.
template <class T, int V, int Rows, int Fold, bool Backward>
struct StatsStepRows {
  using IO = RowIO<T, V>;
  typename IO::Bits x[Rows][Fold], gc[Backward ? Rows : 1][Fold], gs[Backward ? Rows : 1][Fold];
};

// Issues the loads of the loop step at `base` (xs, gos at it). Full: every row of the step exists
// (no per-row predicate).
template <class T, int V, int Rows, int Fold, bool Md, bool Backward, bool Vec, bool Full>
__device__ __forceinline__ void load_stats_step(StatsStepRows<T, V, Rows, Fold, Backward>& r, const LrpeParams& p,
                                                const BlockView<T, V, Fold, Md>& v, int base,
                                                const SliceRows<const T*, Fold>& xs,
                                                const SliceRows<const T*, Fold>& gos) {
  using IO = RowIO<T, V>;
#pragma unroll
  for (int u = 0; u < Rows; ++u) {
    const bool ok = Full || row_of(v.w, base, u) < v.w.row_end;
#pragma unroll
    for (int j = 0; j < Fold; ++j) {
      const int valid = ok && v.ok[j] ? v.col.valid : 0;
      IO::template load_raw<Vec>(r.x[u][j], xs.at(j, u), valid);
      if constexpr (Backward) {
        IO::template load_raw<Vec>(r.gc[u][j], gos.at(j, u), valid);
        IO::template load_raw<Vec>(r.gs[u][j], gos.at(j, u) + p.d, valid);
      }
    }
  }
}

// Adds the loop step at `base` (its rows loaded by load_stats_step) to the running statistics;
// without Full, missing rows read as −inf (no term).
template <class T, int V, int Rows, int Fold, bool Md, bool Cache, bool Backward, bool Vec, bool Full>
__device__ __forceinline__ void add_stats_step(const StatsStepRows<T, V, Rows, Fold, Backward>& r, const LrpeParams& p,
                                               const BlockView<T, V, Fold, Md>& v, int base, OnlineColumns<V> (&st)[Fold],
                                               float (&limit)[Fold][V]) {
  using IO = RowIO<T, V>;
  float x[Rows][Fold][V], g[Rows][Fold][V];
#pragma unroll
  for (int u = 0; u < Rows; ++u) {
    const bool ok = Full || row_of(v.w, base, u) < v.w.row_end;
    float c[V], sn[V];
    if constexpr (Backward) row_trig<V, Md, Cache, Vec>(c, sn, v.col, p, v.h[0], row_of(v.w, base, u), ok);
#pragma unroll
    for (int j = 0; j < Fold; ++j) {
      IO::unpack(x[u][j], r.x[u][j]);
      if constexpr (!Full)
#pragma unroll
        for (int i = 0; i < V; ++i) x[u][j][i] = ok ? x[u][j][i] : -infinity_f32();
      if constexpr (Backward) {
        float gc[V], gs[V];
        IO::unpack(gc, r.gc[u][j]);
        IO::unpack(gs, r.gs[u][j]);
        rotate_back<V>(g[u][j], gc, gs, c, sn);
      }
    }
  }
  // Rescale (every column of the thread) only when some value passed its column's limit.
  bool passed = false;
#pragma unroll
  for (int j = 0; j < Fold; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i) passed |= step_max(x, j, i) > limit[j][i];
  if (passed)
#pragma unroll
    for (int j = 0; j < Fold; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float ref = fmaxf(st[j].m[i], step_max(x, j, i) * kLog2e);
        const float f = exp2_approx(st[j].m[i] - ref);
        st[j].l[i] *= f;
        if constexpr (Backward) st[j].a[i] *= f;
        st[j].m[i] = ref;
        limit[j][i] = (ref + kLazyLog2) * (1.f / kLog2e);
      }
#pragma unroll
  for (int j = 0; j < Fold; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i) {
#pragma unroll
      for (int u = 0; u < Rows; ++u) {
        const float e = exp2_approx(__fmaf_rn(x[u][j][i], kLog2e, -st[j].m[i]));
        st[j].l[i] += e;
        if constexpr (Backward) st[j].a[i] += e * g[u][j][i];
      }
    }
}

// The row loop of lrpe_column_stats for one vectorization (a compile-time constant, so that
// no access carries a branch): `st` started empty, whole steps, then the block's partial last
// step. In the forward each whole step's loads are issued before the previous step's
// exponentials, so that a thread keeps loads in flight while it computes.
template <class T, int V, int Rows, int Fold, bool Md, bool Cache, bool Backward, bool Vec>
__device__ __forceinline__ void column_stats_rows(const LrpeParams& p, const BlockView<T, V, Fold, Md>& v,
                                                  OnlineColumns<V> (&st)[Fold]) {
  const Placement& w = v.w;
  const int step = w.rows_per_pass * Rows;
  // A finite reference below every value until the first rescale (which any finite value
  // triggers: the limit is −inf), so that the loop needs no −inf guard; −inf values add 0.
  float limit[Fold][V];
#pragma unroll
  for (int j = 0; j < Fold; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i)
      limit[j][i] = -infinity_f32(), st[j].m[i] = kNoReference, st[j].l[i] = 0.f, st[j].a[i] = 0.f;
  SliceRows<const T*, Fold> xs(v.x, w, p.x_stride_n, Rows), gos(v.go, w, p.do_stride_n, Rows);
  using StepRows = StatsStepRows<T, V, Rows, Fold, Backward>;
  int base = w.row_begin;
  if constexpr (Backward) {  // three rows per row and slice already in flight (x and dO's halves)
    for (; base + step <= w.row_end; base += step, xs.advance(), gos.advance()) {
      StepRows r;
      load_stats_step<T, V, Rows, Fold, Md, Backward, Vec, true>(r, p, v, base, xs, gos);
      add_stats_step<T, V, Rows, Fold, Md, Cache, Backward, Vec, true>(r, p, v, base, st, limit);
    }
  } else if (base + step <= w.row_end) {
    StepRows cur;
    load_stats_step<T, V, Rows, Fold, Md, Backward, Vec, true>(cur, p, v, base, xs, gos);
    for (;;) {
      xs.advance(), gos.advance();
      const bool next = base + 2 * step <= w.row_end;  // block-uniform
      StepRows nxt;
      if (next) load_stats_step<T, V, Rows, Fold, Md, Backward, Vec, true>(nxt, p, v, base + step, xs, gos);
      add_stats_step<T, V, Rows, Fold, Md, Cache, Backward, Vec, true>(cur, p, v, base, st, limit);
      base += step;
      if (!next) break;
      cur = nxt;
    }
  }
  if (base < w.row_end) {
    StepRows last;
    load_stats_step<T, V, Rows, Fold, Md, Backward, Vec, false>(last, p, v, base, xs, gos);
    add_stats_step<T, V, Rows, Fold, Md, Cache, Backward, Vec, false>(last, p, v, base, st, limit);
  }
#pragma unroll
  for (int j = 0; j < Fold; ++j)
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (st[j].l[i] == 0.f) st[j].m[i] = -infinity_f32();  // no finite value: empty
}

// First pass of softmax over the sequence: the block's partial column statistics of x
// (forward: reference, sum) or of x and g (backward: reference, sum, Σ e·g), log2 domain (OnlineColumns),
// written to p.stats.
template <class T, int V, int Threads, int Rows, int Fold, bool Md, bool Cache, bool Backward>
__device__ __forceinline__ void lrpe_column_stats(const LrpeParams& p) {
  const auto v = block_view<T, V, Threads, Fold, Md>(p, block_coord<false>());
  const Placement& w = v.w;
  OnlineColumns<V> st[Fold];  // column_stats_rows starts and fills them
  if (v.vec) column_stats_rows<T, V, Rows, Fold, Md, Cache, Backward, true>(p, v, st);
  else column_stats_rows<T, V, Rows, Fold, Md, Cache, Backward, false>(p, v, st);

  // Per slice, merge the row slots; the block's first row_group threads write the result.
#pragma unroll
  for (int j = 0; j < Fold; ++j) {
    OnlineColumns<V>& t = st[j];
    merge_row_slots<V, Threads>(t, p.row_group, w.lane, v.ok[j]);
    if (threadIdx.x < p.row_group && v.ok[j]) {
      const int planes = Backward ? 3 : 2;
      for (int plane = 0; plane < planes; ++plane) {
        float* dst = stats_row(p, plane, v.b[j], v.h[j], v.split) + v.col.k0;
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (i < v.col.valid) dst[i] = plane == 0 ? t.m[i] : plane == 1 ? t.l[i] : t.a[i];
      }
    }
  }
}

// Second pass of softmax over the sequence, before the rows: per slice, every split's partials
// of the thread's columns merged (once per block: row slot k takes splits k, k + slots, ...,
// then merge_row_slots; shared through smem).
template <int V, int Threads, int Fold, bool Backward, class View>
__device__ __forceinline__ void merged_column_stats(ColumnSoftmax<V> (&out)[Fold], const LrpeParams& p, const View& v) {
  __shared__ float merged[3][32 * V];
  const int lane = v.w.lane, valid = v.col.valid;
#pragma unroll
  for (int j = 0; j < Fold; ++j) {
    OnlineColumns<V> t;
#pragma unroll
    for (int i = 0; i < V; ++i) t.m[i] = -infinity_f32(), t.l[i] = 0.f, t.a[i] = 0.f;
    if (v.ok[j])
      for (int split = v.w.slot; split < gridDim.x; split += v.w.rows_per_pass) {
        const float* sm = stats_row(p, 0, v.b[j], v.h[j], split) + v.col.k0;
        const float* sl = stats_row(p, 1, v.b[j], v.h[j], split) + v.col.k0;
        const float* sa = Backward ? stats_row(p, 2, v.b[j], v.h[j], split) + v.col.k0 : nullptr;
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (i < valid) merge_stats(t.m[i], t.l[i], t.a[i], sm[i], sl[i], Backward ? sa[i] : 0.f);
      }
    merge_row_slots<V, Threads>(t, p.row_group, lane, v.ok[j]);
    if (threadIdx.x < p.row_group)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        merged[0][lane * V + i] = t.m[i];
        merged[1][lane * V + i] = t.l[i];
        merged[2][lane * V + i] = t.a[i];
      }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const bool present = i < valid && v.ok[j];
      const float l = merged[1][lane * V + i];  // >= 1 unless the column is all −inf
      out[j].bias[i] = present ? -(merged[0][lane * V + i] + log2_approx(l)) : -infinity_f32();
      out[j].dot[i] = present ? merged[2][lane * V + i] * rcp_approx(l) : 0.f;
    }
    __syncthreads();  // before the next slice overwrites `merged`
  }
}

// The x rows of one loop step for activate / act_backward: unpacked from their registers, or
// loaded again from memory (the same rows, the same validity as the step's loads).
template <class IO, int V, int Fold>
struct Unpacker {
  const typename IO::Bits (&raw)[Fold];
  __device__ __forceinline__ void operator()(float (&dst)[Fold][V]) const {
#pragma unroll
    for (int j = 0; j < Fold; ++j) IO::unpack(dst[j], raw[j]);
  }
};
template <class IO, int V, int Fold, bool Vec, class Rows, class View>
struct Reloader {
  const Rows& xs;
  const View& v;
  int u;
  bool row_ok;
  __device__ __forceinline__ void operator()(float (&dst)[Fold][V]) const {
#pragma unroll
    for (int j = 0; j < Fold; ++j) IO::template load<Vec>(dst[j], xs.at(j, u), row_ok && v.ok[j] ? v.col.valid : 0);
  }
};

// The row loop of lrpe_forward for one vectorization.
template <class T, int V, int Rows, int Fold, int Act, bool Md, bool Cache, bool Vec>
__device__ __forceinline__ void forward_rows(const LrpeParams& p, const BlockView<T, V, Fold, Md>& v,
                                             const ColumnSoftmax<V> (&colsm)[Fold]) {
  using IO = RowIO<T, V>;
  const Placement& w = v.w;
  SliceRows<const T*, Fold> xs(v.x, w, p.x_stride_n, Rows);
  SliceRows<T*, Fold> os(v.out, w, p.out_stride_n, Rows);
  // lrpe_cosine's softmax over the sequence (which takes an exponential per element besides the
  // rotation's sin and cos): the rows of a step after its first are one block pass
  // (rows_per_pass positions) apart, so their sin and cos follow from the previous row's by angle
  // addition (four FMA-pipe operations instead of two transcendentals per element); each step
  // starts from exact angles. The other acts keep both transcendentals: they fold slices, which
  // shares them already, and the rotation's registers cost them more than it saves.
  constexpr bool kRotate = !Md && Rows > 1 && Act == kLrpeActSoftmaxSeq;
  float step_cos[V], step_sin[V];
  if constexpr (kRotate)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float a = reduced_angle(static_cast<float>(w.rows_per_pass), v.col.theta[i]);
      step_cos[i] = cos_approx(a), step_sin[i] = sin_approx(a);
    }
  walk_steps<Act == kLrpeActSoftmaxSeq, Rows>(w, [&](int base) {
    typename IO::Bits xr[Rows][Fold];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = row_of(w, base, u);
#pragma unroll
      for (int j = 0; j < Fold; ++j)
        IO::template load_raw<Vec>(xr[u][j], xs.at(j, u), s < w.row_end && v.ok[j] ? v.col.valid : 0);
    }
    float a[V], c[V], sn[V];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = row_of(w, base, u);
      const bool row_ok = s < w.row_end;
      if (!kRotate || u == 0) {
        row_angles<V, Md>(a, v.col, p, s);
#pragma unroll
        for (int i = 0; i < V; ++i) c[i] = cos_approx(a[i]), sn[i] = sin_approx(a[i]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float cp = c[i];
          c[i] = cp * step_cos[i] - sn[i] * step_sin[i];
          sn[i] = sn[i] * step_cos[i] + cp * step_sin[i];
        }
      }
      float x[Fold][V];
      using Reload = Reloader<IO, V, Fold, Vec, decltype(xs), BlockView<T, V, Fold, Md>>;
      activate<Act, V, Fold, Vec>(x, Unpacker<IO, V, Fold>{xr[u]}, Reload{xs, v, u, row_ok}, v.col.valid, colsm,
                                  p.row_group);  // shuffles: before the row check
#pragma unroll
      for (int j = 0; j < Fold; ++j) {
        const int valid = row_ok && v.ok[j] ? v.col.valid : 0;
        if (Cache && v.b[j] == 0)
          RowIO<float, V>::template store<Vec>(p.angles + (1LL * v.h[j] * p.n + s) * p.d + v.col.k0, a, valid);
        float oc[V], on[V];
#pragma unroll
        for (int i = 0; i < V; ++i) oc[i] = x[j][i] * c[i], on[i] = x[j][i] * sn[i];
        IO::template store<Vec>(os.at(j, u), oc, valid);
        IO::template store<Vec>(os.at(j, u) + p.d, on, valid);
      }
    }
  }, xs, os);
}

// The row loop of lrpe_backward for one vectorization.
template <class T, int V, int Rows, int Fold, int Act, bool Md, bool Cache, bool Vec>
__device__ __forceinline__ void backward_rows(const LrpeParams& p, const BlockView<T, V, Fold, Md>& v,
                                              const ColumnSoftmax<V> (&colsm)[Fold]) {
  using IO = RowIO<T, V>;
  constexpr bool kReadsX = Act != kLrpeActNone;
  const Placement& w = v.w;
  SliceRows<const T*, Fold> xs(v.x, w, p.x_stride_n, Rows), gos(v.go, w, p.do_stride_n, Rows);
  SliceRows<T*, Fold> dxs(v.out, w, p.out_stride_n, Rows);
  for (int base = w.row_begin; base < w.row_end;
       base += w.rows_per_pass * Rows, xs.advance(), gos.advance(), dxs.advance()) {
    typename IO::Bits gcr[Rows][Fold], gsr[Rows][Fold], xr[Rows][Fold];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = row_of(w, base, u);
#pragma unroll
      for (int j = 0; j < Fold; ++j) {
        const int valid = s < w.row_end && v.ok[j] ? v.col.valid : 0;
        IO::template load_raw<Vec>(gcr[u][j], gos.at(j, u), valid);
        IO::template load_raw<Vec>(gsr[u][j], gos.at(j, u) + p.d, valid);
        if constexpr (kReadsX) IO::template load_raw<Vec>(xr[u][j], xs.at(j, u), valid);
      }
    }
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = row_of(w, base, u);
      const bool row_ok = s < w.row_end;
      float c[V], sn[V];
      row_trig<V, Md, Cache, Vec>(c, sn, v.col, p, v.h[0], s, row_ok);
      float g[Fold][V];
#pragma unroll
      for (int j = 0; j < Fold; ++j) {
        float gc[V], gs[V];
        IO::unpack(gc, gcr[u][j]);
        IO::unpack(gs, gsr[u][j]);
        rotate_back<V>(g[j], gc, gs, c, sn);
      }
      using Reload = Reloader<IO, V, Fold, Vec, decltype(xs), BlockView<T, V, Fold, Md>>;
      act_backward<Act, V, Fold, Vec>(g, Unpacker<IO, V, Fold>{xr[u]}, Reload{xs, v, u, row_ok}, v.col.valid, colsm,
                                      p.row_group);  // shuffles: before the row check
#pragma unroll
      for (int j = 0; j < Fold; ++j) IO::template store<Vec>(dxs.at(j, u), g[j], row_ok && v.ok[j] ? v.col.valid : 0);
    }
  }
}

// The apply kernels: the block's view, the merged statistics of softmax over the sequence, then
// the row loop of the block's vectorization.
template <class T, int V, int Threads, int Rows, int Fold, int Act, bool Md, bool Cache, bool Backward>
__device__ __forceinline__ void lrpe_apply(const LrpeParams& p) {
  const auto v = block_view<T, V, Threads, Fold, Md>(p, block_coord<Act == kLrpeActSoftmaxSeq>());
  ColumnSoftmax<V> colsm[Fold];
  if constexpr (Act == kLrpeActSoftmaxSeq) merged_column_stats<V, Threads, Fold, Backward>(colsm, p, v);
  if constexpr (Backward) {
    if (v.vec) backward_rows<T, V, Rows, Fold, Act, Md, Cache, true>(p, v, colsm);
    else backward_rows<T, V, Rows, Fold, Act, Md, Cache, false>(p, v, colsm);
  } else {
    if (v.vec) forward_rows<T, V, Rows, Fold, Act, Md, Cache, true>(p, v, colsm);
    else forward_rows<T, V, Rows, Fold, Act, Md, Cache, false>(p, v, colsm);
  }
}

// o = [act(x)·cos Θ, act(x)·sin Θ] for the block's rows; the md cache variant also writes the
// reduced angles (from the slices of batch 0 only: they do not depend on b).
template <class T, int V, int Threads, int Rows, int Fold, int Act, bool Md, bool Cache>
__device__ __forceinline__ void lrpe_forward(const LrpeParams& p) {
  lrpe_apply<T, V, Threads, Rows, Fold, Act, Md, Cache, false>(p);
}

// dx = act'(x) ⊙ (dO_cos·cos Θ + dO_sin·sin Θ) for the block's rows (softmax: p·(g − Σ p·g)).
template <class T, int V, int Threads, int Rows, int Fold, int Act, bool Md, bool Cache>
__device__ __forceinline__ void lrpe_backward(const LrpeParams& p) {
  lrpe_apply<T, V, Threads, Rows, Fold, Act, Md, Cache, true>(p);
}

}  // namespace lrpe
}  // namespace kgen
