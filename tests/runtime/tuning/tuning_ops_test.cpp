// Tuning every operator without a GPU: bucket rules and variant keys per op, database records of
// each op through a shard and back, the tuning problems' candidates and kernels, the records
// `kgen warm --db` compiles, and the launch-path decision precedence (explicit config > valid
// database record > KGEN_AUTOTUNE > heuristic) for attention_fwd, attention_bwd,
// attention_double_bwd, lrpe_cosine and md_lrpe_cosine.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "ops/buckets.h"
#include "generator/attention_backward.h"
#include "generator/lrpe.h"
#include "generator/registry.h"
#include "ops/attention_backward.h"
#include "ops/attention_forward.h"
#include "ops/general_path.h"
#include "ops/lrpe.h"
#include "tuning/bench_registry.h"
#include "tuning/tuning_decision.h"
#include "ops/attention_tuning.h"
#include "ops/lrpe_tuning.h"
#include "tests/runtime/tuning/test_support.h"

namespace kgen {
namespace {

const Target kSm90a = parse_target("sm_90a").value();

AttentionCase attention_case(DType dtype, int d, bool causal, int b, int h, int n) {
  AttentionCase c;
  c.dtype = dtype, c.head_dim = d, c.causal = causal, c.batch = b, c.heads_q = c.heads_kv = h, c.n_q = c.n_k = n;
  return c;
}

LrpeCase lrpe_case(LrpeOp op, LrpeDirection dir, LrpeAct act, int b, int h, int n, int d) {
  LrpeCase c;
  c.op = op, c.direction = dir, c.act = act, c.batch = b, c.heads = h, c.n = n, c.d = d;
  return c;
}

// ---- buckets and variant keys ----

TEST(TuningOpsBucket, LrpeRoundsNAndBatchHeadsUpAndKeepsTheHeadDimExactly) {
  EXPECT_EQ(lrpe_bucket({12, 12, 4096, 128}).text(), "n4096.bh256.d128");
  EXPECT_EQ(lrpe_bucket({12, 12, 4097, 128}).text(), "n8192.bh256.d128");
  EXPECT_EQ(lrpe_bucket({1, 1, 1, 48}).text(), "n1.bh1.d48");
  EXPECT_EQ(lrpe_bucket({2, 3, 266, 64}, 2).text(), "n512.bh8.d64.m2");
  EXPECT_EQ(lrpe_bucket({0, 0, 0, 0}).text(), "n1.bh1.d1");
  // n weighs like the attention sequence lengths.
  EXPECT_DOUBLE_EQ(bucket_distance("n4096.bh256.d128", "n8192.bh256.d128"), 4.0);
  EXPECT_DOUBLE_EQ(bucket_distance("n4096.bh256.d128", "n4096.bh512.d128"), 1.0);
}

TEST(TuningOpsBucket, EveryProblemsBucketFollowsItsOpsRule) {
  const AttentionCase c = attention_case(DType::bf16, 128, true, 4, 16, 3000);
  const std::string attention = "nq4096.nk4096.g1.bh64";
  EXPECT_EQ(attention_forward_tuning(c)->bucket(), attention);
  EXPECT_EQ(attention_backward_tuning(c, false)->bucket(), attention);
  EXPECT_EQ(attention_backward_tuning(c, true)->bucket(), attention);
  EXPECT_EQ(attention_double_backward_tuning(c)->bucket(), attention);
  EXPECT_EQ(lrpe_tuning(lrpe_case(LrpeOp::cosine, LrpeDirection::forward, LrpeAct::silu, 12, 12, 5000, 128))->bucket(),
            "n8192.bh256.d128");
  LrpeCase md = lrpe_case(LrpeOp::md_cosine, LrpeDirection::backward, LrpeAct::none, 2, 3, 4106, 64);
  md.grid = {16, 16, 16}, md.extra = 10;
  EXPECT_EQ(lrpe_tuning(md)->bucket(), "n8192.bh8.d64.m3");
}

// A decode-like grouped-query forward is tuned as the launch runs it: its group's query heads
// packed into the rows of one problem per K/V head, under the bucket and variant the launch looks
// up. Causal calls pack with one query row only; the backward and other calls stay as given.
TEST(TuningOpsBucket, GroupedQueryDecodeForwardIsTunedPacked) {
  AttentionCase c = attention_case(DType::bf16, 128, true, 2, 32, 1);
  c.heads_kv = 8, c.n_k = 4096;
  const auto fwd = attention_forward_tuning(c);
  EXPECT_EQ(fwd->bucket(), attention_bucket({2, 8, 8, 4, 4096}).text());
  EXPECT_EQ(fwd->bucket(), "nq4.nk4096.g1.bh16");
  EXPECT_EQ(fwd->variant_key(), "attention_fwd.bf16.d128.full");
  EXPECT_EQ(fwd->shape_text(), "b=2 h=8 h_kv=8 n_q=4 n_k=4096 (h=32 n_q=1 causal with its query heads packed)");
  const AttentionCase* packed = attention_case_of(*fwd);
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->heads_q, 8);
  EXPECT_EQ(packed->n_q, 4);
  EXPECT_FALSE(packed->causal);
  EXPECT_EQ(attention_backward_tuning(c, false)->bucket(), "nq1.nk4096.g4.bh64");
  AttentionCase rows = c;
  rows.n_q = 3;  // causal with three rows: as given
  EXPECT_EQ(attention_forward_tuning(rows)->bucket(), "nq4.nk4096.g4.bh64");
  rows.causal = false;  // 12 packed rows
  EXPECT_EQ(attention_forward_tuning(rows)->bucket(), "nq16.nk4096.g1.bh16");
  rows.n_q = 40;  // 160 rows: past one query tile, as given
  EXPECT_EQ(attention_forward_tuning(rows)->bucket(), "nq64.nk4096.g4.bh64");
  EXPECT_TRUE(query_heads_pack(32, 8, 32, false));
  EXPECT_FALSE(query_heads_pack(32, 8, 33, false));
  EXPECT_FALSE(query_heads_pack(8, 8, 1, false));
}

TEST(TuningOpsVariant, KeysCarryWhatChangesTheKernelsAndParseBack) {
  const AttentionCase c = attention_case(DType::f16, 64, false, 1, 8, 1024);
  EXPECT_EQ(attention_forward_tuning(c)->variant_key(), "attention_fwd.fp16.d64.full");
  EXPECT_EQ(attention_backward_tuning(c, false)->variant_key(), "attention_bwd.fp16.d64.full");
  EXPECT_EQ(attention_backward_tuning(c, true)->variant_key(), "attention_bwd.fp16.d64.full.deterministic");
  EXPECT_EQ(attention_double_backward_tuning(c)->variant_key(), "attention_double_bwd.fp16.d64.full");
  LrpeCase md = lrpe_case(LrpeOp::md_cosine, LrpeDirection::backward, LrpeAct::softmax_seq, 2, 3, 256, 64);
  md.grid = {16, 16}, md.cache = true;
  EXPECT_EQ(lrpe_tuning(md)->variant_key(), "md_lrpe_cosine.bwd.bf16.softmax_seq.cache");

  auto bwd = parse_attention_backward_variant_key("attention_bwd.bf16.d128.causal.deterministic");
  ASSERT_TRUE(bwd);
  EXPECT_EQ(bwd->first, (AttentionBackwardSpec{DType::bf16, 128, true}));
  EXPECT_TRUE(bwd->second);
  EXPECT_FALSE(parse_attention_backward_variant_key("attention_bwd.bf16.d128.causal")->second);
  EXPECT_EQ(parse_double_backward_variant_key("attention_double_bwd.fp32.d80.full"),
            (AttentionBackwardSpec{DType::f32, 80, false}));
  EXPECT_FALSE(parse_double_backward_variant_key("attention_bwd.fp32.d80.full"));
  auto lrpe = parse_lrpe_variant_key("md_lrpe_cosine.fwd.bf16.silu.cache");
  ASSERT_TRUE(lrpe);
  EXPECT_EQ(lrpe->first, (LrpeSpec{LrpeOp::md_cosine, LrpeDirection::forward, DType::bf16, LrpeAct::silu}));
  EXPECT_TRUE(lrpe->second);
  EXPECT_FALSE(parse_lrpe_variant_key("lrpe_cosine.fwd.bf16.silu.cache"));  // no cache outside md
  EXPECT_FALSE(parse_lrpe_variant_key("lrpe_cosine.up.bf16.silu"));
}

// ---- records of every op through a shard ----

TuningRecord record(const TuningProblem& p, const std::string& config) {
  TuningRecord r;
  r.op = std::string(p.op()), r.variant_key = p.variant_key(), r.bucket = p.bucket(), r.config = config;
  r.median_ms = 0.5, r.p20_ms = 0.49, r.p80_ms = 0.52, r.margin = 0.04, r.runner_up = "x", r.reps = 20;
  r.tuned_at = "2025-01-01T00:00:00.000Z";
  return r;
}

// A database of `records`, written as one shard under kCtx.
TuningDatabase database(const TempDir& dir, const std::vector<TuningRecord>& records) {
  std::string text = header();
  for (const auto& r : records) text += to_json_line(r) + "\n";
  spit(dir / "shard.jsonl", text);
  return TuningDatabase::open({dir / "shard.jsonl"}, kCtx);
}

std::vector<std::unique_ptr<TuningProblem>> one_problem_per_op() {
  std::vector<std::unique_ptr<TuningProblem>> out;
  const AttentionCase c = attention_case(DType::bf16, 128, true, 4, 16, 4096);
  out.push_back(attention_forward_tuning(c));
  out.push_back(attention_backward_tuning(c, true));
  out.push_back(attention_double_backward_tuning(c));
  out.push_back(lrpe_tuning(lrpe_case(LrpeOp::cosine, LrpeDirection::backward, LrpeAct::softmax, 12, 12, 4096, 128)));
  LrpeCase md = lrpe_case(LrpeOp::md_cosine, LrpeDirection::forward, LrpeAct::none, 12, 12, 4096, 128);
  md.grid = {64, 64};
  out.push_back(lrpe_tuning(md));
  return out;
}

// One operator object: every problem's operator is a registry row, and its checking-layer bench
// (installed by the operator's harness at start-up) is there for the tuner.
TEST(TuningOpsRegistry, EveryOpsProblemIsARegisteredOperatorWithItsBench) {
  for (const auto& p : one_problem_per_op()) {
    EXPECT_NE(find_operator(p->op()), nullptr) << p->op();
    EXPECT_NO_THROW(problem_bench(p->op())) << p->op();
  }
  EXPECT_THROW(problem_bench("no_such_operator"), Error);
}

TEST(TuningOpsRecords, EveryOpsRecordRoundTripsThroughAShardAndIsFoundByItsKey) {
  TempDir dir;
  std::vector<TuningRecord> records;
  auto problems = one_problem_per_op();
  for (const auto& p : problems) records.push_back(record(*p, p->config_space(kSm90a).back()));
  TuningDatabase db = database(dir, records);
  ASSERT_EQ(db.records().size(), problems.size());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const TuningProblem& p = *problems[i];
    auto hit = db.lookup(p.op(), p.variant_key(), p.bucket());
    ASSERT_TRUE(hit) << p.op();
    EXPECT_TRUE(hit->exact);
    TuningRecord read = hit->record;
    EXPECT_EQ(read.device, kH100);  // from the shard's header
    read.device.reset();
    EXPECT_EQ(to_json_line(read), to_json_line(records[i]));
    // The op's own records only: the same variant under another op finds nothing.
    EXPECT_FALSE(db.lookup(p.op() == "attention_fwd" ? "attention_bwd" : "attention_fwd", p.variant_key(), p.bucket()));
  }
}

