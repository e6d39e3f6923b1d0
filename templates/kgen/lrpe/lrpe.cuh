// lrpe_cosine and md_lrpe_cosine kernels (specs/lrpe.md): o = [act(x)·cos Θ, act(x)·sin Θ]
// and its backward dx = act'(x) ⊙ (dO_cos·cos Θ + dO_sin·sin Θ), fp32 math.
//
// Work split. Grid (gridDim.x, heads, batch); block (b, h, x) covers rows
// [x·rows_per_block, min(n, (x + 1)·rows_per_block)) of one (b, h). Sequence-parallel ("sp")
// launches give each block one pass of Rows rows per thread; block-parallel ("bp") launches
// give each block a long stretch of the sequence (gridDim.x = splits) that it walks. Inside a
// block, row_group threads (a power of two <= 32, aligned lanes of one warp) share a row,
// lane i owning features [i·V, i·V + V); a block pass covers Threads / row_group rows, Rows
// passes are loaded before any is computed so that Rows·V elements per thread are in flight.
// Every thread runs the same number of passes (rows past the end load nothing and store
// nothing), so the row reductions of softmax over features can shuffle with a full mask.
//
// Softmax over the sequence needs whole columns: a first kernel (lrpe_column_stats) walks the
// block's rows keeping per-column online max/sum (and for the backward Σ e·g, from which
// c = Σ p·g follows), merges them over the block and writes one partial per (b, h, split,
// column); the apply kernel merges the splits' partials once per block and then normalises.
#pragma once

#include "kgen/core/math.cuh"
#include "kgen/core/types.cuh"
#include "kgen/lrpe/params.h"
#include "kgen/lrpe/rotate.cuh"

namespace kgen {
namespace lrpe {

// Where the thread sits: its lane within the row, its row slot, the block's rows.
struct Placement {
  int lane, slot, rows_per_pass, row_begin, row_end;
};

template <int Threads>
__device__ __forceinline__ Placement placement(const LrpeParams& p) {
  Placement w;
  w.lane = threadIdx.x & (p.row_group - 1);
  w.slot = threadIdx.x >> p.row_group_log2;
  w.rows_per_pass = Threads >> p.row_group_log2;
  w.row_begin = blockIdx.x * p.rows_per_block;
  w.row_end = imin(p.n, w.row_begin + p.rows_per_block);
  return w;
}

// What every kernel of a block starts from: its (b, h), placement, columns and row pointers
// (offset to the thread's first feature).
template <class T, int V, bool Md>
struct BlockView {
  int h, b;
  Placement w;
  bool vec;
  Columns<V, Md> col;
  const T* x;
  const T* go;  // dO (backward)
  T* out;       // o or dx
};

template <class T, int V, int Threads, bool Md>
__device__ __forceinline__ BlockView<T, V, Md> block_view(const LrpeParams& p) {
  BlockView<T, V, Md> v;
  v.h = blockIdx.y, v.b = blockIdx.z;
  v.w = placement<Threads>(p);
  v.vec = p.vectorized != 0;
  v.col = load_columns<V, Md>(p, v.h, v.w.lane);
  v.x = static_cast<const T*>(p.x) + v.b * p.x_stride_b + v.h * p.x_stride_h + v.col.k0;
  v.go = static_cast<const T*>(p.d_o) + v.b * p.do_stride_b + v.h * p.do_stride_h + v.col.k0;
  v.out = static_cast<T*>(p.out) + v.b * p.out_stride_b + v.h * p.out_stride_h + v.col.k0;
  return v;
}

// Running column statistics: max m, Σ exp(x − m), Σ exp(x − m)·g.
template <int V>
struct OnlineColumns {
  float m[V], l[V], a[V];
};

// (m, l, a) ← merge with (m2, l2, a2); empty sides have m = −inf.
__device__ __forceinline__ void merge_stats(float& m, float& l, float& a, float m2, float l2, float a2) {
  const float mn = fmaxf(m, m2);
  if (mn == -infinity_f32()) return;
  const float f1 = exp_approx(m - mn), f2 = exp_approx(m2 - mn);
  l = l * f1 + l2 * f2;
  a = a * f1 + a2 * f2;
  m = mn;
}

// Plane `plane` of the partial statistics of (b, h, split).
__device__ __forceinline__ float* stats_row(const LrpeParams& p, int plane, int b, int h, int split) {
  const long long rows = 1LL * p.batch * p.heads * gridDim.x;
  return p.stats + ((plane * rows + (1LL * b * p.heads + h) * gridDim.x + split) * p.d);
}

// The angles of row s for the thread's columns: computed, or (md cache backward) read back.
template <int V, bool Md, bool ReadCache>
__device__ __forceinline__ void angles_of_row(float (&a)[V], const Columns<V, Md>& c, const LrpeParams& p, int h,
                                              int s, bool vec) {
  if constexpr (ReadCache) {
    RowIO<float, V>::load(a, p.angles + (1LL * h * p.n + s) * p.d + c.k0, c.valid, vec);
  } else {
    row_angles<V, Md>(a, c, p, s);
  }
}

// g = dO_cos·cos a + dO_sin·sin a.
template <int V>
__device__ __forceinline__ void rotate_back(float (&g)[V], const float (&gc)[V], const float (&gs)[V], const float (&a)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) g[i] = gc[i] * cos_approx(a[i]) + gs[i] * sin_approx(a[i]);
}

// First pass of softmax over the sequence: the block's partial column statistics of x
// (forward: max, sum) or of x and g (backward: max, sum, Σ e·g), written to p.stats.
template <class T, int V, int Threads, int Rows, bool Md, bool Cache, bool Backward>
__device__ __forceinline__ void lrpe_column_stats(const LrpeParams& p) {
  const auto [h, b, w, vec, col, x, go, out] = block_view<T, V, Threads, Md>(p);
  OnlineColumns<V> st;
#pragma unroll
  for (int i = 0; i < V; ++i) st.m[i] = -infinity_f32(), st.l[i] = 0.f, st.a[i] = 0.f;

  for (int base = w.row_begin; base < w.row_end; base += w.rows_per_pass * Rows) {
    float v[Rows][V], g[Rows][V];
    bool ok[Rows];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = base + u * w.rows_per_pass + w.slot;
      ok[u] = s < w.row_end;
      const int valid = ok[u] ? col.valid : 0;
      RowIO<T, V>::load(v[u], x + s * p.x_stride_n, valid, vec);
      if constexpr (Backward) {
        float gc[V], gs[V], a[V];
        RowIO<T, V>::load(gc, go + s * p.do_stride_n, valid, vec);
        RowIO<T, V>::load(gs, go + s * p.do_stride_n + p.d, valid, vec);
        if (ok[u]) {
          angles_of_row<V, Md, Cache>(a, col, p, h, s, vec);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) a[i] = 0.f;
        }
        rotate_back<V>(g[u], gc, gs, a);
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float mn = st.m[i];
#pragma unroll
      for (int u = 0; u < Rows; ++u)
        if (ok[u]) mn = fmaxf(mn, v[u][i]);
      if (mn == -infinity_f32()) continue;  // no row yet (or -inf inputs): nothing to add
      const float f = exp_approx(st.m[i] - mn);
      st.l[i] *= f;
      st.a[i] *= f;
#pragma unroll
      for (int u = 0; u < Rows; ++u)
        if (ok[u]) {
          const float e = exp_approx(v[u][i] - mn);
          st.l[i] += e;
          if constexpr (Backward) st.a[i] += e * g[u][i];
        }
      st.m[i] = mn;
    }
  }

