// Building blocks of the LRPE kernels: angles and their sin/cos, vector row I/O, activations
// and their gradients, reductions over the threads of one row.
//
// Angles. The spec's angle is pos·θ with an integer position (offset + s, or a grid
// coordinate) and an fp32 θ, exact in the fp64 reference. Here pos·θ is split exactly into
// hi + lo (hi = fp32 product, lo = fma(pos, θ, −hi)), hi is reduced by the nearest multiple of
// 2π with a two-part Cody–Waite constant (both steps fma, k·2π_hi exact), lo is added back, and
// the hardware sin.approx/cos.approx (max abs error 2^-20.5 on [−π, π]) run on the result. The
// reduced angle is within ~3e-7 of the exact one for |pos·θ| < 2^24 (each of the three roundings
// is at most half an ulp of π), so sin/cos are within ~1e-6 absolute for every angle the spec
// reaches ((offset + 32768)·θ): the fp32 bounds (rel_l2 1e-5) hold. A plain __sinf of the
// unreduced fp32 product would be off by up to ~1e-3 at pos = 32768 (ulp of the product), and
// an accurate sincosf costs ~40 instructions per element against a budget of ~50 at the
// bandwidth floor; this costs 8 full-rate instructions plus two MUFU operations per angle (the
// nearest multiple comes from the 1.5·2^23 rounding trick, not FRND, which shares the
// quarter-rate pipe with MUFU), and the kernels share each angle between the `Fold` slices of
// a block (lrpe.cuh).
#pragma once

#include "kgen_device/core/math.cuh"
#include "kgen_device/core/memory.cuh"
#include "kgen_device/core/types.cuh"
#include "kgen_device/core/warp.cuh"
#include "kgen_device/lrpe/params.h"

namespace kgen {
namespace lrpe {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kInv2Pi = 0.159154943091895336f;
constexpr float k2PiHi = 6.28318548202514648f;   // fp32(2π)
constexpr float k2PiLo = -1.74845560e-07f;       // 2π − fp32(2π)

__device__ __forceinline__ float exp_approx(float x) { return exp2_approx(x * kLog2e); }

// Adding then subtracting 1.5·2^23 rounds an fp32 |t| < 2^22 to the nearest integer.
constexpr float kRoundMagic = 12582912.0f;

// pos·θ minus the nearest multiple of 2π (pos an integer with |pos| < 2^24).
__device__ __forceinline__ float reduced_angle(float pos, float theta) {
  const float hi = __fmul_rn(pos, theta);
  const float lo = __fmaf_rn(pos, theta, -hi);
  const float turns = __fadd_rn(__fmaf_rn(hi, kInv2Pi, kRoundMagic), -kRoundMagic);
  float r = __fmaf_rn(-turns, k2PiHi, hi);
  r = __fmaf_rn(-turns, k2PiLo, r);
  return r + lo;
}

// --- rows: V consecutive elements per thread ----------------------------------------------------

template <int Bytes>
struct alignas(Bytes) Piece {
  unsigned w[Bytes / 4];
};

// Loads/stores V elements of one row at `ptr`, converting to/from fp32. `valid` elements exist
// (<= 0: none; missing ones read as 0). `Vec`: the caller guarantees valid == V or <= 0 and a
// 16-byte aligned `ptr`, so whole pieces of up to 16 bytes move at once (the kernels choose
// Vec once per block, so that the row loop has no per-access branch).
template <class T, int V>
struct RowIO {
  static constexpr int kBytes = V * int(sizeof(T));
  static constexpr int kPiece = kBytes < 16 ? kBytes : 16;
  static constexpr int kPieces = kBytes / kPiece;
  static_assert(kBytes % 4 == 0 && kBytes % kPiece == 0, "V elements must fill whole 32-bit words");
  union Bits {
    Piece<kPiece> piece[kPieces];
    T e[V];
  };

  // The raw elements, converted when used: rows loaded early hold V·sizeof(T) bytes of
  // registers each, not V floats (fewer registers, more resident warps).
  template <bool Vec>
  __device__ static __forceinline__ void load_raw(Bits& bits, const T* ptr, int valid) {
    if constexpr (Vec) {
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        bits.piece[i] = Piece<kPiece>{};
        if (valid > 0) bits.piece[i] = reinterpret_cast<const Piece<kPiece>*>(ptr)[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) bits.e[i] = i < valid ? ptr[i] : from_float<T>(0.f);
    }
  }

