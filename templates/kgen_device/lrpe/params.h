// Kernel parameters of lrpe_cosine and md_lrpe_cosine (docs/lrpe.md), forward and backward.
// Included by device templates and host code alike, so it uses only built-in types.
#pragma once

namespace kgen {

// The activation applied to x before the rotation; the value is a template argument.
enum LrpeActCode : int {
  kLrpeActNone = 0,
  kLrpeActRelu = 1,
  kLrpeActSigmoid = 2,
  kLrpeActSilu = 3,
  kLrpeActSoftmax = 4,     // softmax over the features of each row (dim -1)
  kLrpeActSoftmaxSeq = 5,  // softmax over the sequence of each (b, h, k) column (dim -2)
};

// A slice is one (b, h); a block owns rows [x·rows_per_block, …) of `Fold` slices (a template
// argument) that share their angles, slices blockIdx.z·Fold … (over b, or over b·heads + h).
// Logical shapes: x and dx (batch, heads, n, d); o and dO (batch, heads, n, 2d), the cos half
// first. Strides are in elements, the last dimension is contiguous. theta is fp32, read as
// theta[h·theta_stride_h + i·theta_stride_k] (a stride of 0 broadcasts).
struct LrpeParams {
  const void* x;       // forward input; backward: the act's input (unused for act none)
  const void* d_o;     // backward: dO
  void* out;           // forward: o; backward: dx
  const float* theta;
  float* angles;       // md cache variant: (heads, n, d) fp32 angles reduced mod 2π; the
                       // forward writes them (batch 0 only), the backward reads them
  float* stats;        // softmax over the sequence: partial column statistics, planes
                       // [reference | sum | Σ e·g] × (batch·heads·splits) × d, log2 domain
                       // (lrpe.cuh, OnlineColumns)
  long long x_stride_b, x_stride_h, x_stride_n;
  long long do_stride_b, do_stride_h, do_stride_n;
  long long out_stride_b, out_stride_h, out_stride_n;
  long long theta_stride_h, theta_stride_k;
  long long offset;    // lrpe_cosine: token s sits at position offset + s
  int batch, heads, n, d;
  int extra;           // md: l extra tokens before the grid (angle 0)
  int e;               // md: frequencies per spatial dim; feature k belongs to dim k / e
  int dims;            // md: number of spatial dims m (1..3)
  int grid[3];         // md: spatial sizes n_1..n_m, the last varying fastest
  int row_group;       // threads per row: a power of two >= ceil(d / V), <= 32
  int row_group_log2;
  int rows_per_block;  // rows of one (b, h) each block covers (gridDim.x blocks along n)
  int fold_heads;      // nonzero (theta shared by heads): a block's Fold slices run over the
                       // flattened b·heads + h and gridDim.y = 1; zero: over b, gridDim.y = heads
  int vectorized;      // nonzero: d % V == 0 and every row start is 16-byte aligned
};

}  // namespace kgen
