#include "server/templates/expression.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

// Parentheses, unary operators, ternary branches and call arguments opened inside one
// another; each costs a few parser frames, so this bounds the parser's stack.
constexpr int kMaxNesting = 64;
// Height of the finished tree. A flat chain `1+1+...+1` nests no parentheses but still
// builds a left-deep tree that Evaluate and the destructor walk recursively.
constexpr int kMaxHeight = 256;

enum class Op {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAnd,
  kOr,
};

absl::string_view OpText(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kMod:
      return "%";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
    case Op::kAnd:
      return "&&";
    case Op::kOr:
      return "||";
  }
  return "?";
}

}  // namespace

struct Expression::Node {
  enum class Kind {
    kLiteral,      // value
    kIdentifier,   // name
    kSizeofDtype,  // sizeof(dtype): the scope's element type
    kNeg,          // -a
    kNot,          // !a
    kBinary,       // a op b
    kTernary,      // a ? b : c
    kCeilDiv,      // ceil_div(a, b)
    kMin,          // min(a, b)
    kMax,          // max(a, b)
  };
  Kind kind = Kind::kLiteral;
  Op op = Op::kAdd;
  int64_t value = 0;
  std::string name;
  size_t name_hash = 0;  // the scope's hash of `name`, so a lookup does not hash it again
  std::unique_ptr<const Node> a, b, c;
  int height = 1;
};

namespace {

using Node = Expression::Node;

// ---------------------------------------------------------------------------------------
// Tokenizer

struct Token {
  enum class Kind { kNumber, kName, kOp, kEnd };
  Kind kind = Kind::kEnd;
  absl::string_view text;  // the token as written; "" for kEnd
  int col = 0;             // 1-based column of the first character
  int64_t value = 0;       // kNumber only
};

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<const Node>> Run() {
    if (!Tokenize()) return Error();
    if (tokens_.size() == 1) {
      Fail(1, "empty expression");
      return Error();
    }
    std::unique_ptr<const Node> root = ParseTernary(0);
    if (root == nullptr) return Error();
    if (Peek().kind != Token::Kind::kEnd) {
      Fail(Peek().col, absl::StrCat("unexpected '", Peek().text, "' after the expression"));
      return Error();
    }
    return root;
  }

  std::vector<std::string> TakeIdentifiers() { return std::move(identifiers_); }

