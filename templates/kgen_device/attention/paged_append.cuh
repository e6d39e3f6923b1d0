// The paged K/V append (docs/attention.md §10): new key and value rows written into their pages,
// with an optional rotary embedding of the new keys (and of q) fused in; fp32 math, one rounding.
//
// Work split. Each block covers Threads / row_group rows (paged_append_params.h); row_group
// threads share a row, lane l owning elements [l·V, l·V + V). A thread loads its piece of the row
// (and, for GPT-NeoX halves, the partner piece half a rotary width away), computes, waits at a
// block barrier and only then stores: q may be rotated in place, and a partner piece belongs to
// another thread of the same row. Every thread reaches the barrier (no early return).
//
// Rotation of element j < rotary_dim at position pos, with c = cos[pos][m] and s = sin[pos][m]:
//   halves: m = j mod r/2; y_j = x_j·c − x_{j+r/2}·s (j < r/2), y_j = x_j·c + x_{j−r/2}·s (else);
//   pairs:  m = j / 2;     y_j = x_j·c − x_{j+1}·s (j even),   y_j = x_j·c + x_{j−1}·s (j odd).
// Elements at or past rotary_dim, and every value, are copied.
#pragma once

#include "kgen_device/attention/paged_append_params.h"
#include "kgen_device/core/math.cuh"
#include "kgen_device/core/types.cuh"

namespace kgen {
namespace paged_append_detail {

template <int Bytes>
struct alignas(Bytes) Words {
  unsigned w[Bytes / 4];
};

// V elements of a row: loaded to fp32 and stored from it, as whole aligned pieces (Vec) or one
// element at a time (`valid` of them; the rest read as 0 and are not stored).
template <class T, int V>
struct Chunk {
  static constexpr int kBytes = V * int(sizeof(T));
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "a piece is 4, 8 or 16 bytes");
  union Bits {
    Words<kBytes> words;
    T e[V];
  };

