// The variant expression language's lexer, recursive-descent parser (C precedence) and type
// checker, and its canonical printer. Every rejection is one sentence naming the expression and
// the column, so that no bad expression reaches a device compiler.
#include <cctype>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "generator/variant_internal.h"
#include "kgen/types.hpp"

namespace kgen::variant_detail {
namespace {

constexpr int kMaxDepth = 200;  // nesting; deeper input would only exhaust the host's stack

struct FunctionInfo {
  std::string_view name;
  Op op;
  int arity;
};
constexpr FunctionInfo kFunctions[] = {
    {"where", Op::where, 3}, {"min", Op::min, 2},   {"max", Op::max, 2},         {"abs", Op::abs, 1},
    {"exp", Op::exp, 1},     {"log", Op::log, 1},   {"tanh", Op::tanh, 1},       {"sigmoid", Op::sigmoid, 1},
    {"sqrt", Op::sqrt, 1},   {"float", Op::to_real, 1},
};

std::string_view type_phrase(VariantType t) {
  return t == VariantType::boolean ? "a bool" : t == VariantType::integer ? "an integer" : "a real";
}

enum class Tok { end, number, name, punct };
struct Token {
  Tok kind = Tok::end;
  std::string_view text;
  int column = 0;
};

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view which, std::string_view text, const VariantDecl& decl)
      : which_(which), text_(text), decl_(decl), mask_(which == "mask_mod") {
    lex();
  }

  NodeRef parse() {
    NodeRef n = parse_binary(0);
    if (peek().kind != Tok::end) fail(peek().column, "unexpected " + describe(peek()) + " after the end of the expression");
    if (mask_ && n->type != VariantType::boolean)
      fail(1, "the mask is " + std::string(type_phrase(n->type)) + ", not a bool");
    if (!mask_ && n->type == VariantType::boolean) fail(1, "the score_mod is a bool, not a number");
    return n;
  }

 private:
  [[noreturn]] void fail(int column, const std::string& problem) const {
    throw Error(Status::invalid_argument, std::string(which_) + ", column " + std::to_string(column) + ": " + problem + ".");
  }