// ---- tuning problems without a device ----

TEST(TuningOpsProblems, CandidatesParseCheckAndRenderWithoutAGpu) {
  for (const auto& p : one_problem_per_op()) {
    SCOPED_TRACE(std::string(p->op()));
    EXPECT_FALSE(p->check_problem());
    const auto space = p->config_space(kSm90a);
    ASSERT_GE(space.size(), 2u);
    for (const auto& c : space) {
      EXPECT_EQ(p->parse_config(c), c);
      EXPECT_FALSE(p->check_config(c, kSm90a)) << c;
      EXPECT_FALSE(p->kernels(c).empty()) << c;
    }
    EXPECT_FALSE(p->parse_config("nonsense"));
    EXPECT_TRUE(p->check_config("nonsense", kSm90a));
    EXPECT_GT(p->rate(1.0), 0);
  }
  const AttentionCase c = attention_case(DType::bf16, 128, false, 1, 16, 4096);
  // Atomic dQ: preprocess, kv_atomic, dq_convert; deterministic: preprocess, kv, dq.
  EXPECT_EQ(attention_backward_tuning(c, false)->kernels("fa2:bm32:bn128:w8").size(), 3u);
  EXPECT_EQ(attention_backward_tuning(c, true)->kernels("fa2:bm32:bn128:w8")[1].variant,
            render_attention_backward({DType::bf16, 128, false}, BackwardFa2Config{.query_rows = 32}, BackwardKernel::kv).variant);
  EXPECT_TRUE(attention_backward_tuning(c, false)->check_config("fa2:bm64:bn128:w4", kSm90a));  // over the register budget
  EXPECT_TRUE(attention_double_backward_tuning(c)->check_config("fa2:bm64:bn128:w8", kSm90a));
  // lrpe: the angle cache must match the problem, and vec must cover d.
  auto lrpe = lrpe_tuning(lrpe_case(LrpeOp::cosine, LrpeDirection::forward, LrpeAct::none, 1, 1, 100, 200));
  EXPECT_TRUE(lrpe->check_config("sp:t256:r4:v4", kSm90a));
  EXPECT_FALSE(lrpe->check_config("sp:t256:r4:v8", kSm90a));
  EXPECT_TRUE(lrpe->check_config("sp:t256:r4:v8:cache", kSm90a));
  EXPECT_TRUE(lrpe_tuning(lrpe_case(LrpeOp::cosine, LrpeDirection::forward, LrpeAct::none, 1, 1, 100, 300))->check_problem());
  EXPECT_TRUE(attention_forward_tuning(attention_case(DType::bf16, 300, false, 1, 1, 8))->check_problem());
}

