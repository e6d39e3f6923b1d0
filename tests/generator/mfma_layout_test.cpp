// The MFMA fragment layouts (kgen_device/core/mfma_layout.h) against a CPU model of each
// instruction. The model is written from the ISA's operand tables, in their direction (matrix
// element -> lane and register), independently of the layout functions: it reads A and B from
// lane registers and writes D to lane registers. A test packs random matrices into registers with
// the layout functions, runs the model, unpacks D with the layout functions and compares with
// the plain matrix product; a wrong layout function gives a wrong product.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "kgen_device/core/mfma_layout.h"

namespace kgen {
namespace {

constexpr int kLanes = mfma::kWaveLanes;
constexpr int kTile = mfma::kTile;

// One wavefront's registers for a 32x32xK instruction (K = 8 or 16): per lane K/2 elements of
// A and of B, 16 fp32 of C/D. Values are doubles: the model checks placement, not rounding.
struct WaveRegisters {
  int k;
  std::vector<std::array<double, 8>> a, b;
  std::vector<std::array<double, 16>> c;
  explicit WaveRegisters(int k_) : k(k_), a(kLanes), b(kLanes), c(kLanes) {}
};

// v_mfma_f32_32x32x{8,16}: D = A·B + C, one block, no broadcast (cbsz = abid = blgp = 0). The
// ISA's tables (CDNA3 §7.1 for K = 8, CDNA4 for K = 16): A[i][k] is in lane i + 32·(k div (K/2)),
// element k mod (K/2); B[k][j] in lane j + 32·(k div (K/2)), element k mod (K/2); C[i][j] and
// D[i][j] in lane j + 32·((i div 4) mod 2), register 4·(i div 8) + i mod 4.
void model_mfma_32x32(WaveRegisters& w) {
  const int half_k = w.k / 2;
  auto a = [&](int i, int kk) { return w.a[i + 32 * (kk / half_k)][kk % half_k]; };
  auto b = [&](int kk, int j) { return w.b[j + 32 * (kk / half_k)][kk % half_k]; };
  auto d = [&](int i, int j) -> double& { return w.c[j + 32 * ((i / 4) % 2)][4 * (i / 8) + i % 4]; };
  double out[kTile][kTile];
  for (int i = 0; i < kTile; ++i)
    for (int j = 0; j < kTile; ++j) {
      double acc = d(i, j);
      for (int kk = 0; kk < w.k; ++kk) acc += a(i, kk) * b(kk, j);
      out[i][j] = acc;
    }
  for (int i = 0; i < kTile; ++i)
    for (int j = 0; j < kTile; ++j) d(i, j) = out[i][j];
}

using Matrix = std::vector<std::vector<double>>;

Matrix random_matrix(int rows, int cols, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  Matrix m(rows, std::vector<double>(cols));
  for (auto& row : m)
    for (double& x : row) x = normal(rng);
  return m;
}

// Registers of A, B and C placed by the layout functions (what the device code does).
void pack_a(WaveRegisters& w, const Matrix& a) {
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < mfma::operand_elements(w.k); ++e) w.a[lane][e] = a[mfma::a_row(lane)][mfma::a_k(w.k, lane, e)];
}
void pack_b(WaveRegisters& w, const Matrix& b) {
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < mfma::operand_elements(w.k); ++e) w.b[lane][e] = b[mfma::b_k(w.k, lane, e)][mfma::b_col(lane)];
}
void pack_c(WaveRegisters& w, const Matrix& c) {
  for (int lane = 0; lane < kLanes; ++lane)
    for (int r = 0; r < mfma::kAccRegisters; ++r) w.c[lane][r] = c[mfma::c_row(lane, r)][mfma::c_col(lane)];
}
Matrix unpack_d(const WaveRegisters& w) {
  Matrix d(kTile, std::vector<double>(kTile));
  for (int lane = 0; lane < kLanes; ++lane)
    for (int r = 0; r < mfma::kAccRegisters; ++r) d[mfma::c_row(lane, r)][mfma::c_col(lane)] = w.c[lane][r];
  return d;
}

double max_abs_difference(const Matrix& x, const Matrix& y) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = 0; j < x[i].size(); ++j) worst = std::max(worst, std::abs(x[i][j] - y[i][j]));
  return worst;
}

// A·B + C on plain matrices.
Matrix product(const Matrix& a, const Matrix& b, const Matrix& c) {
  Matrix out = c;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < b[0].size(); ++j)
      for (std::size_t kk = 0; kk < b.size(); ++kk) out[i][j] += a[i][kk] * b[kk][j];
  return out;
}