 private:
  // Records the first error only; later ones are consequences of it.
  void Fail(int col, absl::string_view reason) {
    if (error_.empty()) error_ = absl::StrCat("col ", col, ": ", reason);
  }
  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrCat(error_, " in '", text_, "'"));
  }

  bool Tokenize() {
    size_t i = 0;
    const size_t n = text_.size();
    while (i < n) {
      const char c = text_[i];
      const int col = static_cast<int>(i) + 1;
      if (absl::ascii_isspace(c)) {
        ++i;
        continue;
      }
      Token t;
      t.col = col;
      if (absl::ascii_isdigit(c)) {
        size_t j = i;
        while (j < n && absl::ascii_isdigit(text_[j])) ++j;
        t.kind = Token::Kind::kNumber;
        t.text = text_.substr(i, j - i);
        if (j < n && IsNameChar(text_[j])) {
          Fail(static_cast<int>(j) + 1, absl::StrCat("unexpected '", text_.substr(j, 1),
                                                     "' in a number (literals are "
                                                     "decimal integers)"));
          return false;
        }
        // C would read 010 as octal 8; refuse rather than silently differ from the kernel.
        if (t.text.size() > 1 && t.text[0] == '0') {
          Fail(col, absl::StrCat("leading zero in '", t.text, "' (literals are decimal)"));
          return false;
        }
        int64_t v = 0;
        for (char d : t.text) {
          if (__builtin_mul_overflow(v, int64_t{10}, &v) ||
              __builtin_add_overflow(v, int64_t{d - '0'}, &v)) {
            Fail(col, absl::StrCat("integer literal ", t.text, " overflows int64"));
            return false;
          }
        }
        t.value = v;
        i = j;
      } else if (IsNameStart(c)) {
        size_t j = i;
        while (j < n && IsNameChar(text_[j])) ++j;
        t.kind = Token::Kind::kName;
        t.text = text_.substr(i, j - i);
        i = j;
      } else {
        static constexpr absl::string_view kTwoChar[] = {"<=", ">=", "==", "!=", "&&", "||"};
        t.kind = Token::Kind::kOp;
        for (absl::string_view op : kTwoChar) {
          if (text_.substr(i, 2) == op) t.text = text_.substr(i, 2);
        }
        if (t.text.empty()) {
          if (absl::string_view("()+-*/%!<>?:,").find(c) == absl::string_view::npos) {
            std::string reason = absl::StrCat("unexpected character '", text_.substr(i, 1), "'");
            if (c == '&' || c == '|' || c == '=') {
              absl::StrAppend(&reason, " (did you mean '", text_.substr(i, 1), text_.substr(i, 1),
                              "'?)");
            }
            Fail(col, reason);
            return false;
          }
          t.text = text_.substr(i, 1);
        }
        i += t.text.size();
      }
      tokens_.push_back(t);
    }
    Token end;
    end.col = static_cast<int>(n) + 1;
    tokens_.push_back(end);
    return true;
  }

  const Token& Peek() const { return tokens_[pos_]; }
  const Token& Next() { return tokens_[pos_++]; }
  bool IsOp(absl::string_view op) const {
    return Peek().kind == Token::Kind::kOp && Peek().text == op;
  }
  static std::string Describe(const Token& t) {
    if (t.kind == Token::Kind::kEnd) return "the end";
    return absl::StrCat("'", t.text, "'");
  }
  bool Expect(absl::string_view op) {
    if (IsOp(op)) {
      ++pos_;
      return true;
    }
    Fail(Peek().col, absl::StrCat("expected '", op, "' but found ", Describe(Peek())));
    return false;
  }
  bool Enter(int depth, int col) {
    if (depth > kMaxNesting) {
      Fail(col, absl::StrCat("expression nested too deeply (limit ", kMaxNesting, ")"));
      return false;
    }
    return true;
  }

  std::unique_ptr<Node> Make(Node::Kind kind, int col, std::unique_ptr<const Node> a,
                             std::unique_ptr<const Node> b = nullptr,
                             std::unique_ptr<const Node> c = nullptr) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    int h = 0;
    for (const auto* child : {a.get(), b.get(), c.get()}) {
      if (child != nullptr && child->height > h) h = child->height;
    }
    node->height = h + 1;
    if (node->height > kMaxHeight) {
      Fail(col,
           absl::StrCat("expression too deep (more than ", kMaxHeight, " levels of operators)"));
      return nullptr;
    }
    node->a = std::move(a);
    node->b = std::move(b);
    node->c = std::move(c);
    return node;
  }

  // ternary := binary ['?' ternary ':' ternary]; right-associative like C.
  std::unique_ptr<const Node> ParseTernary(int depth) {
    if (!Enter(depth, Peek().col)) return nullptr;
    std::unique_ptr<const Node> cond = ParseBinary(1, depth);
    if (cond == nullptr || !IsOp("?")) return cond;
    const int col = Next().col;
    std::unique_ptr<const Node> then = ParseTernary(depth + 1);
    if (then == nullptr || !Expect(":")) return nullptr;
    std::unique_ptr<const Node> otherwise = ParseTernary(depth + 1);
    if (otherwise == nullptr) return nullptr;
    return Make(Node::Kind::kTernary, col, std::move(cond), std::move(then), std::move(otherwise));
  }

  // The binary operator at the cursor and its precedence (higher binds tighter); 0 if none.
  int PeekBinary(Op* op) const {
    if (Peek().kind != Token::Kind::kOp) return 0;
    static constexpr struct {
      absl::string_view text;
      Op op;
      int prec;
    } kOps[] = {
        {"||", Op::kOr, 1}, {"&&", Op::kAnd, 2}, {"==", Op::kEq, 3}, {"!=", Op::kNe, 3},
        {"<", Op::kLt, 4},  {"<=", Op::kLe, 4},  {">", Op::kGt, 4},  {">=", Op::kGe, 4},
        {"+", Op::kAdd, 5}, {"-", Op::kSub, 5},  {"*", Op::kMul, 6}, {"/", Op::kDiv, 6},
        {"%", Op::kMod, 6},
    };
    for (const auto& e : kOps) {
      if (Peek().text == e.text) {
        *op = e.op;
        return e.prec;
      }
    }
    return 0;
  }

  // Precedence climbing: operators of precedence >= min_prec, all left-associative.
  std::unique_ptr<const Node> ParseBinary(int min_prec, int depth) {
    std::unique_ptr<const Node> lhs = ParseUnary(depth);
    if (lhs == nullptr) return nullptr;
    for (;;) {
      Op op;
      const int prec = PeekBinary(&op);
      if (prec == 0 || prec < min_prec) return lhs;
      const int col = Next().col;
      std::unique_ptr<const Node> rhs = ParseBinary(prec + 1, depth);
      if (rhs == nullptr) return nullptr;
      std::unique_ptr<Node> node = Make(Node::Kind::kBinary, col, std::move(lhs), std::move(rhs));
      if (node == nullptr) return nullptr;
      node->op = op;
      lhs = std::move(node);
    }
  }

  std::unique_ptr<const Node> ParseUnary(int depth) {
    if (IsOp("-") || IsOp("+") || IsOp("!")) {
      const Token& t = Next();
      if (!Enter(depth + 1, t.col)) return nullptr;
      std::unique_ptr<const Node> operand = ParseUnary(depth + 1);
      if (operand == nullptr || t.text == "+") return operand;
      return Make(t.text == "-" ? Node::Kind::kNeg : Node::Kind::kNot, t.col, std::move(operand));
    }
    return ParsePrimary(depth);
  }

  std::unique_ptr<const Node> ParsePrimary(int depth) {
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kNumber: {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kLiteral;
        node->value = t.value;
        return node;
      }
      case Token::Kind::kName:
        return ParseName(depth);
      case Token::Kind::kOp:
        if (t.text == "(") {
          ++pos_;
          std::unique_ptr<const Node> inner = ParseTernary(depth + 1);
          if (inner == nullptr || !Expect(")")) return nullptr;
          return inner;
        }
        break;
      case Token::Kind::kEnd:
        break;
    }
    Fail(t.col, absl::StrCat("expected a number, a name or '(' but found ", Describe(t)));
    return nullptr;
  }

  // A name: a function call if '(' follows, else an identifier.
  std::unique_ptr<const Node> ParseName(int depth) {
    const Token& name = Next();
    const bool is_sizeof = name.text == "sizeof";
    Node::Kind kind = Node::Kind::kIdentifier;
    if (name.text == "ceil_div") kind = Node::Kind::kCeilDiv;
    if (name.text == "min") kind = Node::Kind::kMin;
    if (name.text == "max") kind = Node::Kind::kMax;
    const bool is_function = is_sizeof || kind != Node::Kind::kIdentifier;

    if (!IsOp("(")) {
      if (is_function) {
        Fail(name.col, absl::StrCat("expected '(' after '", name.text, "'"));
        return nullptr;
      }
      if (seen_.insert(name.text).second) identifiers_.emplace_back(name.text);
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kIdentifier;
      node->name = std::string(name.text);
      node->name_hash = decltype(Scope::values)::hasher()(node->name);
      return node;
    }
    if (!is_function) {
      Fail(name.col,
           absl::StrCat("unknown function '", name.text, "' (known: ceil_div, min, max, sizeof)"));
      return nullptr;
    }
    ++pos_;  // '('
    if (is_sizeof) return ParseSizeofArg(name);

    std::vector<std::unique_ptr<const Node>> args;
    if (!IsOp(")")) {
      for (;;) {
        std::unique_ptr<const Node> arg = ParseTernary(depth + 1);
        if (arg == nullptr) return nullptr;
        args.push_back(std::move(arg));
        if (!IsOp(",")) break;
        ++pos_;
      }
    }
    if (!Expect(")")) return nullptr;
    if (args.size() != 2) {
      Fail(name.col, absl::StrCat(name.text, " takes 2 arguments, got ", args.size()));
      return nullptr;
    }
    return Make(kind, name.col, std::move(args[0]), std::move(args[1]));
  }

  // After "sizeof(": `dtype` or a dtype name, then ')'.
  std::unique_ptr<const Node> ParseSizeofArg(const Token& sizeof_token) {
    const Token& arg = Peek();
    auto node = std::make_unique<Node>();
    std::optional<DType> fixed;
    if (arg.kind == Token::Kind::kName && arg.text == "dtype") {
      node->kind = Node::Kind::kSizeofDtype;
    } else if (arg.kind == Token::Kind::kName && (fixed = ParseDType(arg.text))) {
      node->kind = Node::Kind::kLiteral;
      node->value = DTypeSize(*fixed);
    } else {
      Fail(arg.col,
           absl::StrCat("sizeof takes 'dtype' or f32, f16, bf16, i32, f8e4m3, f8e5m2, not ", Describe(arg)));
      return nullptr;
    }
    ++pos_;
    if (!Expect(")")) return nullptr;
    return node;
  }

  absl::string_view text_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string error_;
  std::vector<std::string> identifiers_;
  absl::flat_hash_set<absl::string_view> seen_;  // views into text_
};

