// kgen's MFMA lane layouts (kgen_device/core/mfma_layout.h) against AMD's matrix instruction
// calculator: the tables in tools/amdemu/mfma_tables/ are the calculator's own output (version
// and commit in their README), committed as data, and the AMD emulator (tools/amdemu/emu.py) reads
// its MFMA operands and writes its results through them. So kgen's header and the emulator are
// both checked against a source neither of them wrote. (mfma_layout_test.cpp checks the header
// against a model written from the ISA's tables; this test reads the calculator's.)
//
// Each CSV row is a lane; each column a register of the operand (A and B: its 16-bit halves,
// "v0.[15:0]", "v0.[31:16]", ...; D: "v0" .. "v15"), each cell the matrix entry held there,
// "A[i][k]", "B[k][j]" or "D[i][j]".
//
// Covered: v_mfma_f32_32x32x8_f16 and _bf16 (K = 8; gfx90a's _bf16_1k, gfx942). The calculator
// 1.3.2 stops at CDNA3, so gfx950's 32x32x16 (K = 16) has no table and is not checked here.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kgen_device/core/mfma_layout.h"

namespace kgen {
namespace {

constexpr int kK = 8;  // the K of the tables checked here

// One calculator table: (lane, slot) -> (row, column) of the matrix entry held there; a slot is
// the operand's 16-bit element (A, B) or the accumulator register (D), in column order.
struct Table {
  std::string architecture, instruction;
  std::map<std::pair<int, int>, std::pair<int, int>> cells;
  int slots = 0;
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream s(line);
  std::string cell;
  while (std::getline(s, cell, ',')) out.push_back(cell);
  return out;
}

Table read_table(const std::string& instruction, char matrix) {
  const std::string path = std::string(KGEN_MFMA_TABLES_DIR) + "/cdna3_" + instruction + "_" + matrix + ".csv";
  std::ifstream f(path);
  if (!f) ADD_FAILURE() << "cannot open " << path;
  Table t;
  std::string line;
  std::vector<std::string> header;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    if (line.rfind("Architecture: ", 0) == 0) {
      t.architecture = line.substr(14);
      continue;
    }
    if (line.rfind("Instruction: ", 0) == 0) {
      t.instruction = line.substr(13);
      continue;
    }
    const auto cells = split_csv(line);
    if (header.empty()) {
      header = cells;
      t.slots = static_cast<int>(header.size()) - 1;
      continue;
    }
    EXPECT_EQ(cells.size(), header.size()) << path << ": " << line;
    const int lane = std::stoi(cells[0]);
    for (int slot = 0; slot + 1 < static_cast<int>(cells.size()); ++slot) {
      char m = 0;
      int row = -1, col = -1;
      EXPECT_EQ(std::sscanf(cells[slot + 1].c_str(), "%c[%d][%d]", &m, &row, &col), 3) << path << ": " << cells[slot + 1];
      EXPECT_EQ(m, matrix) << path << ": " << cells[slot + 1];
      t.cells[{lane, slot}] = {row, col};
    }
  }
  return t;
}

// The columns are the registers in order, each operand register's low half before its high
// half: slot e is the operand's element e (what a_k / b_k number), slot r of D register r.
void expect_header_order(const std::string& instruction, char matrix) {
  std::ifstream f(std::string(KGEN_MFMA_TABLES_DIR) + "/cdna3_" + instruction + "_" + matrix + ".csv");
  std::string line;
  while (std::getline(f, line) && line.rfind("lane,", 0) != 0) {
  }
  const auto header = split_csv(line);
  for (int slot = 0; slot + 1 < static_cast<int>(header.size()); ++slot) {
    char expected[32];
    if (matrix == 'D') std::snprintf(expected, sizeof expected, "v%d", slot);
    else std::snprintf(expected, sizeof expected, "v%d.[%d:%d]", slot / 2, 16 * (slot % 2) + 15, 16 * (slot % 2));
    EXPECT_EQ(header[slot + 1], expected) << instruction << " " << matrix;
  }
}

class MfmaCalculator : public ::testing::TestWithParam<const char*> {};

TEST_P(MfmaCalculator, TablesAreWholeOperands) {
  const std::string ins = GetParam();
  for (char m : {'A', 'B', 'D'}) {
    const Table t = read_table(ins, m);
    EXPECT_EQ(t.architecture, "CDNA3");
    std::string upper = ins;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(t.instruction, upper);
    EXPECT_EQ(t.slots, m == 'D' ? mfma::kAccRegisters : mfma::operand_elements(kK));
    expect_header_order(ins, m);
    // Every entry of the matrix (32 x K, K x 32 or 32 x 32) in exactly one (lane, slot).
    std::set<std::pair<int, int>> entries;
    for (const auto& [where, entry] : t.cells) entries.insert(entry);
    EXPECT_EQ(t.cells.size(), static_cast<std::size_t>(mfma::kWaveLanes * t.slots));
    EXPECT_EQ(entries.size(), t.cells.size());
  }
}

TEST_P(MfmaCalculator, OperandLayoutsMatchTheHeader) {
  const std::string ins = GetParam();
  const Table a = read_table(ins, 'A'), b = read_table(ins, 'B');
  for (int lane = 0; lane < mfma::kWaveLanes; ++lane)
    for (int e = 0; e < mfma::operand_elements(kK); ++e) {
      const std::pair<int, int> a_entry{mfma::a_row(lane), mfma::a_k(kK, lane, e)};
      const std::pair<int, int> b_entry{mfma::b_k(kK, lane, e), mfma::b_col(lane)};
      EXPECT_EQ(a.cells.at({lane, e}), a_entry) << ins << " A, lane " << lane << ", element " << e;
      EXPECT_EQ(b.cells.at({lane, e}), b_entry) << ins << " B, lane " << lane << ", element " << e;
    }
}

TEST_P(MfmaCalculator, AccumulatorLayoutMatchesTheHeader) {
  const std::string ins = GetParam();
  const Table d = read_table(ins, 'D');
  for (int lane = 0; lane < mfma::kWaveLanes; ++lane)
    for (int r = 0; r < mfma::kAccRegisters; ++r) {
      const std::pair<int, int> entry{mfma::c_row(lane, r), mfma::c_col(lane)};
      EXPECT_EQ(d.cells.at({lane, r}), entry) << ins << " D, lane " << lane << ", register " << r;
    }
}

// Chaining (mfma_layout.h): k-step s of Y = Z·X takes X's accumulator registers
// chain_register(K, s, kk) as B, so B's k-th entry kk must be the row of X held there:
// chain_row(K, s, kk) == the D table's row of (lane, register), and B's column == D's column.
// Read from the calculator's B and D tables alone.
TEST_P(MfmaCalculator, ChainedAccumulatorIsTheNextBOperand) {
  const std::string ins = GetParam();
  const Table b = read_table(ins, 'B'), d = read_table(ins, 'D');
  for (int s = 0; s < mfma::kTile / kK; ++s)
    for (int lane = 0; lane < mfma::kWaveLanes; ++lane)
      for (int e = 0; e < mfma::operand_elements(kK); ++e) {
        const auto [kk, col] = b.cells.at({lane, e});
        const int reg = mfma::chain_register(kK, s, kk);
        EXPECT_EQ(reg, mfma::operand_elements(kK) * s + e) << ins << ": step " << s << ", lane " << lane;
        const auto [x_row, x_col] = d.cells.at({lane, reg});
        EXPECT_EQ(x_col, col) << ins << ": step " << s << ", lane " << lane << ", element " << e;
        EXPECT_EQ(mfma::chain_row(kK, s, kk), x_row) << ins << ": step " << s << ", lane " << lane << ", element " << e;
      }
}

INSTANTIATE_TEST_SUITE_P(Cdna3, MfmaCalculator,
                         ::testing::Values("v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x8_bf16"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param).substr(std::string("v_mfma_f32_32x32x8_").size());
                         });

}  // namespace
}  // namespace kgen