  __device__ static __forceinline__ void unpack(float (&v)[V], const Bits& bits) {
    if constexpr (sizeof(T) == 2) {  // by 32-bit words: no byte permutes
      constexpr int kWords = kPiece / 4;
#pragma unroll
      for (int i = 0; i < V / 2; ++i) unpack2<T>(bits.piece[i / kWords].w[i % kWords], v[2 * i], v[2 * i + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = to_float(bits.e[i]);
    }
  }

  template <bool Vec>
  __device__ static __forceinline__ void load(float (&v)[V], const T* ptr, int valid) {
    Bits bits;
    load_raw<Vec>(bits, ptr, valid);
    unpack(v, bits);
  }

  template <bool Vec>
  __device__ static __forceinline__ void store(T* ptr, const float (&v)[V], int valid) {
    if constexpr (Vec) {
      Bits bits;
      if constexpr (sizeof(T) == 2) {
        constexpr int kWords = kPiece / 4;
#pragma unroll
        for (int i = 0; i < V / 2; ++i) bits.piece[i / kWords].w[i % kWords] = pack2<T>(v[2 * i], v[2 * i + 1]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) bits.e[i] = from_float<T>(v[i]);
      }
#pragma unroll
      for (int i = 0; i < kPieces; ++i)
        st_global_if(reinterpret_cast<Piece<kPiece>*>(ptr) + i, bits.piece[i].w, valid > 0);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) ptr[i] = from_float<T>(v[i]);
    }
  }
};

// --- reductions over the row_group threads of one row (aligned lanes of a warp) -----------------

// N rows at once, one butterfly level per step for all of them: the N shuffles of a level are in
// flight together, and only the log2(group) levels the row needs run.
template <int N>
__device__ __forceinline__ void row_maxes(float (&x)[N], int group) {
  for (int w = 1; w < group; w <<= 1)
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] = fmaxf(x[j], shfl_xor32(x[j], w));
}
template <int N>
__device__ __forceinline__ void row_sums(float (&x)[N], int group) {
  for (int w = 1; w < group; w <<= 1)
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] += shfl_xor32(x[j], w);
}

// --- the columns one thread owns ------------------------------------------------------------------

// Features k0 .. k0 + valid − 1 of every row, their frequencies and (md) spatial dims.
template <int V, bool Md>
struct Columns {
  int k0, valid;
  float theta[V];
  int dim[V];
};

template <int V, bool Md>
__device__ __forceinline__ Columns<V, Md> load_columns(const LrpeParams& p, int h, int lane) {
  Columns<V, Md> c;
  c.k0 = lane * V;
  c.valid = imin(V, p.d - c.k0);
  const float* th = p.theta + h * p.theta_stride_h;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int k = c.k0 + i;
    c.dim[i] = Md ? k / p.e : 0;
    const int freq = k - c.dim[i] * p.e * int(Md);
    c.theta[i] = i < c.valid ? th[freq * p.theta_stride_k] : 0.f;
  }
  return c;
}

// Reduced angles of row s for the thread's columns.
template <int V, bool Md>
__device__ __forceinline__ void row_angles(float (&a)[V], const Columns<V, Md>& c, const LrpeParams& p, int s) {
  if constexpr (!Md) {
    const float pos = static_cast<float>(static_cast<int>(p.offset) + s);  // |offset| + n < 2^24
#pragma unroll
    for (int i = 0; i < V; ++i) a[i] = reduced_angle(pos, c.theta[i]);
  } else {
    // Extra tokens (s < l) sit at coordinate 0 of every dim: angle 0.
    float coord[3] = {0.f, 0.f, 0.f};
    if (s >= p.extra) {
      int r = s - p.extra;
#pragma unroll
      for (int j = 2; j >= 0; --j)
        if (j < p.dims) {
          coord[j] = static_cast<float>(r % p.grid[j]);
          r /= p.grid[j];
        }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float pos = c.dim[i] == 0 ? coord[0] : c.dim[i] == 1 ? coord[1] : coord[2];
      a[i] = reduced_angle(pos, c.theta[i]);
    }
  }
}

// --- activations ----------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float x) { return rcp_approx(1.f + exp_approx(-x)); }

// Per-column statistics of softmax over the sequence, for the thread's V columns.
template <int V>
struct ColumnSoftmax {
  float bias[V];  // p = 2^(x·log2e + bias): −log2 Σ_s exp(x_s) (−inf for missing columns)
  float dot[V];   // backward: Σ_s p·g
};

// Softmax over features first sums 2^(x·log2e) unshifted. Rows whose sums lie in
// [2^-kNoShiftLog2, 2^kNoShiftLog2] keep it: no term overflowed, every x·log2e <= kNoShiftLog2
// and the dominant terms' x·log2e >= −kNoShiftLog2 − 8, so their arguments' rounding stays within
// 2^-24·40 ≈ 2.4e-6 relative, inside the fp32 bound of docs/lrpe.md §6. When some row of the warp
// falls outside (one vote), the warp redoes its rows shifted by the row max: the max reduction
// and a second pass of exponentials are paid only by such rows' warps.
constexpr float kNoShiftLog2 = 32.f;