// ---------------------------------------------------------------------------------------
// Evaluator. Eval returns false on the first failure and keeps its reason; the status is
// built once, at the top, so a deep tree does not pass statuses up every level.

class Evaluator {
 public:
  Evaluator(const Scope& scope, const std::string& text) : scope_(scope), text_(text) {}

  bool Eval(const Node& n, int64_t* out) {
    switch (n.kind) {
      case Node::Kind::kLiteral:
        *out = n.value;
        return true;
      case Node::Kind::kIdentifier: {
        auto it = scope_.values.find(n.name, n.name_hash);
        if (it == scope_.values.end()) {
          return Fail(absl::StrCat("unknown identifier '", n.name, "'"));
        }
        *out = it->second;
        return true;
      }
      case Node::Kind::kSizeofDtype:
        *out = DTypeSize(scope_.dtype);
        return true;
      case Node::Kind::kNeg: {
        int64_t a;
        if (!Eval(*n.a, &a)) return false;
        if (__builtin_sub_overflow(int64_t{0}, a, out)) {
          return Fail("overflow", absl::StrCat("-(", a, ") does not fit in int64"));
        }
        return true;
      }
      case Node::Kind::kNot: {
        int64_t a;
        if (!Eval(*n.a, &a)) return false;
        *out = a == 0 ? 1 : 0;
        return true;
      }
      case Node::Kind::kTernary: {
        int64_t cond;
        if (!Eval(*n.a, &cond)) return false;
        return Eval(cond != 0 ? *n.b : *n.c, out);
      }
      case Node::Kind::kBinary:
        return EvalBinary(n, out);
      case Node::Kind::kCeilDiv:
      case Node::Kind::kMin:
      case Node::Kind::kMax: {
        int64_t a, b;
        if (!Eval(*n.a, &a) || !Eval(*n.b, &b)) return false;
        if (n.kind == Node::Kind::kMin) {
          *out = a < b ? a : b;
        } else if (n.kind == Node::Kind::kMax) {
          *out = a > b ? a : b;
        } else if (b <= 0) {
          return Fail("ceil_div by a non-positive divisor",
                      absl::StrCat("ceil_div(", a, ", ", b, ") needs b > 0"));
        } else if (a < 0) {
          // Rounding a negative count up is ambiguous (toward zero or toward +inf?) and
          // always a manifest mistake: these are element, block and byte counts.
          return Fail(
              "ceil_div of a negative number",
              absl::StrCat("ceil_div(", a, ", ", b, ") needs a >= 0 (it rounds counts up)"));
        } else {
          *out = a / b + (a % b != 0 ? 1 : 0);  // no a + b - 1, which can overflow
        }
        return true;
      }
    }
    return Fail("internal error: unknown node");
  }

