// Variant (variant.h): the checked declaration and expressions, their canonical text, the CPU
// evaluation entry points, and the presets composed into a declaration.
#include "generator/variant.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "generator/variant_internal.h"
#include "kgen/types.hpp"
#include "kgen_device/core/expr_interval.h"

namespace kgen {

using namespace variant_detail;

namespace {

[[noreturn]] void fail(const std::string& sentence) { throw Error(Status::invalid_argument, sentence); }

constexpr std::string_view kReserved[] = {"score", "b",   "h",   "q",    "k",       "n_q",  "n_k",  "where",
                                          "min",   "max", "abs", "exp",  "log",     "tanh", "sigmoid", "sqrt",
                                          "float"};

bool identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string_view type_text(VariantType t) { return t == VariantType::integer ? "int" : t == VariantType::real ? "real" : "bool"; }

void check_name(std::set<std::string>& seen, const std::string& name, std::string_view kind) {
  if (!identifier(name))
    fail("variant declaration: the " + std::string(kind) + " name '" + name + "' is not an identifier (letters, digits, _).");
  for (std::string_view r : kReserved)
    if (name == r) fail("variant declaration: the " + std::string(kind) + " name '" + name + "' is reserved (an input or a function).");
  if (!seen.insert(name).second) fail("variant declaration: the name '" + name + "' is declared twice.");
}

void check_declaration(const VariantDecl& decl) {
  if (decl.scalars.size() > kMaxVariantScalars)
    fail("variant declaration: " + std::to_string(decl.scalars.size()) + " scalars, more than the " +
         std::to_string(kMaxVariantScalars) + " a variant may have.");
  if (decl.tensors.size() > kMaxVariantTensors)
    fail("variant declaration: " + std::to_string(decl.tensors.size()) + " tensors, more than the " +
         std::to_string(kMaxVariantTensors) + " a variant may have.");
  std::set<std::string> seen;
  for (const auto& s : decl.scalars) {
    check_name(seen, s.name, "scalar");
    if (s.type == VariantType::boolean) fail("variant declaration: scalar '" + s.name + "' is a bool; scalars are int or real.");
  }
  for (const auto& t : decl.tensors) {
    check_name(seen, t.name, "tensor");
    if (t.rank < 1 || t.rank > kMaxVariantTensorRank)
      fail("variant declaration: tensor '" + t.name + "' has rank " + std::to_string(t.rank) + ", outside 1.." +
           std::to_string(kMaxVariantTensorRank) + ".");
    if (t.type == VariantType::boolean) fail("variant declaration: tensor '" + t.name + "' is a bool; tensors are int or real.");
    if (t.learnable && t.type != VariantType::real)
      fail("variant declaration: tensor '" + t.name + "' is learnable but integer; only real tensors have gradients.");
  }
}

void mark_reads(const Node& n, std::vector<bool>& scalars, std::vector<bool>& tensors) {
  if (n.op == Op::scalar) scalars[n.value] = true;
  if (n.op == Op::tensor) tensors[n.value] = true;
  for (const auto& a : n.args) mark_reads(*a, scalars, tensors);
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

std::string canonical_text(const VariantExpr& e) {
  std::string s = "score=" + (e.score ? print(*e.score) : "") + ";mask=" + (e.mask ? print(*e.mask) : "") + ";scalars=";
  for (std::size_t i = 0; i < e.decl.scalars.size(); ++i)
    s += (i ? "," : "") + e.decl.scalars[i].name + ":" + std::string(type_text(e.decl.scalars[i].type));
  s += ";tensors=";
  for (std::size_t i = 0; i < e.decl.tensors.size(); ++i) {
    const auto& t = e.decl.tensors[i];
    s += (i ? "," : "") + t.name + ":" + std::to_string(t.rank) + ":" + std::string(type_text(t.type)) + (t.learnable ? ":learn" : "");
  }
  return s;
}

std::shared_ptr<const VariantExpr> build(const VariantDecl& decl) {
  check_declaration(decl);
  auto e = std::make_shared<VariantExpr>();
  e->decl = decl;
  if (!blank(decl.score_mod)) {
    NodeRef f = parse_expression("score_mod", decl.score_mod, decl);
    if (f->op != Op::score) e->score = std::move(f);
  }
  if (!blank(decl.mask_mod)) e->mask = parse_expression("mask_mod", decl.mask_mod, decl);
  std::vector<bool> scalars(decl.scalars.size()), tensors(decl.tensors.size());
  for (const auto& n : {e->score, e->mask})
    if (n) mark_reads(*n, scalars, tensors);
  for (std::size_t i = 0; i < scalars.size(); ++i)
    if (!scalars[i]) fail("variant declaration: scalar '" + decl.scalars[i].name + "' is declared but no expression reads it.");
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i]) fail("variant declaration: tensor '" + decl.tensors[i].name + "' is declared but no expression reads it.");
  auto one = std::make_shared<Node>();
  one->op = Op::real_lit;
  one->type = VariantType::real;
  one->real = 1;
  e->dscore = e->score ? derive(e->score, nullptr) : one;
  e->d2score = derive(e->dscore, nullptr);
  e->unit_slope = is_const(*e->dscore) && const_value(*e->dscore) == 1 && is_const(*e->d2score) &&
                  const_value(*e->d2score) == 0;
  e->learnable = learnable_reads(e->score, decl);
  if (auto keys = key_bounds(e->mask)) e->key_lo = keys->lo, e->key_hi = keys->hi;
  e->canonical = canonical_text(*e);
  return e;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  if (s.empty()) return parts;
  for (std::size_t at = 0;;) {
    const std::size_t end = s.find(sep, at);
    parts.push_back(s.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) return parts;
    at = end + 1;
  }
}

VariantType parse_type(std::string_view s, std::string_view text) {
  if (s == "int") return VariantType::integer;
  if (s == "real") return VariantType::real;
  fail("canonical variant text: unknown type '" + std::string(s) + "' in '" + std::string(text) + "'.");
}

EvalContext context(const VariantExpr& e, const VariantValues& values, double score, const VariantIndex& at) {
  check_values(e.decl, values);
  return EvalContext{&e.decl, &values, at, score};
}

double evaluate_real(const NodeRef& n, const EvalContext& cx) { return as_real(*n, evaluate(*n, cx)); }

}  // namespace

