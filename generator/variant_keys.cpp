// The keys a query row sees, as one interval of k, for masks of that form (variant_internal.h,
// key_bounds): sliding windows, causal masks of either alignment, prefix-LM and their
// conjunctions. A kernel can then mask a partial tile with two comparisons per element against
// bounds computed once per row, instead of evaluating the mask per element.
#include <optional>
#include <utility>

#include "generator/variant_internal.h"

namespace kgen::variant_detail {
namespace {

NodeRef int_lit(std::int64_t v) {
  auto n = std::make_shared<Node>();
  n->op = Op::int_lit;
  n->type = VariantType::integer;
  n->value = v;
  n->name = std::to_string(v);
  return n;
}

NodeRef input(Input which) {
  auto n = std::make_shared<Node>();
  n->op = Op::input;
  n->type = VariantType::integer;
  n->value = which;
  n->name = std::string(kInputNames[which]);
  return n;
}

NodeRef op(Op o, VariantType type, std::vector<NodeRef> args) { return make_node(o, type, std::move(args)); }
NodeRef ints(Op o, NodeRef a, NodeRef b) { return op(o, VariantType::integer, {std::move(a), std::move(b)}); }
NodeRef where(NodeRef c, NodeRef x, NodeRef y) {
  return op(Op::where, VariantType::integer, {std::move(c), std::move(x), std::move(y)});
}
NodeRef compare(Op o, NodeRef a, NodeRef b) { return op(o, VariantType::boolean, {std::move(a), std::move(b)}); }
NodeRef last_key() { return ints(Op::sub, input(in_n_k), int_lit(1)); }

// [lo, hi] with lo in [0, n_k] and hi in [−1, n_k − 1] for the keys of [0, n_k); `free` marks a
// side without a constraint (lo = 0, hi = n_k − 1).
struct Bounds {
  NodeRef lo, hi;
  bool lo_free = false, hi_free = false;
};

Bounds at_least(NodeRef e) { return {std::move(e), last_key(), false, true}; }
Bounds at_most(NodeRef e) { return {int_lit(0), std::move(e), true, false}; }

std::optional<Bounds> bounds(const NodeRef& n);

// A comparison of k with an integer expression e that does not read k, as `k o e`.
std::optional<Bounds> compare_k(Op o, const NodeRef& e) {
  switch (o) {
    case Op::ge: return at_least(e);
    case Op::le: return at_most(e);
    // k > e: from e + 1 (no key where e + 1 would pass the last key, so e + 1 never overflows).
    case Op::gt: return at_least(where(compare(Op::ge, e, last_key()), input(in_n_k), ints(Op::add, e, int_lit(1))));
    // k < e: to e − 1 (no key where e ≤ 0).
    case Op::lt: return at_most(where(compare(Op::le, e, int_lit(0)), int_lit(-1), ints(Op::sub, e, int_lit(1))));
    case Op::eq: return Bounds{e, e, false, false};
    default: return std::nullopt;  // k != e: two intervals
  }
}

Op mirrored(Op o) {
  switch (o) {
    case Op::lt: return Op::gt;
    case Op::le: return Op::ge;
    case Op::gt: return Op::lt;
    case Op::ge: return Op::le;
    default: return o;
  }
}

std::optional<Bounds> bounds(const NodeRef& n) {
  // A condition without k: every key or none.
  if (!reads_k(*n)) return Bounds{where(n, int_lit(0), input(in_n_k)), where(n, last_key(), int_lit(-1))};
  switch (n->op) {
    case Op::land: {
      auto a = bounds(n->args[0]), b = bounds(n->args[1]);
      if (!a || !b) return std::nullopt;
      return Bounds{a->lo_free ? b->lo : b->lo_free ? a->lo : ints(Op::max, a->lo, b->lo),
                    a->hi_free ? b->hi : b->hi_free ? a->hi : ints(Op::min, a->hi, b->hi), a->lo_free && b->lo_free,
                    a->hi_free && b->hi_free};
    }
    case Op::lor: {
      const NodeRef &x = n->args[0], &y = n->args[1];
      // c || m: every key where c holds, else m's.
      if (!reads_k(*x) || !reads_k(*y)) {
        const NodeRef& c = reads_k(*x) ? y : x;
        auto m = bounds(reads_k(*x) ? x : y);
        if (!m) return std::nullopt;
        return Bounds{m->lo_free ? m->lo : where(c, int_lit(0), m->lo), m->hi_free ? m->hi : where(c, last_key(), m->hi),
                      m->lo_free, m->hi_free};
      }
      // Two half-lines of one direction unite into one.
      auto a = bounds(x), b = bounds(y);
      if (!a || !b) return std::nullopt;
      if (a->hi_free && b->hi_free) return at_least(ints(Op::min, a->lo, b->lo));
      if (a->lo_free && b->lo_free) return at_most(ints(Op::max, a->hi, b->hi));
      return std::nullopt;
    }
    case Op::where: {
      if (reads_k(*n->args[0]) || n->type != VariantType::boolean) return std::nullopt;
      auto a = bounds(n->args[1]), b = bounds(n->args[2]);
      if (!a || !b) return std::nullopt;
      const NodeRef& c = n->args[0];
      return Bounds{where(c, a->lo, b->lo), where(c, a->hi, b->hi), a->lo_free && b->lo_free, a->hi_free && b->hi_free};
    }
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::eq: {
      const NodeRef &x = n->args[0], &y = n->args[1];
      if (x->type != VariantType::integer || y->type != VariantType::integer) return std::nullopt;
      if (x->op == Op::input && x->value == in_k && !reads_k(*y)) return compare_k(n->op, y);
      if (y->op == Op::input && y->value == in_k && !reads_k(*x)) return compare_k(mirrored(n->op), x);
      return std::nullopt;
    }
    default: return std::nullopt;  // k under arithmetic, in a tensor index, under a negation
  }
}

}  // namespace

std::optional<KeyBounds> key_bounds(const NodeRef& mask) {
  if (!mask || mask->type != VariantType::boolean) return std::nullopt;
  auto b = bounds(mask);
  if (!b) return std::nullopt;
  return KeyBounds{b->lo, b->hi};
}

}  // namespace kgen::variant_detail
