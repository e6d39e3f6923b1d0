// The variant expression language on the CPU: fp64 evaluation (64-bit integers, C's truncating
// / and %), symbolic derivatives with trivial simplification, and the interval classification of
// a mask over a tile, by the same functions as the device's tile() (expr_interval.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "generator/variant_internal.h"
#include "kgen/types.hpp"
#include "kgen_device/core/expr_interval.h"

namespace kgen::variant_detail {
namespace {

[[noreturn]] void fail(const std::string& sentence) { throw Error(Status::invalid_argument, sentence); }

// Two's-complement wrap-around, as the device's integers (a 64-bit overflow is not undefined here).
std::int64_t wrap(std::uint64_t x) { return static_cast<std::int64_t>(x); }
std::uint64_t bits(std::int64_t x) { return static_cast<std::uint64_t>(x); }

std::int64_t input_value(const VariantIndex& at, std::int64_t slot) {
  const std::int64_t v[] = {at.b, at.h, at.q, at.k, at.n_q, at.n_k};
  return v[slot];
}

Value evaluate_arithmetic(const Node& n, const Value& x, const Value& y) {
  Value v;
  if (n.type == VariantType::real) {
    const double a = as_real(*n.args[0], x), b = as_real(*n.args[1], y);
    v.r = n.op == Op::add ? a + b : n.op == Op::sub ? a - b : n.op == Op::mul ? a * b : a / b;
    return v;
  }
  const std::int64_t a = x.i, b = y.i;
  switch (n.op) {
    case Op::add: v.i = wrap(bits(a) + bits(b)); break;
    case Op::sub: v.i = wrap(bits(a) - bits(b)); break;
    case Op::mul: v.i = wrap(bits(a) * bits(b)); break;
    default:
      if (b == 0) fail("variant evaluation: integer " + std::string(n.op == Op::div ? "division" : "remainder") + " by zero");
      if (b == -1) v.i = n.op == Op::div ? wrap(0 - bits(a)) : 0;
      else v.i = n.op == Op::div ? a / b : a % b;
  }
  return v;
}

bool compare(const Node& n, const Value& x, const Value& y) {
  const Node &na = *n.args[0], &nb = *n.args[1];
  if (na.type == VariantType::boolean) return n.op == Op::eq ? x.b == y.b : x.b != y.b;
  if (na.type == VariantType::real || nb.type == VariantType::real) {
    const double a = as_real(na, x), b = as_real(nb, y);
    switch (n.op) {
      case Op::lt: return a < b;
      case Op::le: return a <= b;
      case Op::gt: return a > b;
      case Op::ge: return a >= b;
      case Op::eq: return a == b;
      default: return a != b;
    }
  }
  switch (n.op) {
    case Op::lt: return x.i < y.i;
    case Op::le: return x.i <= y.i;
    case Op::gt: return x.i > y.i;
    case Op::ge: return x.i >= y.i;
    case Op::eq: return x.i == y.i;
    default: return x.i != y.i;
  }
}

// ---- Derivatives: constructors that simplify x·1, x+0, x·0 and fold constants ---------------

NodeRef real_const(double v) {
  auto n = std::make_shared<Node>();
  n->op = Op::real_lit;
  n->type = VariantType::real;
  n->real = v;
  return n;
}
bool is_value(const NodeRef& n, double v) { return is_const(*n) && const_value(*n) == v; }

NodeRef folded(Op op, std::vector<NodeRef> args) {
  NodeRef n = make_node(op, VariantType::real, std::move(args));
  for (const auto& a : n->args)
    if (!is_const(*a)) return n;
  const Value v = evaluate(*n, EvalContext{});
  return real_const(v.r);
}
// Every derivative node is real: an integer operand is converted (so that 1/q stays a real division).
NodeRef as_real_node(const NodeRef& n) {
  if (n->type != VariantType::integer) return n;
  if (n->op == Op::int_lit) return real_const(static_cast<double>(n->value));
  return make_node(Op::to_real, VariantType::real, {n});
}
NodeRef s_neg(const NodeRef& a) {
  if (a->op == Op::neg) return a->args[0];
  return folded(Op::neg, {a});
}
NodeRef s_add(const NodeRef& a, const NodeRef& b) {
  if (is_value(a, 0)) return b;
  if (is_value(b, 0)) return a;
  return folded(Op::add, {a, b});
}
NodeRef s_sub(const NodeRef& a, const NodeRef& b) {
  if (is_value(b, 0)) return a;
  if (is_value(a, 0)) return s_neg(b);
  return folded(Op::sub, {a, b});
}
NodeRef s_mul(const NodeRef& a0, const NodeRef& b0) {
  const NodeRef a = as_real_node(a0), b = as_real_node(b0);
  if (is_value(a, 0) || is_value(b, 0)) return real_const(0);
  if (is_value(a, 1)) return b;
  if (is_value(b, 1)) return a;
  if (is_value(a, -1)) return s_neg(b);
  if (is_value(b, -1)) return s_neg(a);
  return folded(Op::mul, {a, b});
}
NodeRef s_div(const NodeRef& a, const NodeRef& b0) {
  const NodeRef b = as_real_node(b0);
  if (is_value(a, 0)) return real_const(0);
  if (is_value(b, 1)) return a;
  return folded(Op::div, {a, b});
}
NodeRef s_where(const NodeRef& c, const NodeRef& a, const NodeRef& b) {
  if (is_const(*a) && is_const(*b) && const_value(*a) == const_value(*b)) return a;
  return make_node(Op::where, VariantType::real, {c, a, b});
}

void collect_reads(const NodeRef& n, const VariantDecl& decl, std::vector<std::pair<NodeRef, bool>>& guards,
                   std::vector<LearnableRead>& out) {
  if (n->op == Op::tensor && decl.tensors[n->value].learnable) out.push_back({n, guards, nullptr});
  if (n->op == Op::where) {
    collect_reads(n->args[0], decl, guards, out);
    for (int branch = 1; branch <= 2; ++branch) {
      guards.emplace_back(n->args[0], branch == 1);
      collect_reads(n->args[branch], decl, guards, out);
      guards.pop_back();
    }
    return;
  }
  for (const auto& a : n->args) collect_reads(a, decl, guards, out);
}

// ---- Interval classification -------------------------------------------------------------------

// The range table (expr_interval.h) of an integer tensor, as the GPU builds it.
struct RangeTable {
  std::vector<int> pairs;
  std::int64_t n = 0, rows = 0, lead[3] = {};
};

RangeTable range_table(const VariantTensorValue& t, int rank) {
  RangeTable r;
  r.n = t.shape[rank - 1];
  r.rows = 1;
  for (int d = rank - 2; d >= 0; --d) r.lead[d] = r.rows, r.rows *= t.shape[d];
  if (r.n == 0 || r.rows == 0) return r;
  const std::int64_t blocks = iv_table_blocks(r.n);
  const int levels = iv_table_levels(blocks);
  r.pairs.resize(static_cast<std::size_t>(2 * r.rows * levels * blocks));
  const int* data = static_cast<const int*>(t.data);
  for (std::int64_t row = 0; row < r.rows; ++row) {
    std::int64_t base = 0;
    for (int d = 0; d + 1 < rank; ++d) base += (row / r.lead[d] % t.shape[d]) * t.strides[d];
    int* level0 = &r.pairs[static_cast<std::size_t>(2 * iv_table_pair(r.n, row, 0, 0))];
    for (std::int64_t e = 0; e < blocks; ++e) {
      int lo = data[base + (e << kExprRangeShift) * t.strides[rank - 1]], hi = lo;
      for (std::int64_t i = e << kExprRangeShift; i < std::min(r.n, (e + 1) << kExprRangeShift); ++i) {
        const int x = data[base + i * t.strides[rank - 1]];
        lo = std::min(lo, x), hi = std::max(hi, x);
      }
      level0[2 * e] = lo, level0[2 * e + 1] = hi;
    }
    for (int l = 1; l < levels; ++l) {
      const int* below = &r.pairs[static_cast<std::size_t>(2 * iv_table_pair(r.n, row, l - 1, 0))];
      int* at = &r.pairs[static_cast<std::size_t>(2 * iv_table_pair(r.n, row, l, 0))];
      for (std::int64_t e = 0; e < blocks; ++e) {
        const std::int64_t f = std::min(e + (std::int64_t{1} << (l - 1)), blocks - 1);
        at[2 * e] = std::min(below[2 * e], below[2 * f]);
        at[2 * e + 1] = std::max(below[2 * e + 1], below[2 * f + 1]);
      }
    }
  }
  return r;
}

struct Box {
  const VariantDecl& decl;
  const VariantValues& values;
  std::int64_t b, h, q0, q1, k0, k1, n_q, n_k;
  std::vector<RangeTable> tables;  // per declared tensor (empty for real ones)
};

int tri(const Node& n, const Box& box);

ExprInterval interval(const Node& n, const Box& box) {
  auto arg = [&](int i) { return interval(*n.args[i], box); };
  switch (n.op) {
    case Op::int_lit: return iv_exact(n.value);
    case Op::input:
      switch (n.value) {
        case in_b: return iv_exact(box.b);
        case in_h: return iv_exact(box.h);
        case in_q: return iv_range(box.q0, box.q1);
        case in_k: return iv_range(box.k0, box.k1);
        case in_n_q: return iv_exact(box.n_q);
        default: return iv_exact(box.n_k);
      }
    case Op::scalar: return iv_exact(static_cast<std::int64_t>(box.values.scalars[n.value]));
    case Op::neg: return iv_neg(arg(0));
    case Op::add: return iv_add(arg(0), arg(1));
    case Op::sub: return iv_sub(arg(0), arg(1));
    case Op::mul: return iv_mul(arg(0), arg(1));
    case Op::div: return iv_div(arg(0), arg(1));
    case Op::mod: return iv_mod(arg(0), arg(1));
    case Op::min: return iv_min(arg(0), arg(1));
    case Op::max: return iv_max(arg(0), arg(1));
    case Op::abs: return iv_abs(arg(0));
    case Op::where: return iv_where(tri(*n.args[0], box), arg(1), arg(2));
    case Op::tensor: {
      const RangeTable& t = box.tables[n.value];
      if (t.pairs.empty()) return iv_top();
      ExprInterval row = iv_exact(0);
      for (std::size_t d = 0; d + 1 < n.args.size(); ++d) row = iv_add(row, iv_mul(arg(static_cast<int>(d)), iv_exact(t.lead[d])));
      return iv_table(t.pairs.data(), t.n, t.rows, row, arg(static_cast<int>(n.args.size()) - 1));
    }
    default: return iv_top();
  }
}

int tri(const Node& n, const Box& box) {
  auto arg = [&](int i) { return tri(*n.args[i], box); };
  switch (n.op) {
    case Op::lnot: return tri_not(arg(0));
    case Op::land: return tri_and(arg(0), arg(1));
    case Op::lor: return tri_or(arg(0), arg(1));
    case Op::where: return tri_where(arg(0), arg(1), arg(2));
    default: break;
  }
  const Node &a = *n.args[0], &b = *n.args[1];
  if (a.type == VariantType::boolean) return n.op == Op::eq ? tri_same(arg(0), arg(1)) : tri_not(tri_same(arg(0), arg(1)));
  if (a.type == VariantType::real || b.type == VariantType::real) return kTriUnknown;
  const ExprInterval x = interval(a, box), y = interval(b, box);
  switch (n.op) {
    case Op::lt: return tri_lt(x, y);
    case Op::le: return tri_le(x, y);
    case Op::gt: return tri_lt(y, x);
    case Op::ge: return tri_le(y, x);
    case Op::eq: return tri_eq(x, y);
    default: return tri_not(tri_eq(x, y));
  }
}

}  // namespace

double as_real(const Node& n, const Value& v) { return n.type == VariantType::integer ? static_cast<double>(v.i) : v.r; }

void check_values(const VariantDecl& decl, const VariantValues& values) {
  if (values.scalars.size() != decl.scalars.size())
    fail("variant values: " + std::to_string(values.scalars.size()) + " scalars given for the " +
         std::to_string(decl.scalars.size()) + " declared.");
  if (values.tensors.size() != decl.tensors.size())
    fail("variant values: " + std::to_string(values.tensors.size()) + " tensors given for the " +
         std::to_string(decl.tensors.size()) + " declared.");
  for (std::size_t i = 0; i < decl.scalars.size(); ++i) {
    const double v = values.scalars[i];
    if (decl.scalars[i].type == VariantType::integer && !(v == std::trunc(v) && v >= INT32_MIN && v <= INT32_MAX))
      fail("variant scalar '" + decl.scalars[i].name + "' is an integer, but its value " + real_text(v) +
           " is not a 32-bit integer.");
  }
  for (std::size_t j = 0; j < decl.tensors.size(); ++j) {
    if (!values.tensors[j].data) fail("variant tensor '" + decl.tensors[j].name + "' has no data.");
    for (int d = 0; d < decl.tensors[j].rank; ++d)
      if (values.tensors[j].shape[d] < 0)
        fail("variant tensor '" + decl.tensors[j].name + "' has a negative size in dimension " + std::to_string(d) + ".");
  }
}

std::int64_t element_offset(const Node& read, const EvalContext& cx) {
  const VariantTensorValue& t = cx.values->tensors[read.value];
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < read.args.size(); ++d) {
    const std::int64_t i = evaluate(*read.args[d], cx).i;
    if (i < 0 || i >= t.shape[d])
      fail("variant tensor '" + read.name + "': index " + std::to_string(i) + " in dimension " + std::to_string(d) +
           " is outside 0.." + std::to_string(t.shape[d] - 1) + ".");
    offset += i * t.strides[d];
  }
  return offset;
}