TEST(TuningOpsWarm, EveryOpsRecordNamesItsWinnerAndDefaultKernels) {
  for (const auto& p : one_problem_per_op()) {
    SCOPED_TRACE(std::string(p->op()));
    const OperatorInfo* op = find_operator(p->op());
    ASSERT_TRUE(op);
    const std::string winner = p->config_space(kSm90a).back();
    auto kernels = recorded_kernels(*op, p->variant_key(), winner, kSm90a);
    ASSERT_TRUE(kernels);
    for (const auto& k : p->kernels(winner))
      EXPECT_TRUE(std::ranges::any_of(*kernels, [&](const KernelSource& s) { return s.variant == k.variant; })) << k.variant;
    EXPECT_FALSE(recorded_kernels(*op, p->variant_key(), "nonsense", kSm90a));
    EXPECT_FALSE(recorded_kernels(*op, "nonsense.variant", winner, kSm90a));
  }
}

// ---- launch-path decisions ----

// A context as a launch would build it, with a hand-made database and a fake tuner that
// records what it was asked.
struct FakeDevice {
  TempDir dir;
  TuningDatabase db;
  std::vector<std::string> tuned;  // "op variant bucket" of each tuning request
  std::string tune_answer;         // "" = no candidate passed
  DecisionContext context(AutotuneMode mode = AutotuneMode::off) {
    DecisionContext ctx;
    ctx.target = kSm90a, ctx.sm_count = 132, ctx.db = &db, ctx.mode = mode;
    ctx.tune = [this](const TuningProblem& p) -> std::optional<std::string> {
      tuned.push_back(std::string(p.op()) + " " + p.variant_key() + " " + p.bucket());
      if (tune_answer.empty()) return std::nullopt;
      return tune_answer;
    };
    return ctx;
  }
};

