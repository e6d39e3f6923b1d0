// Tuning database: buckets, lookup, shard headers and lines, writers, merge, environment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "ops/attention_tuning.h"
#include "tuning/tuning_db.h"
#include "tests/runtime/tuning/test_support.h"

namespace kgen {
namespace {

const DeviceClass kA100{"NVIDIA A100-SXM4-80GB", "sm_80", 108};

const char* kVariant = "attention_fwd.bf16.d128.causal";

TuningRecord rec(const std::string& bucket, const std::string& config, const std::string& tuned_at = "2025-01-01T00:00:00.000Z",
                 const std::string& variant = kVariant) {
  TuningRecord r;
  r.op = "attention_fwd";
  r.variant_key = variant;
  r.bucket = bucket;
  r.config = config;
  r.median_ms = 1.25;
  r.p20_ms = 1.2;
  r.p80_ms = 1.3;
  r.margin = 0.05;
  r.runner_up = "fa2:bm64:bn64:w4:s2";
  r.reps = 100;
  r.tuned_at = tuned_at;
  return r;
}

std::string line(const TuningRecord& r) { return to_json_line(r) + "\n"; }

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---- buckets ----

TEST(TuningBucket, PowersOfTwoRoundUpAndExactPowersMapToThemselves) {
  EXPECT_EQ(attention_bucket({4, 16, 16, 4096, 4096}).text(), "nq4096.nk4096.g1.bh64");
  EXPECT_EQ(attention_bucket({4, 16, 16, 4097, 4095}).text(), "nq8192.nk4096.g1.bh64");
  EXPECT_EQ(attention_bucket({1, 1, 1, 1, 1}).text(), "nq1.nk1.g1.bh1");
  EXPECT_EQ(attention_bucket({1, 1, 1, 0, 3}).text(), "nq1.nk4.g1.bh1");
  EXPECT_EQ(attention_bucket({3, 5, 5, 1000, 129}).text(), "nq1024.nk256.g1.bh16");  // 15 -> 16
  EXPECT_EQ(attention_bucket({2, 32, 32, 512, 512}).text(), "nq512.nk512.g1.bh64");  // 64 is a tie: stays
}

TEST(TuningBucket, GroupRatioIsExact) {
  EXPECT_EQ(attention_bucket({1, 32, 8, 128, 128}).text(), "nq128.nk128.g4.bh32");
  EXPECT_EQ(attention_bucket({1, 24, 8, 128, 128}).text(), "nq128.nk128.g3.bh32");  // 3 is not rounded
  EXPECT_EQ(attention_bucket({1, 40, 40, 128, 128}).text(), "nq128.nk128.g1.bh64");
}

TEST(TuningBucket, NextPow2) {
  EXPECT_EQ(next_pow2(0), 1);
  EXPECT_EQ(next_pow2(1), 1);
  EXPECT_EQ(next_pow2(2), 2);
  EXPECT_EQ(next_pow2(3), 4);
  EXPECT_EQ(next_pow2(1 << 20), 1 << 20);
  EXPECT_EQ(next_pow2((1 << 20) + 1), 1 << 21);
}

TEST(TuningBucket, DistanceWeightsSequenceLengthsMost) {
  EXPECT_DOUBLE_EQ(bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk4096.g1.bh64"), 0);
  EXPECT_DOUBLE_EQ(bucket_distance("nq4096.nk4096.g1.bh64", "nq8192.nk4096.g1.bh64"), 4);
  EXPECT_DOUBLE_EQ(bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk1024.g1.bh64"), 8);
  EXPECT_DOUBLE_EQ(bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk4096.g1.bh256"), 2);
  EXPECT_DOUBLE_EQ(bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk4096.g4.bh64"), 2);
  EXPECT_DOUBLE_EQ(bucket_distance("nq1.nk1.g1.bh1", "nq2.nk1.g1.bh1"), bucket_distance("nq2.nk1.g1.bh1", "nq1.nk1.g1.bh1"));
  // One doubling of n_q costs more than four doublings of batch*heads.
  EXPECT_GT(bucket_distance("nq4096.nk4096.g1.bh64", "nq8192.nk4096.g1.bh64"),
            bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk4096.g1.bh512"));
  EXPECT_TRUE(std::isinf(bucket_distance("nq4096.nk4096.g1.bh64", "nq4096.nk4096.bh64")));
  EXPECT_TRUE(std::isinf(bucket_distance("garbage", "nq4096.nk4096.g1.bh64")));
  EXPECT_TRUE(std::isinf(bucket_distance("nq0.nk1.g1.bh1", "nq1.nk1.g1.bh1")));
}

// ---- lookup ----

TEST(TuningLookup, ExactThenNearest) {
  TempDir dir;
  spit(dir / "a.jsonl", header() + line(rec("nq1024.nk1024.g1.bh64", "fa2:bm64:bn64:w4:s2")) +
                            line(rec("nq8192.nk8192.g1.bh64", "fa2:bm128:bn64:w4:s2")) +
                            line(rec("nq1024.nk1024.g1.bh64", "simt:bm4:bn32:dmax128", "2025-01-01T00:00:00.000Z",
                                     "attention_fwd.fp32.d128")));
  auto db = TuningDatabase::open({dir / "a.jsonl"}, kCtx);
  EXPECT_EQ(db.shards_read(), 1);

  auto exact = db.lookup("attention_fwd", kVariant, "nq1024.nk1024.g1.bh64");
  ASSERT_TRUE(exact);
  EXPECT_TRUE(exact->exact);
  EXPECT_EQ(exact->record.config, "fa2:bm64:bn64:w4:s2");
  EXPECT_EQ(exact->source_file, (dir / "a.jsonl").string());
  EXPECT_EQ(exact->record.reps, 100);
  EXPECT_DOUBLE_EQ(exact->record.median_ms, 1.25);
  ASSERT_TRUE(exact->record.device);
  EXPECT_EQ(*exact->record.device, kH100);

  auto near = db.lookup("attention_fwd", kVariant, attention_bucket(AttentionShape{2, 32, 32, 6000, 6000}).text());  // nq8192.nk8192.g1.bh64
  ASSERT_TRUE(near);
  EXPECT_TRUE(near->exact);
  near = db.lookup("attention_fwd", kVariant, "nq4096.nk4096.g1.bh64");  // 2 doublings vs 1
  ASSERT_TRUE(near);
  EXPECT_FALSE(near->exact);
  EXPECT_EQ(near->record.config, "fa2:bm128:bn64:w4:s2");
  near = db.lookup("attention_fwd", kVariant, "nq512.nk512.g8.bh1024");
  ASSERT_TRUE(near);
  EXPECT_EQ(near->record.bucket, "nq1024.nk1024.g1.bh64");

  EXPECT_FALSE(db.lookup("attention_fwd", "attention_fwd.bf16.d64", "nq1024.nk1024.g1.bh64"));
  EXPECT_FALSE(db.lookup("other_op", kVariant, "nq1024.nk1024.g1.bh64"));
  EXPECT_FALSE(db.lookup("attention_fwd", kVariant, "unparsable"));
}

TEST(TuningLookup, NearestTieIsDeterministicAndPrefersTheLargerBucket) {
  TempDir dir;
  for (int order = 0; order < 2; ++order) {
    std::string a = line(rec("nq2048.nk2048.g1.bh64", "small")), b = line(rec("nq8192.nk8192.g1.bh64", "large"));
    spit(dir / "t.jsonl", header() + (order ? b + a : a + b));
    auto db = TuningDatabase::open({dir / "t.jsonl"}, kCtx);
    auto r = db.lookup("attention_fwd", kVariant, "nq4096.nk4096.g1.bh64");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->record.config, "large");
  }
}

TEST(TuningLookup, NewestWins) {
  TempDir dir;
  // Same file: the later line wins on equal tuned_at, the later tuned_at wins otherwise.
  spit(dir / "a.jsonl", header() + line(rec("nq1024.nk1024.g1.bh64", "first")) +
                            line(rec("nq1024.nk1024.g1.bh64", "second")) +
                            line(rec("nq2048.nk2048.g1.bh64", "new", "2025-03-01T00:00:00.000Z")) +
                            line(rec("nq2048.nk2048.g1.bh64", "old", "2025-02-01T00:00:00.000Z")));
  // Another file, listed first but newer.
  spit(dir / "b.jsonl", header() + line(rec("nq4096.nk4096.g1.bh64", "b-newer", "2025-05-01T00:00:00.000Z")));
  spit(dir / "c.jsonl", header() + line(rec("nq4096.nk4096.g1.bh64", "c-older", "2025-04-01T00:00:00.000Z")));
  auto db = TuningDatabase::open({dir / "a.jsonl", dir / "b.jsonl", dir / "c.jsonl"}, kCtx);
  EXPECT_EQ(db.lookup("attention_fwd", kVariant, "nq1024.nk1024.g1.bh64")->record.config, "second");
  EXPECT_EQ(db.lookup("attention_fwd", kVariant, "nq2048.nk2048.g1.bh64")->record.config, "new");
  auto r = db.lookup("attention_fwd", kVariant, "nq4096.nk4096.g1.bh64");
  EXPECT_EQ(r->record.config, "b-newer");
  EXPECT_EQ(r->source_file, (dir / "b.jsonl").string());
  EXPECT_EQ(db.records().size(), 3u);
}

TEST(TuningLookup, OtherDeviceClassesAreIgnored) {
  TempDir dir;
  TuningRecord foreign = rec("nq1024.nk1024.g1.bh64", "a100-config", "2030-01-01T00:00:00.000Z");
  foreign.device = kA100;
  TuningRecord other_sms = rec("nq2048.nk2048.g1.bh64", "h100-pcie", "2030-01-01T00:00:00.000Z");
  other_sms.device = DeviceClass{kH100.name, kH100.arch, 114};
  spit(dir / "a.jsonl", header() + line(rec("nq1024.nk1024.g1.bh64", "h100-config")) + line(foreign) + line(other_sms));
  auto db = TuningDatabase::open({dir / "a.jsonl"}, kCtx);
  auto r = db.lookup("attention_fwd", kVariant, "nq1024.nk1024.g1.bh64");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->record.config, "h100-config");
  // The other-device bucket is not a nearest candidate either.
  r = db.lookup("attention_fwd", kVariant, "nq2048.nk2048.g1.bh64");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->exact);
  EXPECT_EQ(r->record.config, "h100-config");
  EXPECT_EQ(db.records().size(), 3u);  // all kept
  // Seen from an A100, only the A100 record exists.
  auto a100 = TuningDatabase::open({dir / "a.jsonl"}, TuningContext{"0.1.0", "nvrtc 13.0", kA100});
  EXPECT_EQ(a100.shards_skipped(), 1);  // header is for an H100
  spit(dir / "b.jsonl", header(TuningContext{"0.1.0", "nvrtc 13.0", kA100}) + line(rec("nq8.nk8.g1.bh1", "x")));
  TuningRecord h = rec("nq8.nk8.g1.bh1", "h");
  h.device = kH100;
  spit(dir / "b.jsonl", slurp(dir / "b.jsonl") + line(h));
  a100 = TuningDatabase::open({dir / "b.jsonl"}, TuningContext{"0.1.0", "nvrtc 13.0", kA100});
  EXPECT_EQ(a100.lookup("attention_fwd", kVariant, "nq8.nk8.g1.bh1")->record.config, "x");
}

// ---- headers and lines ----

TEST(TuningShards, HeaderMismatchSkipsTheShardWithOneWarningNamingTheField) {
  TempDir dir;
  struct Case {
    TuningContext ctx;
    int schema;
    std::string expect;
  } cases[] = {
      {{"0.1.0", "nvrtc 12.4", kH100}, 1, "compiler nvrtc 12.4 != nvrtc 13.0"},
      {{"1.0.0", "nvrtc 13.0", kH100}, 1, "kgen_version 1.0.0 != 0.1.0"},
      {{"0.1.0", "nvrtc 13.0", kH100}, 2, "kgen_tuning_db 2 != 1"},
      {{"0.1.0", "nvrtc 13.0", kA100}, 1, "device.name NVIDIA A100-SXM4-80GB != NVIDIA H100 80GB HBM3"},
      {{"0.1.0", "nvrtc 13.0", {kH100.name, "sm_90", 132}}, 1, "device.arch sm_90 != sm_90a"},
      {{"0.1.0", "nvrtc 13.0", {kH100.name, "sm_90a", 114}}, 1, "device.sm_count 114 != 132"},
  };
  for (const Case& c : cases) {
    fs::path file = dir / "x.jsonl";
    spit(file, header(c.ctx, c.schema) + line(rec("nq1.nk1.g1.bh1", "c")) + "not json\n" + line(rec("nq2.nk1.g1.bh1", "c")));
    std::optional<TuningDatabase> db;
    std::string log = captured_log([&] { db = TuningDatabase::open({file}, kCtx); });
    EXPECT_EQ(count(log, "kgen [warn]"), 1) << log;  // no per-line warnings for a skipped shard
    EXPECT_NE(log.find("kgen [warn] tuning db shard " + file.string() + " skipped: " + c.expect), std::string::npos) << log;
    EXPECT_EQ(db->shards_skipped(), 1);
    EXPECT_FALSE(db->lookup("attention_fwd", kVariant, "nq1.nk1.g1.bh1"));
  }
  // Same major, other minor: accepted.
  spit(dir / "y.jsonl", header({"0.2.5", "nvrtc 13.0", kH100}) + line(rec("nq1.nk1.g1.bh1", "c")));
  std::string log = captured_log([&] { EXPECT_EQ(TuningDatabase::open({dir / "y.jsonl"}, kCtx).shards_read(), 1); });
  EXPECT_EQ(log, "");
}

TEST(TuningShards, MalformedAndTornLinesAreSkippedNamingFileAndLine) {
  TempDir dir;
  fs::path file = dir / "m.jsonl";
  std::string good = line(rec("nq1.nk1.g1.bh1", "good"));
  std::string torn = line(rec("nq2.nk2.g1.bh1", "torn"));
  torn = torn.substr(0, torn.size() / 2);  // a crash mid-write: no newline, half a record
  spit(file, header() + "\n" + good + "{not json\n" + "[1,2]\n" + R"({"op":"attention_fwd","variant":"v"})" "\n" +
                 R"({"op":"attention_fwd","variant":"v","bucket":"nq1.nk1.g1.bh1","config":"c","reps":"many"})" "\n" +
                 line(rec("nq4.nk4.g1.bh1", "also-good")) + torn);
  std::optional<TuningDatabase> db;
  std::string log = captured_log([&] { db = TuningDatabase::open({file}, kCtx); });
  EXPECT_EQ(db->shards_read(), 1);
  EXPECT_EQ(db->lines_skipped(), 5);
  for (int l : {4, 5, 6, 7, 9}) EXPECT_NE(log.find(file.string() + ":" + std::to_string(l) + ": malformed"), std::string::npos) << l << log;
  EXPECT_NE(log.find(":9: malformed line skipped: not valid JSON (torn last line)"), std::string::npos) << log;
  EXPECT_EQ(db->lookup("attention_fwd", kVariant, "nq1.nk1.g1.bh1")->record.config, "good");
  EXPECT_EQ(db->lookup("attention_fwd", kVariant, "nq4.nk4.g1.bh1")->record.config, "also-good");
  EXPECT_TRUE(db->lookup("attention_fwd", kVariant, "nq2.nk2.g1.bh1")->exact == false);
}

TEST(TuningShards, UnreadableOrHeaderlessFilesAreSkipped) {
  TempDir dir;
  spit(dir / "empty.jsonl", "");
  spit(dir / "noheader.jsonl", line(rec("nq1.nk1.g1.bh1", "c")));
  spit(dir / "good.jsonl", header() + line(rec("nq1.nk1.g1.bh1", "good")));
  std::optional<TuningDatabase> db;
  std::string log = captured_log([&] {
    db = TuningDatabase::open({dir / "missing.jsonl", dir / "empty.jsonl", dir / "noheader.jsonl", dir / "good.jsonl"}, kCtx);
  });
  EXPECT_EQ(db->shards_read(), 1);
  EXPECT_EQ(db->shards_skipped(), 3);
  EXPECT_NE(log.find("missing.jsonl skipped: cannot open"), std::string::npos) << log;
  EXPECT_NE(log.find("noheader.jsonl skipped: line 1: first line is not a kgen tuning db header"), std::string::npos) << log;
  EXPECT_EQ(db->lookup("attention_fwd", kVariant, "nq1.nk1.g1.bh1")->record.config, "good");
}

TEST(TuningShards, RecordRoundTripsThroughJson) {
  TuningRecord r = rec("nq1.nk1.g1.bh1", "fa2:bm128:bn64:w4:s2");
  r.margin = std::nan("");
  r.device = kA100;
  EXPECT_EQ(to_json_line(r).substr(0, 40), R"({"op":"attention_fwd","variant":"attenti)");
  TempDir dir;
  spit(dir / "r.jsonl", header() + line(r));
  TuningShard s = read_tuning_shard(dir / "r.jsonl");
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_TRUE(std::isnan(s.records[0].record.margin));
  EXPECT_EQ(s.records[0].line, 2);
  EXPECT_EQ(to_json_line(s.records[0].record), to_json_line(r));
}

// ---- writer ----

TEST(TuningWriter, CreatesTheShardWithOneHeaderOnFirstAppendAndAppends) {
  TempDir dir;
  TuningShardWriter w(dir / "sub" / "dir", kCtx);
  EXPECT_FALSE(fs::exists(w.path()));
  EXPECT_EQ(w.path().parent_path(), dir / "sub" / "dir");
  EXPECT_EQ(w.path().filename().string().rfind("shard-", 0), 0u);
  EXPECT_EQ(w.path().extension(), ".jsonl");
  TuningRecord first = rec("nq1.nk1.g1.bh1", "first", "");
  w.append(first);
  w.append(rec("nq1.nk1.g1.bh1", "second", ""));
  w.append(rec("nq2.nk2.g1.bh1", "third"));
  std::string text = slurp(w.path());
  EXPECT_EQ(count(text, "\"kgen_tuning_db\""), 1);
  EXPECT_EQ(text.rfind(header(), 0), 0u);
  EXPECT_EQ(count(text, "\n"), 4);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(count(text, "\"device\""), 1);  // only the header's
  TuningShard s = read_tuning_shard(w.path());
  ASSERT_EQ(s.records.size(), 3u);
  // Stamped, strictly increasing, ISO 8601 UTC with milliseconds.
  const std::string& t1 = s.records[0].record.tuned_at;
  const std::string& t2 = s.records[1].record.tuned_at;
  EXPECT_EQ(t1.size(), 24u) << t1;
  EXPECT_EQ(t1.back(), 'Z');
  EXPECT_LT(t1, t2);
  EXPECT_EQ(s.records[2].record.tuned_at, "2025-01-01T00:00:00.000Z");
  auto db = TuningDatabase::open({w.path()}, kCtx);
  EXPECT_EQ(db.lookup("attention_fwd", kVariant, "nq1.nk1.g1.bh1")->record.config, "second");
}

TEST(TuningWriter, TwoWritersTwoShards) {
  TempDir dir;
  TuningShardWriter a(dir.path(), kCtx), b(dir.path(), kCtx);
  EXPECT_NE(a.path(), b.path());
  a.append(rec("nq1.nk1.g1.bh1", "a"));
  b.append(rec("nq2.nk2.g1.bh1", "b"));
  a.append(rec("nq4.nk4.g1.bh1", "a2"));
  auto files = expand_tuning_db_paths({dir.path()});
  EXPECT_EQ(files.size(), 2u);
  auto db = TuningDatabase::open(files, kCtx);
  EXPECT_EQ(db.records().size(), 3u);
  EXPECT_EQ(count(slurp(a.path()), "\n"), 3);
  EXPECT_EQ(count(slurp(b.path()), "\n"), 2);
}

TEST(TuningWriter, ConcurrentAppendsProduceWholeLines) {
  TempDir dir;
  TuningShardWriter w(dir.path(), kCtx);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) w.append(rec("nq" + std::to_string(1 << t) + ".nk" + std::to_string(1 << i) + ".g1.bh1", "c", ""));
    });
  for (auto& t : threads) t.join();
  TuningShard s = read_tuning_shard(w.path());
  EXPECT_EQ(s.records.size(), 40u);
  EXPECT_EQ(s.malformed_lines, 0);
}

TEST(TuningWriter, UnwritableDirectoryThrows) {
  TempDir dir;
  spit(dir / "file", "x");
  TuningShardWriter w(dir / "file" / "sub", kCtx);
  EXPECT_THROW(w.append(rec("nq1.nk1.g1.bh1", "c")), Error);
}

// ---- merge ----

TEST(TuningMerge, NewestPerKeyWinsSortedAndDeterministicForShuffledInputs) {
  TempDir dir;
  std::vector<fs::path> inputs;
  std::vector<std::string> buckets = {"nq8.nk8.g1.bh1", "nq1.nk1.g1.bh1", "nq4.nk4.g1.bh1", "nq2.nk2.g1.bh1"};
  for (int s = 0; s < 5; ++s) {
    std::string text = header();
    for (int i = 0; i < 4; ++i) {
      // Every shard has every bucket; shard 3 is newest for even buckets, shard 1 for odd ones.
      // Shards 0 and 4 tie on tuned_at for bucket 0 (broken by content, not order).
      int age = (i % 2 == 0) ? (s == 3 ? 9 : s % 3) : (s == 1 ? 9 : 0);
      text += line(rec(buckets[i], "s" + std::to_string(s), "2025-01-01T0" + std::to_string(age) + ":00:00.000Z"));
    }
    text += line(rec("nq1.nk1.g1.bh1", "fp32-" + std::to_string(s), "2025-01-01T00:00:00.000Z", "attention_fwd.fp32.d64"));
    TuningRecord foreign = rec("nq1.nk1.g1.bh1", "a100", "2025-01-01T00:00:00.000Z");
    foreign.device = kA100;
    text += line(foreign);
    inputs.push_back(dir / ("in" + std::to_string(s) + ".jsonl"));
    spit(inputs.back(), text);
  }
  MergeStats st = merge_tuning_shards(inputs, dir / "out1.jsonl");
  EXPECT_EQ(st.shards_merged, 5);
  EXPECT_EQ(st.shards_skipped, 0);
  EXPECT_EQ(st.records, 6);  // 4 buckets + fp32 + the A100 record (kept)
  std::string first = slurp(dir / "out1.jsonl");

  std::mt19937 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    std::shuffle(inputs.begin(), inputs.end(), rng);
    merge_tuning_shards(inputs, dir / "out2.jsonl");
    EXPECT_EQ(slurp(dir / "out2.jsonl"), first) << "trial " << trial;
  }