  void lex() {
    static constexpr std::string_view kTwo[] = {"<=", ">=", "==", "!=", "&&", "||"};
    std::size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      const int column = static_cast<int>(i) + 1;
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
        continue;
      }
      std::size_t j = i;
      Tok kind = Tok::punct;
      if (digit(c) || (c == '.' && i + 1 < text_.size() && digit(text_[i + 1]))) {
        kind = Tok::number;
        while (j < text_.size() && (digit(text_[j]) || text_[j] == '.')) ++j;
        if (j < text_.size() && (text_[j] == 'e' || text_[j] == 'E')) {
          ++j;
          if (j < text_.size() && (text_[j] == '+' || text_[j] == '-')) ++j;
          while (j < text_.size() && digit(text_[j])) ++j;
        }
        while (j < text_.size() && name_char(text_[j])) ++j;  // swallowed so that "2x" is one bad number
      } else if (name_start(c)) {
        kind = Tok::name;
        while (j < text_.size() && name_char(text_[j])) ++j;
      } else {
        j = i + 1;
        for (std::string_view two : kTwo)
          if (text_.substr(i, 2) == two) j = i + 2;
        if (j == i + 1 && std::string_view("()[],+-*/%<>!").find(c) == std::string_view::npos) {
          const std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c)
                                                                                 : "\\x" + std::to_string(+static_cast<unsigned char>(c));
          fail(column, "unexpected character '" + shown + "'");
        }
      }
      tokens_.push_back({kind, text_.substr(i, j - i), column});
      i = j;
    }
    tokens_.push_back({Tok::end, {}, static_cast<int>(text_.size()) + 1});
  }

  const Token& peek() const { return tokens_[pos_]; }
  const Token& next() { return tokens_[pos_++]; }
  bool accept(std::string_view punct) {
    if (peek().kind != Tok::punct || peek().text != punct) return false;
    ++pos_;
    return true;
  }
  static std::string describe(const Token& t) {
    return t.kind == Tok::end ? "the end of the expression" : "'" + std::string(t.text) + "'";
  }
  void expect(std::string_view punct) {
    if (!accept(punct)) fail(peek().column, "expected '" + std::string(punct) + "' but found " + describe(peek()));
  }

  // Binary operators by C precedence, loosest first.
  static int precedence(std::string_view op) {
    if (op == "||") return 1;
    if (op == "&&") return 2;
    if (op == "==" || op == "!=") return 3;
    if (op == "<" || op == "<=" || op == ">" || op == ">=") return 4;
    if (op == "+" || op == "-") return 5;
    if (op == "*" || op == "/" || op == "%") return 6;
    return 0;
  }

  NodeRef parse_binary(int min_level) {
    NodeRef lhs = parse_unary();
    for (;;) {
      const Token& t = peek();
      const int level = t.kind == Tok::punct ? precedence(t.text) : 0;
      if (level == 0 || level <= min_level) return lhs;
      next();
      NodeRef rhs = parse_binary(level);
      lhs = binary(t, std::move(lhs), std::move(rhs));
    }
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.fail(p.peek().column, "the expression is nested more than 200 deep");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  NodeRef parse_unary() {
    DepthGuard guard(*this);
    const Token t = peek();
    if (accept("-") || accept("!")) {
      NodeRef arg = parse_unary();
      if (t.text == "-") {
        if (arg->type == VariantType::boolean) fail(t.column, "unary '-' takes a number, not a bool");
        return make_node(Op::neg, arg->type, {arg}, t.column);
      }
      if (arg->type != VariantType::boolean) fail(t.column, "'!' takes a bool, not " + std::string(type_phrase(arg->type)));
      return make_node(Op::lnot, VariantType::boolean, {arg}, t.column);
    }
    return parse_primary();
  }

  NodeRef parse_primary() {
    const Token t = next();
    if (t.kind == Tok::number) return number(t);
    if (t.kind == Tok::name) return name(t);
    if (t.kind == Tok::punct && t.text == "(") {
      if (accept(")")) fail(t.column, "empty parentheses");
      NodeRef inner = parse_binary(0);
      expect(")");
      return inner;
    }
    fail(t.column, "expected a number, a name or '(' but found " + describe(t));
  }

  NodeRef number(const Token& t) {
    const std::string_view s = t.text;
    const bool real = s.find_first_of(".eE") != std::string_view::npos;
    auto node = std::make_shared<Node>();
    node->column = t.column;
    if (real) {
      double v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ptr != s.data() + s.size() && r.ec != std::errc::result_out_of_range)
        fail(t.column, "malformed number '" + std::string(s) + "'");
      if (r.ec == std::errc::result_out_of_range || std::fabs(v) > FLT_MAX || (v != 0 && std::fabs(v) < FLT_MIN))
        fail(t.column, "the number " + std::string(s) + " does not fit a 32-bit float");
      node->op = Op::real_lit;
      node->type = VariantType::real;
      node->real = v;
    } else {
      std::int64_t v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ptr != s.data() + s.size() && r.ec != std::errc::result_out_of_range)
        fail(t.column, "malformed number '" + std::string(s) + "'");
      if (r.ec == std::errc::result_out_of_range || v > INT32_MAX)
        fail(t.column, "the number " + std::string(s) + " does not fit a 32-bit integer");
      node->op = Op::int_lit;
      node->value = v;
    }
    return node;
  }

  std::string valid_inputs() const {
    std::string s = mask_ ? "(the inputs are b, h, q, k, n_q, n_k" : "(the inputs are score, b, h, q, k, n_q, n_k";
    std::string declared;
    for (const auto& v : decl_.scalars) declared += (declared.empty() ? "" : ", ") + v.name;
    for (const auto& v : decl_.tensors) declared += (declared.empty() ? "" : ", ") + v.name;
    return s + (declared.empty() ? " and no declared scalars or tensors)" : " and the declared " + declared + ")");
  }

  NodeRef name(const Token& t) {
    const std::string_view s = t.text;
    for (const auto& f : kFunctions)
      if (f.name == s) return call(t, f);
    if (peek().kind == Tok::punct && peek().text == "(")
      fail(t.column, "unknown function '" + std::string(s) +
                         "' (the functions are where, min, max, abs, exp, log, tanh, sigmoid, sqrt and float)");
    auto node = std::make_shared<Node>();
    node->column = t.column;
    node->name = std::string(s);
    if (s == "score") {
      if (mask_) fail(t.column, "the mask may not read score");
      node->op = Op::score;
      node->type = VariantType::real;
    } else if (auto input = input_slot(s); input >= 0) {
      node->op = Op::input;
      node->value = input;
    } else if (auto scalar = scalar_slot(s); scalar >= 0) {
      node->op = Op::scalar;
      node->value = scalar;
      node->type = decl_.scalars[scalar].type;
    } else if (auto tensor = tensor_slot(s); tensor >= 0) {
      return tensor_read(t, tensor, std::move(node));
    } else {
      fail(t.column, "unknown name '" + std::string(s) + "' " + valid_inputs());
    }
    if (peek().kind == Tok::punct && peek().text == "[")
      fail(peek().column, "'" + std::string(s) + "' is not a tensor and cannot be indexed");
    return node;
  }

  static int input_slot(std::string_view s) {
    for (int i = 0; i < 6; ++i)
      if (kInputNames[i] == s) return i;
    return -1;
  }
  int scalar_slot(std::string_view s) const {
    for (std::size_t i = 0; i < decl_.scalars.size(); ++i)
      if (decl_.scalars[i].name == s) return static_cast<int>(i);
    return -1;
  }
  int tensor_slot(std::string_view s) const {
    for (std::size_t i = 0; i < decl_.tensors.size(); ++i)
      if (decl_.tensors[i].name == s) return static_cast<int>(i);
    return -1;
  }

  NodeRef tensor_read(const Token& t, int slot, std::shared_ptr<Node> node) {
    const VariantTensor& decl = decl_.tensors[slot];
    node->op = Op::tensor;
    node->value = slot;
    node->type = decl.type;
    while (peek().kind == Tok::punct && peek().text == "[") {
      next();
      NodeRef index = parse_binary(0);
      expect("]");
      const std::string which = "index " + std::to_string(node->args.size() + 1) + " of tensor '" + decl.name + "'";
      if (index->type != VariantType::integer) {
        if (reads_score(*index))
          fail(index->column, "score reaches an integer context (" + which + "), where it has no derivative");
        fail(index->column, which + " is " + std::string(type_phrase(index->type)) + ", not an integer");
      }
      if (literal_only(*index)) {
        const double v = const_value(*fold(index));
        if (v < 0) fail(index->column, "out-of-range constant index " + std::to_string(static_cast<long long>(v)) + " (" + which + ")");
      }
      node->args.push_back(std::move(index));
    }
    if (static_cast<int>(node->args.size()) != decl.rank)
      fail(t.column, "tensor '" + decl.name + "' takes " + std::to_string(decl.rank) + " index" + (decl.rank == 1 ? "" : "es") +
                         " ([i] per dimension) but is given " + std::to_string(node->args.size()));
    return node;
  }

  NodeRef call(const Token& t, const FunctionInfo& f) {
    if (!(peek().kind == Tok::punct && peek().text == "("))
      fail(t.column, "'" + std::string(f.name) + "' is a function: call it as " + std::string(f.name) + "(…)");
    next();
    std::vector<NodeRef> args;
    if (!accept(")")) {
      do args.push_back(parse_binary(0));
      while (accept(","));
      expect(")");
    }
    if (static_cast<int>(args.size()) != f.arity)
      fail(t.column, std::string(f.name) + "() takes " + std::to_string(f.arity) + " argument" + (f.arity == 1 ? "" : "s") +
                         " but is given " + std::to_string(args.size()));
    auto number_arg = [&](const NodeRef& a) {
      if (a->type == VariantType::boolean) fail(a->column, std::string(f.name) + "() takes numbers, not a bool");
    };
    VariantType type = VariantType::real;
    switch (f.op) {
      case Op::where:
        if (args[0]->type != VariantType::boolean)
          fail(args[0]->column, "where() needs a bool condition, not " + std::string(type_phrase(args[0]->type)));
        if ((args[1]->type == VariantType::boolean) != (args[2]->type == VariantType::boolean))
          fail(args[2]->column, "where() takes two bools or two numbers, not a bool and a number");
        type = join(args[1]->type, args[2]->type);
        break;
      case Op::min:
      case Op::max:
        number_arg(args[0]);
        number_arg(args[1]);
        type = join(args[0]->type, args[1]->type);
        break;
      case Op::abs:
        number_arg(args[0]);
        type = args[0]->type;
        break;
      case Op::to_real:
        if (args[0]->type != VariantType::integer)
          fail(args[0]->column, "float() takes an integer, not " + std::string(type_phrase(args[0]->type)));
        break;
      default:
        number_arg(args[0]);
        break;
    }
    return make_node(f.op, type, std::move(args), t.column);
  }

  static VariantType join(VariantType a, VariantType b) {
    if (a == VariantType::boolean) return a;
    return a == VariantType::real || b == VariantType::real ? VariantType::real : VariantType::integer;
  }

  static bool literal_only(const Node& n) {
    if (n.op == Op::score || n.op == Op::input || n.op == Op::scalar || n.op == Op::tensor) return false;
    for (const auto& a : n.args)
      if (!literal_only(*a)) return false;
    return true;
  }
  static NodeRef fold(const NodeRef& n) {
    const Value v = evaluate(*n, EvalContext{});
    auto node = std::make_shared<Node>();
    node->op = n->type == VariantType::real ? Op::real_lit : Op::int_lit;
    node->type = n->type;
    node->value = v.i;
    node->real = v.r;
    return node;
  }

  NodeRef binary(const Token& t, NodeRef a, NodeRef b) {
    const std::string_view s = t.text;
    const std::string quoted = "'" + std::string(s) + "'";
    Op op{};
    if (s == "&&" || s == "||") {
      for (const auto* x : {&a, &b})
        if ((*x)->type != VariantType::boolean)
          fail(t.column, quoted + " takes bools, not " + std::string(type_phrase((*x)->type)));
      return make_node(s == "&&" ? Op::land : Op::lor, VariantType::boolean, {a, b}, a->column);
    }
    if (s == "==" || s == "!=") {
      if ((a->type == VariantType::boolean) != (b->type == VariantType::boolean))
        fail(t.column, quoted + " compares a bool with a number");
      return make_node(s == "==" ? Op::eq : Op::ne, VariantType::boolean, {a, b}, a->column);
    }
    for (const auto* x : {&a, &b})
      if ((*x)->type == VariantType::boolean) fail(t.column, quoted + " takes numbers, not a bool");
    if (s == "<" || s == "<=" || s == ">" || s == ">=") {
      op = s == "<" ? Op::lt : s == "<=" ? Op::le : s == ">" ? Op::gt : Op::ge;
      return make_node(op, VariantType::boolean, {a, b}, a->column);
    }
    op = s == "+" ? Op::add : s == "-" ? Op::sub : s == "*" ? Op::mul : s == "/" ? Op::div : Op::mod;
    if (op == Op::mod)
      for (const auto* x : {&a, &b})
        if ((*x)->type == VariantType::real) {
          if (reads_score(**x)) fail(t.column, "score reaches an integer context (an operand of '%'), where it has no derivative");
          fail(t.column, "'%' takes integers, not a real");
        }
    if ((op == Op::div || op == Op::mod) && literal_only(*b) && const_value(*fold(b)) == 0)
      fail(t.column, "division by constant zero");
    return make_node(op, join(a->type, b->type), {a, b}, a->column);
  }

  std::string_view which_, text_;
  const VariantDecl& decl_;
  bool mask_;
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