AttentionBackwardCall backward_call(int d, int n) {
  AttentionBackwardCall call;
  call.spec = {DType::bf16, d, true};
  call.shape = {2, 16, 16, n, n};
  return call;
}

TEST(TuningOpsGeneralPath, SixteenBitAlignedMultipleOf8CallsNeverRunOnSimt) {
  // The whole heuristic decision table: every 16-bit dtype, head dim (multiples of 8 up to 256),
  // causal mode, target, machine size and shape bucket, both backward modes, the double backward
  // too. A call of aligned 16-bit inputs must land on a tensor-core kernel.
  const std::vector<AttentionShape> shapes = {
      {1, 1, 1, 1, 1},         {1, 1, 1, 7, 7},          {2, 3, 3, 63, 1000},    {1, 4, 1, 1337, 1000},
      {2, 16, 16, 1000, 1337}, {4, 32, 8, 4096, 4096},   {8, 64, 8, 16384, 16384}, {1, 8, 1, 65536, 65536},
      {1, 1, 1, 8192, 8192},   {16, 16, 16, 512, 512}};
  int checked = 0;
  for (const char* arch : {"sm_80", "sm_90a"})
    for (int sm_count : {108, 132}) {
      FakeDevice dev;
      DecisionContext ctx = dev.context();
      ctx.target = parse_target(arch).value();
      ctx.sm_count = sm_count;
      for (DType t : {DType::f16, DType::bf16})
        for (int d = 8; d <= kMaxHeadDim; d += 8)
          for (bool causal : {false, true})
            for (const AttentionShape& shape : shapes) {
              const std::string where = std::string(arch) + " sms=" + std::to_string(sm_count) + " " +
                                        to_string(AttentionForwardSpec{t, d, causal}) + " n_q=" +
                                        std::to_string(shape.n_q) + " n_k=" + std::to_string(shape.n_k);
              AttentionForwardCall fwd;
              fwd.spec = {t, d, causal};
              fwd.shape = shape;
              EXPECT_NE(choose_attention_forward_config(fwd, AttentionOptions{}, ctx).path, ForwardPath::simt) << where;
              AttentionBackwardCall bwd;
              bwd.spec = {t, d, causal};
              bwd.shape = shape;
              for (bool deterministic : {false, true}) {
                AttentionBackwardOptions options;
                options.deterministic = deterministic;
                EXPECT_NE(choose_attention_backward_config(bwd, options, ctx).path(), BackwardPath::simt)
                    << where << (deterministic ? " deterministic" : "");
                EXPECT_NE(choose_attention_double_backward_config(bwd, options, ctx).path(), BackwardPath::simt)
                    << where << " double backward";
              }
              ++checked;
            }
    }
  EXPECT_EQ(checked, 2 * 2 * 2 * 32 * 2 * 10);
  // The general path stays for what the tensor cores cannot take.
  AttentionForwardCall odd;
  odd.spec = {DType::bf16, 33, false};
  odd.shape = {1, 1, 1, 128, 128};
  FakeDevice dev;
  EXPECT_EQ(choose_attention_forward_config(odd, AttentionOptions{}, dev.context()).path, ForwardPath::simt);
  odd.spec = {DType::f32, 64, false};
  EXPECT_EQ(choose_attention_forward_config(odd, AttentionOptions{}, dev.context()).path, ForwardPath::simt);
  odd.spec = {DType::bf16, 64, false};
  odd.aligned16 = false;
  EXPECT_EQ(choose_attention_forward_config(odd, AttentionOptions{}, dev.context()).path, ForwardPath::simt);
}

