// The autotuner's winner rule: failed candidates never win; inside the noise band the
// earliest candidate in canonical order wins, so two runs agree.
#include <gtest/gtest.h>

#include "tuning/autotune.h"

namespace kgen {
namespace {

CandidateResult candidate(int block_n, bool pass, double median, double spread) {
  CandidateResult c;
  c.config = "fa2:bm128:bn" + std::to_string(block_n) + ":w4:s2";
  c.compiled = true;
  c.check.pass = pass;
  if (pass) c.timing = {median, median - spread / 2, median + spread / 2, median, spread, 50};
  return c;
}

TEST(ChooseWinner, FailedCandidatesNeverWinEvenWhenFastest) {
  TuneResult r;
  r.candidates = {candidate(32, false, 0.5, 0.001), candidate(64, true, 1.0, 0.001), candidate(128, true, 1.2, 0.001)};
  choose_winner(r);
  ASSERT_TRUE(r.winner);
  EXPECT_EQ(*r.winner, 1u);
  ASSERT_TRUE(r.runner_up);
  EXPECT_EQ(*r.runner_up, 2u);
  EXPECT_NEAR(r.margin, 0.2, 1e-12);
  EXPECT_FALSE(r.within_noise);
}

TEST(ChooseWinner, TiesInsideTheNoiseGoToCanonicalOrder) {
  TuneResult a, b;
  // 0.3 % apart with 1 % spreads: a tie; whichever measured faster, the first candidate wins.
  a.candidates = {candidate(32, true, 1.003, 0.01), candidate(64, true, 1.000, 0.01)};
  b.candidates = {candidate(32, true, 1.000, 0.01), candidate(64, true, 1.003, 0.01)};
  choose_winner(a);
  choose_winner(b);
  EXPECT_EQ(*a.winner, 0u);
  EXPECT_EQ(*b.winner, 0u);
  EXPECT_TRUE(a.within_noise);
}

TEST(ChooseWinner, ANoisyCandidateDoesNotTieWithAClearlyFasterOne) {
  // Seen on an H200: 1.649 ms with a 3.3 % spread against 1.596 ms with 0.7 %, 50 reps each.
  TuneResult r;
  r.candidates = {candidate(64, true, 1.6491, 0.0538), candidate(32, true, 1.5957, 0.0117)};
  choose_winner(r);
  EXPECT_EQ(*r.winner, 1u);
  EXPECT_NEAR(r.margin, 1.6491 / 1.5957 - 1, 1e-9);
}

TEST(ChooseWinner, ClearlyFasterCandidateWinsRegardlessOfOrder) {
  TuneResult r;
  r.candidates = {candidate(32, true, 1.2, 0.005), candidate(64, true, 1.0, 0.005)};
  choose_winner(r);
  EXPECT_EQ(*r.winner, 1u);
}

TEST(ChooseWinner, NoPassingCandidateMeansNoWinner) {
  TuneResult r;
  r.candidates = {candidate(32, false, 0, 0), candidate(64, false, 0, 0)};
  choose_winner(r);
  EXPECT_FALSE(r.winner);
}

}  // namespace
}  // namespace kgen
