// Fragment lane layouts of the AMD CDNA matrix instructions that kgen's MFMA attention kernels
// use: D (32x32, fp32) = A (32xK, 16-bit) · B (Kx32, 16-bit) + C, one instruction per 64-lane
// wavefront, K = 8 (v_mfma_f32_32x32x8f16 / _32x32x8bf16_1k on gfx90a and gfx942) or K = 16
// (v_mfma_f32_32x32x16_f16 / _bf16 on gfx950). Plain constexpr C++: the device templates place
// their data with these functions, and tests/generator/mfma_layout_test.cpp checks them on the
// CPU against a model of each instruction written from the CDNA3/CDNA4 ISA's operand tables.
#pragma once

#include "kgen_device/core/host_device.h"

namespace kgen {
namespace mfma {

constexpr int kWaveLanes = 64;  // lanes of a CDNA wavefront, all taking part in one MFMA
constexpr int kTile = 32;       // M = N of the instruction
constexpr int kAccRegisters = 16;  // fp32 registers of C/D per lane (32·32 / 64)

// 16-bit elements of A (and of B) per lane: K / 2 (4 for K = 8, 8 for K = 16).
KGEN_HOST_DEVICE constexpr int operand_elements(int k) { return k / 2; }

// A (32 rows x K): element e (< K/2) of lane `lane` is A[a_row(lane)][a_k(k, lane, e)]. Each
// 32-lane half holds one half of K, each lane K/2 consecutive k of one row.
KGEN_HOST_DEVICE constexpr int a_row(int lane) { return lane % kTile; }
KGEN_HOST_DEVICE constexpr int a_k(int k, int lane, int e) { return operand_elements(k) * (lane / kTile) + e; }

// B (K x 32 columns): element e of lane `lane` is B[b_k(k, lane, e)][b_col(lane)], the mirror of A.
KGEN_HOST_DEVICE constexpr int b_col(int lane) { return lane % kTile; }
KGEN_HOST_DEVICE constexpr int b_k(int k, int lane, int e) { return a_k(k, lane, e); }

// C and D (32 x 32, fp32): register r (< 16) of lane `lane` is D[c_row(lane, r)][c_col(lane)]:
// a lane owns one column; its registers run over rows in groups of 4, the two halves of the
// wavefront interleaving every 4 rows. The same for both K.
KGEN_HOST_DEVICE constexpr int c_row(int lane, int r) { return 8 * (r / 4) + 4 * (lane / kTile) + r % 4; }
KGEN_HOST_DEVICE constexpr int c_col(int lane) { return lane % kTile; }

// Chaining without data movement: X = A·B left in C layout (a lane owns column n of X and 16
// of its rows) is the B operand of a next product Y = Z·X over X's 32 rows, in 32 / K k-steps:
// k-step s takes C registers [s·K/2, s·K/2 + K/2) of each lane as its B elements. Position kk
// (< K) of step s then stands for row chain_row(k, s, kk) of X, and Z must be loaded in the same
// order: Z's k-th element of step s is Z[·][chain_row(k, s, kk)]. For K = 8 this is 8·s + kk;
// for K = 16 rows interleave in runs of 4.
KGEN_HOST_DEVICE constexpr int chain_register(int k, int s, int kk) { return operand_elements(k) * s + kk % operand_elements(k); }
KGEN_HOST_DEVICE constexpr int chain_row(int k, int s, int kk) {
  return c_row(kTile * (kk / operand_elements(k)), chain_register(k, s, kk));
}

}  // namespace mfma
}  // namespace kgen