class MfmaLayout : public ::testing::TestWithParam<int> {};

TEST_P(MfmaLayout, EveryOperandLayoutCoversItsMatrixOnce) {
  const int k = GetParam();
  std::vector<int> a(kTile * k), b(kTile * k), c(kTile * kTile);
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int e = 0; e < mfma::operand_elements(k); ++e) {
      ++a[mfma::a_row(lane) * k + mfma::a_k(k, lane, e)];
      ++b[mfma::b_k(k, lane, e) * kTile + mfma::b_col(lane)];
    }
    for (int r = 0; r < mfma::kAccRegisters; ++r) ++c[mfma::c_row(lane, r) * kTile + mfma::c_col(lane)];
  }
  for (int n : a) EXPECT_EQ(n, 1);
  for (int n : b) EXPECT_EQ(n, 1);
  for (int n : c) EXPECT_EQ(n, 1);
}

TEST_P(MfmaLayout, ModelOfTheInstructionComputesTheProductOfThePlacedMatrices) {
  const int k = GetParam();
  std::mt19937 rng(1234 + k);
  for (int trial = 0; trial < 4; ++trial) {
    const Matrix a = random_matrix(kTile, k, rng), b = random_matrix(k, kTile, rng), c = random_matrix(kTile, kTile, rng);
    WaveRegisters w(k);
    pack_a(w, a);
    pack_b(w, b);
    pack_c(w, c);
    model_mfma_32x32(w);
    EXPECT_LT(max_abs_difference(unpack_d(w), product(a, b, c)), 1e-12) << "K=" << k;
  }
}

// The device kernels reuse a product left in C registers as the B operand of the next one
// (P after the softmax, dS): the chained product Y = Z·X over X's 32 rows, Z loaded in
// chain_row order, equals the plain product.
TEST_P(MfmaLayout, ChainedProductReusesCRegistersAsTheNextBOperand) {
  const int k = GetParam();
  std::mt19937 rng(99 + k);
  const Matrix a = random_matrix(kTile, k, rng), b = random_matrix(k, kTile, rng);
  const Matrix zero(kTile, std::vector<double>(kTile, 0.0));
  WaveRegisters first(k);
  pack_a(first, a);
  pack_b(first, b);
  pack_c(first, zero);
  model_mfma_32x32(first);
  const Matrix x = unpack_d(first);
  const Matrix z = random_matrix(kTile, kTile, rng);  // Y = Z·X: 32 x 32 over X's 32 rows
  WaveRegisters next(k);
  pack_c(next, zero);
  for (int s = 0; s < kTile / k; ++s) {
    for (int lane = 0; lane < kLanes; ++lane)
      for (int e = 0; e < mfma::operand_elements(k); ++e) {
        const int kk = mfma::b_k(k, lane, e);
        next.b[lane][e] = first.c[lane][mfma::chain_register(k, s, kk)];
        // The device gather (mfma_tile.cuh's chained_operand) indexes by e alone.
        EXPECT_EQ(mfma::chain_register(k, s, kk), mfma::chain_register(k, s, e));
        next.a[lane][e] = z[mfma::a_row(lane)][mfma::chain_row(k, s, mfma::a_k(k, lane, e))];
      }
    model_mfma_32x32(next);
  }
  EXPECT_LT(max_abs_difference(unpack_d(next), product(z, x, zero)), 1e-12) << "K=" << k;
}

// The comparison can fail: A placed transposed within each half-K run gives another product.
TEST_P(MfmaLayout, AMisplacedOperandGivesAnotherProduct) {
  const int k = GetParam();
  std::mt19937 rng(7);
  const Matrix a = random_matrix(kTile, k, rng), b = random_matrix(k, kTile, rng);
  const Matrix zero(kTile, std::vector<double>(kTile, 0.0));
  WaveRegisters w(k);
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < mfma::operand_elements(k); ++e)
      w.a[lane][e] = a[mfma::a_row(lane)][mfma::a_k(k, lane, mfma::operand_elements(k) - 1 - e)];
  pack_b(w, b);
  pack_c(w, zero);
  model_mfma_32x32(w);
  EXPECT_GT(max_abs_difference(unpack_d(w), product(a, b, zero)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(K, MfmaLayout, ::testing::Values(8, 16),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 8 ? std::string("x8_gfx90a_gfx942") : std::string("x16_gfx950");
                         });

}  // namespace
}  // namespace kgen