Variant Variant::parse(const VariantDecl& decl) {
  Variant v;
  v.expr_ = build(decl);
  return v;
}

Variant::Variant() {
  static const std::shared_ptr<const VariantExpr> identity = build({});
  expr_ = identity;
}

const VariantDecl& Variant::decl() const { return expr_->decl; }
bool Variant::identity() const { return !expr_->score && !expr_->mask; }
bool Variant::has_score_mod() const { return expr_->score != nullptr; }
bool Variant::has_mask() const { return expr_->mask != nullptr; }
bool Variant::unit_slope() const { return expr_->unit_slope; }
bool Variant::has_learnable_tensors() const { return !expr_->learnable.empty(); }
std::string Variant::canonical() const { return expr_->canonical; }

Variant Variant::from_canonical(std::string_view text) {
  const auto parts = split(text, ';');
  static constexpr std::string_view kFields[] = {"score=", "mask=", "scalars=", "tensors="};
  if (parts.size() != 4) fail("canonical variant text: expected 4 fields separated by ';', found " + std::to_string(parts.size()) + ".");
  std::string_view values[4];
  for (int i = 0; i < 4; ++i) {
    if (parts[i].substr(0, kFields[i].size()) != kFields[i])
      fail("canonical variant text: field " + std::to_string(i + 1) + " does not start with '" + std::string(kFields[i]) + "'.");
    values[i] = parts[i].substr(kFields[i].size());
  }
  VariantDecl decl;
  decl.score_mod = std::string(values[0]);
  decl.mask_mod = std::string(values[1]);
  for (std::string_view item : split(values[2], ',')) {
    const auto f = split(item, ':');
    if (f.size() != 2) fail("canonical variant text: scalar '" + std::string(item) + "' is not name:type.");
    decl.scalars.push_back({std::string(f[0]), parse_type(f[1], item)});
  }
  for (std::string_view item : split(values[3], ',')) {
    const auto f = split(item, ':');
    if (f.size() < 3 || f.size() > 4 || (f.size() == 4 && f[3] != "learn") || f[1].size() != 1 || f[1][0] < '0' || f[1][0] > '9')
      fail("canonical variant text: tensor '" + std::string(item) + "' is not name:rank:type[:learn].");
    decl.tensors.push_back({std::string(f[0]), f[1][0] - '0', parse_type(f[2], item), f.size() == 4});
  }
  return parse(decl);
}

