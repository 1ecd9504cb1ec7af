// Template segments and tokens (lexer.h) -> AST: a recursive descent parser reads each
// tag's tokens with Jinja2's operator precedence, and statements nest into bodies.
#include <fmt/format.h>

#include <cctype>
#include <optional>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace kvgate::chat {
namespace {

struct SyntaxError {
  std::string message;
};

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : t_(std::move(tokens)), line_(line) {}

  const Token& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == Token::kEnd; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::kName && Peek(ahead).text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    ++p_;
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    ++p_;
    return true;
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail(fmt::format("expected '{}'", op));
  }
  std::string ExpectName() {
    if (Peek().kind != Token::kName) Fail("expected a name");
    return t_[p_++].text;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    throw SyntaxError{fmt::format("line {}: {} near '{}'", line_, what, Peek().text)};
  }

  NodePtr Make(NodeKind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line_;
    return n;
  }

  // expr := or ['if' or ['else' expr]]
  NodePtr Expr() {
    NodePtr then = Or();
    if (!IsName("if")) return then;
    ++p_;
    auto n = Make(NodeKind::kTernary);
    n->a.resize(3);
    n->a[0] = std::move(then);
    n->a[1] = Or();
    if (SkipName("else")) n->a[2] = Expr();
    return n;
  }
  // A ternary-free expression (for `for ... in X if cond`).
  NodePtr Or() {
    NodePtr l = And();
    while (SkipName("or")) l = Binary("or", std::move(l), And());
    return l;
  }
  NodePtr And() {
    NodePtr l = Not();
    while (SkipName("and")) l = Binary("and", std::move(l), Not());
    return l;
  }
  NodePtr Not() {
    if (SkipName("not")) {
      auto n = Make(NodeKind::kUnary);
      n->text = "not";
      n->a.push_back(Not());
      return n;
    }
    return Compare();
  }
  NodePtr Compare() {
    NodePtr l = Math1();
    for (;;) {
      static constexpr std::string_view kCmp[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool done = true;
      for (std::string_view op : kCmp) {
        if (SkipOp(op)) {
          l = Binary(std::string(op), std::move(l), Math1());
          done = false;
          break;
        }
      }
      if (!done) continue;
      if (SkipName("in")) {
        l = Binary("in", std::move(l), Math1());
      } else if (IsName("not") && IsName("in", 1)) {
        p_ += 2;
        l = Binary("not in", std::move(l), Math1());
      } else {
        return l;
      }
    }
  }
  NodePtr Math1() {
    NodePtr l = Concat();
    for (;;) {
      if (IsOp("+") || IsOp("-")) {
        const std::string op = t_[p_++].text;
        l = Binary(op, std::move(l), Concat());
      } else {
        return l;
      }
    }
  }
  NodePtr Concat() {
    NodePtr l = Math2();
    while (SkipOp("~")) l = Binary("~", std::move(l), Math2());
    return l;
  }
  NodePtr Math2() {
    NodePtr l = Pow();
    for (;;) {
      if (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
        const std::string op = t_[p_++].text;
        l = Binary(op, std::move(l), Pow());
      } else {
        return l;
      }
    }
  }
  NodePtr Pow() {
    NodePtr l = Unary();
    while (SkipOp("**")) l = Binary("**", std::move(l), Unary());
    return l;
  }
  NodePtr Unary() {
    if (IsOp("-") || IsOp("+")) {
      auto n = Make(NodeKind::kUnary);
      n->text = t_[p_++].text;
      n->a.push_back(Unary());
      return n;
    }
    NodePtr n = Postfix(Primary());
    return FilterTest(std::move(n));
  }
  NodePtr FilterTest(NodePtr n) {
    for (;;) {
      if (SkipOp("|")) {
        auto f = Make(NodeKind::kFilter);
        f->text = ExpectName();
        while (SkipOp(".")) {
          f->text += '.';
          f->text += ExpectName();
        }
        f->a.push_back(std::move(n));
        if (IsOp("(")) Args(*f);
        n = std::move(f);
      } else if (SkipName("is")) {
        auto t = Make(NodeKind::kTest);
        t->negated = SkipName("not");
        t->text = ExpectName();
        t->a.push_back(std::move(n));
        if (IsOp("(")) {
          Args(*t);
        } else if (!AtEnd() &&
                   (Peek().kind == Token::kString || Peek().kind == Token::kInt ||
                    Peek().kind == Token::kFloat ||
                    (Peek().kind == Token::kName && !IsName("and") && !IsName("or") &&
                     !IsName("else") && !IsName("if") && !IsName("in") && !IsName("not")))) {
          t->children.push_back(Postfix(Primary()));  // `is equalto 3`, `is sameas x`
        }
        n = std::move(t);
      } else {
        return n;
      }
    }
  }
  void Args(Node& call) {
    ExpectOp("(");
    while (!SkipOp(")")) {
      if (Peek().kind == Token::kName && IsOp("=", 1)) {
        std::string name = ExpectName();
        ExpectOp("=");
        call.kwargs.emplace_back(std::move(name), Expr());
      } else {
        call.children.push_back(Expr());
      }
      if (!IsOp(")")) ExpectOp(",");
    }
  }
  NodePtr Postfix(NodePtr n) {
    for (;;) {
      if (SkipOp(".")) {
        auto a = Make(NodeKind::kAttr);
        if (Peek().kind == Token::kInt) {
          a = Make(NodeKind::kItem);
          a->a.push_back(std::move(n));
          auto lit = Make(NodeKind::kLiteral);
          lit->value = Value::Int(t_[p_++].integer);
          a->a.push_back(std::move(lit));
          n = std::move(a);
          continue;
        }
        a->text = ExpectName();
        a->a.push_back(std::move(n));
        n = std::move(a);
      } else if (SkipOp("[")) {
        NodePtr start, stop, step;
        bool slice = false;
        if (!IsOp(":")) start = Expr();
        if (SkipOp(":")) {
          slice = true;
          if (!IsOp(":") && !IsOp("]")) stop = Expr();
          if (SkipOp(":") && !IsOp("]")) step = Expr();
        }
        ExpectOp("]");
        auto s = Make(slice ? NodeKind::kSlice : NodeKind::kItem);
        s->a.push_back(std::move(n));
        s->a.push_back(std::move(start));
        if (slice) {
          s->a.push_back(std::move(stop));
          s->a.push_back(std::move(step));
        }
        n = std::move(s);
      } else if (IsOp("(")) {
        auto c = Make(NodeKind::kCall);
        c->a.push_back(std::move(n));
        Args(*c);
        n = std::move(c);
      } else {
        return n;
      }
    }
  }
  NodePtr Primary() {
    const Token& tok = Peek();
    if (tok.kind == Token::kString) {
      auto n = Make(NodeKind::kLiteral);
      std::string s = t_[p_++].text;
      while (Peek().kind == Token::kString) s += t_[p_++].text;  // adjacent literals join
      n->text = std::move(s);  // the node keeps the characters the literal views
      n->value = Value::StringView(n->text);
      return n;
    }
    if (tok.kind == Token::kInt || tok.kind == Token::kFloat) {
      auto n = Make(NodeKind::kLiteral);
      n->value = tok.kind == Token::kInt ? Value::Int(tok.integer) : Value::Float(tok.number);
      ++p_;
      return n;
    }
    if (tok.kind == Token::kName) {
      const std::string name = t_[p_++].text;
      auto n = Make(NodeKind::kLiteral);
      if (name == "true" || name == "True") {
        n->value = Value::Bool(true);
      } else if (name == "false" || name == "False") {
        n->value = Value::Bool(false);
      } else if (name == "none" || name == "None") {
        n->value = Value::None();
      } else {
        n = Make(NodeKind::kName);
        n->text = name;
      }
      return n;
    }
    if (SkipOp("(")) {
      if (SkipOp(")")) {
        auto empty = Make(NodeKind::kList);
        empty->text = "tuple";
        return empty;
      }
      NodePtr first = Expr();
      if (SkipOp(")")) return first;
      auto tuple = Make(NodeKind::kList);
      tuple->text = "tuple";
      tuple->children.push_back(std::move(first));
      while (SkipOp(",")) {
        if (IsOp(")")) break;
        tuple->children.push_back(Expr());
      }
      ExpectOp(")");
      return tuple;
    }
    if (SkipOp("[")) {
      auto list = Make(NodeKind::kList);
      while (!SkipOp("]")) {
        list->children.push_back(Expr());
        if (!IsOp("]")) ExpectOp(",");
      }
      return list;
    }
    if (SkipOp("{")) {
      auto dict = Make(NodeKind::kDict);
      while (!SkipOp("}")) {
        dict->children.push_back(Expr());
        ExpectOp(":");
        dict->children.push_back(Expr());
        if (!IsOp("}")) ExpectOp(",");
      }
      return dict;
    }
    Fail("unexpected token");
  }
  NodePtr Binary(std::string op, NodePtr l, NodePtr r) {
    auto n = Make(NodeKind::kBinary);
    for (const auto& [name, code] : kBinaryOps) {
      if (name == op) n->op = code;
    }
    n->text = std::move(op);
    n->a.push_back(std::move(l));
    n->a.push_back(std::move(r));
    return n;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int line_;
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segments) : s_(std::move(segments)) {}

  NodePtr ParseAll() {
    std::string end;
    NodePtr body = Body({}, &end);
    if (pos_ < s_.size())
      throw SyntaxError{fmt::format("line {}: unexpected '{}'", s_[pos_].line, end)};
    return body;
  }

 private:
  static std::string Keyword(const std::string& content) {
    size_t b = 0;
    while (b < content.size() && IsSpace(content[b])) ++b;
    size_t e = b;
    while (e < content.size() &&
           (std::isalnum(static_cast<unsigned char>(content[e])) || content[e] == '_'))
      ++e;
    return content.substr(b, e - b);
  }

  ExprParser Tokens(const Segment& seg, size_t skip_keyword) {
    std::vector<Token> tokens;
    if (Status s = Tokenize(seg.content, seg.line, tokens); !s.ok()) throw SyntaxError{s.message()};
    ExprParser p(std::move(tokens), seg.line);
    for (size_t i = 0; i < skip_keyword; ++i) p.ExpectName();
    return p;
  }

  // Parses statements until one of `terminators` (a block tag keyword); returns it in `end`.
  NodePtr Body(const std::vector<std::string>& terminators, std::string* end) {
    auto body = std::make_unique<Node>();
    body->kind = NodeKind::kBody;
    while (pos_ < s_.size()) {
      const Segment& seg = s_[pos_];
      if (seg.kind == Segment::kText) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kText;
        n->text = seg.content;
        body->children.push_back(std::move(n));
        ++pos_;
        continue;
      }
      if (seg.kind == Segment::kExpr) {
        ExprParser p = Tokens(seg, 0);
        auto n = p.Make(NodeKind::kOutput);
        n->a.push_back(p.Expr());
        if (!p.AtEnd()) p.Fail("unexpected token after expression");
        body->children.push_back(std::move(n));
        ++pos_;
        continue;
      }
      const std::string kw = Keyword(seg.content);
      for (const std::string& t : terminators) {
        if (kw == t) {
          *end = kw;
          return body;
        }
      }
      body->children.push_back(Statement(kw));
    }
    if (!terminators.empty()) {
      throw SyntaxError{fmt::format("unexpected end of template, expected '{}'", terminators[0])};
    }
    return body;
  }

  NodePtr Statement(const std::string& kw) {
    const Segment& seg = s_[pos_];
    ExprParser p = Tokens(seg, 1);
    ++pos_;
    if (kw == "if") {
      auto n = p.Make(NodeKind::kIf);
      n->children.push_back(p.Expr());
      std::string end;
      for (;;) {
        n->children.push_back(Body({"elif", "else", "endif"}, &end));
        const Segment& tag = s_[pos_];
        ExprParser q = Tokens(tag, 1);
        ++pos_;
        if (end == "elif") {
          n->children.push_back(q.Expr());
          continue;
        }
        if (end == "else") {
          n->children.push_back(Body({"endif"}, &end));
          ++pos_;
        }
        break;
      }
      return n;
    }
    if (kw == "for") {
      auto n = p.Make(NodeKind::kFor);
      n->names.push_back(p.ExpectName());
      while (p.SkipOp(",")) n->names.push_back(p.ExpectName());
      if (!p.SkipName("in")) p.Fail("expected 'in'");
      n->a.resize(4);
      n->a[0] = p.Or();
      if (p.SkipName("if")) n->a[1] = p.Expr();
      p.SkipName("recursive");
      std::string end;
      n->a[2] = Body({"else", "endfor"}, &end);
      ++pos_;
      if (end == "else") {
        n->a[3] = Body({"endfor"}, &end);
        ++pos_;
      }
      return n;
    }
    if (kw == "set") {
      auto n = p.Make(NodeKind::kSet);
      n->names.push_back(p.ExpectName());
      if (p.SkipOp(".")) n->names.push_back(p.ExpectName());
      n->a.resize(2);
      if (p.SkipOp("=")) {
        NodePtr value = p.Expr();
        if (p.SkipOp(",")) {  // set a = x, y  (a tuple)
          auto tuple = p.Make(NodeKind::kList);
          tuple->text = "tuple";
          tuple->children.push_back(std::move(value));
          do {
            tuple->children.push_back(p.Expr());
          } while (p.SkipOp(","));
          value = std::move(tuple);
        }
        n->a[0] = std::move(value);
      } else {
        std::string end;
        n->a[1] = Body({"endset"}, &end);
        ++pos_;
      }
      return n;
    }
    if (kw == "macro") {
      auto n = p.Make(NodeKind::kMacro);
      n->text = p.ExpectName();
      p.ExpectOp("(");
      while (!p.SkipOp(")")) {
        n->names.push_back(p.ExpectName());
        n->children.push_back(p.SkipOp("=") ? p.Expr() : nullptr);
        if (!p.IsOp(")")) p.ExpectOp(",");
      }
      std::string end;
      n->a.push_back(Body({"endmacro"}, &end));
      ++pos_;
      return n;
    }
    if (kw == "call") {
      auto n = p.Make(NodeKind::kCallBlock);
      n->a.push_back(p.Expr());
      std::string end;
      n->a.push_back(Body({"endcall"}, &end));
      ++pos_;
      return n;
    }
    if (kw == "filter") {
      auto n = p.Make(NodeKind::kFilterBlock);
      auto f = p.Make(NodeKind::kFilter);
      f->text = p.ExpectName();
      f->a.push_back(nullptr);
      if (p.IsOp("(")) p.Args(*f);
      n->a.push_back(std::move(f));
      std::string end;
      n->a.push_back(Body({"endfilter"}, &end));
      ++pos_;
      return n;
    }
    if (kw == "break") return p.Make(NodeKind::kBreak);
    if (kw == "continue") return p.Make(NodeKind::kContinue);
    if (kw == "generation" || kw == "endgeneration") {  // transformers' marker tags: no output
      auto n = p.Make(NodeKind::kBody);
      return n;
    }
    throw SyntaxError{fmt::format("line {}: unknown tag '{}'", seg.line, kw)};
  }

  std::vector<Segment> s_;
  size_t pos_ = 0;
};

}  // namespace

Status ParseTemplate(std::string_view source, NodePtr* root) {
  // Jinja2's default (keep_trailing_newline=False): one trailing newline is dropped.
  if (source.ends_with("\r\n")) {
    source.remove_suffix(2);
  } else if (source.ends_with('\n')) {
    source.remove_suffix(1);
  }
  std::vector<Segment> segments;
  if (Status s = SplitSegments(source, segments); !s.ok()) {
    return Status::Error(fmt::format("template syntax error: {}", s.message()));
  }
  try {
    *root = Parser(std::move(segments)).ParseAll();
  } catch (const SyntaxError& e) {
    return Status::Error(fmt::format("template syntax error: {}", e.message));
  }
  return Status::Ok();
}

}  // namespace kvgate::chat
