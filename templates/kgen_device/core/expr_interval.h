// Interval arithmetic for attention-variant masks (generator/variant.h): the integer intervals
// and three-valued booleans with which a variant's tile() proves a (query range × key range)
// tile empty or full, and with which the generator's CPU classification computes the same
// answer. Shared by host and device, so both sides run one body.
//
// An interval [lo, hi] holds every value a 32-bit device integer expression can take over the
// tile. A result that leaves the int32 range becomes top ([kTopLo, kTopHi], one past each end):
// the device's int arithmetic may have wrapped there, so nothing is known, and top never decides
// a comparison against an int32 value. With operands in [kTopLo, kTopHi], sums and products stay
// far inside long long.
// A three-valued boolean is a set of the values it may take: bit 0 "may be false", bit 1 "may be
// true" (kTriFalse, kTriTrue, kTriUnknown); && || ! are Kleene's.
#pragma once

#include "kgen_device/core/host_device.h"

namespace kgen {

struct ExprInterval {
  long long lo, hi;
};

constexpr long long kExprTopLo = -2147483649LL;  // INT32_MIN − 1
constexpr long long kExprTopHi = 2147483648LL;   // INT32_MAX + 1
constexpr int kTriFalse = 1, kTriTrue = 2, kTriUnknown = 3;

KGEN_HOST_DEVICE constexpr ExprInterval iv_top() { return {kExprTopLo, kExprTopHi}; }
KGEN_HOST_DEVICE constexpr ExprInterval iv_range(long long lo, long long hi) {
  return lo < kExprTopLo + 1 || hi > kExprTopHi - 1 ? iv_top() : ExprInterval{lo, hi};
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_exact(long long x) { return iv_range(x, x); }
KGEN_HOST_DEVICE constexpr long long iv_min2(long long a, long long b) { return a < b ? a : b; }
KGEN_HOST_DEVICE constexpr long long iv_max2(long long a, long long b) { return a > b ? a : b; }

KGEN_HOST_DEVICE constexpr ExprInterval iv_add(ExprInterval a, ExprInterval b) {
  return iv_range(a.lo + b.lo, a.hi + b.hi);
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_sub(ExprInterval a, ExprInterval b) {
  return iv_range(a.lo - b.hi, a.hi - b.lo);
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_neg(ExprInterval a) { return iv_range(-a.hi, -a.lo); }
KGEN_HOST_DEVICE constexpr ExprInterval iv_mul(ExprInterval a, ExprInterval b) {
  const long long p0 = a.lo * b.lo, p1 = a.lo * b.hi, p2 = a.hi * b.lo, p3 = a.hi * b.hi;
  return iv_range(iv_min2(iv_min2(p0, p1), iv_min2(p2, p3)), iv_max2(iv_max2(p0, p1), iv_max2(p2, p3)));
}
// C's truncating division is monotonic in each operand while the divisor keeps its sign, so the
// corners bound it; a divisor range that holds 0 gives top.
KGEN_HOST_DEVICE constexpr ExprInterval iv_div(ExprInterval a, ExprInterval b) {
  if (b.lo <= 0 && b.hi >= 0) return iv_top();
  const long long p0 = a.lo / b.lo, p1 = a.lo / b.hi, p2 = a.hi / b.lo, p3 = a.hi / b.hi;
  return iv_range(iv_min2(iv_min2(p0, p1), iv_min2(p2, p3)), iv_max2(iv_max2(p0, p1), iv_max2(p2, p3)));
}
// C's remainder takes the dividend's sign and |a % b| < |b|; with one divisor c and a dividend
// range of one sign and one quotient, a % c = a − c·q rises with a, so the ends bound it.
KGEN_HOST_DEVICE constexpr ExprInterval iv_mod(ExprInterval a, ExprInterval b) {
  if (b.lo <= 0 && b.hi >= 0) return iv_top();
  const long long m = iv_max2(b.lo < 0 ? -b.lo : b.lo, b.hi < 0 ? -b.hi : b.hi) - 1;
  const bool one_sign = a.lo >= 0 || a.hi <= 0;
  if (one_sign && b.lo == b.hi && a.lo / b.lo == a.hi / b.lo) return iv_range(a.lo % b.lo, a.hi % b.lo);
  return iv_range(a.lo >= 0 ? 0 : iv_max2(a.lo, -m), a.hi <= 0 ? 0 : iv_min2(a.hi, m));
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_min(ExprInterval a, ExprInterval b) {
  return iv_range(iv_min2(a.lo, b.lo), iv_min2(a.hi, b.hi));
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_max(ExprInterval a, ExprInterval b) {
  return iv_range(iv_max2(a.lo, b.lo), iv_max2(a.hi, b.hi));
}
KGEN_HOST_DEVICE constexpr ExprInterval iv_abs(ExprInterval a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return iv_neg(a);
  return iv_range(0, iv_max2(-a.lo, a.hi));
}
// where(c, x, y) over integers: the branch c must take, or both.
KGEN_HOST_DEVICE constexpr ExprInterval iv_where(int c, ExprInterval x, ExprInterval y) {
  return c == kTriTrue ? x : c == kTriFalse ? y : iv_range(iv_min2(x.lo, y.lo), iv_max2(x.hi, y.hi));
}

// Comparisons decide only when the ranges do not overlap.
KGEN_HOST_DEVICE constexpr int tri_lt(ExprInterval a, ExprInterval b) {
  return a.hi < b.lo ? kTriTrue : a.lo >= b.hi ? kTriFalse : kTriUnknown;
}
KGEN_HOST_DEVICE constexpr int tri_le(ExprInterval a, ExprInterval b) {
  return a.hi <= b.lo ? kTriTrue : a.lo > b.hi ? kTriFalse : kTriUnknown;
}
KGEN_HOST_DEVICE constexpr int tri_eq(ExprInterval a, ExprInterval b) {
  if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return kTriTrue;
  return a.hi < b.lo || b.hi < a.lo ? kTriFalse : kTriUnknown;
}
KGEN_HOST_DEVICE constexpr int tri_not(int a) { return ((a & 1) << 1) | ((a >> 1) & 1); }
KGEN_HOST_DEVICE constexpr int tri_and(int a, int b) { return (a & b & 2) | ((a | b) & 1); }
KGEN_HOST_DEVICE constexpr int tri_or(int a, int b) { return ((a | b) & 2) | (a & b & 1); }
// == of two booleans: known only when both are.
KGEN_HOST_DEVICE constexpr int tri_same(int a, int b) {
  return a == kTriUnknown || b == kTriUnknown ? kTriUnknown : a == b ? kTriTrue : kTriFalse;
}
// where(c, x, y) over booleans: the values either reachable branch may take.
KGEN_HOST_DEVICE constexpr int tri_where(int c, int x, int y) {
  return c == kTriTrue ? x : c == kTriFalse ? y : (x | y);
}

// Range tables: the bounds of an integer tensor's elements over an index range, for tensor reads
// in a mask (VariantArgs::range; built on the GPU by variant_ranges.cuh, on the CPU by the
// generator's classification). A table row covers one row of the tensor's last dimension (n
// elements) in blocks of 2^kExprRangeShift elements; entry e of level l is the (min, max) pair of
// blocks [e, e + 2^l) clipped at the last block, so that any block range [b0, b1] is covered
// exactly by two entries of level ⌊log2(b1 − b0 + 1)⌋. A row is levels(blocks) · blocks pairs.
constexpr int kExprRangeShift = 4;
KGEN_HOST_DEVICE constexpr int iv_floor_log2(long long x) {  // x >= 1
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(x);
#else
  return 63 - __builtin_clzll(static_cast<unsigned long long>(x));
#endif
}
KGEN_HOST_DEVICE constexpr long long iv_table_blocks(long long n) { return (n + (1 << kExprRangeShift) - 1) >> kExprRangeShift; }
KGEN_HOST_DEVICE constexpr int iv_table_levels(long long blocks) { return iv_floor_log2(blocks) + 1; }
// The index of the (min, max) pair of (row, level, e) in a table of rows of n elements.
KGEN_HOST_DEVICE constexpr long long iv_table_pair(long long n, long long row, int level, long long e) {
  const long long blocks = iv_table_blocks(n);
  return (row * iv_table_levels(blocks) + level) * blocks + e;
}
// The bounds of the elements [index.lo, index.hi] (clipped to [0, n)) of row `row` (which must be
// one value in [0, rows)) of a table; top when there is no table or nothing is known.
KGEN_HOST_DEVICE constexpr ExprInterval iv_table(const int* table, long long n, long long rows, ExprInterval row,
                                                 ExprInterval index) {
  if (table == nullptr || row.lo != row.hi || row.lo < 0 || row.lo >= rows) return iv_top();
  const long long lo = iv_max2(index.lo, 0), hi = iv_min2(index.hi, n - 1);
  if (lo > hi) return iv_top();
  const long long b0 = lo >> kExprRangeShift, b1 = hi >> kExprRangeShift;
  const int level = iv_floor_log2(b1 - b0 + 1);
  const int* x = table + 2 * iv_table_pair(n, row.lo, level, b0);
  const int* y = table + 2 * iv_table_pair(n, row.lo, level, b1 - (1LL << level) + 1);
  return ExprInterval{iv_min2(x[0], y[0]), iv_max2(x[1], y[1])};
}

}  // namespace kgen