  // Merge the row slots: first inside each warp (lanes that differ above the row group), then
  // across warps through shared memory; warp 0's first row_group lanes hold the block's result.
  for (int lane_bit = p.row_group; lane_bit < 32; lane_bit <<= 1)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float m2 = __shfl_xor_sync(0xffffffffu, st.m[i], lane_bit);
      const float l2 = __shfl_xor_sync(0xffffffffu, st.l[i], lane_bit);
      const float a2 = __shfl_xor_sync(0xffffffffu, st.a[i], lane_bit);
      merge_stats(st.m[i], st.l[i], st.a[i], m2, l2, a2);
    }
  constexpr int kWarps = Threads / 32;
  __shared__ float partial[3][kWarps][32 * V];
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) < p.row_group)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      partial[0][warp][w.lane * V + i] = st.m[i];
      partial[1][warp][w.lane * V + i] = st.l[i];
      partial[2][warp][w.lane * V + i] = st.a[i];
    }
  __syncthreads();
  if (threadIdx.x >= p.row_group) return;
  for (int other = 1; other < kWarps; ++other)
#pragma unroll
    for (int i = 0; i < V; ++i)
      merge_stats(st.m[i], st.l[i], st.a[i], partial[0][other][w.lane * V + i], partial[1][other][w.lane * V + i],
                  partial[2][other][w.lane * V + i]);
  const int planes = Backward ? 3 : 2;
  for (int plane = 0; plane < planes; ++plane) {
    float* dst = stats_row(p, plane, b, h, blockIdx.x) + col.k0;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (i < col.valid) dst[i] = plane == 0 ? st.m[i] : plane == 1 ? st.l[i] : st.a[i];
  }
}