TEST(TuningOpsGeneralPath, TheReasonNamesWhatSendsACallThere) {
  // The log line a user sees when a call runs without tensor cores says why, most basic cause first.
  EXPECT_EQ(general_path_reason(DType::f32, 128, true), "fp32 inputs (the tensor-core kernels take fp16 and bf16)");
  EXPECT_EQ(general_path_reason(DType::f32, 128, false), "fp32 inputs (the tensor-core kernels take fp16 and bf16)");
  EXPECT_NE(general_path_reason(DType::bf16, 128, false).find("not 16-byte aligned"), std::string::npos);
  EXPECT_EQ(general_path_reason(DType::bf16, 33, true),
            "head dim 33 is not a multiple of 8 up to 256 (the tensor-core kernels' head dims)");
}

TEST(TuningOpsDecision, BackwardPrecedence) {
  const AttentionBackwardCall call = backward_call(64, 4096);
  const AttentionBackwardOptions none;
  auto problem = attention_backward_tuning(attention_case(DType::bf16, 64, true, 2, 16, 4096), false);
  FakeDevice dev;
  const std::string heuristic = to_string(attention_backward_default_config(call.spec, call.shape, kSm90a, 132));
  ASSERT_EQ(heuristic, "wg:bm128:bn128:a1:t:l:w");  // the Hopper kernel on sm_90a
  EXPECT_EQ(to_string(choose_attention_backward_config(call, none, dev.context())), heuristic);
  dev.db = database(dev.dir, {record(*problem, "fa2:bm32:bn64:w4")});
  EXPECT_EQ(to_string(choose_attention_backward_config(call, none, dev.context())), "fa2:bm32:bn64:w4");
  // The nearest bucket answers a longer sequence.
  EXPECT_EQ(to_string(choose_attention_backward_config(backward_call(64, 16384), none, dev.context())), "fa2:bm32:bn64:w4");
  // An explicit config beats the record.
  AttentionBackwardOptions forced;
  forced.config = "fa2:bm64:bn64:w4";
  EXPECT_EQ(to_string(choose_attention_backward_config(call, forced, dev.context())), "fa2:bm64:bn64:w4");
  // Deterministic mode is another variant: this record does not apply.
  AttentionBackwardOptions det;
  det.deterministic = true;
  EXPECT_EQ(to_string(choose_attention_backward_config(call, det, dev.context())), heuristic);
  // Unaligned views run the general path whatever the database says.
  AttentionBackwardCall unaligned = call;
  unaligned.aligned16 = false;
  EXPECT_EQ(choose_attention_backward_config(unaligned, none, dev.context()).path(), BackwardPath::simt);
  // KGEN_AUTOTUNE: on-miss leaves a hit alone; force tunes first.
  dev.tune_answer = "fa2:bm64:bn64:w4";
  EXPECT_EQ(to_string(choose_attention_backward_config(call, none, dev.context(AutotuneMode::on_miss))), "fa2:bm32:bn64:w4");
  EXPECT_TRUE(dev.tuned.empty());
  EXPECT_EQ(to_string(choose_attention_backward_config(call, none, dev.context(AutotuneMode::force))), "fa2:bm64:bn64:w4");
  ASSERT_EQ(dev.tuned.size(), 1u);
  EXPECT_EQ(dev.tuned[0], "attention_bwd attention_bwd.bf16.d64.causal nq4096.nk4096.g1.bh32");
  // on-miss tunes a variant without records; a tuner without a winner falls back to the heuristic.
  EXPECT_EQ(to_string(choose_attention_backward_config(call, det, dev.context(AutotuneMode::on_miss))), "fa2:bm64:bn64:w4");
  EXPECT_EQ(dev.tuned.back(), "attention_bwd attention_bwd.bf16.d64.causal.deterministic nq4096.nk4096.g1.bh32");
  dev.tune_answer.clear();
  EXPECT_EQ(to_string(choose_attention_backward_config(call, det, dev.context(AutotuneMode::on_miss))), heuristic);
  EXPECT_EQ(dev.tuned.size(), 3u);
}

