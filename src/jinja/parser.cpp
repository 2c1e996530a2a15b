// The Jinja parser (parser.h): recursive descent over the lexer's tokens.
#include "jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "jinja/lexer.h"

namespace strata::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string name)
      : t_(std::move(tokens)), name_(std::move(name)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().type != Token::Type::kEof) error(peek().line, "unexpected end tag");
    return body;
  }

 private:
  using T = Token::Type;

  [[noreturn]] void error(int line, std::string_view what) const {
    fail("{}: template line {}: {}", name_, line, what);
  }

  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).type == T::kOp && peek(ahead).text == op;
  }
  bool is_name(std::string_view n, size_t ahead = 0) const {
    return peek(ahead).type == T::kName && peek(ahead).text == n;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) error(peek().line, fmt::format("expected '{}', found '{}'", op, shown(peek())));
    ++i_;
  }
  void expect(T type, std::string_view what) {
    if (peek().type != type)
      error(peek().line, fmt::format("expected {}, found '{}'", what, shown(peek())));
    ++i_;
  }
  std::string expect_name() {
    if (peek().type != T::kName)
      error(peek().line, fmt::format("expected a name, found '{}'", shown(peek())));
    return next().text;
  }
  static std::string shown(const Token& t) {
    switch (t.type) {
      case T::kBlockEnd:
        return "%}";
      case T::kVarEnd:
        return "}}";
      case T::kEof:
        return "end of template";
      case T::kText:
        return "text";
      default:
        return t.text;
    }
  }

  // Statements until a block tag whose keyword is in `ends` (left unread).
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    for (;;) {
      const Token& tok = peek();
      if (tok.type == T::kEof) {
        for (const std::string& e : ends) {
          if (e.rfind("end", 0) == 0) error(tok.line, fmt::format("missing {{% {} %}}", e));
        }
        return body;
      }
      if (tok.type == T::kText) {
        auto s = stmt(Stmt::Kind::kText, tok.line);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (tok.type == T::kVarBegin) {
        ++i_;
        auto s = stmt(Stmt::Kind::kOutput, tok.line);
        s->expr = parse_expr();
        expect(T::kVarEnd, "}}");
        body.push_back(std::move(s));
      } else if (tok.type == T::kBlockBegin) {
        if (peek(1).type == T::kName && ends.count(peek(1).text)) return body;
        ++i_;
        body.push_back(parse_statement());
      } else {
        error(tok.line, fmt::format("unexpected '{}'", shown(tok)));
      }
    }
  }

  int64_t int_literal(const Token& t) const {
    int64_t v = 0;
    const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size()) {
      error(t.line, fmt::format("the integer {} is out of range", t.text));
    }
    return v;
  }

  // Expressions and statements nest at most kMaxDepth deep (the parser and
  // the renderer recurse on them).
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) {
        p.error(p.peek().line, fmt::format("nested deeper than {} levels", kMaxDepth));
      }
    }
    ~Nest() { --p.depth_; }
  };
  static constexpr int kMaxDepth = 200;

  static std::unique_ptr<Stmt> stmt(Stmt::Kind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  // After {% and the keyword `kw` (not yet read): reads "{% kw %}".
  void end_tag(std::string_view kw) {
    expect(T::kBlockBegin, "{%");
    if (!is_name(kw)) error(peek().line, fmt::format("expected {}", kw));
    ++i_;
    expect(T::kBlockEnd, "%}");
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Nest nest(*this);
    const Token& kw = peek();
    if (kw.type != T::kName)
      error(kw.line, fmt::format("expected a statement, found '{}'", shown(kw)));
    const std::string k = next().text;
    const int line = kw.line;
    if (k == "if") {
      auto s = stmt(Stmt::Kind::kIf, line);
      ExprPtr cond = parse_expr();
      expect(T::kBlockEnd, "%}");
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        expect(T::kBlockBegin, "{%");
        const std::string which = next().text;
        if (which == "elif") {
          cond = parse_expr();
          expect(T::kBlockEnd, "%}");
          continue;
        }
        expect(T::kBlockEnd, "%}");
        if (which == "else") {
          s->else_body = parse_body({"endif"});
          end_tag("endif");
        }
        return s;
      }
    }
    if (k == "for") {
      auto s = stmt(Stmt::Kind::kFor, line);
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++i_;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) error(peek().line, "expected 'in' in a for loop");
      ++i_;
      s->expr = parse_or_no_cond();
      if (is_name("if")) {
        ++i_;
        s->cond = parse_or_no_cond();
      }
      if (is_name("recursive")) error(peek().line, "recursive loops are not supported");
      expect(T::kBlockEnd, "%}");
      s->body = parse_body({"else", "endfor"});
      if (is_name("else", 1)) {
        end_tag("else");
        s->else_body = parse_body({"endfor"});
      }
      end_tag("endfor");
      return s;
    }
    if (k == "set") {
      if (peek().type == T::kName && peek(1).type == T::kBlockEnd) {
        auto s = stmt(Stmt::Kind::kSetBlock, line);
        s->targets.push_back(next().text);
        expect(T::kBlockEnd, "%}");
        s->body = parse_body({"endset"});
        end_tag("endset");
        return s;
      }
      auto s = stmt(Stmt::Kind::kSet, line);
      s->target = parse_target();
      expect_op("=");
      s->expr = parse_tuple_or_expr();
      expect(T::kBlockEnd, "%}");
      return s;
    }
    if (k == "macro") {
      auto s = stmt(Stmt::Kind::kMacro, line);
      s->name = expect_name();
      s->params = parse_params();
      expect(T::kBlockEnd, "%}");
      s->body = parse_body({"endmacro"});
      end_tag("endmacro");
      return s;
    }
    if (k == "call") {
      auto s = stmt(Stmt::Kind::kCallBlock, line);
      if (is_op("(")) s->params = parse_params();
      s->expr = parse_expr();
      if (s->expr->kind != Expr::Kind::kCall) error(line, "{% call %} needs a call");
      expect(T::kBlockEnd, "%}");
      s->body = parse_body({"endcall"});
      end_tag("endcall");
      return s;
    }
    if (k == "filter") {
      auto s = stmt(Stmt::Kind::kFilterBlock, line);
      ExprPtr e;
      do {
        if (e) ++i_;
        e = parse_filter(std::move(e), line);
      } while (is_op("|"));
      s->expr = std::move(e);
      expect(T::kBlockEnd, "%}");
      s->body = parse_body({"endfilter"});
      end_tag("endfilter");
      return s;
    }
    if (k == "generation") {
      auto s = stmt(Stmt::Kind::kGeneration, line);
      expect(T::kBlockEnd, "%}");
      s->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return s;
    }
    if (k == "break" || k == "continue") {
      auto s = stmt(k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
      expect(T::kBlockEnd, "%}");
      return s;
    }
    error(line, fmt::format("the statement '{}' is not supported", k));
  }

  // (a, b=default, ...)
  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!is_op(")")) {
      std::string n = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        ++i_;
        def = parse_expr();
      }
      params.emplace_back(std::move(n), std::move(def));
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
    return params;
  }

  // A set target: name, name.attr, or names separated by commas.
  ExprPtr parse_target() {
    const int line = peek().line;
    auto e = make(Expr::Kind::kName, line);
    e->name = expect_name();
    if (is_op(".")) {
      ++i_;
      auto a = make(Expr::Kind::kAttr, line);
      a->name = expect_name();
      a->kids.push_back(std::move(e));
      return a;
    }
    if (!is_op(",")) return e;
    auto t = make(Expr::Kind::kTuple, line);
    t->kids.push_back(std::move(e));
    while (is_op(",")) {
      ++i_;
      auto n = make(Expr::Kind::kName, line);
      n->name = expect_name();
      t->kids.push_back(std::move(n));
    }
    return t;
  }

  static ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  ExprPtr parse_tuple_or_expr() {
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, first->line);
    t->kids.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      t->kids.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr() {
    const Nest nest(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::kCond, line);
      c->kids.push_back(std::move(e));
      c->kids.push_back(parse_or());
      if (is_name("else")) {
        ++i_;
        c->kids.push_back(parse_expr());
      } else {
        c->kids.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or_no_cond() { return parse_or(); }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::kBinary, a->line);
    e->name = std::move(op);
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      ++i_;
      e = binary("or", std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      ++i_;
      e = binary("and", std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    const Nest nest(*this);
    if (is_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (peek().type == T::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, first->line);
        cmp->kids.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      ++i_;
      e = binary("~", std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      ++i_;
      e = binary("**", std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this);
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      auto e = make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      e->kids.push_back(parse_unary(false));
      return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
    }
    ExprPtr e = parse_postfix(parse_primary());
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.type) {
      case T::kString: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        std::string s = t.text;
        while (peek().type == T::kString) s += next().text;  // adjacent literals join
        e->value = Value::string(std::move(s));
        return e;
      }
      case T::kInt: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->value = Value::integer(int_literal(t));
        return e;
      }
      case T::kFloat: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case T::kName: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case T::kOp:
        if (t.text == "(") {
          if (is_op(")")) {
            ++i_;
            return make(Expr::Kind::kTuple, t.line);
          }
          ExprPtr first = parse_expr();
          if (is_op(")")) {
            ++i_;
            return first;
          }
          auto tup = make(Expr::Kind::kTuple, t.line);
          tup->kids.push_back(std::move(first));
          while (is_op(",")) {
            ++i_;
            if (is_op(")")) break;
            tup->kids.push_back(parse_expr());
          }
          expect_op(")");
          return tup;
        }
        if (t.text == "[") {
          auto l = make(Expr::Kind::kList, t.line);
          while (!is_op("]")) {
            l->kids.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          auto d = make(Expr::Kind::kDict, t.line);
          while (!is_op("}")) {
            d->kids.push_back(parse_expr());
            expect_op(":");
            d->kids.push_back(parse_expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return d;
        }
        break;
      default:
        break;
    }
    error(t.line, fmt::format("unexpected '{}' in an expression", shown(t)));
  }

  CallArgs parse_call_args() {
    CallArgs a;
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == T::kName && is_op("=", 1)) {
        std::string n = next().text;
        ++i_;
        a.kw.emplace_back(std::move(n), parse_expr());
      } else {
        if (is_op("*") || is_op("**"))
          error(peek().line, "*args and **kwargs in calls are not supported");
        a.pos.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++i_;
        auto a = make(Expr::Kind::kAttr, e->line);
        if (peek().type == T::kInt) {  // x.0 is x[0]
          a->kind = Expr::Kind::kItem;
          a->kids.push_back(std::move(e));
          auto idx = make(Expr::Kind::kLiteral, a->line);
          idx->value = Value::integer(int_literal(next()));
          a->kids.push_back(std::move(idx));
          e = std::move(a);
          continue;
        }
        a->name = expect_name();
        a->kids.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++i_;
        ExprPtr parts[3];
        int n_colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++i_;
            if (++n_colons > 2) error(peek().line, "a slice has at most two ':'");
            continue;
          }
          parts[n_colons] = parse_expr();
        }
        expect_op("]");
        if (n_colons == 0) {
          if (!parts[0]) error(e->line, "an empty subscript");
          auto it = make(Expr::Kind::kItem, e->line);
          it->kids.push_back(std::move(e));
          it->kids.push_back(std::move(parts[0]));
          e = std::move(it);
        } else {
          auto sl = make(Expr::Kind::kSlice, e->line);
          sl->kids.push_back(std::move(e));
          for (auto& p : parts) sl->kids.push_back(std::move(p));
          e = std::move(sl);
        }
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::kCall, e->line);
        c->args = parse_call_args();
        c->kids.push_back(std::move(e));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // expr | name(args) ; also used for filter blocks with a null input.
  ExprPtr parse_filter(ExprPtr input, int line) {
    auto f = make(Expr::Kind::kFilter, line);
    f->name = expect_name();
    while (is_op(".")) {  // dotted filter names
      ++i_;
      f->name += "." + expect_name();
    }
    if (is_op("(")) f->args = parse_call_args();
    f->kids.push_back(std::move(input));
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        const int line = next().line;
        e = parse_postfix(parse_filter(std::move(e), line));
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Kind::kTest, line);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = expect_name();
        if (is_op("(")) {
          t->args = parse_call_args();
        } else if (peek().type == T::kString || peek().type == T::kInt ||
                   peek().type == T::kFloat ||
                   (peek().type == T::kName && !is_name("and") && !is_name("or") &&
                    !is_name("if") && !is_name("else") && !is_name("is") && !is_name("in") &&
                    !is_name("not"))) {
          t->args.pos.push_back(parse_primary());  // `is divisibleby 3`, `is sameas false`
        }
        t->kids.push_back(std::move(e));
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  std::string name_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::string_view source, const std::string& name) {
  return Parser(lex(source, name), name).parse_all();
}

}  // namespace strata::jinja