  template <bool Vec>
  __device__ static __forceinline__ void load(float (&x)[V], const T* ptr, int valid) {
    Bits bits;
    if constexpr (Vec) {
      bits.words = *reinterpret_cast<const Words<kBytes>*>(ptr);
#pragma unroll
      for (int i = 0; i < V; ++i) x[i] = to_float(bits.e[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) x[i] = i < valid ? to_float(ptr[i]) : 0.f;
    }
  }

  template <bool Vec>
  __device__ static __forceinline__ void store(T* ptr, const float (&x)[V], int valid) {
    if constexpr (Vec) {
      Bits bits;
#pragma unroll
      for (int i = 0; i < V; ++i) bits.e[i] = from_float<T>(x[i]);
      *reinterpret_cast<Words<kBytes>*>(ptr) = bits.words;
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) ptr[i] = from_float<T>(x[i]);
    }
  }
};

// Where one row comes from and goes to.
template <class T>
struct RowPlace {
  const T* src = nullptr;
  T* dst = nullptr;
  const T* v_src = nullptr;  // key rows: the value row beside the key
  T* v_dst = nullptr;
  int pos = 0;
  bool ok = false;
};

template <class T>
__device__ __forceinline__ RowPlace<T> place_row(const PagedAppendParams& p, long long row) {
  RowPlace<T> r;
  if (row >= p.rows) return r;
  if (row < p.k_rows) {
    const int h = static_cast<int>(row % p.heads_kv);
    const long long t = row / p.heads_kv;
    const int i = static_cast<int>(t % p.n_new), b = static_cast<int>(t / p.n_new);
    r.pos = p.cache_seqlens[b] + i;
    if (r.pos < 0 || r.pos >= p.max_keys) return r;
    const int slot = r.pos / p.page_size;
    const long long page = p.block_table ? p.block_table[b * p.table_stride + slot] : b;
    const long long in_page = r.pos - static_cast<long long>(slot) * p.page_size;
    r.src = static_cast<const T*>(p.k_new) + b * p.kn_stride_b + h * p.kn_stride_h + i * p.kn_stride_n;
    r.v_src = static_cast<const T*>(p.v_new) + b * p.vn_stride_b + h * p.vn_stride_h + i * p.vn_stride_n;
    r.dst = static_cast<T*>(p.k_cache) + page * p.kc_stride_page + in_page * p.kc_stride_row + h * p.kc_stride_h;
    r.v_dst = static_cast<T*>(p.v_cache) + page * p.vc_stride_page + in_page * p.vc_stride_row + h * p.vc_stride_h;
  } else {
    const long long q_row = row - p.k_rows;
    const int h = static_cast<int>(q_row % p.heads_q);
    const long long t = q_row / p.heads_q;
    const int i = static_cast<int>(t % p.n_q), b = static_cast<int>(t / p.n_q);
    r.pos = p.cache_seqlens[b] + (p.q_sequential ? i : 0);
    if (r.pos < 0 || r.pos >= p.max_keys) return r;
    r.src = static_cast<const T*>(p.q) + b * p.q_stride_b + h * p.q_stride_h + i * p.q_stride_n;
    r.dst = static_cast<T*>(p.q_out) + b * p.qo_stride_b + h * p.qo_stride_h + i * p.qo_stride_n;
  }
  r.ok = true;
  return r;
}

// Rotates x (elements c … c + V − 1 of a row at position pos) in place; `partner` holds each
// element's partner (halves: the piece half a rotary width away; pairs: filled here).
template <class C, int Rotary, int V>
__device__ __forceinline__ void rotate(float (&x)[V], float (&partner)[V], const PagedAppendParams& p, int c, int pos) {
  const C* cos = static_cast<const C*>(p.cos) + pos * p.cos_stride;
  const C* sin = static_cast<const C*>(p.sin) + pos * p.sin_stride;
  const int half = p.rotary_dim / 2;
  if constexpr (Rotary == kAppendRotaryPairs) {
#pragma unroll
    for (int i = 0; i < V; ++i) partner[i] = x[i ^ 1];
  }
  float y[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = c + i;
    y[i] = x[i];
    if (j >= p.rotary_dim) continue;
    bool first;
    int m;
    if constexpr (Rotary == kAppendRotaryHalves) first = j < half, m = first ? j : j - half;
    else first = (j & 1) == 0, m = j / 2;
    const float cv = to_float(cos[m]), sv = to_float(sin[m]);
    y[i] = first ? x[i] * cv - partner[i] * sv : x[i] * cv + partner[i] * sv;
  }
#pragma unroll
  for (int i = 0; i < V; ++i) x[i] = y[i];
}

template <class T, class C, int Rotary, int V, int Threads, bool Vec>
__device__ __forceinline__ void append_rows(const PagedAppendParams& p) {
  using IO = Chunk<T, V>;
  const int lane = threadIdx.x & (p.row_group - 1);
  const long long row =
      static_cast<long long>(blockIdx.x) * (Threads >> p.row_group_log2) + (threadIdx.x >> p.row_group_log2);
  const int c = lane * V;
  const int valid = imin(V, p.head_dim - c);
  const RowPlace<T> r = valid > 0 ? place_row<T>(p, row) : RowPlace<T>{};
  float x[V], v[V], partner[V];
  if (r.ok) {
    IO::template load<Vec>(x, r.src + c, valid);
    if (r.v_src) IO::template load<Vec>(v, r.v_src + c, valid);
    if constexpr (Rotary != kAppendRotaryNone) {
      if (c < p.rotary_dim) {
        if constexpr (Rotary == kAppendRotaryHalves) {
          const int half = p.rotary_dim / 2;
          if constexpr (Vec) {
            IO::template load<true>(partner, r.src + (c < half ? c + half : c - half), V);
          } else {
#pragma unroll
            for (int i = 0; i < V; ++i) {
              const int j = c + i;
              partner[i] = i < valid && j < p.rotary_dim ? to_float(r.src[j < half ? j + half : j - half]) : 0.f;
            }
          }
        }
        rotate<C, Rotary, V>(x, partner, p, c, r.pos);
      }
    }
  }
  // q may be rotated in place: every piece of its rows is read before any is written.
  if constexpr (Rotary == kAppendRotaryHalves) __syncthreads();
  if (r.ok) {
    IO::template store<Vec>(r.dst + c, x, valid);
    if (r.v_dst) IO::template store<Vec>(r.v_dst + c, v, valid);
  }
}

}  // namespace paged_append_detail

// T: the caches' element type; C: the rotary tables' (T or float); Rotary: kAppendRotary*; V:
// elements per thread; Threads: the block size.
template <class T, class C, int Rotary, int V, int Threads>
__device__ __forceinline__ void paged_append(const PagedAppendParams& p) {
  if (p.vectorized) paged_append_detail::append_rows<T, C, Rotary, V, Threads, true>(p);
  else paged_append_detail::append_rows<T, C, Rotary, V, Threads, false>(p);
}

}  // namespace kgen
