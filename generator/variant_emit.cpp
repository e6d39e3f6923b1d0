// The device struct of a variant (variant.h, Variant::device_struct): the score modification, its
// derivatives, the mask, the tile classification and the learnable tensors' gradients, as C++ for
// NVRTC and clang's AMD device compile. Integers are 32-bit `int` as in the kernels, reals
// `float`; the math comes from kgen_device/core/expr_math.cuh and red_add from atomic.cuh (the
// renderer includes both, and variant_args.h). Every local and parameter is prefixed kgv_, and
// no user name is spelled in the code (scalars and tensors are slots of VariantArgs).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "generator/variant_internal.h"

namespace kgen::variant_detail {
namespace {

std::string float_text(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "kgen::infinity_f32()" : "(-kgen::infinity_f32())";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

// An integer operand where a real is needed.
std::string real(const Node& n, const std::string& text) {
  return n.type == VariantType::integer ? "static_cast<float>(" + text + ")" : text;
}

std::string expr(const Node& n);

std::string real_arg(const Node& n, int i) { return real(*n.args[i], expr(*n.args[i])); }

// The element offset of a tensor read with the strides `strides` ("stride" or "grad_stride"), in
// 32-bit arithmetic: the host refuses variant tensors whose elements lie 2^31 or more apart, and
// 64-bit products per score element cost registers the tensor-core kernels do not have.
std::string offset(const Node& read, const char* strides) {
  std::string s;
  for (std::size_t d = 0; d < read.args.size(); ++d)
    s += (d ? " + " : "") + std::string("(") + expr(*read.args[d]) + ") * static_cast<int>(kgv_a." + strides + "[" +
         std::to_string(read.value) + "][" + std::to_string(d) + "])";
  return s;
}

std::string expr(const Node& n) {
  switch (n.op) {
    case Op::int_lit: return std::to_string(n.value);
    case Op::real_lit: return float_text(n.real);
    case Op::score: return "kgv_s";
    case Op::input: return "kgv_" + std::string(kInputNames[n.value]);
    case Op::scalar:
      return std::string(n.type == VariantType::integer ? "kgv_a.integer[" : "kgv_a.real[") + std::to_string(n.value) + "]";
    case Op::tensor:
      // Through expr_load: a read the compiler may merge with an equal one and hoist out of the
      // key loop (a per-head slope is read once per block, not once per score element).
      return std::string("kgen::expr_load(") +
             (n.type == VariantType::integer ? "static_cast<const int*>" : "static_cast<const float*>") +
             "(kgv_a.tensor[" + std::to_string(n.value) + "]) + (" + offset(n, "stride") + "))";
    case Op::neg:
    case Op::lnot: return "(" + std::string(op_text(n.op)) + expr(*n.args[0]) + ")";
    case Op::to_real: return "static_cast<float>(" + expr(*n.args[0]) + ")";
    case Op::where: {
      const bool r = n.type == VariantType::real;
      return "(" + expr(*n.args[0]) + " ? " + (r ? real_arg(n, 1) : expr(*n.args[1])) + " : " +
             (r ? real_arg(n, 2) : expr(*n.args[2])) + ")";
    }
    case Op::min:
    case Op::max:
      if (n.type == VariantType::integer)
        return std::string(n.op == Op::min ? "kgen::imin(" : "kgen::imax(") + expr(*n.args[0]) + ", " + expr(*n.args[1]) + ")";
      return std::string(n.op == Op::min ? "kgen::expr_min(" : "kgen::expr_max(") + real_arg(n, 0) + ", " + real_arg(n, 1) + ")";
    case Op::abs:
      if (n.type == VariantType::integer) return "kgen::expr_iabs(" + expr(*n.args[0]) + ")";
      return "kgen::expr_abs(" + real_arg(n, 0) + ")";
    case Op::exp:
    case Op::log:
    case Op::tanh:
    case Op::sigmoid:
    case Op::sqrt: return "kgen::expr_" + std::string(op_text(n.op)) + "(" + real_arg(n, 0) + ")";
    default: break;
  }
  // Binary operators: mixed integer and real operands compare and compute as reals.
  const Node &a = *n.args[0], &b = *n.args[1];
  const bool r = a.type == VariantType::real || b.type == VariantType::real;
  const std::string x = r ? real_arg(n, 0) : expr(a), y = r ? real_arg(n, 1) : expr(b);
  // A real division as x·(1/y): the reciprocal of a scalar is computed once per kernel, not per
  // score (IEEE division is a subroutine call per element).
  if (r && n.op == Op::div) return "kgen::expr_div(" + x + ", " + y + ")";
  return "(" + x + " " + std::string(op_text(n.op)) + " " + y + ")";
}

// The straight-line interval code of tile(): one local per integer or boolean node.
class TileEmitter {
 public:
  std::string tri(const Node& n) {
    switch (n.op) {
      case Op::lnot: return local("int", "kgen::tri_not(" + tri(*n.args[0]) + ")");
      case Op::land:
      case Op::lor:
        return local("int", std::string(n.op == Op::land ? "kgen::tri_and(" : "kgen::tri_or(") + tri(*n.args[0]) + ", " +
                                tri(*n.args[1]) + ")");
      case Op::where:
        return local("int", "kgen::tri_where(" + tri(*n.args[0]) + ", " + tri(*n.args[1]) + ", " + tri(*n.args[2]) + ")");
      default: break;
    }
    const Node &a = *n.args[0], &b = *n.args[1];
    if (a.type == VariantType::boolean) {
      const std::string same = local("int", "kgen::tri_same(" + tri(a) + ", " + tri(b) + ")");
      return n.op == Op::eq ? same : local("int", "kgen::tri_not(" + same + ")");
    }
    if (a.type == VariantType::real || b.type == VariantType::real) return "kgen::kTriUnknown";
    const std::string x = iv(a), y = iv(b);
    switch (n.op) {
      case Op::lt: return local("int", "kgen::tri_lt(" + x + ", " + y + ")");
      case Op::le: return local("int", "kgen::tri_le(" + x + ", " + y + ")");
      case Op::gt: return local("int", "kgen::tri_lt(" + y + ", " + x + ")");
      case Op::ge: return local("int", "kgen::tri_le(" + y + ", " + x + ")");
      case Op::eq: return local("int", "kgen::tri_eq(" + x + ", " + y + ")");
      default: return local("int", "kgen::tri_not(kgen::tri_eq(" + x + ", " + y + "))");
    }
  }

  std::string body() const { return body_; }

 private:
  std::string iv(const Node& n) {
    static constexpr const char* kInput[] = {"kgen::iv_exact(kgv_b)",          "kgen::iv_exact(kgv_h)",
                                             "kgen::iv_range(kgv_q0, kgv_q1)", "kgen::iv_range(kgv_k0, kgv_k1)",
                                             "kgen::iv_exact(kgv_n_q)",        "kgen::iv_exact(kgv_n_k)"};
    auto call = [&](const char* f) {
      std::string s = std::string("kgen::") + f + "(";
      for (std::size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + iv(*n.args[i]);
      return local("kgen::ExprInterval", s + ")");
    };
    switch (n.op) {
      case Op::int_lit: return local("kgen::ExprInterval", "kgen::iv_exact(" + std::to_string(n.value) + ")");
      case Op::input: return local("kgen::ExprInterval", kInput[n.value]);
      case Op::scalar:
        return local("kgen::ExprInterval", "kgen::iv_exact(kgv_a.integer[" + std::to_string(n.value) + "])");
      case Op::neg: return call("iv_neg");
      case Op::add: return call("iv_add");
      case Op::sub: return call("iv_sub");
      case Op::mul: return call("iv_mul");
      case Op::div: return call("iv_div");
      case Op::mod: return call("iv_mod");
      case Op::min: return call("iv_min");
      case Op::max: return call("iv_max");
      case Op::abs: return call("iv_abs");
      case Op::where: {
        const std::string c = tri(*n.args[0]);
        return local("kgen::ExprInterval", "kgen::iv_where(" + c + ", " + iv(*n.args[1]) + ", " + iv(*n.args[2]) + ")");
      }
      case Op::tensor: {
        if (n.type != VariantType::integer) return local("kgen::ExprInterval", "kgen::iv_top()");
        // An integer element: bounded by the tensor's range table over the last index's interval
        // (top without a table, or when the leading indices are not single values).
        const std::string j = std::to_string(n.value);
        std::string row = "kgen::iv_exact(0)";
        for (std::size_t d = 0; d + 1 < n.args.size(); ++d)
          row = "kgen::iv_add(" + row + ", kgen::iv_mul(" + iv(*n.args[d]) + ", kgen::iv_exact(kgv_a.range_lead[" + j + "][" +
                std::to_string(d) + "])))";
        const std::string last = iv(*n.args.back());
        return local("kgen::ExprInterval", "kgen::iv_table(kgv_a.range[" + j + "], kgv_a.range_len[" + j +
                                               "], kgv_a.range_rows[" + j + "], " + row + ", " + last + ")");
      }
      default: return local("kgen::ExprInterval", "kgen::iv_top()");  // a real element
    }
  }

  std::string local(const char* type, const std::string& value) {
    const std::string name = "kgv_t" + std::to_string(count_++);
    body_ += "    const " + std::string(type) + " " + name + " = " + value + ";\n";
    return name;
  }

  std::string body_;
  int count_ = 0;
};

const char* const kScoreParams =
    "(const kgen::VariantArgs& kgv_a, float kgv_s, int kgv_b, int kgv_h, int kgv_q, int kgv_k, int kgv_n_q, int kgv_n_k)";

std::string function(const char* result, const char* name, const std::string& params, const std::string& body) {
  return "  static __device__ __forceinline__ " + std::string(result) + " " + name + params + " {\n" + body + "  }\n";
}

}  // namespace

std::string emit_struct(const VariantExpr& e, std::string_view name) {
  const auto flag = [](bool b) { return b ? "true" : "false"; };
  std::string s = "// The attention variant " + e.canonical + "\n";
  s += "struct " + std::string(name) + " {\n";
  s += "  static constexpr bool kScoreMod = " + std::string(flag(e.score != nullptr)) + ";\n";
  s += "  static constexpr bool kMask = " + std::string(flag(e.mask != nullptr)) + ";\n";
  s += "  static constexpr bool kUnitSlope = " + std::string(flag(e.unit_slope)) + ";\n";
  s += "  static constexpr bool kTensorGrads = " + std::string(flag(!e.learnable.empty())) + ";\n";
  s += "  static constexpr bool kMaskReads = " + std::string(flag(e.mask != nullptr && reads_tensor(*e.mask))) + ";\n";
  s += "  static constexpr bool kKeyBounds = " + std::string(flag(e.key_lo != nullptr)) + ";\n";
  const auto ret = [](const std::string& v) { return "    return " + v + ";\n"; };
  s += function("float", "score", kScoreParams, ret(e.score ? real(*e.score, expr(*e.score)) : "kgv_s"));
  s += function("float", "dscore", kScoreParams, ret(expr(*e.dscore)));
  s += function("float", "d2score", kScoreParams, ret(expr(*e.d2score)));
  s += function("bool", "mask", "(const kgen::VariantArgs& kgv_a, int kgv_b, int kgv_h, int kgv_q, int kgv_k, int kgv_n_q, int kgv_n_k)",
                ret(e.mask ? expr(*e.mask) : "true"));
  // The keys row q sees, [lo, hi], where the mask is one interval of k per row (key_bounds).
  s += function("void", "keys", "(const kgen::VariantArgs& kgv_a, int kgv_b, int kgv_h, int kgv_q, int kgv_n_q, int kgv_n_k, int& kgv_lo, int& kgv_hi)",
                e.key_lo ? "    kgv_lo = " + expr(*e.key_lo) + ";\n    kgv_hi = " + expr(*e.key_hi) + ";\n"
                         : std::string("    kgv_lo = 0;\n    kgv_hi = kgv_n_k - 1;\n"));
  std::string tile = ret("2");
  if (e.mask) {
    TileEmitter t;
    const std::string result = t.tri(*e.mask);
    tile = t.body() + ret("(" + result + " == kgen::kTriTrue) ? 2 : (" + result + " == kgen::kTriFalse) ? 0 : 1");
  }
  s += function("int", "tile",
                "(const kgen::VariantArgs& kgv_a, int kgv_b, int kgv_h, int kgv_q0, int kgv_q1, int kgv_k0, int kgv_k1, "
                "int kgv_n_q, int kgv_n_k)",
                tile);
  std::string grads;
  for (const auto& r : e.learnable) {
    std::string guard;
    for (const auto& [condition, taken] : r.guards)
      guard += (guard.empty() ? "" : " && ") + std::string(taken ? "" : "!") + "(" + expr(*condition) + ")";
    const std::string slot = std::to_string(r.read->value);
    std::string add = "kgen::red_add(kgv_a.grad[" + slot + "] + (" + offset(*r.read, "grad_stride") + "), kgv_g * " +
                      expr(*r.partial) + ");\n";
    grads += guard.empty() ? "    " + add : "    if (" + guard + ") " + add;
  }
  s += function("void", "tensor_grads",
                "(const kgen::VariantArgs& kgv_a, float kgv_g, float kgv_s, int kgv_b, int kgv_h, int kgv_q, int kgv_k, "
                "int kgv_n_q, int kgv_n_k)",
                grads);
  return s + "};\n";
}

}  // namespace kgen::variant_detail
