// The row rule of the metrics (docs/attention.md §5.2): an output whose global rel_l2 is within
// its bound still fails when one row is wrong, while the rounding of a correct output, rows of
// tiny norm and masked rows pass.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "check/host_convert.h"
#include "check/metrics.h"
#include "generator/target.h"

namespace kgen {
namespace {

constexpr std::size_t kRows = 32768, kRowLength = 128;

// Random normal values, rows × row_length.
std::vector<double> random_rows(std::size_t rows, std::size_t row_length, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(rows * row_length);
  for (double& x : v) x = normal(rng);
  return v;
}

// The values as a kernel storing `dtype` would hold them.
std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    out[i] = dtype == DType::bf16 ? bf16_bits_to_float(float_to_bf16_bits(f))
             : dtype == DType::f16 ? half_bits_to_float(float_to_half_bits(f))
                                   : f;
  }
  return out;
}

void zero_row(std::vector<double>& v, std::size_t row, std::size_t row_length) {
  for (std::size_t x = 0; x < row_length; ++x) v[row * row_length + x] = 0;
}

TEST(MetricsRowRule, RoundedOutputsPassAndTheirWorstRowIsFarBelowTheBound) {
  const std::vector<double> ref = random_rows(kRows, kRowLength, 1);
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    const Tolerance tol = tolerance_for(t);
    const Comparison c = compare(rounded(ref, t), ref, tol, kRowLength);
    EXPECT_TRUE(c.pass) << dtype_name(t) << ": " << to_string(c);
    EXPECT_EQ(c.rows, kRows);
    EXPECT_DOUBLE_EQ(c.row_bound, kRowErrorMultiple * tol.rel_l2);
    // Output rounding alone: about 2^-9 relative per row in bf16, 2^-12 in fp16, 2^-25 in fp32.
    EXPECT_LT(c.worst_row_error, c.row_bound / 8) << dtype_name(t);
  }
}

TEST(MetricsRowRule, OneZeroedRowFailsThoughRelL2AndCosinePass) {
  // The probe that motivated the rule: one 128-element row of 32,768 zeroed, bf16.
  const std::vector<double> ref = random_rows(kRows, kRowLength, 2);
  std::vector<double> out = rounded(ref, DType::bf16);
  zero_row(out, 12345, kRowLength);
  const Tolerance tol = tolerance_for(DType::bf16);
  const Comparison c = compare(out, ref, tol, kRowLength);
  EXPECT_LE(c.rel_l2, tol.rel_l2) << "rel_l2 alone would miss the zeroed row: " << to_string(c);
  EXPECT_GT(c.cosine, 0.999);
  EXPECT_FALSE(c.pass) << to_string(c);
  EXPECT_EQ(c.failed, Comparison::Failure::row);
  EXPECT_EQ(c.worst_row, 12345u);
  EXPECT_NEAR(c.worst_row_error, 1.0, 1e-12);
  EXPECT_NE(c.why.find("row 12345 of 32768"), std::string::npos) << c.why;
}

TEST(MetricsRowRule, ARowWrongByAFewPercentFailsFirstOrderButNotSecondOrder) {
  // One row off by 30 %: above 20 × 1e-2, within 20 × 2e-2 (the second-order bound).
  const std::vector<double> ref = random_rows(kRows, kRowLength, 3);
  std::vector<double> out = ref;
  for (std::size_t x = 0; x < kRowLength; ++x) out[77 * kRowLength + x] *= 1.30;
  const Comparison first = compare(out, ref, tolerance_for(DType::bf16), kRowLength);
  EXPECT_FALSE(first.pass);
  EXPECT_EQ(first.failed, Comparison::Failure::row);
  EXPECT_EQ(first.worst_row, 77u);
  const Comparison second = compare(out, ref, second_order_tolerance_for(DType::bf16), kRowLength);
  EXPECT_TRUE(second.pass) << to_string(second);
  // A zeroed row fails the second-order bound too.
  zero_row(out, 77, kRowLength);
  const Comparison zeroed = compare(out, ref, second_order_tolerance_for(DType::bf16), kRowLength);
  EXPECT_EQ(zeroed.failed, Comparison::Failure::row);
}

TEST(MetricsRowRule, LongRowsWithHalfARowWrongFail) {
  // lrpe's o rows hold 2d features, the cos half then the sin half: a lost sin half fails.
  constexpr std::size_t d = 256, rows = 8192;
  const std::vector<double> ref = random_rows(rows, 2 * d, 4);
  std::vector<double> out = rounded(ref, DType::bf16);
  for (std::size_t x = d; x < 2 * d; ++x) out[4000 * 2 * d + x] = 0;
  const Comparison c = compare(out, ref, tolerance_for(DType::bf16), 2 * d);
  EXPECT_LE(c.rel_l2, tolerance_for(DType::bf16).rel_l2);
  EXPECT_EQ(c.failed, Comparison::Failure::row) << to_string(c);
  EXPECT_EQ(c.worst_row, 4000u);
}

