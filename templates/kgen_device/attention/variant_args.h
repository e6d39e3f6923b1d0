// Run-time inputs of an attention variant (generator/variant.h): its scalars, its tensors, the
// attention sinks and, for packed (variable-length) batches, the sequences' bounds. A variant kernel takes them as a second kernel parameter after its params
// struct; the generated variant struct reads them. Included by device templates and host code
// alike, so it uses only built-in types: the layout is identical on both sides.
#pragma once

namespace kgen {

struct VariantArgs {
  float real[8];                // scalar i when declared real
  int integer[8];               // scalar i when declared integer
  const void* tensor[4];        // tensor j: int32 or fp32 elements
  long long stride[4][4];       // tensor j's strides in elements
  float* grad[4];               // ∂L/∂tensor j (fp32) of a learnable tensor in the backward; else null
  long long grad_stride[4][4];  // its strides in elements
  const float* sinks;           // sinks: one logit per query head (natural-log units) that joins
                                // each row's softmax denominator; null without sinks
  float* sinks_grad;            // ∂L/∂sinks (fp32, per query head) in the backward; else null
  // Packed batches: sequence b's query rows are [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of the
  // tensors' n dimension, its keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]); int32 on the device.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  // Paged K/V: key j of batch b is row j % page_size of page block_table[b · table_stride +
  // j / page_size] (k's and v's batch dimension holds the pages, n the rows of a page); batch b
  // has seqused_k[b] keys (null: n_k). Null block_table otherwise.
  const int* block_table;
  long long table_stride;
  int page_shift;  // log2(page_size)
  const int* seqused_k;
  // Range tables of the integer tensors a mask reads (expr_interval.h, iv_table), so that tile()
  // bounds their elements over a tile and proves tiles of, e.g., other documents empty: tensor j's
  // table (null: none), the length of its last dimension, the number of rows of its leading
  // dimensions, and their multipliers (row = Σ index_i · range_lead[j][i]).
  const int* range[4];
  long long range_len[4];
  long long range_rows[4];
  long long range_lead[4][3];
};

}  // namespace kgen
