// The parts of the variant expression language (variant.h) that its source files share: the
// checked syntax tree, and the passes over it (parse, derive, evaluate, classify, emit).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "generator/variant.h"

namespace kgen {
namespace variant_detail {

enum class Op : std::uint8_t {
  int_lit, real_lit,
  score, input, scalar, tensor,  // input: one of kInputNames (b … n_k)
  neg, lnot, to_real,
  mul, div, mod, add, sub,
  lt, le, gt, ge, eq, ne, land, lor,
  where, min, max, abs, exp, log, tanh, sigmoid, sqrt,
};

// The integer inputs after `score`, in the order of VariantIndex.
inline constexpr std::string_view kInputNames[] = {"b", "h", "q", "k", "n_q", "n_k"};
enum Input { in_b, in_h, in_q, in_k, in_n_q, in_n_k };

struct Node;
using NodeRef = std::shared_ptr<const Node>;

// One node of a checked expression. Each tensor read of the source is its own node, so its
// address names it (the variable of its partial derivative).
struct Node {
  Op op = Op::int_lit;
  VariantType type = VariantType::integer;
  int column = 0;           // 1-based start in the source text (0 for derived nodes)
  std::int64_t value = 0;   // int literal; input, scalar or tensor slot
  double real = 0;          // real literal
  std::string name;         // score, an input, scalar, tensor or function: as written
  std::vector<NodeRef> args;  // operands; a tensor read's indices
};

bool is_const(const Node& n);  // a literal
double const_value(const Node& n);
// Whether n or a node under it satisfies `hit`.
template <class Hit>
bool any_node(const Node& n, const Hit& hit) {
  if (hit(n)) return true;
  for (const auto& a : n.args)
    if (any_node(*a, hit)) return true;
  return false;
}
inline bool reads_score(const Node& n) {
  return any_node(n, [](const Node& x) { return x.op == Op::score; });
}
inline bool reads_tensor(const Node& n) {
  return any_node(n, [](const Node& x) { return x.op == Op::tensor; });
}
inline bool reads_k(const Node& n) {
  return any_node(n, [](const Node& x) { return x.op == Op::input && x.value == in_k; });
}
NodeRef make_node(Op op, VariantType type, std::vector<NodeRef> args, int column = 0);
std::string_view op_text(Op op);  // "+", "&&", "tanh", …

// A learnable tensor read of the score_mod: the where() conditions on its path (each with the
// branch taken), and ∂f/∂(the read).
struct LearnableRead {
  NodeRef read;
  std::vector<std::pair<NodeRef, bool>> guards;
  NodeRef partial;
};

}  // namespace variant_detail

// The checked variant behind Variant (declared in variant.h).
class VariantExpr {
 public:
  VariantDecl decl;                // as given
  variant_detail::NodeRef score;  // null: the identity
  variant_detail::NodeRef mask;   // null: every key visible
  variant_detail::NodeRef dscore, d2score;
  std::vector<variant_detail::LearnableRead> learnable;
  variant_detail::NodeRef key_lo, key_hi;  // the mask's keys per row where it is one interval (key_bounds)
  bool unit_slope = true;
  std::string canonical;
};

namespace variant_detail {

// Parses one expression of `decl` (which = "score_mod" or "mask_mod"); throws as Variant::parse.
NodeRef parse_expression(std::string_view which, std::string_view text, const VariantDecl& decl);
// The canonical text of an expression (fully parenthesised, no whitespace).
std::string print(const Node& n);
// The text of a literal that reads back as the same value and type.
std::string real_text(double v);

// ∂n/∂var, simplified; var null = ∂/∂score.
NodeRef derive(const NodeRef& n, const Node* var);
std::vector<LearnableRead> learnable_reads(const NodeRef& score, const VariantDecl& decl);

// Evaluation on the CPU (values checked first by check_values).
struct EvalContext {
  const VariantDecl* decl = nullptr;
  const VariantValues* values = nullptr;
  VariantIndex at;
  double score = 0;
};
struct Value {
  std::int64_t i = 0;
  double r = 0;
  bool b = false;
};
void check_values(const VariantDecl& decl, const VariantValues& values);
Value evaluate(const Node& n, const EvalContext& cx);
double as_real(const Node& n, const Value& v);
std::int64_t element_offset(const Node& read, const EvalContext& cx);  // bounds-checked

// The tile class bits of a mask (kTriFalse / kTriTrue / kTriUnknown of expr_interval.h).
int classify_mask(const Node& mask, const VariantDecl& decl, const VariantValues& values, std::int64_t b,
                  std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                  std::int64_t n_q, std::int64_t n_k);

std::string emit_struct(const VariantExpr& e, std::string_view name);

// The keys a row sees where the mask is one interval of k per row (windows, causal masks of
// either alignment, prefix-LM and their conjunctions): integer expressions lo and hi that do not
// read k, such that for every key k of [0, n_k) the mask holds exactly when lo <= k <= hi.
// nullopt where the mask is not of that form (k under arithmetic or in a tensor index, k != e,
// a union of intervals that need not touch). variant_keys.cpp.
struct KeyBounds {
  NodeRef lo, hi;
};
std::optional<KeyBounds> key_bounds(const NodeRef& mask);

}  // namespace variant_detail
}  // namespace kgen
