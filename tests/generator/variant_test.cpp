// The variant expression language (generator/variant.h): parsing and its one-sentence errors, the
// canonical text, derivatives against central differences, tensor partials, the interval
// classification against brute force, the presets, and deviceless compiles of the device struct.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/amd_compilers.h"
#include "compiler/compiler.h"
#include "generator/target.h"
#include "generator/variant.h"
#include "kgen/types.hpp"

namespace kgen {
namespace {

// A declaration's run-time values: its scalars and tensors (owned here).
struct Inputs {
  std::vector<std::vector<float>> reals;
  std::vector<std::vector<std::int32_t>> ints;
  VariantValues values;
};

VariantDecl decl(std::string score, std::string mask, std::vector<VariantScalar> scalars = {},
                 std::vector<VariantTensor> tensors = {}) {
  return {std::move(score), std::move(mask), std::move(scalars), std::move(tensors)};
}

// Tensors of shape (8, 8192) for rank 2, (8) for rank 1 and so on, filled by `rng`; scalars from
// `scalar_values` (by name) or 3.
Inputs make_inputs(const VariantDecl& d, std::mt19937& rng, std::map<std::string, double> scalar_values = {}) {
  Inputs in;
  for (const auto& s : d.scalars) in.values.scalars.push_back(scalar_values.count(s.name) ? scalar_values[s.name] : 3.0);
  in.reals.reserve(d.tensors.size());
  in.ints.reserve(d.tensors.size());
  for (const auto& t : d.tensors) {
    VariantTensorValue v;
    std::int64_t size = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      v.shape[i] = i == t.rank - 1 && t.rank > 1 ? 8192 : 8;
      v.strides[i] = size;
      size *= v.shape[i];
    }
    std::uniform_real_distribution<float> real(-1.0f, 1.0f);
    std::uniform_int_distribution<int> doc(0, 3);
    in.reals.emplace_back(size);
    in.ints.emplace_back(size);
    for (std::int64_t i = 0; i < size; ++i) {
      in.reals.back()[i] = real(rng);
      in.ints.back()[i] = doc(rng);
    }
    if (t.type == VariantType::integer) {  // ids per row in runs of 3 to 30: documents of packed sequences
      const std::int64_t n = v.shape[t.rank - 1];
      for (std::int64_t r = 0; r < size / n; ++r) {
        const std::int64_t run = 3 + rng() % 28;
        for (std::int64_t i = 0; i < n; ++i) in.ints.back()[r * n + i] = static_cast<int>(i / run);
        // Every other row unsorted in places (ids need not rise): the tables bound them all the same.
        if (r % 2 == 1)
          for (int swaps = 0; swaps < 40; ++swaps) std::swap(in.ints.back()[r * n + rng() % 128], in.ints.back()[r * n + rng() % 128]);
      }
    }
    v.data = t.type == VariantType::integer ? static_cast<const void*>(in.ints.back().data()) : in.reals.back().data();
    in.values.tensors.push_back(v);
  }
  return in;
}

std::string error_of(const VariantDecl& d) {
  try {
    Variant::parse(d);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    return e.what();
  }
  return "(no error)";
}

const VariantScalar kC{"c", VariantType::real};
const VariantTensor kBias{"bias", 2, VariantType::real, true};

TEST(Variant, CanonicalTextRoundTrips) {
  const std::vector<VariantDecl> decls = {
      decl("score + bias[h][q - k + 4095]", "", {}, {kBias}),
      decl("30 * tanh(score / 30)", ""),
      decl("", "k <= q"),
      decl("score * 2.0 - -1", "!(q < k) && (k >= 0 || q != k)"),
      decl("where(q >= k, score, score * 0.5)", "q % 4 == k % 4 || abs(q - k) <= 2"),
      decl("sigmoid(score) * score + exp(-score) / sqrt(2.5) + log(1e-3 + float(q))", ""),
      decl("tanh(score / c) * c + b2[h]", "", {kC}, {{"b2", 1, VariantType::real, true}}),
      decl("min(score, 1e30) + max(q, k) / 3", "(q + (n_k - n_q)) / 64 == k / 64"),
      decl("score", "where(q > 3, k < 2, k > 5) == (b != h)"),
      decl(".5 * score + 2. + 1.25e2", ""),
  };
  for (const auto& d : decls) {
    SCOPED_TRACE(d.score_mod + " | " + d.mask_mod);
    const Variant v = Variant::parse(d);
    const std::string c = v.canonical();
    EXPECT_EQ(c.find_first_of(" \t\n"), std::string::npos) << c;
    const Variant back = Variant::from_canonical(c);
    EXPECT_EQ(back.canonical(), c);
    EXPECT_EQ(back.digest(), v.digest());
    EXPECT_EQ(v.digest().size(), 16u);
  }
  EXPECT_EQ(Variant::parse(decls[0]).canonical(), "score=(score+bias[h][((q-k)+4095)]);mask=;scalars=;tensors=bias:2:real:learn");
  EXPECT_EQ(Variant::parse(decl("2.0 * score + 2", "")).canonical(), "score=((2.0*score)+2);mask=;scalars=;tensors=");
  EXPECT_EQ(Variant::parse(decl("score * 0.1", "")).canonical(), "score=(score*0.1);mask=;scalars=;tensors=");
  // `score` alone is the identity, and whitespace does not change the text.
  EXPECT_TRUE(Variant::parse(decl(" score ", "")).identity());
  EXPECT_EQ(Variant::parse(decl("score*2", "k<=q")).canonical(), Variant::parse(decl(" score * 2 ", " k <= q ")).canonical());
  EXPECT_EQ(Variant().canonical(), "score=;mask=;scalars=;tensors=");
  EXPECT_NE(Variant::parse(decl("score*2", "")).digest(), Variant::parse(decl("score*2.0", "")).digest());
}

TEST(Variant, ErrorsNameTheExpressionColumnAndProblem) {
  const VariantScalar ws{"w", VariantType::integer};
  const std::vector<std::pair<VariantDecl, std::string>> cases = {
      {decl("score + bais[h][q]", "", {}, {kBias}), "score_mod, column 9: unknown name 'bais' (the inputs are score, b, h, q, k, n_q, n_k and the declared bias)."},
      {decl("", "k <= qq"), "mask_mod, column 6: unknown name 'qq'"},
      {decl("min(score)", ""), "score_mod, column 1: min() takes 2 arguments but is given 1"},
      {decl("where(q, score, 1)", ""), "score_mod, column 7: where() needs a bool condition, not an integer"},
      {decl("score + bias[h]", "", {}, {kBias}), "score_mod, column 9: tensor 'bias' takes 2 indexes"},
      {decl("score + bias[h][0.5]", "", {}, {kBias}), "score_mod, column 17: index 2 of tensor 'bias' is a real, not an integer"},
      {decl("score + bias[h][score]", "", {}, {kBias}), "score_mod, column 17: score reaches an integer context"},
      {decl("score + bias[h][-1]", "", {}, {kBias}), "score_mod, column 17: out-of-range constant index -1"},
      {decl("score", "q > 1.0 && 2.5"), "mask_mod, column 9: '&&' takes bools, not a real"},
      {decl("", "q + k"), "mask_mod, column 1: the mask is an integer, not a bool"},
      {decl("", "score > 0"), "mask_mod, column 1: the mask may not read score"},
      {decl("score % 2", ""), "score_mod, column 7: score reaches an integer context (an operand of '%')"},
      {decl("q % 2.5", ""), "score_mod, column 3: '%' takes integers, not a real"},
      {decl("score + 1 )", ""), "score_mod, column 11: unexpected ')' after the end of the expression"},
      {decl("score * ()", ""), "score_mod, column 9: empty parentheses"},
      {decl("score / 0", ""), "score_mod, column 7: division by constant zero"},
      {decl("q / (2 - 2)", ""), "score_mod, column 3: division by constant zero"},
      {decl("score + 99999999999", ""), "score_mod, column 9: the number 99999999999 does not fit a 32-bit integer"},
      {decl("score * 1e39", ""), "score_mod, column 9: the number 1e39 does not fit a 32-bit float"},
      {decl("score + 2x", ""), "score_mod, column 9: malformed number '2x'"},
      {decl("score + (q", ""), "score_mod, column 11: expected ')' but found the end of the expression"},
      {decl("score $ 2", ""), "score_mod, column 7: unexpected character '$'"},
      {decl("foo(score)", ""), "score_mod, column 1: unknown function 'foo'"},
      {decl("tanh + 1", ""), "score_mod, column 1: 'tanh' is a function"},
      {decl("q[1]", ""), "score_mod, column 2: 'q' is not a tensor"},
      {decl("float(score)", ""), "score_mod, column 7: float() takes an integer, not a real"},
      {decl("-(q < k)", ""), "score_mod, column 1: unary '-' takes a number, not a bool"},
      {decl("score", "!q"), "mask_mod, column 1: '!' takes a bool, not an integer"},
      {decl("score", "(q < k) < 1"), "mask_mod, column 9: '<' takes numbers, not a bool"},
      {decl("score", "(q < k) == 1"), "mask_mod, column 9: '==' compares a bool with a number"},
      {decl("score", "where(q < k, q < 2, 3)"), "mask_mod, column 21: where() takes two bools or two numbers"},
      {decl("q < k", ""), "score_mod, column 1: the score_mod is a bool, not a number"},
      {decl("score + w", "", {ws, ws}), "variant declaration: the name 'w' is declared twice."},
      {decl("score + q", "", {{"q", VariantType::integer}}), "variant declaration: the scalar name 'q' is reserved"},
      {decl("score", "", {ws}), "variant declaration: scalar 'w' is declared but no expression reads it."},
      {decl("score + t[q]", "", {}, {{"t", 1, VariantType::integer, true}}), "tensor 't' is learnable but integer"},
      {decl("score + t[q]", "", {}, {{"t", 5, VariantType::real, false}}), "tensor 't' has rank 5, outside 1..4"},
      {decl("score + w", "", {{"2w", VariantType::real}}), "the scalar name '2w' is not an identifier"},
      {decl("score", "", {{"a", VariantType::real}, {"b1", VariantType::real}, {"c", VariantType::real},
                         {"d", VariantType::real}, {"e", VariantType::real}, {"f", VariantType::real},
                         {"g", VariantType::real}, {"h1", VariantType::real}, {"i", VariantType::real}}),
       "9 scalars, more than the 8"},
  };
  for (const auto& [d, expected] : cases) {
    const std::string got = error_of(d);
    EXPECT_NE(got.find(expected), std::string::npos) << "got: " << got << "\nexpected: " << expected;
    EXPECT_EQ(got.back(), '.') << got;
  }
  EXPECT_THROW(Variant::from_canonical("score=;mask="), Error);
  EXPECT_THROW(Variant::from_canonical("score=;mask=;scalars=x:bool;tensors="), Error);
  EXPECT_THROW(Variant::from_canonical("score=(score+t[q]);mask=;scalars=;tensors=t:9:real"), Error);
  EXPECT_NE(error_of(decl(std::string(300, '(') + "score" + std::string(300, ')'), "")).find("nested"), std::string::npos);
}

// f, f' and f'' at random points against central differences in score.
TEST(Variant, DerivativesMatchCentralDifferences) {
  const VariantTensor b2{"b2", 1, VariantType::real, true};
  const std::vector<VariantDecl> decls = {
      decl("30 * tanh(score / 30)", ""),
      decl("score + bias[h][q - k + 4095]", "", {}, {kBias}),
      decl("score + bias[h][where(q - k < 8, abs(q - k), min(8 + int_log, 15))]", "", {{"int_log", VariantType::integer}},
           {kBias}),
      decl("score - 0.1 * log(1.0 + float(abs(q - k))) * min(float(q - k), 3.0)", ""),
      decl("tanh(score / c) * c + b2[h]", "", {kC}, {b2}),
      decl("sigmoid(score) * score", ""),
      decl("where(q >= k, score, score * 0.5)", ""),
      decl("exp(score / 4) / (1 + score * score) + sqrt(2 + score * score)", ""),
      decl("score * score * score / 7 - abs(score) + max(score, 0.25)", ""),
      decl("2 * score + q", ""),
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> s_dist(-4, 4);
  std::uniform_int_distribution<int> i_dist(0, 200);
  for (const auto& d : decls) {
    SCOPED_TRACE(d.score_mod);
    const Variant v = Variant::parse(d);
    Inputs in = make_inputs(d, rng, {{"c", 5.0}, {"int_log", 2}});
    for (int t = 0; t < 200; ++t) {
      const double s = s_dist(rng);
      if (std::fabs(s) < 1e-2 || std::fabs(s - 0.25) < 1e-2) continue;  // abs/max kinks
      const VariantIndex at{0, i_dist(rng) % 8, i_dist(rng), i_dist(rng), 256, 256};
      const double e = 1e-4;
      const double f0 = v.score(in.values, s, at), fp = v.score(in.values, s + e, at), fm = v.score(in.values, s - e, at);
      const double d1 = (fp - fm) / (2 * e), d2 = (fp - 2 * f0 + fm) / (e * e);
      EXPECT_NEAR(v.dscore(in.values, s, at), d1, 1e-6 * (1 + std::fabs(d1)));
      EXPECT_NEAR(v.d2score(in.values, s, at), d2, 1e-4 * (1 + std::fabs(d2)));
    }
  }
  EXPECT_TRUE(Variant::parse(decls[1]).unit_slope());
  EXPECT_TRUE(Variant::parse(decls[2]).unit_slope());
  EXPECT_TRUE(Variant::parse(decls[3]).unit_slope());
  EXPECT_TRUE(Variant().unit_slope());
  EXPECT_FALSE(Variant::parse(decls[0]).unit_slope());
  EXPECT_FALSE(Variant::parse(decls[6]).unit_slope());
  EXPECT_FALSE(Variant::parse(decls[9]).unit_slope());
}

// ∂f/∂t for learnable tensor elements against central differences of f in that element.
TEST(Variant, TensorPartialsMatchCentralDifferences) {
  const VariantTensor w{"w", 1, VariantType::real, true};
  const VariantTensor fixed{"fixed", 1, VariantType::real, false};
  const std::vector<VariantDecl> decls = {
      decl("score + bias[h][q - k + 4095]", "", {}, {kBias}),
      decl("score * w[h] + tanh(bias[h][0] * score) * fixed[h]", "", {}, {kBias, w, fixed}),
      decl("where(q >= k, score + bias[h][q - k], score - w[h] * w[(h + 1) % 8])", "", {}, {kBias, w}),
      decl("softcap_like * tanh((score + bias[h][q]) / softcap_like)", "", {{"softcap_like", VariantType::real}}, {kBias}),
  };
  std::mt19937 rng(11);
  for (const auto& d : decls) {
    SCOPED_TRACE(d.score_mod);
    const Variant v = Variant::parse(d);
    EXPECT_TRUE(v.has_learnable_tensors());
    Inputs in = make_inputs(d, rng, {{"softcap_like", 4.0}});
    for (int t = 0; t < 100; ++t) {
      const double s = std::uniform_real_distribution<double>(-3, 3)(rng);
      const VariantIndex at{0, t % 8, t % 37, (t * 7) % 41, 64, 64};
      int calls = 0;
      v.tensor_partials(in.values, s, at, [&](int slot, std::int64_t offset, double partial) {
        ++calls;
        float& x = in.reals[slot][offset];
        const float saved = x;
        const float e = 1.0f / 1024;  // exact in fp32 at these magnitudes
        x = saved + e;
        const double fp = v.score(in.values, s, at);
        x = saved - e;
        const double fm = v.score(in.values, s, at);
        x = saved;
        // Several reads of one element each give their own share.
        double others = 0;
        v.tensor_partials(in.values, s, at, [&](int slot2, std::int64_t offset2, double p2) {
          if (slot2 == slot && offset2 == offset) others += p2;
        });
        EXPECT_NEAR(others, (fp - fm) / (2 * e), 1e-4 * (1 + std::fabs(partial)));
      });
      EXPECT_GT(calls, 0);
    }
  }
  EXPECT_FALSE(Variant::parse(decl("score + fixed[h]", "", {}, {fixed})).has_learnable_tensors());
}

TEST(Variant, EvaluationChecksValuesAndIndexBounds) {
  const Variant v = Variant::parse(decl("score + bias[h][q - k]", "", {}, {kBias}));
  std::mt19937 rng(1);
  Inputs in = make_inputs(v.decl(), rng);
  EXPECT_NO_THROW(v.score(in.values, 0.5, {0, 1, 5, 3, 8, 8}));
  try {
    v.score(in.values, 0.5, {0, 1, 3, 5, 8, 8});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'bias': index -2 in dimension 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v.score({}, 0.5, {}), Error);
  const Variant m = Variant::parse(decl("", "q / w == k % w", {{"w", VariantType::integer}}));
  VariantValues zero{{0.0}, {}};
  EXPECT_THROW(m.mask(zero, {0, 0, 1, 1, 4, 4}), Error);
  VariantValues half{{2.5}, {}};
  EXPECT_THROW(m.mask(half, {0, 0, 1, 1, 4, 4}), Error);
  // C's truncating division and remainder.
  VariantValues three{{3.0}, {}};
  EXPECT_TRUE(m.mask(three, {0, 0, -4, -1, 4, 4}));  // -4/3 = -1, -1 % 3 = -1
}

// Every preset mask, their compositions and custom masks: classify() never says empty or full
// wrongly, on random tiles against every element.
TEST(Variant, ClassificationIsConservativeAgainstBruteForce) {
  std::vector<VariantDecl> decls;
  const VariantPresets one[] = {{.causal_top_left = true}, {.window = true}, {.prefix_lm = true},
                                {.chunked = true},         {.document = true}};
  for (const auto& p : one) decls.push_back(compose_variant(p));
  decls.push_back(compose_variant({.causal_top_left = true, .window = true, .chunked = true}));
  decls.push_back(compose_variant({.window = true, .prefix_lm = true, .document = true}));
  decls.push_back(compose_variant({.prefix_lm = true, .chunked = true}, decl("", "k <= q + (n_k - n_q)")));
  const VariantScalar w{"w", VariantType::integer}, r{"r", VariantType::real};
  // Each custom mask with the scalars it reads.
  const std::vector<std::pair<const char*, std::vector<VariantScalar>>> custom = {
      {"q % 4 == k % 4 || abs(q - k) <= 2", {}},
      {"(q - k) * (q - k) <= w * w", {w}},
      {"max(q, k) - min(q, k) < w", {w}},
      {"!(k > q) && (q / w != 0 || k == 0)", {w}},
      {"where(q > w, k < q - w, k >= 2 * w) != (k % 3 == 1)", {w}},
      {"float(k) <= float(q) * r || k < w", {w, r}},
      {"-k >= -q - w / 2", {w}},
      {"(q + k) % (w + 1) < w / 2 + 1", {w}},
  };
  for (const auto& [m, scalars] : custom) decls.push_back(decl("", m, scalars));
  std::mt19937 rng(3);
  for (const auto& d : decls) {
    SCOPED_TRACE(d.mask_mod);
    const Variant v = Variant::parse(d);
    Inputs in = make_inputs(d, rng);
    int decided = 0;
    for (int t = 0; t < 3000; ++t) {
      const std::int64_t n_k = 1 + rng() % 96;
      // document_ids[b][q + n_k - n_q] has a key position only for n_q <= n_k.
      const std::int64_t n_q = d.tensors.empty() ? 1 + rng() % 96 : 1 + rng() % n_k;
      std::map<std::string, double> values{{"window_left", static_cast<int>(rng() % 40) - 8},
                                           {"window_right", static_cast<int>(rng() % 40) - 8},
                                           {"prefix", rng() % 40},
                                           {"chunk", 1 + rng() % 24},
                                           {"w", 1 + rng() % 9},
                                           {"r", 0.5 + (rng() % 4) * 0.25}};
      for (std::size_t i = 0; i < d.scalars.size(); ++i) in.values.scalars[i] = values[d.scalars[i].name];
      const std::int64_t bq = 1 + rng() % 16, bk = 1 + rng() % 16;
      const std::int64_t q0 = rng() % n_q, k0 = rng() % n_k;
      const std::int64_t q1 = std::min(n_q - 1, q0 + bq - 1), k1 = std::min(n_k - 1, k0 + bk - 1);
      const std::int64_t b = rng() % 8, h = rng() % 8;
      bool any = false, all = true;
      for (std::int64_t q = q0; q <= q1; ++q)
        for (std::int64_t k = k0; k <= k1; ++k) {
          const bool m = v.mask(in.values, {b, h, q, k, n_q, n_k});
          any = any || m;
          all = all && m;
        }
      const TileClass c = v.classify(in.values, b, h, q0, q1, k0, k1, n_q, n_k);
      if (c == TileClass::empty) {
        EXPECT_FALSE(any) << q0 << ".." << q1 << " x " << k0 << ".." << k1;
      }
      if (c == TileClass::full) {
        EXPECT_TRUE(all) << q0 << ".." << q1 << " x " << k0 << ".." << k1;
      }
      decided += c != TileClass::partial;
    }
    // Not vacuous: some tiles are proved (a document mask by the ids' range tables).
    EXPECT_GT(decided, 50);
  }
}

// A document mask's tiles are proved from the ids' range tables: tiles of two other documents
// empty, tiles inside one document full, tiles across a boundary partial; ids that fall and rise
// again (an unsorted row) are bounded all the same.
// Masks that are one interval of keys per row have bounds whose interval is exactly the mask's
// keys, for every row, key and scalar tried (negative windows, empty prefixes, n_q != n_k); the
// others say they have none.
TEST(Variant, KeyBoundsAreExactlyTheMasksKeysPerRow) {
  const VariantScalar w{"w", VariantType::integer};
  std::vector<VariantDecl> intervals;
  const VariantPresets one[] = {{.causal_top_left = true}, {.window = true}, {.prefix_lm = true}};
  for (const auto& p : one) intervals.push_back(compose_variant(p));
  intervals.push_back(compose_variant({.causal_top_left = true, .window = true}));
  intervals.push_back(compose_variant({.window = true, .prefix_lm = true}));
  for (const char* m : {"k <= q + (n_k - n_q)", "k > q - w && k < q + w", "where(q > w, k >= q - w, k <= w)",
                        "k == q || w > 3", "q - w <= k", "k >= 2 * w && (k < q || q < w)", "k > w || k >= q"})
    intervals.push_back(decl("", m, std::string_view(m).find('w') != std::string_view::npos
                                        ? std::vector<VariantScalar>{w}
                                        : std::vector<VariantScalar>{}));
  std::mt19937 rng(5);
  for (const auto& d : intervals) {
    SCOPED_TRACE(d.mask_mod);
    const Variant v = Variant::parse(d);
    ASSERT_TRUE(v.has_key_bounds());
    Inputs in = make_inputs(d, rng);
    int visible = 0, hidden = 0;
    for (int t = 0; t < 200; ++t) {
      const std::int64_t n_q = 1 + rng() % 64, n_k = 1 + rng() % 64;
      std::map<std::string, double> values{{"window_left", static_cast<int>(rng() % 40) - 8},
                                           {"window_right", static_cast<int>(rng() % 40) - 8},
                                           {"prefix", static_cast<int>(rng() % 48) - 4},
                                           {"w", static_cast<int>(rng() % 20) - 4}};
      for (std::size_t i = 0; i < d.scalars.size(); ++i) in.values.scalars[i] = values[d.scalars[i].name];
      for (std::int64_t q = 0; q < n_q; ++q) {
        const auto [lo, hi] = v.key_bounds(in.values, 1, 2, q, n_q, n_k);
        for (std::int64_t k = 0; k < n_k; ++k) {
          const bool m = v.mask(in.values, {1, 2, q, k, n_q, n_k});
          ASSERT_EQ(m, lo <= k && k <= hi) << "q " << q << " k " << k << " n_q " << n_q << " n_k " << n_k
                                          << " bounds " << lo << ".." << hi;
          (m ? visible : hidden) += 1;
        }
      }
    }
    EXPECT_GT(visible, 100);  // not vacuous either way
    EXPECT_GT(hidden, 100);
  }
  const VariantTensor ids{"ids", 2, VariantType::integer, false};
  for (const VariantDecl& d : {compose_variant({.chunked = true}), compose_variant({.document = true}),
                               decl("", "k != q"), decl("", "k % 2 == 0"), decl("", "k < w || k > q", {w}),
                               decl("", "k + 1 <= q"), decl("", "ids[b][k] == ids[b][q]", {}, {ids}),
                               decl("", "!(k > q)")}) {
    SCOPED_TRACE(d.mask_mod);
    EXPECT_FALSE(Variant::parse(d).has_key_bounds());
  }
  EXPECT_FALSE(Variant::parse(decl("score * 2", "")).has_key_bounds());
}

TEST(Variant, DocumentTilesAreProvedFromRangeTables) {
  const VariantDecl d = compose_variant({.document = true});
  const Variant v = Variant::parse(d);
  EXPECT_EQ(v.mask_range_tensors(), std::vector<int>{0});
  EXPECT_TRUE(Variant::parse(compose_variant({.window = true})).mask_range_tensors().empty());
  const std::int64_t n = 1000;
  std::vector<int> ids(2 * n);
  for (std::int64_t i = 0; i < n; ++i) ids[i] = static_cast<int>(i / 100);       // batch 0: documents of 100
  for (std::int64_t i = 0; i < n; ++i) ids[n + i] = i < 500 ? 0 : i < 700 ? 1 : 0;  // batch 1: 0, 1, then 0 again
  VariantTensorValue t;
  t.data = ids.data();
  t.shape[0] = 2, t.shape[1] = n, t.strides[0] = n, t.strides[1] = 1;
  const VariantValues values{{}, {t}};
  auto classify = [&](std::int64_t b, std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1) {
    return v.classify(values, b, 0, q0, q1, k0, k1, n, n);
  };
  EXPECT_EQ(classify(0, 0, 63, 512, 575), TileClass::empty);
  EXPECT_EQ(classify(0, 0, 63, 0, 63), TileClass::full);
  EXPECT_EQ(classify(0, 280, 343, 280, 343), TileClass::partial);  // documents 2 and 3
  EXPECT_EQ(classify(0, 112, 191, 0, 95), TileClass::empty);
  EXPECT_EQ(classify(0, 912, 999, 912, 999), TileClass::full);    // the last block is clipped at n
  EXPECT_EQ(classify(1, 0, 63, 720, 783), TileClass::full);       // document 0 again after 1
  EXPECT_EQ(classify(1, 0, 63, 512, 575), TileClass::empty);
  EXPECT_EQ(classify(1, 496, 511, 496, 511), TileClass::partial);
}

// The presets skip tiles: the classifier proves their interiors full and their far tiles empty.
TEST(Variant, PresetTilesAreProvedEmptyAndFull) {
  std::mt19937 rng(5);
  auto classify = [&](const VariantPresets& p, std::map<std::string, double> s, std::int64_t q0, std::int64_t q1,
                      std::int64_t k0, std::int64_t k1, std::int64_t n_q = 1024, std::int64_t n_k = 1024) {
    const VariantDecl d = compose_variant(p);
    Inputs in = make_inputs(d, rng, s);
    return Variant::parse(d).classify(in.values, 0, 0, q0, q1, k0, k1, n_q, n_k);
  };
  const VariantPresets window{.window = true}, chunked{.chunked = true}, prefix{.prefix_lm = true},
      top_left{.causal_top_left = true};
  const std::map<std::string, double> w{{"window_left", 128}, {"window_right", 0}};
  EXPECT_EQ(classify(window, w, 512, 575, 0, 63), TileClass::empty);       // far left of the window
  EXPECT_EQ(classify(window, w, 512, 575, 640, 703), TileClass::empty);    // right of the diagonal
  EXPECT_EQ(classify(window, w, 512, 575, 448, 511), TileClass::full);     // inside the band
  EXPECT_EQ(classify(window, w, 512, 575, 512, 575), TileClass::partial);  // on the diagonal
  EXPECT_EQ(classify(window, {{"window_left", -1}, {"window_right", -1}}, 512, 575, 0, 63), TileClass::full);
  EXPECT_EQ(classify(window, {{"window_left", -1}, {"window_right", 0}}, 512, 575, 0, 63), TileClass::full);
  EXPECT_EQ(classify(chunked, {{"chunk", 256}}, 512, 575, 576, 639), TileClass::full);
  EXPECT_EQ(classify(chunked, {{"chunk", 256}}, 512, 575, 256, 319), TileClass::empty);
  EXPECT_EQ(classify(prefix, {{"prefix", 100}}, 0, 63, 0, 63), TileClass::full);
  EXPECT_EQ(classify(prefix, {{"prefix", 100}}, 0, 63, 512, 575), TileClass::empty);
  EXPECT_EQ(classify(prefix, {{"prefix", 100}}, 512, 575, 128, 191), TileClass::full);
  EXPECT_EQ(classify(top_left, {}, 512, 575, 0, 63, 512, 1024), TileClass::full);
  EXPECT_EQ(classify(top_left, {}, 512, 575, 576, 639, 512, 1024), TileClass::empty);
  EXPECT_EQ(Variant().classify({}, 0, 0, 0, 63, 0, 63, 64, 64), TileClass::full);
}

TEST(Variant, ComposesThePresets) {
  const VariantDecl all = compose_variant({.causal_top_left = true, .window = true, .softcap = true, .alibi = true,
                                           .prefix_lm = true, .chunked = true, .document = true},
                                          decl("score * u", "k != 3", {{"u", VariantType::real}}));
  EXPECT_EQ(all.score_mod, "softcap*tanh(((score * u)-alibi_slopes[h]*abs(float(q+(n_k-n_q))-float(k)))/softcap)");
  EXPECT_EQ(all.mask_mod,
            "(k != 3)&&(k<=q)&&((window_left<0||k>=q+(n_k-n_q)-window_left)&&(window_right<0||k<=q+(n_k-n_q)+window_right))"
            "&&(k<prefix||k<=q+(n_k-n_q))&&((q+(n_k-n_q))/chunk==k/chunk)&&(document_ids[b][q+(n_k-n_q)]==document_ids[b][k])");
  std::vector<std::string> scalars, tensors;
  for (const auto& s : all.scalars) scalars.push_back(s.name);
  for (const auto& t : all.tensors) tensors.push_back(t.name);
  EXPECT_EQ(scalars, (std::vector<std::string>{"u", "window_left", "window_right", "softcap", "prefix", "chunk"}));
  EXPECT_EQ(tensors, (std::vector<std::string>{"alibi_slopes", "document_ids"}));
  EXPECT_EQ(all.tensors[0].rank, 1);
  EXPECT_FALSE(all.tensors[0].learnable);
  EXPECT_EQ(all.tensors[1].rank, 2);
  EXPECT_EQ(all.tensors[1].type, VariantType::integer);
  EXPECT_NO_THROW(Variant::parse(all));
  EXPECT_EQ(compose_variant({.softcap = true}).score_mod, "softcap*tanh(score/softcap)");
  EXPECT_EQ(compose_variant({.alibi = true}).score_mod, "score-alibi_slopes[h]*abs(float(q+(n_k-n_q))-float(k))");
  EXPECT_EQ(compose_variant({.chunked = true}).mask_mod, "(q+(n_k-n_q))/chunk==k/chunk");
  EXPECT_EQ(compose_variant({}).score_mod, "");
  EXPECT_THROW(compose_variant({.chunked = true}, decl("", "k < chunk", {{"chunk", VariantType::integer}})), Error);

  // The formulas on the CPU: softcap(alibi(f)).
  std::mt19937 rng(2);
  const VariantDecl d = compose_variant({.softcap = true, .alibi = true}, decl("score * 2", ""));
  Inputs in = make_inputs(d, rng, {{"softcap", 30}});
  const Variant v = Variant::parse(d);
  const VariantIndex at{0, 3, 10, 4, 20, 24};
  const double slope = in.reals[0][3];
  EXPECT_NEAR(v.score(in.values, 1.5, at), 30 * std::tanh((3.0 - slope * std::abs(10 + 4 - 4)) / 30), 1e-12);
}

// The device struct compiles (NVRTC for sm_80 and sm_90a; clang for gfx942 where present) inside
// a kernel that calls each of its functions.
TEST(Variant, DeviceStructCompiles) {
  const std::vector<VariantDecl> decls = {
      {},
      compose_variant({.window = true, .softcap = true, .alibi = true, .chunked = true, .document = true}),
      decl("where(q >= k, score + bias[h][q - k + 4095], sigmoid(score) * score) + exp(min(score, 2.0)) + log(2.0 + abs(score)) "
           "+ sqrt(1 + float(max(q, k) % 5))",
           "q % 4 == k % 4 || abs(q - k) <= 2 || float(k) * 0.5 < float(q)", {}, {kBias}),
  };
  std::vector<std::string> targets = {"sm_80", "sm_90a"};
  if (amd_clang_description().find("unavailable") == std::string::npos) targets.push_back("gfx942");
  for (const auto& d : decls) {
    const Variant v = Variant::parse(d);
    const std::string body = v.device_struct("V");
    EXPECT_EQ(body.find("#include"), std::string::npos);
    KernelSource src;
    src.op = "test";
    src.variant = "variant_" + v.digest();
    src.entry = "variant_probe";
    src.threads = 64;
    src.source = "#include \"kgen_device/attention/variant_args.h\"\n#include \"kgen_device/core/atomic.cuh\"\n"
                 "#include \"kgen_device/core/expr_math.cuh\"\n" +
                 body +
                 "extern \"C\" __global__ void __launch_bounds__(64) variant_probe(kgen::VariantArgs a, float* out, int n) {\n"
                 "  const int q = threadIdx.x, k = blockIdx.x;\n"
                 "  float s = out[q];\n"
                 "  s = V::score(a, s, 0, 1, q, k, n, n) + V::dscore(a, s, 0, 1, q, k, n, n) + V::d2score(a, s, 0, 1, q, k, n, n);\n"
                 "  if (V::mask(a, 0, 1, q, k, n, n)) s += 1.0f;\n"
                 "  s += static_cast<float>(V::tile(a, 0, 1, q, q + 15, k, k + 15, n, n));\n"
                 "  if (V::kTensorGrads) V::tensor_grads(a, s, s, 0, 1, q, k, n, n);\n"
                 "  out[q] = s;\n}\n";
    for (const auto& name : targets) {
      SCOPED_TRACE(name + " " + v.canonical());
      const Target target = *parse_target(name);
      try {
        const CompiledBinary bin = compiler_for(target).compile(src, target);
        EXPECT_FALSE(bin.image.empty());
      } catch (const Error& e) {
        ADD_FAILURE() << e.what() << "\n" << src.source;
      }
    }
  }
}

}  // namespace
}  // namespace kgen