  // Sorted by op, variant, bucket; header first; newest wins.
  TuningShard out = read_tuning_shard(dir / "out1.jsonl");
  ASSERT_TRUE(out.header);
  EXPECT_EQ(out.header->compiler, "nvrtc 13.0");
  ASSERT_EQ(out.records.size(), 6u);
  std::vector<std::string> order;
  for (auto& l : out.records) order.push_back(l.record.variant_key + " " + l.record.bucket + " " + l.record.config);
  EXPECT_EQ(order[0], "attention_fwd.bf16.d128.causal nq1.nk1.g1.bh1 a100");  // "NVIDIA A..." < "NVIDIA H..."
  EXPECT_EQ(order[1], "attention_fwd.bf16.d128.causal nq1.nk1.g1.bh1 s1");
  EXPECT_EQ(order[2], "attention_fwd.bf16.d128.causal nq2.nk2.g1.bh1 s1");
  EXPECT_EQ(order[3], "attention_fwd.bf16.d128.causal nq4.nk4.g1.bh1 s3");
  EXPECT_EQ(order[4], "attention_fwd.bf16.d128.causal nq8.nk8.g1.bh1 s3");
  EXPECT_EQ(order[5].substr(0, 38), "attention_fwd.fp32.d64 nq1.nk1.g1.bh1 ");
  EXPECT_EQ(count(first, "\"device\""), 2);  // the header's and the A100 record's
}