std::string Variant::digest() const {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : expr_->canonical) h = (h ^ c) * 0x100000001b3ULL;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<int> Variant::mask_range_tensors() const {
  std::vector<int> out;
  const std::function<void(const Node&)> walk = [&](const Node& n) {
    if (n.op == Op::tensor && n.type == VariantType::integer &&
        std::find(out.begin(), out.end(), static_cast<int>(n.value)) == out.end())
      out.push_back(static_cast<int>(n.value));
    for (const auto& a : n.args) walk(*a);
  };
  if (expr_->mask) walk(*expr_->mask);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Variant::device_struct(std::string_view name) const {
  if (!identifier(name)) fail("variant device struct: '" + std::string(name) + "' is not an identifier.");
  return emit_struct(*expr_, name);
}

double Variant::score(const VariantValues& values, double score, const VariantIndex& at) const {
  const EvalContext cx = context(*expr_, values, score, at);
  return expr_->score ? evaluate_real(expr_->score, cx) : score;
}
double Variant::dscore(const VariantValues& values, double score, const VariantIndex& at) const {
  return evaluate_real(expr_->dscore, context(*expr_, values, score, at));
}
double Variant::d2score(const VariantValues& values, double score, const VariantIndex& at) const {
  return evaluate_real(expr_->d2score, context(*expr_, values, score, at));
}
bool Variant::mask(const VariantValues& values, const VariantIndex& at) const {
  const EvalContext cx = context(*expr_, values, 0, at);
  return !expr_->mask || evaluate(*expr_->mask, cx).b;
}

void Variant::tensor_partials(const VariantValues& values, double score, const VariantIndex& at,
                              const std::function<void(int, std::int64_t, double)>& sink) const {
  const EvalContext cx = context(*expr_, values, score, at);
  for (const auto& r : expr_->learnable) {
    bool reached = true;
    for (const auto& [condition, taken] : r.guards)
      if (evaluate(*condition, cx).b != taken) {
        reached = false;
        break;
      }
    if (!reached) continue;
    const std::int64_t offset = element_offset(*r.read, cx);
    sink(static_cast<int>(r.read->value), offset, evaluate_real(r.partial, cx));
  }
}

TileClass Variant::classify(const VariantValues& values, std::int64_t b, std::int64_t h, std::int64_t q0,
                            std::int64_t q1, std::int64_t k0, std::int64_t k1, std::int64_t n_q,
                            std::int64_t n_k) const {
  check_values(expr_->decl, values);
  if (q0 > q1 || k0 > k1) fail("variant classify: an empty range (q " + std::to_string(q0) + ".." + std::to_string(q1) +
                               ", k " + std::to_string(k0) + ".." + std::to_string(k1) + ").");
  if (!expr_->mask) return TileClass::full;
  const int t = classify_mask(*expr_->mask, expr_->decl, values, b, h, q0, q1, k0, k1, n_q, n_k);
  return t == kTriTrue ? TileClass::full : t == kTriFalse ? TileClass::empty : TileClass::partial;
}

bool Variant::has_key_bounds() const { return expr_->key_lo != nullptr; }

std::pair<std::int64_t, std::int64_t> Variant::key_bounds(const VariantValues& values, std::int64_t b, std::int64_t h,
                                                          std::int64_t q, std::int64_t n_q, std::int64_t n_k) const {
  if (!expr_->key_lo) fail("variant key_bounds: the mask is not one interval of keys per row (has_key_bounds()).");
  const EvalContext cx = context(*expr_, values, 0, {b, h, q, 0, n_q, n_k});
  return {evaluate(*expr_->key_lo, cx).i, evaluate(*expr_->key_hi, cx).i};
}

// ---- Presets -------------------------------------------------------------------------------

namespace {

// `formula` with each token `score` replaced by `f` (parenthesised unless it is `score`).
std::string substitute_score(std::string_view formula, const std::string& f) {
  const std::string with = f == "score" ? f : "(" + f + ")";
  std::string out;
  for (std::size_t i = 0; i < formula.size();) {
    const char c = formula[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < formula.size() && (std::isalnum(static_cast<unsigned char>(formula[j])) || formula[j] == '_')) ++j;
      const std::string_view token = formula.substr(i, j - i);
      out += token == "score" ? with : std::string(token);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {  // 1e5 is one token, not 1 and e5
      std::size_t j = i;
      while (j < formula.size() && (std::isalnum(static_cast<unsigned char>(formula[j])) || formula[j] == '.')) ++j;
      out += formula.substr(i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace

VariantDecl compose_variant(const VariantPresets& presets, const VariantDecl& user) {
  VariantDecl out = user;
  auto taken = [&](const std::string& name, std::string_view preset) {
    for (const auto& s : user.scalars)
      if (s.name == name) fail("compose_variant: the user's scalar '" + name + "' collides with the " + std::string(preset) + " preset's input.");
    for (const auto& t : user.tensors)
      if (t.name == name) fail("compose_variant: the user's tensor '" + name + "' collides with the " + std::string(preset) + " preset's input.");
  };
  auto scalar = [&](const char* name, VariantType type, std::string_view preset) {
    taken(name, preset);
    out.scalars.push_back({name, type});
  };
  auto tensor = [&](const char* name, int rank, VariantType type, std::string_view preset) {
    taken(name, preset);
    out.tensors.push_back({name, rank, type, false});
  };
  std::vector<std::string> masks;
  if (!blank(user.mask_mod)) masks.push_back(user.mask_mod);
  if (presets.causal_top_left) masks.push_back("k<=q");
  if (presets.window) {
    scalar("window_left", VariantType::integer, "window");
    scalar("window_right", VariantType::integer, "window");
    masks.push_back("(window_left<0||k>=q+(n_k-n_q)-window_left)&&(window_right<0||k<=q+(n_k-n_q)+window_right)");
  }
  if (presets.softcap) scalar("softcap", VariantType::real, "softcap");
  if (presets.alibi) tensor("alibi_slopes", 1, VariantType::real, "alibi");
  if (presets.prefix_lm) {
    scalar("prefix", VariantType::integer, "prefix_lm");
    masks.push_back("k<prefix||k<=q+(n_k-n_q)");
  }
  if (presets.chunked) {
    scalar("chunk", VariantType::integer, "chunked");
    masks.push_back("(q+(n_k-n_q))/chunk==k/chunk");
  }
  if (presets.document) {
    tensor("document_ids", 2, VariantType::integer, "document");
    masks.push_back("document_ids[b][q+(n_k-n_q)]==document_ids[b][k]");
  }
  std::string f = blank(user.score_mod) ? "score" : user.score_mod;
  // The distance as a difference of reals: one conversion per row and one per key, shared by the
  // score elements of a tile, rather than one per element (exact below 2^24 positions).
  if (presets.alibi) f = substitute_score("score-alibi_slopes[h]*abs(float(q+(n_k-n_q))-float(k))", f);
  if (presets.softcap) f = substitute_score("softcap*tanh(score/softcap)", f);
  out.score_mod = f == "score" ? user.score_mod : f;
  out.mask_mod = masks.size() == 1 ? masks[0] : "";
  for (std::size_t i = 0; masks.size() > 1 && i < masks.size(); ++i) out.mask_mod += (i ? "&&(" : "(") + masks[i] + ")";
  return out;
}

}  // namespace kgen