  // "<reason> in '<text>'[: <detail>]", e.g. "division by zero in 'hidden / VEC'".
  absl::Status Status() const {
    std::string msg = absl::StrCat(reason_, " in '", text_, "'");
    if (!detail_.empty()) absl::StrAppend(&msg, ": ", detail_);
    return absl::InvalidArgumentError(msg);
  }

 private:
  bool Fail(std::string reason, std::string detail = "") {
    reason_ = std::move(reason);
    detail_ = std::move(detail);
    return false;
  }

  bool EvalBinary(const Node& n, int64_t* out) {
    int64_t a;
    if (!Eval(*n.a, &a)) return false;
    // Short-circuit: the right side is not evaluated, so its errors do not count.
    if (n.op == Op::kAnd && a == 0) {
      *out = 0;
      return true;
    }
    if (n.op == Op::kOr && a != 0) {
      *out = 1;
      return true;
    }
    int64_t b;
    if (!Eval(*n.b, &b)) return false;
    auto overflow = [&] {
      return Fail("overflow", absl::StrCat(a, " ", OpText(n.op), " ", b, " does not fit in int64"));
    };
    switch (n.op) {
      case Op::kAdd:
        if (__builtin_add_overflow(a, b, out)) return overflow();
        return true;
      case Op::kSub:
        if (__builtin_sub_overflow(a, b, out)) return overflow();
        return true;
      case Op::kMul:
        if (__builtin_mul_overflow(a, b, out)) return overflow();
        return true;
      case Op::kDiv:
        if (b == 0) return Fail("division by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) return overflow();
        *out = a / b;  // truncates toward zero, as in C
        return true;
      case Op::kMod:
        if (b == 0) return Fail("modulo by zero");
        // INT64_MIN % -1 is 0, but the hardware divide traps on it.
        *out = b == -1 ? 0 : a % b;
        return true;
      case Op::kLt:
        *out = a < b;
        return true;
      case Op::kLe:
        *out = a <= b;
        return true;
      case Op::kGt:
        *out = a > b;
        return true;
      case Op::kGe:
        *out = a >= b;
        return true;
      case Op::kEq:
        *out = a == b;
        return true;
      case Op::kNe:
        *out = a != b;
        return true;
      case Op::kAnd:
      case Op::kOr:
        *out = b != 0;
        return true;
    }
    return Fail("internal error: unknown operator");
  }

  const Scope& scope_;
  const std::string& text_;
  std::string reason_;
  std::string detail_;
};

}  // namespace

Expression::Expression(std::string text, std::shared_ptr<const Node> root,
                       std::vector<std::string> identifiers)
    : text_(std::move(text)), root_(std::move(root)), identifiers_(std::move(identifiers)) {}

absl::StatusOr<Expression> Expression::Parse(absl::string_view text) {
  Parser parser(text);
  absl::StatusOr<std::unique_ptr<const Node>> root = parser.Run();
  if (!root.ok()) return root.status();
  return Expression(std::string(text), std::shared_ptr<const Node>(std::move(*root)),
                    parser.TakeIdentifiers());
}

absl::StatusOr<int64_t> Expression::Evaluate(const Scope& scope) const {
  Evaluator evaluator(scope, text_);
  int64_t value = 0;
  if (!evaluator.Eval(*root_, &value)) return evaluator.Status();
  return value;
}

}  // namespace ktune