TEST(TuningMerge, MismatchedInputsSkippedWithWarningAndMalformedLinesDropped) {
  TempDir dir;
  spit(dir / "a.jsonl", header() + line(rec("nq1.nk1.g1.bh1", "a")) + "garbage\n");
  spit(dir / "b.jsonl", header({"0.1.0", "nvrtc 12.4", kH100}) + line(rec("nq2.nk2.g1.bh1", "b")));
  spit(dir / "c.jsonl", "not a header\n");
  MergeStats st;
  std::string log = captured_log([&] { st = merge_tuning_shards({dir / "a.jsonl", dir / "b.jsonl", dir / "c.jsonl"}, dir / "out.jsonl"); });
  EXPECT_EQ(st.records, 1);
  EXPECT_EQ(st.shards_merged, 1);
  EXPECT_EQ(st.shards_skipped, 2);
  EXPECT_EQ(st.lines_skipped, 1);
  EXPECT_NE(log.find("b.jsonl skipped: compiler nvrtc 12.4 != nvrtc 13.0"), std::string::npos) << log;
  EXPECT_NE(log.find("a.jsonl:3: malformed line skipped"), std::string::npos) << log;
  EXPECT_EQ(slurp(dir / "out.jsonl"), header() + line(rec("nq1.nk1.g1.bh1", "a")));
  // With an expected context, the first input may be the one skipped.
  st = merge_tuning_shards({dir / "a.jsonl", dir / "b.jsonl"}, dir / "out12.jsonl", TuningContext{"0.1.0", "nvrtc 12.4", kH100});
  EXPECT_EQ(st.records, 1);
  EXPECT_NE(slurp(dir / "out12.jsonl").find("\"b\""), std::string::npos);
  EXPECT_THROW(merge_tuning_shards({dir / "c.jsonl"}, dir / "none.jsonl"), Error);
  EXPECT_FALSE(fs::exists(dir / "none.jsonl"));
}

