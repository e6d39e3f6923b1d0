// Kernel parameters of the paged K/V append (paged_append.cuh, docs/attention.md §10). Included by
// device templates and host code alike, so it uses only built-in types.
#pragma once

namespace kgen {

// Rotary styles (a template argument): none, GPT-NeoX halves (element i pairs with i + r/2,
// FlashAttention's rotary_interleaved=False) and GPT-J pairs (2i with 2i + 1, interleaved=True).
enum PagedAppendRotary : int {
  kAppendRotaryNone = 0,
  kAppendRotaryHalves = 1,
  kAppendRotaryPairs = 2,
};

// A row is one (batch, token, head) vector of head_dim elements. Rows [0, k_rows) are the new
// keys in (b, i, h) order, h fastest: row (b, i, h) of k_new goes to page block_table[b][pos /
// page_size], row pos % page_size, head h of k_cache (pos = cache_seqlens[b] + i), and the same
// row of v_new to v_cache. Rows [k_rows, rows) are q's (b, i, h) rows, read from q and written to
// q_out, rotated at position cache_seqlens[b] + i (q_sequential) or cache_seqlens[b]. Rows whose
// position is negative or at or past max_keys are not written. Strides are in elements, the last
// dimension is contiguous.
struct PagedAppendParams {
  const void* k_new;
  const void* v_new;
  void* k_cache;
  void* v_cache;
  const int* block_table;    // int32 (batch, table_stride …); null: page = batch (a contiguous cache)
  const int* cache_seqlens;  // int32 (batch): where batch b's new rows start
  const void* cos;           // rotary: (positions, rotary_dim / 2), rows cos_stride apart
  const void* sin;
  const void* q;             // rotated queries (null: none)
  void* q_out;
  long long kn_stride_b, kn_stride_h, kn_stride_n;
  long long vn_stride_b, vn_stride_h, vn_stride_n;
  long long kc_stride_page, kc_stride_row, kc_stride_h;
  long long vc_stride_page, vc_stride_row, vc_stride_h;
  long long q_stride_b, q_stride_h, q_stride_n;
  long long qo_stride_b, qo_stride_h, qo_stride_n;
  long long table_stride;
  long long cos_stride, sin_stride;
  long long k_rows;  // batch · n_new · heads_kv
  long long rows;    // k_rows plus batch · n_q · heads_q when q is rotated
  int n_new, heads_kv, n_q, heads_q, head_dim, rotary_dim;
  int page_size;
  int max_keys;      // the table's rows per batch (max_pages · page_size; a contiguous cache's n)
  int q_sequential;  // nonzero: query i sits at cache_seqlens[b] + i, else every query at cache_seqlens[b]
  int row_group;     // threads per row: a power of two >= ceil(head_dim / V)
  int row_group_log2;
  int vectorized;    // nonzero: whole V-element pieces (aligned pointers and strides, head_dim and
                     // rotary_dim / 2 multiples of V)
};

}  // namespace kgen
