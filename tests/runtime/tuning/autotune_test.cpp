// The autotuner's winner rule: failed candidates never win; inside the noise band the
// earliest candidate in canonical order wins, so two runs agree. Its final round: the
// candidates near the fastest timed again, interleaved, against a bench whose clock drops
// under sustained work as a GPU's power cap does.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

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

TEST(ChooseWinner, AfterAFinalOnlyItsCandidatesCompete) {
  TuneResult r;
  // The first candidate's first-pass time (at a higher clock) is the lowest, but it did not run
  // the final: the finalists' times are the comparable ones.
  r.candidates = {candidate(32, true, 0.90, 0.005), candidate(64, true, 1.00, 0.005), candidate(128, true, 1.05, 0.005)};
  r.candidates[1].final_round = r.candidates[2].final_round = true;
  choose_winner(r);
  EXPECT_EQ(*r.winner, 1u);
  EXPECT_EQ(*r.runner_up, 2u);
  EXPECT_NEAR(r.margin, 0.05, 1e-12);
}

// A bench whose runs take each config's own time until `cap_after` runs in all, and 12 % longer
// after that, as under a GPU's power cap; it logs which config each call timed.
class CappedBench final : public CandidateBench {
 public:
  CappedBench(std::map<std::string, double> ms, int cap_after) : ms_(std::move(ms)), cap_after_(cap_after) {}
  CandidateCheck check(const std::string&) override { return {true, "ok"}; }
  Timing time(const std::string& config, int warmup, int reps) override {
    calls.push_back(config);
    std::vector<double> runs;
    for (int i = 0; i < warmup + reps; ++i) {
      const double ms = ms_.at(config) * (runs_++ >= cap_after_ ? 1.12 : 1.0);
      if (i >= warmup) runs.push_back(ms);
    }
    return timing_of(runs);
  }
  std::vector<std::string> calls;

 private:
  std::map<std::string, double> ms_;
  int cap_after_, runs_ = 0;
};

// Candidates 32, 64, 128, 256 (bn) of the first pass: each timed with warmup 5 and reps 20 on
// `bench`, in that order.
TuneResult first_pass(CappedBench& bench) {
  TuneResult r;
  for (int bn : {32, 64, 128, 256}) {
    CandidateResult c = candidate(bn, true, 0, 0);
    c.timing = bench.time(c.config, 5, 20);
    r.candidates.push_back(c);
  }
  bench.calls.clear();
  return r;
}

TEST(RefineFinalists, TheFasterKernelWinsWhenTheSlowerOneWasTimedAtTheHigherClock) {
  // bn32 takes 1.00 ms and bn64 0.92 ms, but the clock drops after bn32's runs: the first pass
  // measures bn64 at 1.030 ms and would pick bn32; bn128 (1.30) is too slow for the final and
  // bn256 (1.04 ms: 1.165 under the cap) too.
  CappedBench bench({{"fa2:bm128:bn32:w4:s2", 1.00}, {"fa2:bm128:bn64:w4:s2", 0.92},
                     {"fa2:bm128:bn128:w4:s2", 1.30}, {"fa2:bm128:bn256:w4:s2", 1.04}},
                    25);
  TuneResult r = first_pass(bench);
  EXPECT_NEAR(r.candidates[1].timing.median_ms, 0.92 * 1.12, 1e-12);
  TuneResult before = r;
  choose_winner(before);
  EXPECT_EQ(*before.winner, 0u);  // the bias this round removes

  std::vector<std::string> stages;
  refine_finalists(bench, r, 20, [&](const char* stage, std::size_t done, std::size_t total, const CandidateResult* c) {
    stages.push_back(stage);
    EXPECT_TRUE(c && done >= 1 && done <= total);
  });
  EXPECT_TRUE(r.candidates[0].final_round && r.candidates[1].final_round);
  EXPECT_FALSE(r.candidates[2].final_round || r.candidates[3].final_round);
  EXPECT_NEAR(r.candidates[2].timing.median_ms, 1.30 * 1.12, 1e-12);  // outside the final: kept
  EXPECT_NEAR(r.candidates[0].timing.median_ms, 1.12, 1e-12);
  EXPECT_NEAR(r.candidates[1].timing.median_ms, 0.92 * 1.12, 1e-12);
  EXPECT_EQ(r.candidates[0].timing.reps, 7);  // ⌈20 / 3⌉ turns of 3 runs
  // Every call is one turn of kTurnReps runs without warm-up, two finalists a round, and the one
  // who goes first alternates.
  ASSERT_EQ(bench.calls.size(), 14u);
  EXPECT_EQ(bench.calls[0], r.candidates[0].config);
  EXPECT_EQ(bench.calls[2], r.candidates[1].config);
  EXPECT_EQ(bench.calls[4], r.candidates[0].config);
  EXPECT_EQ(stages, std::vector<std::string>(14, "final"));
  choose_winner(r);
  EXPECT_EQ(*r.winner, 1u);
  EXPECT_EQ(*r.runner_up, 0u);
}

TEST(RefineFinalists, AtMostFourFinalists) {
  // Five candidates within 5 % of the fastest: the four fastest run the final, not the fifth.
  CappedBench bench({{"fa2:bm128:bn16:w4:s2", 1.04}, {"fa2:bm128:bn32:w4:s2", 1.00}, {"fa2:bm128:bn64:w4:s2", 1.01},
                     {"fa2:bm128:bn128:w4:s2", 1.02}, {"fa2:bm128:bn256:w4:s2", 1.03}},
                    1 << 30);
  TuneResult r = first_pass(bench);
  CandidateResult slowest = candidate(16, true, 0, 0);
  slowest.timing = bench.time(slowest.config, 5, 20);
  r.candidates.insert(r.candidates.begin(), slowest);
  bench.calls.clear();
  refine_finalists(bench, r, 9);
  EXPECT_FALSE(r.candidates[0].final_round);
  for (std::size_t i = 1; i < 5; ++i) EXPECT_TRUE(r.candidates[i].final_round) << i;
  EXPECT_EQ(bench.calls.size(), 3u * 4);  // three rounds (⌈9 / 3⌉) of four turns
  EXPECT_EQ(std::count(bench.calls.begin(), bench.calls.end(), slowest.config), 0);
}

TEST(RefineFinalists, NoFinalForALoneFastestOrFailedCandidates) {
  CappedBench bench({{"fa2:bm128:bn32:w4:s2", 1.00}, {"fa2:bm128:bn64:w4:s2", 1.10},
                     {"fa2:bm128:bn128:w4:s2", 1.20}, {"fa2:bm128:bn256:w4:s2", 1.01}},
                    1 << 30);
  TuneResult r = first_pass(bench);
  r.candidates[3].check.pass = false;  // within 5 %, but failed its check
  const TuneResult before = r;
  refine_finalists(bench, r, 20);
  EXPECT_TRUE(bench.calls.empty());
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    EXPECT_FALSE(r.candidates[i].final_round);
    EXPECT_EQ(r.candidates[i].timing.median_ms, before.candidates[i].timing.median_ms);
  }
}

}  // namespace
}  // namespace kgen