bool is_const(const Node& n) { return n.op == Op::int_lit || n.op == Op::real_lit; }
double const_value(const Node& n) { return n.op == Op::real_lit ? n.real : static_cast<double>(n.value); }

NodeRef make_node(Op op, VariantType type, std::vector<NodeRef> args, int column) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->type = type;
  n->column = column;
  n->args = std::move(args);
  return n;
}

std::string_view op_text(Op op) {
  switch (op) {
    case Op::neg: return "-";
    case Op::lnot: return "!";
    case Op::to_real: return "float";
    case Op::mul: return "*";
    case Op::div: return "/";
    case Op::mod: return "%";
    case Op::add: return "+";
    case Op::sub: return "-";
    case Op::lt: return "<";
    case Op::le: return "<=";
    case Op::gt: return ">";
    case Op::ge: return ">=";
    case Op::eq: return "==";
    case Op::ne: return "!=";
    case Op::land: return "&&";
    case Op::lor: return "||";
    default: break;
  }
  for (const auto& f : kFunctions)
    if (f.op == op) return f.name;
  return "?";
}

NodeRef parse_expression(std::string_view which, std::string_view text, const VariantDecl& decl) {
  return Parser(which, text, decl).parse();
}

std::string real_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string print(const Node& n) {
  switch (n.op) {
    case Op::int_lit: return std::to_string(n.value);
    case Op::real_lit: return real_text(n.real);
    case Op::score:
    case Op::input:
    case Op::scalar: return n.name;
    case Op::tensor: {
      std::string s = n.name;
      for (const auto& a : n.args) s += "[" + print(*a) + "]";
      return s;
    }
    case Op::neg:
    case Op::lnot: return "(" + std::string(op_text(n.op)) + print(*n.args[0]) + ")";
    default: break;
  }
  if (n.op >= Op::mul && n.op <= Op::lor)
    return "(" + print(*n.args[0]) + std::string(op_text(n.op)) + print(*n.args[1]) + ")";
  std::string s = std::string(op_text(n.op)) + "(";
  for (std::size_t i = 0; i < n.args.size(); ++i) s += (i ? "," : "") + print(*n.args[i]);
  return s + ")";
}

}  // namespace kgen::variant_detail