TEST(TuningOpsDecision, AnInvalidRecordIsIgnoredWithAWarning) {
  const AttentionBackwardCall call = backward_call(64, 4096);
  auto problem = attention_backward_tuning(attention_case(DType::bf16, 64, true, 2, 16, 4096), false);
  FakeDevice dev;
  dev.db = database(dev.dir, {record(*problem, "fa2:bm32:bn64:w8")});  // 8 keys per warp: invalid
  std::string chosen;
  std::string log = captured_log([&] { chosen = to_string(choose_attention_backward_config(call, {}, dev.context())); });
  EXPECT_EQ(chosen, "wg:bm128:bn128:a1:t:l:w");  // the heuristic
  EXPECT_NE(log.find("tuning record fa2:bm32:bn64:w8"), std::string::npos) << log;
  EXPECT_NE(log.find("not valid here"), std::string::npos) << log;
}

TEST(TuningOpsDecision, DoubleBackwardPrecedence) {
  const AttentionBackwardCall call = backward_call(64, 4096);
  auto problem = attention_double_backward_tuning(attention_case(DType::bf16, 64, true, 2, 16, 4096));
  FakeDevice dev;
  EXPECT_EQ(to_string(choose_attention_double_backward_config(call, {}, dev.context())), "wg:bm64:bn64");
  // A backward record of the same spec is not the double backward's.
  auto bwd = attention_backward_tuning(attention_case(DType::bf16, 64, true, 2, 16, 4096), false);
  dev.db = database(dev.dir, {record(*bwd, "fa2:bm64:bn16:w4")});
  EXPECT_EQ(to_string(choose_attention_double_backward_config(call, {}, dev.context())), "wg:bm64:bn64");
  dev.db = database(dev.dir, {record(*problem, "fa2:bm64:bn16:w4")});
  EXPECT_EQ(to_string(choose_attention_double_backward_config(call, {}, dev.context())), "fa2:bm64:bn16:w4");
  AttentionBackwardOptions forced;
  forced.config = "simt:w4:dmax64";
  EXPECT_EQ(to_string(choose_attention_double_backward_config(call, forced, dev.context())), "simt:w4:dmax64");
  forced.config = "fa2:bm64:bn128:w4";
  EXPECT_THROW(choose_attention_double_backward_config(call, forced, dev.context()), Error);
  dev.db = database(dev.dir, {record(*problem, "fa2:bm64:bn64:w4")});  // over the register budget at d=64
  EXPECT_EQ(to_string(choose_attention_double_backward_config(call, {}, dev.context())), "wg:bm64:bn64");
}