// xb = act(x) for N rows (the slices of one loop step), x from load(v); softmax over features
// takes x again from reload(v) (from memory: the rows' registers are free by then) when it must
// redo them shifted. Softmax over features reduces over each row's threads: every lane of the
// warp must call it the same number of times.
// WholeLane: a lane owns all V features of its slice or none (valid == V or <= 0, the vectorized
// path), so validity is tested once per lane.
template <int Act, int V, int N, bool WholeLane, class Load, class Reload>
__device__ __forceinline__ void activate(float (&v)[N][V], Load load, Reload reload, int valid,
                                         const ColumnSoftmax<V> (&col)[N], int group) {
  load(v);
  if constexpr (Act == kLrpeActSoftmax) {
    // v ← 2^(v·log2e − shift) over the row's valid features, sum[j] ← the rows' sums.
    float sum[N];
    auto exp_sum = [&](const float (&shift)[N]) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        sum[j] = 0.f;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          v[j][i] = exp2_approx(__fmaf_rn(v[j][i], kLog2e, -shift[j]));
          if (!WholeLane && i >= valid) v[j][i] = 0.f;
          sum[j] += v[j][i];
        }
        if (WholeLane && valid <= 0) sum[j] = 0.f;
      }
      row_sums(sum, group);
    };
    const float unshifted[N] = {};
    exp_sum(unshifted);
    constexpr float kLow = 1.f / (1ull << 32), kHigh = float(1ull << 32);
    static_assert(kNoShiftLog2 == 32.f, "kLow and kHigh are 2^∓kNoShiftLog2");
    bool in_range = true;
#pragma unroll
    for (int j = 0; j < N; ++j) in_range &= sum[j] >= kLow && sum[j] <= kHigh;
    if (!all32(in_range)) {
      reload(v);
      float mx[N];
#pragma unroll
      for (int j = 0; j < N; ++j) {
        mx[j] = -infinity_f32();
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (WholeLane || i < valid) mx[j] = fmaxf(mx[j], v[j][i]);
        if (WholeLane && valid <= 0) mx[j] = -infinity_f32();
      }
      row_maxes(mx, group);
#pragma unroll
      for (int j = 0; j < N; ++j) mx[j] *= kLog2e;
      exp_sum(mx);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float inv = rcp_approx(sum[j]);  // IEEE division would call a slow path (a stack frame)
#pragma unroll
      for (int i = 0; i < V; ++i) v[j][i] *= inv;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float& x = v[j][i];
        if constexpr (Act == kLrpeActRelu) x = fmaxf(x, 0.f);
        else if constexpr (Act == kLrpeActSigmoid) x = sigmoid(x);
        else if constexpr (Act == kLrpeActSilu) x = x * sigmoid(x);
        else if constexpr (Act == kLrpeActSoftmaxSeq) x = exp2_approx(__fmaf_rn(x, kLog2e, col[j].bias[i]));
      }
  }
}

// dx = ∂xb/∂x applied to g = ∂L/∂xb for N rows, in place of g; load(x) and reload(x) give the
// act's input as for activate (neither is called for act none).
template <int Act, int V, int N, bool WholeLane, class Load, class Reload>
__device__ __forceinline__ void act_backward(float (&g)[N][V], Load load, Reload reload, int valid,
                                             const ColumnSoftmax<V> (&col)[N], int group) {
  if constexpr (Act == kLrpeActSoftmax) {
    float p[N][V], dot[N];
    activate<kLrpeActSoftmax, V, N, WholeLane>(p, load, reload, valid, col, group);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      dot[j] = 0.f;
#pragma unroll
      for (int i = 0; i < V; ++i) dot[j] += p[j][i] * g[j][i];
    }
    row_sums(dot, group);
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) g[j][i] = p[j][i] * (g[j][i] - dot[j]);
  } else if constexpr (Act != kLrpeActNone) {
    float x[N][V];
    load(x);
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float& d = g[j][i];
        const float xi = x[j][i];
        if constexpr (Act == kLrpeActRelu) {
          d = xi >= 0.f ? d : 0.f;
        } else if constexpr (Act == kLrpeActSigmoid) {
          const float s = sigmoid(xi);
          d *= s * (1.f - s);
        } else if constexpr (Act == kLrpeActSilu) {
          const float s = sigmoid(xi);
          d *= s * (1.f + xi * (1.f - s));
        } else if constexpr (Act == kLrpeActSoftmaxSeq) {
          d = exp2_approx(__fmaf_rn(xi, kLog2e, col[j].bias[i])) * (d - col[j].dot[i]);
        }
      }
  }
}

}  // namespace lrpe
}  // namespace kgen
