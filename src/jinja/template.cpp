// The Jinja interpreter (template.h): walks the syntax tree with a stack of
// scopes. As in jinja2, a for loop and a macro open a scope (a `set` inside
// stays inside; namespaces carry values out), `if` does not.
#include "jinja/template.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "core/error.h"
#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace strata::jinja {
namespace {

using Scope = std::unordered_map<std::string, Value>;

// The scope a call block opens holds its caller under a name no template
// can write, so only the macro it calls sees it (as `caller`).
constexpr const char* kCallerKey =
    "\x01"
    "caller";

struct LoopSignal {
  bool is_break;
};

class Renderer {
 public:
  // Namespaces are the only values changed after they are made, so every
  // reference cycle (a namespace holding itself) passes through one:
  // emptying them frees whatever a template built.
  ~Renderer() {
    for (const auto& ns : namespaces_) ns->items.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  explicit Renderer(const std::string& name) : name_(name) {
    cb_.filter = [this](std::string_view f, const Value& in, Args& a) {
      return apply_filter(f, in, a, cb_);
    };
    cb_.test = [](std::string_view t, const Value& in, Args& a) { return apply_test(t, in, a); };
  }

  void run(const Body& body, const Dict& variables) {
    scopes_.emplace_back();
    Scope& g = scopes_.back();
    g["range"] = Value::function([this](Args& a) { return range(a); });
    g["namespace"] = Value::function([this](Args& a) {
      Value ns = Value::dict_of({});
      ns.is_namespace = true;
      namespaces_.push_back(ns.dict);
      for (const Value& p : a.pos) {
        if (p.is_dict()) {
          for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
        }
      }
      for (const auto& [k, v] : a.kw) ns.dict->set(k, v);
      return ns;
    });
    g["dict"] = Value::function([](Args& a) {
      Dict d;
      for (const auto& [k, v] : a.kw) d.set(k, v);
      return Value::dict_of(std::move(d));
    });
    g["raise_exception"] = Value::function([](Args& a) -> Value {
      fail("{}: the template raised an error: {}", a.where,
           str(a.get(0, "message").value_or(Value::string(""))));
    });
    g["strftime_now"] = strftime_now_function();
    for (const auto& [k, v] : variables.items) g[k] = v;
    exec(body);
  }

  std::string out;

 private:
  std::string where(int line) const { return fmt::format("{}: template line {}", name_, line); }
  [[noreturn]] void error(int line, std::string_view what) const {
    fail("{}: template line {}: {}", name_, line, what);
  }

  Value lookup(const std::string& n) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(n);
  }

  Value range(Args& a) {
    int64_t start = 0, stop = 0, step = 1;
    auto num = [&](size_t i) {
      if (a.pos[i].kind != Value::Kind::kInt) fail("{}: range needs integers", a.where);
      return a.pos[i].i;
    };
    if (a.pos.size() == 1) {
      stop = num(0);
    } else if (a.pos.size() >= 2) {
      start = num(0);
      stop = num(1);
      if (a.pos.size() >= 3) step = num(2);
    }
    if (step == 0) fail("{}: range step must not be zero", a.where);
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
      out.push_back(Value::integer(k));
      if (out.size() > 100000) fail("{}: range is too long", a.where);
      if (__builtin_add_overflow(k, step, &k)) break;
    }
    return Value::list_of(std::move(out));
  }

  void exec(const Body& body) {
    for (const auto& s : body) exec(*s);
  }

