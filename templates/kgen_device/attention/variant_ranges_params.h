// The parameters of the range-table kernel (variant_ranges.cuh). Included by device templates and
// host code alike: built-in types only.
#pragma once

namespace kgen {

struct VariantRangeParams {
  const int* src;        // the tensor (int32)
  int* table;            // rows · levels · blocks (min, max) pairs
  long long n, rows;     // the last dimension's length; the product of the leading ones
  long long shape[4];    // the leading dimensions' sizes (rank − 1 of them)
  long long stride[4];   // the tensor's strides in elements, the last dimension's at rank − 1
  int rank;
};

}  // namespace kgen