Value evaluate(const Node& n, const EvalContext& cx) {
  Value v;
  auto arg = [&](int i) { return evaluate(*n.args[i], cx); };
  auto real_arg = [&](int i) { return as_real(*n.args[i], evaluate(*n.args[i], cx)); };
  switch (n.op) {
    case Op::int_lit: v.i = n.value; break;
    case Op::real_lit: v.r = n.real; break;
    case Op::score: v.r = cx.score; break;
    case Op::input: v.i = input_value(cx.at, n.value); break;
    case Op::scalar:
      if (n.type == VariantType::integer) v.i = static_cast<std::int64_t>(cx.values->scalars[n.value]);
      else v.r = cx.values->scalars[n.value];
      break;
    case Op::tensor: {
      const std::int64_t at = element_offset(n, cx);
      const void* data = cx.values->tensors[n.value].data;
      if (n.type == VariantType::integer) v.i = static_cast<const std::int32_t*>(data)[at];
      else v.r = static_cast<const float*>(data)[at];
      break;
    }
    case Op::neg:
      if (n.type == VariantType::integer) v.i = wrap(0 - bits(arg(0).i));
      else v.r = -arg(0).r;
      break;
    case Op::lnot: v.b = !arg(0).b; break;
    case Op::to_real: v.r = static_cast<double>(arg(0).i); break;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::mod: return evaluate_arithmetic(n, arg(0), arg(1));
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::eq:
    case Op::ne: v.b = compare(n, arg(0), arg(1)); break;
    case Op::land: v.b = arg(0).b && arg(1).b; break;
    case Op::lor: v.b = arg(0).b || arg(1).b; break;
    case Op::where: {
      const int branch = arg(0).b ? 1 : 2;
      const Value x = arg(branch);
      if (n.type == VariantType::real) v.r = as_real(*n.args[branch], x);
      else v = x;
      break;
    }
    case Op::min:
    case Op::max:
      if (n.type == VariantType::integer) {
        const std::int64_t a = arg(0).i, b = arg(1).i;
        v.i = (n.op == Op::min) == (a < b) ? a : b;
      } else {
        const double a = real_arg(0), b = real_arg(1);
        v.r = (n.op == Op::min) == (a < b) ? a : b;
      }
      break;
    case Op::abs:
      if (n.type == VariantType::integer) {
        const std::int64_t a = arg(0).i;
        v.i = a < 0 ? wrap(0 - bits(a)) : a;
      } else {
        v.r = std::fabs(real_arg(0));
      }
      break;
    case Op::exp: v.r = std::exp(real_arg(0)); break;
    case Op::log: v.r = std::log(real_arg(0)); break;
    case Op::tanh: v.r = std::tanh(real_arg(0)); break;
    case Op::sigmoid: v.r = 1 / (1 + std::exp(-real_arg(0))); break;
    case Op::sqrt: v.r = std::sqrt(real_arg(0)); break;
  }
  return v;
}