// Second pass of softmax over the sequence, before the rows: every split's partials of the
// thread's columns merged (once per block, by the first row slot, shared through smem).
template <int V, int Threads, bool Backward>
__device__ __forceinline__ ColumnSoftmax<V> merged_column_stats(const LrpeParams& p, const Placement& w, int k0, int valid) {
  __shared__ float merged[3][32 * V];
  const int b = blockIdx.z, h = blockIdx.y;
  if (w.slot == 0) {
    float m[V], l[V], a[V];
#pragma unroll
    for (int i = 0; i < V; ++i) m[i] = -infinity_f32(), l[i] = 0.f, a[i] = 0.f;
    for (int split = 0; split < gridDim.x; ++split) {
      const float* sm = stats_row(p, 0, b, h, split) + k0;
      const float* sl = stats_row(p, 1, b, h, split) + k0;
      const float* sa = Backward ? stats_row(p, 2, b, h, split) + k0 : nullptr;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) merge_stats(m[i], l[i], a[i], sm[i], sl[i], Backward ? sa[i] : 0.f);
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      merged[0][w.lane * V + i] = m[i];
      merged[1][w.lane * V + i] = l[i];
      merged[2][w.lane * V + i] = a[i];
    }
  }
  __syncthreads();
  ColumnSoftmax<V> c;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const bool present = i < valid;
    const float inv = present ? rcp_approx(merged[1][w.lane * V + i]) : 0.f;  // l >= 1
    c.max[i] = present ? merged[0][w.lane * V + i] : 0.f;
    c.scale[i] = inv;
    c.dot[i] = merged[2][w.lane * V + i] * inv;
  }
  return c;
}

// o = [act(x)·cos Θ, act(x)·sin Θ] for the block's rows; the md cache variant also writes the
// reduced angles (batch 0 only: they do not depend on b).
template <class T, int V, int Threads, int Rows, int Act, bool Md, bool Cache>
__device__ __forceinline__ void lrpe_forward(const LrpeParams& p) {
  const auto [h, b, w, vec, col, x, go, o] = block_view<T, V, Threads, Md>(p);
  ColumnSoftmax<V> colsm;
  if constexpr (Act == kLrpeActSoftmaxSeq) colsm = merged_column_stats<V, Threads, false>(p, w, col.k0, col.valid);
  const bool write_angles = Cache && b == 0;

  for (int base = w.row_begin; base < w.row_end; base += w.rows_per_pass * Rows) {
    float v[Rows][V];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = base + u * w.rows_per_pass + w.slot;
      RowIO<T, V>::load(v[u], x + s * p.x_stride_n, s < w.row_end ? col.valid : 0, vec);
    }
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = base + u * w.rows_per_pass + w.slot;
      activate<Act, V>(v[u], col.valid, colsm, p.row_group);  // shuffles: before the row check
      if (s >= w.row_end) continue;
      float a[V], oc[V], os[V];
      row_angles<V, Md>(a, col, p, s);
      if (write_angles) RowIO<float, V>::store(p.angles + (1LL * h * p.n + s) * p.d + col.k0, a, col.valid, vec);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        oc[i] = v[u][i] * cos_approx(a[i]);
        os[i] = v[u][i] * sin_approx(a[i]);
      }
      T* row = o + s * p.out_stride_n;
      RowIO<T, V>::store(row, oc, col.valid, vec);
      RowIO<T, V>::store(row + p.d, os, col.valid, vec);
    }
  }
}

// dx = act'(x) ⊙ (dO_cos·cos Θ + dO_sin·sin Θ) for the block's rows (softmax: p·(g − Σ p·g)).
template <class T, int V, int Threads, int Rows, int Act, bool Md, bool Cache>
__device__ __forceinline__ void lrpe_backward(const LrpeParams& p) {
  constexpr bool kReadsX = Act != kLrpeActNone;
  const auto [h, b, w, vec, col, x, go, dx] = block_view<T, V, Threads, Md>(p);
  ColumnSoftmax<V> colsm;
  if constexpr (Act == kLrpeActSoftmaxSeq) colsm = merged_column_stats<V, Threads, true>(p, w, col.k0, col.valid);

  for (int base = w.row_begin; base < w.row_end; base += w.rows_per_pass * Rows) {
    float gc[Rows][V], gs[Rows][V], v[Rows][V];
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = base + u * w.rows_per_pass + w.slot;
      const int valid = s < w.row_end ? col.valid : 0;
      RowIO<T, V>::load(gc[u], go + s * p.do_stride_n, valid, vec);
      RowIO<T, V>::load(gs[u], go + s * p.do_stride_n + p.d, valid, vec);
      if constexpr (kReadsX) RowIO<T, V>::load(v[u], x + s * p.x_stride_n, valid, vec);
    }
#pragma unroll
    for (int u = 0; u < Rows; ++u) {
      const int s = base + u * w.rows_per_pass + w.slot;
      const bool ok = s < w.row_end;
      float a[V], g[V];
      if (ok) {
        angles_of_row<V, Md, Cache>(a, col, p, h, s, vec);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) a[i] = 0.f;
      }
      rotate_back<V>(g, gc[u], gs[u], a);
      act_backward<Act, V>(g, v[u], col.valid, colsm, p.row_group);  // shuffles: before the row check
      if (ok) RowIO<T, V>::store(dx + s * p.out_stride_n, g, col.valid, vec);
    }
  }
}

}  // namespace lrpe
}  // namespace kgen