TEST(TuningOpsDecision, LrpePrecedence) {
  const LrpeSpec spec{LrpeOp::cosine, LrpeDirection::forward, DType::bf16, LrpeAct::silu};
  const LrpeShape shape{12, 12, 4096, 128};
  const LrpeRequest request;
  auto problem = lrpe_tuning(lrpe_case(LrpeOp::cosine, LrpeDirection::forward, LrpeAct::silu, 12, 12, 4096, 128));
  FakeDevice dev;
  const std::string heuristic = to_string(lrpe_default_config(spec, shape));
  ASSERT_NE(heuristic, "sp:t256:r4:v8");
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context())), heuristic);
  dev.db = database(dev.dir, {record(*problem, "sp:t256:r4:v8")});
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context())), "sp:t256:r4:v8");
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, {12, 12, 16384, 128}, false, dev.context())), "sp:t256:r4:v8");
  // Another direction or act is another variant.
  LrpeSpec bwd = spec;
  bwd.direction = LrpeDirection::backward;
  EXPECT_EQ(to_string(choose_lrpe_config(request, bwd, shape, false, dev.context())), to_string(lrpe_default_config(bwd, shape)));
  LrpeRequest forced;
  forced.config = "bp:t128:r2:v8";
  EXPECT_EQ(to_string(choose_lrpe_config(forced, spec, shape, false, dev.context())), "bp:t128:r2:v8");
  // A record that cannot serve this shape (vec 4 covers d <= 128) is ignored.
  dev.db = database(dev.dir, {record(*problem, "sp:t256:r4:v4")});
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context())), "sp:t256:r4:v4");
  std::string chosen;
  std::string log = captured_log(
      [&] { chosen = to_string(choose_lrpe_config(request, spec, {12, 12, 4096, 160}, false, dev.context())); });
  EXPECT_EQ(chosen, heuristic);
  EXPECT_NE(log.find("not valid here"), std::string::npos) << log;
  // KGEN_AUTOTUNE=force asks the tuner with the launch's variant and bucket.
  dev.tune_answer = "bp:t256:r4:v8";
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context(AutotuneMode::force))), "bp:t256:r4:v8");
  ASSERT_EQ(dev.tuned.size(), 1u);
  EXPECT_EQ(dev.tuned[0], "lrpe_cosine lrpe_cosine.fwd.bf16.silu n4096.bh256.d128");
}

TEST(TuningOpsDecision, MdLrpeUsesTheGridDimsAndTheAngleCacheInItsKeys) {
  const LrpeSpec spec{LrpeOp::md_cosine, LrpeDirection::forward, DType::bf16, LrpeAct::none};
  const LrpeShape shape{12, 12, 4096, 128};
  LrpeRequest request;
  request.op = LrpeOp::md_cosine, request.dims = 2, request.grid[0] = 64, request.grid[1] = 64;
  LrpeCase c = lrpe_case(LrpeOp::md_cosine, LrpeDirection::forward, LrpeAct::none, 12, 12, 4096, 128);
  c.grid = {64, 64};
  FakeDevice dev;
  dev.db = database(dev.dir, {record(*lrpe_tuning(c), "sp:t256:r2:v8")});
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context())), "sp:t256:r2:v8");
  // With the angle cache: another variant, so the cache kernel of the heuristic.
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, true, dev.context())), to_string(lrpe_default_config(spec, shape, true)));
  // A 1-d grid of the same n is the nearest bucket (m1 vs m2).
  request.dims = 1, request.grid[0] = 4096;
  EXPECT_EQ(to_string(choose_lrpe_config(request, spec, shape, false, dev.context())), "sp:t256:r2:v8");
}