TEST(TuningMerge, AtomicInPlaceAndLeavesNoTempFiles) {
  TempDir dir;
  spit(dir / "db.jsonl", header() + line(rec("nq1.nk1.g1.bh1", "old")));
  spit(dir / "new.jsonl", header() + line(rec("nq1.nk1.g1.bh1", "new", "2026-01-01T00:00:00.000Z")));
  merge_tuning_shards({dir / "db.jsonl", dir / "new.jsonl"}, dir / "db.jsonl");
  auto files = expand_tuning_db_paths({dir.path()});
  EXPECT_EQ(files.size(), 2u);
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 2);  // no leftover temp file
  auto db = TuningDatabase::open({dir / "db.jsonl"}, kCtx);
  EXPECT_EQ(db.lookup("attention_fwd", kVariant, "nq1.nk1.g1.bh1")->record.config, "new");

  // A failed write leaves the old output untouched.
  std::string before = slurp(dir / "db.jsonl");
  EXPECT_THROW(merge_tuning_shards({dir / "new.jsonl"}, dir / "missing-dir" / "db.jsonl"), Error);
  fs::create_directories(dir / "isdir.jsonl");
  EXPECT_THROW(merge_tuning_shards({dir / "new.jsonl"}, dir / "isdir.jsonl"), Error);
  EXPECT_TRUE(fs::is_directory(dir / "isdir.jsonl"));
  entries = 0;
  for (auto& e : fs::directory_iterator(dir.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 3);
  EXPECT_EQ(slurp(dir / "db.jsonl"), before);
}