  void exec(const Stmt& s) {
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::kText:
        append(s.text, s.line);
        return;
      case Stmt::Kind::kOutput:
        append(str(eval(*s.expr)), s.line);
        return;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (eval(*cond).truthy()) {
            exec(body);
            return;
          }
        }
        exec(s.else_body);
        return;
      case Stmt::Kind::kFor:
        exec_for(s);
        return;
      case Stmt::Kind::kSet:
        assign(*s.target, eval(*s.expr), s.line);
        return;
      case Stmt::Kind::kSetBlock:
        scopes_.back()[s.targets[0]] = Value::string(capture(s.body));
        return;
      case Stmt::Kind::kMacro:
        scopes_.back()[s.name] = make_macro(s, nullptr);
        return;
      case Stmt::Kind::kCallBlock: {
        Value caller = make_macro(s, &s);
        scopes_.emplace_back();
        scopes_.back()[kCallerKey] = caller;  // for the macro this call block calls
        const Value r = eval(*s.expr);
        scopes_.pop_back();
        out += str(r);
        return;
      }
      case Stmt::Kind::kFilterBlock: {
        Value text = Value::string(capture(s.body));
        out += str(apply_filter_chain(*s.expr, text));
        return;
      }
      case Stmt::Kind::kBreak:
      case Stmt::Kind::kContinue:
        if (loop_depth_ == 0) error(s.line, "break or continue outside a loop");
        throw LoopSignal{s.kind == Stmt::Kind::kBreak};
      case Stmt::Kind::kGeneration:
        exec(s.body);
        return;
    }
  }

  void append(const std::string& text, int line) {
    if (out.size() + text.size() > static_cast<size_t>(kMaxOutput)) {
      error(line, fmt::format("the output grows past {} bytes", kMaxOutput));
    }
    out += text;
  }

  std::string capture(const Body& body) {
    std::string saved;
    saved.swap(out);
    exec(body);
    std::string text;
    text.swap(out);
    out.swap(saved);
    return text;
  }

  Value apply_filter_chain(const Expr& f, const Value& input) {
    Value in = f.kids[0] ? apply_filter_chain(*f.kids[0], input) : input;
    Args a = eval_args(f.args, f.line);
    return apply_filter(f.name, in, a, cb_);
  }

  // A macro (or, with `call_block`, the caller of a call block) as a function.
  Value make_macro(const Stmt& s, const Stmt* call_block) {
    const Stmt* def = &s;
    const size_t depth = scopes_.size();
    return Value::function([this, def, call_block, depth](Args& a) {
      if (call_depth_ >= kMaxCallDepth) {
        fail("{}: macros nest deeper than {} calls (endless recursion?)", a.where, kMaxCallDepth);
      }
      struct Depth {
        int& d;
        explicit Depth(int& x) : d(x) { ++d; }
        ~Depth() { --d; }
      } guard(call_depth_);
      const auto& params = def->params;
      Scope local;
      for (size_t k = 0; k < params.size(); ++k) {
        const auto v = a.get(k, params[k].first);
        local[params[k].first] = v                  ? *v
                                 : params[k].second ? eval(*params[k].second)
                                                    : Value::undefined(params[k].first);
      }
      if (a.pos.size() > params.size())
        fail("{}: {} takes {} arguments", a.where, call_block ? "caller" : def->name,
             params.size());
      // The macro sees the scopes that were there when it was defined.
      const size_t keep = std::min(depth, scopes_.size());
      std::vector<Scope> saved(scopes_.begin() + static_cast<std::ptrdiff_t>(keep), scopes_.end());
      // `caller` is defined in a macro only when a call block called it.
      const auto from_call_block = scopes_.back().find(kCallerKey);
      const Value caller =
          from_call_block == scopes_.back().end() ? Value::undefined() : from_call_block->second;
      scopes_.resize(keep);
      if (!call_block && !caller.is_undefined()) local["caller"] = caller;
      scopes_.push_back(std::move(local));
      const int saved_loop = loop_depth_;
      loop_depth_ = 0;
      std::string text = capture(def->body);
      loop_depth_ = saved_loop;
      scopes_.pop_back();
      scopes_.insert(scopes_.end(), saved.begin(), saved.end());
      return Value::string(std::move(text));
    });
  }

  void assign(const Expr& target, const Value& v, int line) {
    switch (target.kind) {
      case Expr::Kind::kName:
        scopes_.back()[target.name] = v;
        return;
      case Expr::Kind::kAttr: {
        const Value ns = eval(*target.kids[0]);
        if (!ns.is_dict() || !ns.is_namespace) {
          error(line,
                fmt::format(
                    "cannot assign the attribute '{}' of a {}; only a namespace() takes attributes",
                    target.name, kind_name(ns)));
        }
        ns.dict->set(target.name, v);
        return;
      }
      case Expr::Kind::kTuple: {
        const List items = iterate(v, where(line));
        if (items.size() != target.kids.size()) {
          error(line, fmt::format("cannot unpack {} values into {} names", items.size(),
                                  target.kids.size()));
        }
        for (size_t k = 0; k < items.size(); ++k) assign(*target.kids[k], items[k], line);
        return;
      }
      default:
        error(line, "cannot assign to this target");
    }
  }

  void exec_for(const Stmt& s) {
    const Value seq = eval(*s.expr);
    List items = iterate(seq, where(s.line));
    scopes_.emplace_back();
    if (s.cond) {  // the filter sees each item under the loop's names
      List kept;
      for (const Value& it : items) {
        bind_targets(s, it);
        if (eval(*s.cond).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    ++loop_depth_;
    for (int64_t k = 0; k < n; ++k) {
      if (++iterations_ > kMaxIterations) {
        error(s.line,
              fmt::format("the template runs more than {} loop iterations", kMaxIterations));
      }
      bind_targets(s, items[static_cast<size_t>(k)]);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem",
               k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem"));
      loop.set("nextitem",
               k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem"));
      loop.set("cycle", Value::function([k](Args& a) {
                 if (a.pos.empty()) fail("{}: loop.cycle needs arguments", a.where);
                 return a.pos[static_cast<size_t>(k) % a.pos.size()];
               }));
      scopes_.back()["loop"] = Value::dict_of(std::move(loop));
      try {
        exec(s.body);
      } catch (const LoopSignal& sig) {
        if (sig.is_break) break;
      }
    }
    --loop_depth_;
    if (n == 0) exec(s.else_body);
    scopes_.pop_back();
  }

  void bind_targets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = item;
      return;
    }
    const List parts = iterate(item, where(s.line));
    if (parts.size() != s.targets.size()) {
      error(s.line, fmt::format("cannot unpack {} values into {} loop names", parts.size(),
                                s.targets.size()));
    }
    for (size_t k = 0; k < parts.size(); ++k) scopes_.back()[s.targets[k]] = parts[k];
  }

  Args eval_args(const CallArgs& ca, int line) {
    Args a;
    a.where = where(line);
    for (const auto& p : ca.pos) a.pos.push_back(eval(*p));
    for (const auto& [k, e] : ca.kw) a.kw.emplace_back(k, eval(*e));
    return a;
  }

  Value slice(const Value& obj, const Expr& e) {
    auto bound = [&](int k) -> std::optional<int64_t> {
      if (!e.kids[static_cast<size_t>(k)]) return std::nullopt;
      const Value v = eval(*e.kids[static_cast<size_t>(k)]);
      if (v.is_none()) return std::nullopt;
      if (v.kind != Value::Kind::kInt) error(e.line, "slice bounds must be integers");
      return v.i;
    };
    const auto b0 = bound(1), b1 = bound(2), st = bound(3);
    const int64_t step = st.value_or(1);
    if (step == 0) error(e.line, "slice step cannot be zero");
    std::u32string u;
    int64_t n;
    if (obj.is_string()) {
      u = to_u32(obj.s);
      n = static_cast<int64_t>(u.size());
    } else if (obj.is_list()) {
      n = static_cast<int64_t>(obj.list->size());
    } else {
      error(e.line, fmt::format("cannot slice a {}", kind_name(obj)));
    }
    auto clamp = [&](std::optional<int64_t> b, int64_t def) {
      if (!b) return def;
      const int64_t x = *b < -n ? -n - 1 : *b < 0 ? *b + n : *b;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(b0, step > 0 ? 0 : n - 1), stop = clamp(b1, step > 0 ? n : -1);
    std::u32string us;
    List ls;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (obj.is_string()) {
        us += u[static_cast<size_t>(k)];
      } else {
        ls.push_back((*obj.list)[static_cast<size_t>(k)]);
      }
    }
    return obj.is_string() ? Value::string(to_utf8(us)) : Value::list_of(std::move(ls));
  }

  Value arith(const std::string& op, const Value& x, const Value& y, int line) {
    using K = Value::Kind;
    if (op == "~") return Value::string(str(x) + str(y));
    if (op == "+") {
      if (x.is_string() && y.is_string()) return Value::string(x.s + y.s);
      if (x.is_list() && y.is_list()) {
        List l = *x.list;
        l.insert(l.end(), y.list->begin(), y.list->end());
        return Value::list_of(std::move(l));
      }
    }
    if (op == "*" && ((x.is_string() || x.is_list()) && y.kind == K::kInt)) {
      const int64_t unit =
          x.is_string() ? static_cast<int64_t>(x.s.size()) : static_cast<int64_t>(x.list->size());
      // A string up to the output's size; a list up to the items a loop may
      // visit (copying millions of values is a hang of its own).
      const int64_t limit = x.is_string() ? kMaxOutput : kMaxIterations;
      if (y.i > 0 && unit > 0 && y.i > limit / unit) {
        error(line, fmt::format("repeating {} items {} times is too large", unit, y.i));
      }
      // Nothing repeated any number of times is nothing (no loop over a huge count).
      const int64_t times = unit > 0 ? y.i : 0;
      if (x.is_string()) {
        std::string s;
        for (int64_t k = 0; k < times; ++k) s += x.s;
        return Value::string(s);
      }
      List l;
      for (int64_t k = 0; k < times; ++k) l.insert(l.end(), x.list->begin(), x.list->end());
      return Value::list_of(std::move(l));
    }
    if (!x.is_number() || !y.is_number()) {
      error(line, fmt::format("unsupported operand types for {}: '{}' and '{}'", op, kind_name(x),
                              kind_name(y)));
    }
    const bool ints = x.kind != K::kFloat && y.kind != K::kFloat;
    const int64_t a = x.kind == K::kBool ? x.b : x.i, b = y.kind == K::kBool ? y.b : y.i;
    const double fa = x.as_double(), fb = y.as_double();
    int64_t r = 0;
    auto overflow = [&]() -> Value {
      error(line, fmt::format("integer overflow in {} {} {}", a, op, b));
    };
    if (op == "+") {
      if (!ints) return Value::number(fa + fb);
      return __builtin_add_overflow(a, b, &r) ? overflow() : Value::integer(r);
    }
    if (op == "-") {
      if (!ints) return Value::number(fa - fb);
      return __builtin_sub_overflow(a, b, &r) ? overflow() : Value::integer(r);
    }
    if (op == "*") {
      if (!ints) return Value::number(fa * fb);
      return __builtin_mul_overflow(a, b, &r) ? overflow() : Value::integer(r);
    }
    if (op == "/") {
      if (fb == 0) error(line, "division by zero");
      return Value::number(fa / fb);
    }
    if (op == "//" || op == "%") {
      if (fb == 0) error(line, "division by zero");
      if (ints) {
        if (a == INT64_MIN && b == -1) return overflow();
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return Value::integer(op == "//" ? q : m);
      }
      const double q = std::floor(fa / fb);
      return Value::number(op == "//" ? q : fa - q * fb);
    }
    if (op == "**") {
      if (ints && b >= 0) {
        int64_t acc = 1, base = a;
        for (int64_t e = b; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow();
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow();
        }
        return Value::integer(acc);
      }
      return Value::number(std::pow(fa, fb));
    }
    error(line, fmt::format("unknown operator {}", op));
  }

  bool contains(const Value& container, const Value& item, int line) {
    if (container.is_string()) {
      if (!item.is_string()) error(line, "'in <string>' needs a string on the left");
      return container.s.find(item.s) != std::string::npos;
    }
    if (container.is_dict()) return item.is_string() && container.dict->find(item.s);
    for (const Value& x : iterate(container, where(line))) {
      if (equals(x, item)) return true;
    }
    return false;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& k : e.kids) items.push_back(eval(*k));
        return e.kind == Expr::Kind::kTuple ? Value::tuple_of(std::move(items))
                                            : Value::list_of(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.kids.size(); k += 2)
          d.set(str(eval(*e.kids[k])), eval(*e.kids[k + 1]));
        return Value::dict_of(std::move(d));
      }
      case Expr::Kind::kAttr:
        return get_attr(eval(*e.kids[0]), e.name);
      case Expr::Kind::kItem: {
        const Value obj = eval(*e.kids[0]);
        const Value key = eval(*e.kids[1]);
        Value v = get_item(obj, key);
        if (v.is_undefined() && key.is_string() && !obj.is_dict()) v = get_attr(obj, key.s);
        return v;
      }
      case Expr::Kind::kSlice:
        return slice(eval(*e.kids[0]), e);
      case Expr::Kind::kCall: {
        const Value f = eval(*e.kids[0]);
        Args a = eval_args(e.args, e.line);
        if (f.kind != Value::Kind::kFunction) {
          const std::string what =
              e.kids[0]->kind == Expr::Kind::kName || e.kids[0]->kind == Expr::Kind::kAttr
                  ? "'" + e.kids[0]->name + "'"
                  : "the value";
          error(e.line, fmt::format("{} is {}, not something to call", what,
                                    f.is_undefined() ? "undefined" : kind_name(f)));
        }
        return (*f.fn)(a);
      }
      case Expr::Kind::kFilter: {
        const Value in = eval(*e.kids[0]);
        Args a = eval_args(e.args, e.line);
        return apply_filter(e.name, in, a, cb_);
      }
      case Expr::Kind::kTest: {
        const Value in = eval(*e.kids[0]);
        Args a = eval_args(e.args, e.line);
        return Value::boolean(apply_test(e.name, in, a) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.kids[0]);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (!v.is_number())
          error(e.line, fmt::format("bad operand type for unary {}: '{}'", e.name, kind_name(v)));
        if (e.name == "+") return v;
        if (v.kind == Value::Kind::kInt && v.i == INT64_MIN) {
          error(e.line, "integer overflow in unary -");
        }
        return v.kind == Value::Kind::kFloat
                   ? Value::number(-v.f)
                   : Value::integer(-(v.kind == Value::Kind::kBool ? v.b : v.i));
      }
      case Expr::Kind::kBinary: {
        if (e.name == "and") {
          const Value a = eval(*e.kids[0]);
          return a.truthy() ? eval(*e.kids[1]) : a;
        }
        if (e.name == "or") {
          const Value a = eval(*e.kids[0]);
          return a.truthy() ? a : eval(*e.kids[1]);
        }
        return arith(e.name, eval(*e.kids[0]), eval(*e.kids[1]), e.line);
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.kids[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          const Value right = eval(*e.kids[k + 1]);
          const std::string& op = e.ops[k];
          bool ok;
          if (op == "==")
            ok = equals(left, right);
          else if (op == "!=")
            ok = !equals(left, right);
          else if (op == "in")
            ok = contains(right, left, e.line);
          else if (op == "not in")
            ok = !contains(right, left, e.line);
          else {
            const int c = compare(left, right, where(e.line));
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value::boolean(false);
          left = right;
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCond:
        if (eval(*e.kids[1]).truthy()) return eval(*e.kids[0]);
        return e.kids[2] ? eval(*e.kids[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  const std::string& name_;
  std::vector<Scope> scopes_;
  Callbacks cb_;
  int loop_depth_ = 0;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;

 public:
  int line_ = 0;  // of the statement being run, for errors raised without one

 private:
  static constexpr int kMaxCallDepth = 64;
  static constexpr int64_t kMaxIterations = 100000;
  static constexpr int64_t kMaxOutput = 16 << 20;
};

}  // namespace

Value strftime_now_function(std::optional<std::time_t> pinned) {
  return Value::function([pinned](Args& a) {
    const std::string f = str(a.get(0, "format").value_or(Value::string("")));
    const std::time_t t = pinned ? *pinned : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
}

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), body_(std::make_shared<Body>(parse(source, name_))) {}

std::string Template::render(const Dict& variables) const {
  Renderer r(name_);
  try {
    r.run(*body_, variables);
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind(name_ + ": ", 0) == 0) throw;
    fail("{}: template line {}: {}", name_, r.line_, e.what());
  }
  return std::move(r.out);
}

}  // namespace strata::jinja