TEST(TuningOpsDecision, ForwardPrecedenceIsUnchanged) {
  AttentionForwardCall call;
  call.spec = {DType::bf16, 128, true};
  call.shape = {4, 16, 16, 4096, 4096};
  FakeDevice dev;
  const std::string heuristic = to_string(attention_forward_default_config(call.spec, call.shape, kSm90a, 132));
  EXPECT_EQ(to_string(choose_attention_forward_config(call, {}, dev.context())), heuristic);
  std::string other;
  for (const auto& c : attention_forward_config_space(call.spec, kSm90a))
    if (to_string(c) != heuristic) other = to_string(c);
  dev.db = database(dev.dir, {record(*attention_forward_tuning(attention_case(DType::bf16, 128, true, 4, 16, 4096)), other)});
  EXPECT_EQ(to_string(choose_attention_forward_config(call, {}, dev.context())), other);
  AttentionOptions forced;
  forced.causal = true, forced.config = heuristic;
  EXPECT_EQ(to_string(choose_attention_forward_config(call, forced, dev.context())), heuristic);
  call.aligned16 = false;
  EXPECT_EQ(choose_attention_forward_config(call, {}, dev.context()).path, ForwardPath::simt);
}

TEST(TuningOpsDecision, TheTableDecidesOncePerKey) {
  DecisionTable<std::string> table;
  int calls = 0;
  auto decide = [&] { return "c" + std::to_string(++calls); };
  const DecisionKey a{1, {4096, 4096, 64, 1}, 0, 0}, b{1, {4096, 4096, 64, 1}, 1, 0}, c{1, {4096, 4096, 64, 1}, 0, 1};
  EXPECT_EQ(table.get(a, decide), "c1");
  EXPECT_EQ(table.get(a, decide), "c1");
  EXPECT_EQ(table.get(b, decide), "c2");
  EXPECT_EQ(table.get(c, decide), "c3");  // same bucket and device, another shape class
  EXPECT_EQ(calls, 3);
}

// One tuning bucket holds shapes on both sides of each heuristic's grid threshold: the shape
// classes tell them apart, so the per-process decision table cannot hand one the other's tiles.
TEST(TuningOpsDecision, ShapeClassesSplitBucketsWhereTheHeuristicsDo) {
  const Target sm90a = *parse_target("sm_90a");
  const int sms = 132;
  // Double backward, b = h = 1: n = 2049 and n = 4096 share the bucket nq4096; 33 and 64 tiles.
  const AttentionShape a{1, 1, 1, 2049, 2049}, b{1, 1, 1, 4096, 4096};
  ASSERT_EQ(attention_bucket(a).text(), attention_bucket(b).text());
  EXPECT_EQ(attention_double_backward_shape_class(a, sms), 1);
  EXPECT_EQ(attention_double_backward_shape_class(b, sms), 1);
  const AttentionShape c{1, 1, 1, 8192, 8192}, d{1, 1, 1, 4097, 4097};
  ASSERT_EQ(attention_bucket(c).text(), attention_bucket(d).text());
  EXPECT_NE(attention_double_backward_shape_class(c, sms), attention_double_backward_shape_class(d, sms));
  const AttentionBackwardSpec spec{DType::bf16, 128, false};
  const Target sm80 = *parse_target("sm_80");  // the fa2 double backward (sm_90a: wgmma, one tile)
  EXPECT_NE(attention_double_backward_default_config(spec, c, sm80, sms),
            attention_double_backward_default_config(spec, d, sm80, sms));
  // Backward: 12 kv heads of 1025 keys (108 tiles of 128) against 2048 keys (192 tiles), one bucket.
  const AttentionShape e{1, 12, 12, 1025, 1025}, f{1, 12, 12, 2048, 2048};
  ASSERT_EQ(attention_bucket(e).text(), attention_bucket(f).text());
  EXPECT_NE(attention_backward_shape_class(e, sms), attention_backward_shape_class(f, sms));
  EXPECT_NE(attention_backward_default_config(spec, e, sm90a, sms), attention_backward_default_config(spec, f, sm90a, sms));
  // Forward: 128-row tiles, 108 blocks against 192.
  EXPECT_NE(attention_forward_shape_class(e, sms), attention_forward_shape_class(f, sms));
}

}  // namespace
}  // namespace kgen