TEST(MetricsRowRule, RowsOfTinyNormAreJudgedAgainstTheOutputsScale) {
  // Rows whose exact value is tiny (cancellation) carry the absolute error of the whole
  // computation: 1e-3 of the typical row norm. Relative to their own norm that is 100 %, yet
  // it is 1/100 of the floor's allowance (20 × 1e-2 × 0.5 × rms), so they pass.
  std::vector<double> ref = random_rows(kRows, kRowLength, 5);
  std::vector<double> out = ref;
  const double typical = std::sqrt(double(kRowLength));
  for (std::size_t r = 0; r < kRows; r += 100) {
    for (std::size_t x = 0; x < kRowLength; ++x) ref[r * kRowLength + x] *= 1e-6;
    for (std::size_t x = 0; x < kRowLength; ++x) out[r * kRowLength + x] = ref[r * kRowLength + x] + 1e-3 * typical / std::sqrt(double(kRowLength));
  }
  const Comparison c = compare(out, ref, tolerance_for(DType::bf16), kRowLength);
  EXPECT_TRUE(c.pass) << to_string(c);
  // A tiny row that is badly wrong on the output's scale still fails.
  for (std::size_t x = 0; x < kRowLength; ++x) out[500 * kRowLength + x] = 1.0;
  const Comparison bad = compare(out, ref, tolerance_for(DType::bf16), kRowLength);
  EXPECT_EQ(bad.failed, Comparison::Failure::row) << to_string(bad);
  EXPECT_EQ(bad.worst_row, 500u);
}

TEST(MetricsRowRule, MaskedRowsPass) {
  // Fully masked attention rows: o rows of zeros, lse −inf, in the kernel's output as in the
  // reference. LSE is compared one value per row.
  std::vector<double> o_ref = random_rows(4096, 64, 6), lse_ref(4096);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(5.0, 1.0);
  for (std::size_t r = 0; r < 4096; ++r) {
    lse_ref[r] = normal(rng);
    if (r % 7 == 0) {
      zero_row(o_ref, r, 64);
      lse_ref[r] = -INFINITY;
    }
  }
  const Tolerance tol = tolerance_for(DType::bf16);
  EXPECT_TRUE(compare(rounded(o_ref, DType::bf16), o_ref, tol, 64).pass);
  const Comparison lse = compare(rounded(lse_ref, DType::f32), lse_ref, tol, 1);
  EXPECT_TRUE(lse.pass) << to_string(lse);
  // A masked row that is written anyway fails, as does a lost −inf.
  std::vector<double> o_bad = rounded(o_ref, DType::bf16);
  for (std::size_t x = 0; x < 64; ++x) o_bad[7 * 64 + x] = 0.5;
  EXPECT_EQ(compare(o_bad, o_ref, tol, 64).failed, Comparison::Failure::row);
  std::vector<double> lse_bad = lse_ref;
  lse_bad[14] = 0;
  EXPECT_EQ(compare(lse_bad, lse_ref, tol, 1).failed, Comparison::Failure::inf_mismatch);
  // One wrong LSE value among thousands: rel_l2 misses it, its own row does not.
  lse_bad = lse_ref;
  lse_bad[15] *= 1.3;
  const Comparison one = compare(lse_bad, lse_ref, tol, 1);
  EXPECT_LE(one.rel_l2, tol.rel_l2);
  EXPECT_EQ(one.failed, Comparison::Failure::row) << to_string(one);
  EXPECT_EQ(one.worst_row, 15u);
}

TEST(MetricsRowRule, AnExactlyZeroReferenceHasNoRowScale) {
  const std::vector<double> ref(1024, 0.0), out(1024, 1e-7);
  const Comparison c = compare(out, ref, tolerance_for(DType::f32), 64);
  EXPECT_EQ(c.worst_row_error, 0.0);
  EXPECT_NE(c.failed, Comparison::Failure::row);
  EXPECT_TRUE(compare(ref, ref, tolerance_for(DType::f32), 64).pass);
}

TEST(MetricsRowRule, SizeMustBeAMultipleOfTheRowLength) {
  const std::vector<double> v(100, 1.0);
  const Comparison c = compare(v, v, tolerance_for(DType::f32), 64);
  EXPECT_EQ(c.failed, Comparison::Failure::size);
  EXPECT_EQ(compare(v, v, tolerance_for(DType::f32), 0).failed, Comparison::Failure::size);
}

TEST(MetricsRowRule, Fp32RowsAreHeldToTwentyTimesTheFp32Bound) {
  // One row off by 5e-4 (above 20 × 1e-5) among 4096: rel_l2 7.8e-6 misses it.
  const std::vector<double> ref = random_rows(4096, 64, 8);
  std::vector<double> out = rounded(ref, DType::f32);
  for (std::size_t x = 0; x < 64; ++x) out[100 * 64 + x] = ref[100 * 64 + x] * (1 + 5e-4);
  const Comparison c = compare(out, ref, tolerance_for(DType::f32), 64);
  EXPECT_LE(c.rel_l2, tolerance_for(DType::f32).rel_l2);
  EXPECT_EQ(c.failed, Comparison::Failure::row) << to_string(c);
}

}  // namespace
}  // namespace kgen