NodeRef derive(const NodeRef& n, const Node* var) {
  if (n->type != VariantType::real) return real_const(0);
  auto d = [&](int i) { return derive(n->args[i], var); };
  auto arg = [&](int i) { return n->args[i]; };
  switch (n->op) {
    case Op::score: return real_const(var == nullptr ? 1 : 0);
    case Op::tensor: return real_const(n.get() == var ? 1 : 0);
    case Op::neg: return s_neg(d(0));
    case Op::add: return s_add(d(0), d(1));
    case Op::sub: return s_sub(d(0), d(1));
    case Op::mul: return s_add(s_mul(d(0), arg(1)), s_mul(arg(0), d(1)));
    case Op::div: {
      const NodeRef quotient = s_div(d(0), arg(1)), db = d(1);
      if (is_value(db, 0)) return quotient;
      return s_sub(quotient, s_div(s_mul(arg(0), db), s_mul(arg(1), arg(1))));
    }
    case Op::where: return s_where(arg(0), d(1), d(2));
    case Op::min: return s_where(make_node(Op::le, VariantType::boolean, {arg(0), arg(1)}), d(0), d(1));
    case Op::max: return s_where(make_node(Op::ge, VariantType::boolean, {arg(0), arg(1)}), d(0), d(1));
    case Op::abs: {
      const NodeRef da = d(0);
      return s_where(make_node(Op::ge, VariantType::boolean, {arg(0), real_const(0)}), da, s_neg(da));
    }
    case Op::exp: return s_mul(n, d(0));
    case Op::log: return s_div(d(0), arg(0));
    case Op::tanh: return s_mul(s_sub(real_const(1), s_mul(n, n)), d(0));
    case Op::sigmoid: return s_mul(s_mul(n, s_sub(real_const(1), n)), d(0));
    case Op::sqrt: return s_div(d(0), s_mul(real_const(2), n));
    default: return real_const(0);  // literals, real scalars, float(integer)
  }
}

std::vector<LearnableRead> learnable_reads(const NodeRef& score, const VariantDecl& decl) {
  std::vector<LearnableRead> reads, kept;
  std::vector<std::pair<NodeRef, bool>> guards;
  if (score) collect_reads(score, decl, guards, reads);
  for (auto& r : reads) {
    r.partial = derive(score, r.read.get());
    if (!is_value(r.partial, 0)) kept.push_back(std::move(r));  // read only by a condition
  }
  return kept;
}

int classify_mask(const Node& mask, const VariantDecl& decl, const VariantValues& values, std::int64_t b,
                  std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1,
                  std::int64_t n_q, std::int64_t n_k) {
  Box box{decl, values, b, h, q0, q1, k0, k1, n_q, n_k, std::vector<RangeTable>(decl.tensors.size())};
  for (std::size_t j = 0; j < decl.tensors.size(); ++j)
    if (decl.tensors[j].type == VariantType::integer) box.tables[j] = range_table(values.tensors[j], decl.tensors[j].rank);
  return tri(mask, box);
}

}  // namespace kgen::variant_detail