// ---- environment ----

TEST(TuningEnv, AutotuneModeParsing) {
  EXPECT_EQ(autotune_mode_from(nullptr), AutotuneMode::off);
  EXPECT_EQ(autotune_mode_from(""), AutotuneMode::off);
  EXPECT_EQ(autotune_mode_from("off"), AutotuneMode::off);
  EXPECT_EQ(autotune_mode_from("on-miss"), AutotuneMode::on_miss);
  EXPECT_EQ(autotune_mode_from("on_miss"), AutotuneMode::on_miss);
  EXPECT_EQ(autotune_mode_from("FORCE"), AutotuneMode::force);
  std::string log = captured_log([] { EXPECT_EQ(autotune_mode_from("always"), AutotuneMode::off); });
  EXPECT_NE(log.find("kgen [warn] KGEN_AUTOTUNE=always"), std::string::npos) << log;
  EXPECT_EQ(to_string(AutotuneMode::on_miss), "on-miss");
  for (auto m : {AutotuneMode::off, AutotuneMode::on_miss, AutotuneMode::force})
    EXPECT_EQ(parse_autotune_mode(to_string(m)), m);
}

TEST(TuningEnv, TuneDbFilesAndDirectories) {
  TempDir dir;
  fs::create_directories(dir / "d");
  spit(dir / "d" / "b.jsonl", header());
  spit(dir / "d" / "a.jsonl", header());
  spit(dir / "d" / "notes.txt", "x");
  fs::create_directories(dir / "d" / "nested.jsonl");  // a directory, not a shard
  spit(dir / "single.jsonl", header());
  {
    std::string v = (dir / "single.jsonl").string() + "::" + (dir / "d").string() + ":" + (dir / "later.jsonl").string();
    ScopedEnv env("KGEN_TUNE_DB", v.c_str());
    auto files = default_tuning_db_files();
    std::vector<fs::path> expect = {dir / "single.jsonl", dir / "d" / "a.jsonl", dir / "d" / "b.jsonl", dir / "later.jsonl"};
    EXPECT_EQ(files, expect);
    EXPECT_EQ(default_tuning_shard_dir(), dir / "d");  // the first directory part
  }
  {
    ScopedEnv env("KGEN_TUNE_DB", (dir / "new-dir/").string().c_str());
    EXPECT_EQ(default_tuning_shard_dir(), fs::path((dir / "new-dir/").string()));
    EXPECT_TRUE(default_tuning_db_files().empty());
  }
  {
    ScopedEnv env("KGEN_TUNE_DB", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", (dir / "xdg").string().c_str());
    EXPECT_EQ(default_tuning_shard_dir(), dir / "xdg" / "kgen" / "tuning");
    EXPECT_TRUE(default_tuning_db_files().empty());  // no directory yet
    TuningShardWriter w(default_tuning_shard_dir(), kCtx);
    w.append(rec("nq1.nk1.g1.bh1", "c"));
    EXPECT_EQ(default_tuning_db_files(), std::vector<fs::path>{w.path()});
  }
  {
    ScopedEnv env("KGEN_TUNE_DB", (dir / "single.jsonl").string().c_str());
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", (dir / "home").string().c_str());
    EXPECT_EQ(default_tuning_shard_dir(), dir / "home" / ".cache" / "kgen" / "tuning");
    EXPECT_EQ(default_tuning_db_files(), std::vector<fs::path>{dir / "single.jsonl"});
  }
}

}  // namespace
}  // namespace kgen
