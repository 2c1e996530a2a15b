// Jinja filters, tests and methods (builtins.h).
#include "jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace strata::jinja {
namespace {

const char* kSpace = " \t\n\r\f\v";

std::string strip(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
  }
  if (right) {
    while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
  }
  return std::string(s.substr(b, e - b));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    c = static_cast<char>(prev_alpha ? std::tolower(static_cast<unsigned char>(c))
                                     : std::toupper(static_cast<unsigned char>(c)));
    prev_alpha = alpha;
  }
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  if (old.empty()) {  // Python inserts `with` between every character
    const std::u32string u = to_u32(s);
    for (size_t k = 0; k < u.size(); ++k) {
      if (count < 0 || n++ < count) out += with;
      out += to_utf8(std::u32string_view(&u[k], 1));
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  for (;;) {
    const size_t at = s.find(old, pos);
    if (at == std::string::npos || (count >= 0 && n >= count)) break;
    out += s.substr(pos, at - pos) + with;
    pos = at + old.size();
    ++n;
  }
  return out + s.substr(pos);
}

List split(const std::string& s, const std::optional<Value>& sep, int64_t maxsplit,
           bool from_right) {
  List out;
  if (!sep || sep->is_none()) {  // runs of white space, ends ignored
    std::vector<std::string> words;
    size_t p = 0;
    while (p < s.size()) {
      while (p < s.size() && std::string_view(kSpace).find(s[p]) != std::string_view::npos) ++p;
      if (p >= s.size()) break;
      size_t e = p;
      while (e < s.size() && std::string_view(kSpace).find(s[e]) == std::string_view::npos) ++e;
      words.push_back(s.substr(p, e - p));
      p = e;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      // Rare: rejoin the tail the way Python keeps it (approximately: single spaces).
      std::vector<std::string> cut(words.begin(), words.begin() + maxsplit);
      std::string rest;
      for (size_t k = static_cast<size_t>(maxsplit); k < words.size(); ++k)
        rest += (rest.empty() ? "" : " ") + words[k];
      cut.push_back(rest);
      words = cut;
    }
    for (auto& w : words) out.push_back(Value::string(w));
    return out;
  }
  const std::string d = str(*sep);
  if (d.empty()) fail("split: empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t p = 0;
    for (;;) {
      const size_t at = s.find(d, p);
      if (at == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
        parts.push_back(s.substr(p));
        break;
      }
      parts.push_back(s.substr(p, at - p));
      p = at + d.size();
    }
  } else {
    size_t e = s.size();
    for (;;) {
      const size_t at = e >= d.size() ? s.rfind(d, e - d.size()) : std::string::npos;
      if (at == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
        parts.push_back(s.substr(0, e));
        break;
      }
      parts.push_back(s.substr(at + d.size(), e - at - d.size()));
      e = at;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(p));
  return out;
}

int64_t int_arg(const Args& a, size_t i, std::string_view name, int64_t def) {
  const auto v = a.get(i, name);
  if (!v || v->is_none()) return def;
  if (v->kind != Value::Kind::kInt) fail("{}: {} must be an integer", a.where, name);
  return v->i;
}

Value string_method(const std::string& s, const std::string& name, Args& a) {
  auto arg_str = [&](size_t i, std::string_view n) -> std::optional<std::string> {
    const auto v = a.get(i, n);
    if (!v || v->is_none()) return std::nullopt;
    return str(*v);
  };
  if (name == "startswith" || name == "endswith") {
    const auto v = a.get(0, "prefix");
    if (!v) fail("{}: {} needs an argument", a.where, name);
    std::vector<std::string> options;
    if (v->is_list()) {
      for (const Value& o : *v->list) options.push_back(str(o));
    } else {
      options.push_back(str(*v));
    }
    for (const auto& o : options) {
      if (name == "startswith"
              ? s.rfind(o, 0) == 0
              : (s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)) {
        return Value::boolean(true);
      }
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const std::string chars = arg_str(0, "chars").value_or(kSpace);
    return Value::string(strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    return Value::list_of(
        split(s, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    List out;
    size_t p = 0;
    while (p < s.size()) {
      size_t e = s.find('\n', p);
      if (e == std::string::npos) e = s.size();
      std::string l = s.substr(p, e - p);
      if (!l.empty() && l.back() == '\r') l.pop_back();
      out.push_back(Value::string(l));
      p = e + 1;
    }
    return Value::list_of(std::move(out));
  }
  if (name == "lower") return Value::string(lower(s));
  if (name == "upper") return Value::string(upper(s));
  if (name == "title") return Value::string(title(s));
  if (name == "capitalize") return Value::string(capitalize(s));
  if (name == "replace") {
    const auto o = arg_str(0, "old"), w = arg_str(1, "new");
    if (!o || !w) fail("{}: replace needs two arguments", a.where);
    return Value::string(replace(s, *o, *w, int_arg(a, 2, "count", -1)));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const auto sub = arg_str(0, "sub");
    if (!sub) fail("{}: {} needs an argument", a.where, name);
    if (name == "count") {
      if (sub->empty()) return Value::integer(static_cast<int64_t>(to_u32(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
      return Value::integer(n);
    }
    const size_t at = name == "find" ? s.find(*sub) : s.rfind(*sub);
    return Value::integer(
        at == std::string::npos
            ? -1
            : static_cast<int64_t>(to_u32(std::string_view(s).substr(0, at)).size()));
  }
  if (name == "join") {
    const auto v = a.get(0, "iterable");
    if (!v) fail("{}: join needs an argument", a.where);
    std::string out;
    const List items = iterate(*v, a.where);
    for (size_t k = 0; k < items.size(); ++k) out += (k ? s : "") + str(items[k]);
    return Value::string(out);
  }
  auto all_of = [&](int (*pred)(int)) {
    if (s.empty()) return Value::boolean(false);
    for (unsigned char c : s) {
      if (!pred(c)) return Value::boolean(false);
    }
    return Value::boolean(true);
  };
  if (name == "isdigit") return all_of(::isdigit);
  if (name == "isalpha") return all_of(::isalpha);
  if (name == "isalnum") return all_of(::isalnum);
  if (name == "isspace") return all_of(::isspace);
  if (name == "islower") return Value::boolean(lower(s) == s && upper(s) != s);
  if (name == "isupper") return Value::boolean(upper(s) == s && lower(s) != s);
  fail("{}: str has no method '{}'", a.where, name);
}

Value dict_method(const std::shared_ptr<Dict>& d, const std::string& name, Args& a) {
  if (name == "get") {
    const auto k = a.get(0, "key");
    if (!k) fail("{}: get needs a key", a.where);
    const Value* v = d->find(str(*k));
    return v ? *v : a.get(1, "default").value_or(Value::none());
  }
  List out;
  for (const auto& [k, v] : d->items) {
    if (name == "items") {
      out.push_back(Value::tuple_of({Value::string(k), v}));
    } else if (name == "keys") {
      out.push_back(Value::string(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      fail("{}: dict has no method '{}' (the sandbox allows get, items, keys, values)", a.where,
           name);
    }
  }
  return Value::list_of(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The attribute of an item for map / selectattr / sort: "a.b" walks dicts.
Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t p = 0;
  for (;;) {
    const size_t dot = path.find('.', p);
    const std::string part = path.substr(p, dot == std::string::npos ? std::string::npos : dot - p);
    Value next = get_item(v, Value::string(part));
    int64_t index = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), index);
    if (next.is_undefined() && !part.empty() && r.ec == std::errc() &&
        r.ptr == part.data() + part.size()) {
      next = get_item(v, Value::integer(index));
    }
    v = next;
    if (dot == std::string::npos) return v;
    p = dot + 1;
  }
}

// The rest of the arguments, from position `from`, as a new Args.
Args rest_args(const Args& a, size_t from) {
  Args r;
  r.where = a.where;
  for (size_t k = from; k < a.pos.size(); ++k) r.pos.push_back(a.pos[k]);
  r.kw = a.kw;
  return r;
}

}  // namespace

List iterate(const Value& v, const std::string& where) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      if (v.kind == Value::Kind::kNone) fail("{}: 'NoneType' object is not iterable", where);
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : to_u32(v.s))
        chars.push_back(Value::string(to_utf8(std::u32string_view(&c, 1))));
      return chars;
    }
    default:
      fail("{}: '{}' object is not iterable", where, kind_name(v));
  }
}

int64_t length(const Value& v, const std::string& where) {
  switch (v.kind) {
    case Value::Kind::kString:
      return static_cast<int64_t>(to_u32(v.s).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    case Value::Kind::kUndefined:
      return 0;
    default:
      fail("{}: object of type '{}' has no len()", where, kind_name(v));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!key.is_string()) return Value::undefined();
    const Value* v = obj.dict->find(key.s);
    return v ? *v : Value::undefined(key.s);
  }
  if ((obj.is_list() || obj.is_string()) && key.kind == Value::Kind::kInt) {
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list->size());
      if (key.i < -n) return Value::undefined();
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      return k >= 0 && k < n ? (*obj.list)[static_cast<size_t>(k)] : Value::undefined();
    }
    const std::u32string u = to_u32(obj.s);
    const int64_t n = static_cast<int64_t>(u.size());
    if (key.i < -n) return Value::undefined();
    const int64_t k = key.i < 0 ? key.i + n : key.i;
    return k >= 0 && k < n
               ? Value::string(to_utf8(std::u32string_view(&u[static_cast<size_t>(k)], 1)))
               : Value::undefined();
  }
  return Value::undefined();
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    const std::string s = obj.s;
    return Value::function([s, name](Args& a) { return string_method(s, name, a); });
  }
  if (obj.is_dict() && !obj.is_namespace) {
    static const char* methods[] = {"get", "items", "keys", "values"};
    for (const char* m : methods) {
      if (name == m) {
        auto d = obj.dict;
        return Value::function([d, name](Args& a) { return dict_method(d, name, a); });
      }
    }
  }
  return get_item(obj, Value::string(name));
}

bool apply_test(std::string_view name, const Value& v, Args& a) {
  const auto arg = [&]() {
    const auto x = a.get(0, "value");
    if (!x) fail("{}: the test '{}' needs an argument", a.where, name);
    return *x;
  };
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.kind == K::kInt || v.kind == K::kFloat || v.kind == K::kBool;
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "odd" || name == "even") {
    if (v.kind != K::kInt) fail("{}: the test '{}' needs an integer", a.where, name);
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = arg();
    return v.kind == K::kInt && d.kind == K::kInt && d.i != 0 && v.i % d.i == 0;
  }
  if (name == "lower") return v.is_string() && lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && upper(v.s) == v.s;
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "sameas") {
    const Value o = arg();
    if (v.kind != o.kind) return false;
    if (v.kind == K::kBool) return v.b == o.b;
    if (v.kind == K::kNone || v.kind == K::kUndefined) return true;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict()) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "lt" || name == "<") return compare(v, arg(), a.where) < 0;
  if (name == "le" || name == "<=") return compare(v, arg(), a.where) <= 0;
  if (name == "gt" || name == ">") return compare(v, arg(), a.where) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg(), a.where) >= 0;
  if (name == "in") {
    const Value c = arg();
    if (c.is_string()) return v.is_string() && c.s.find(v.s) != std::string::npos;
    if (c.is_dict()) return v.is_string() && c.dict->find(v.s);
    for (const Value& x : iterate(c, a.where)) {
      if (equals(x, v)) return true;
    }
    return false;
  }
  fail("{}: the test '{}' is not supported", a.where, name);
}

Value apply_filter(std::string_view name, const Value& v, Args& a, const Callbacks& cb) {
  const std::string& where = a.where;
  if (name == "trim") {
    const auto chars = a.get(0, "chars");
    return Value::string(
        strip(str(v), chars && !chars->is_none() ? str(*chars) : kSpace, true, true));
  }
  if (name == "tojson") {
    std::optional<int> indent;
    if (const auto i = a.get(0, "indent"); i && !i->is_none()) indent = static_cast<int>(i->i);
    const auto sk = a.get(99, "sort_keys");
    return Value::string(to_json(v, indent, sk && sk->truthy()));
  }
  if (name == "length" || name == "count") return Value::integer(length(v, where));
  if (name == "string") return Value::string(str(v));
  if (name == "upper") return Value::string(upper(str(v)));
  if (name == "lower") return Value::string(lower(str(v)));
  if (name == "capitalize") return Value::string(capitalize(str(v)));
  if (name == "title") return Value::string(title(str(v)));
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return Value::string(html_escape(str(v)));
  if (name == "replace") {
    const auto o = a.get(0, "old"), w = a.get(1, "new");
    if (!o || !w) fail("{}: replace needs two arguments", where);
    return Value::string(replace(str(v), str(*o), str(*w), int_arg(a, 2, "count", -1)));
  }
  if (name == "default" || name == "d") {
    const Value def = a.get(0, "default_value").value_or(Value::string(""));
    const auto boolean = a.get(1, "boolean");
    const bool use_def = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    return use_def ? def : v;
  }
  if (name == "join") {
    const std::string sep = str(a.get(0, "d").value_or(Value::string("")));
    const auto attr = a.get(1, "attribute");
    std::string out;
    const List items = iterate(v, where);
    for (size_t k = 0; k < items.size(); ++k) {
      out += (k ? sep : "") + str(attr ? attribute_of(items[k], str(*attr)) : items[k]);
    }
    return Value::string(out);
  }
  if (name == "list") return Value::list_of(iterate(v, where));
  if (name == "first" || name == "last") {
    const List items = iterate(v, where);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = to_u32(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(to_utf8(u));
    }
    List items = iterate(v, where);
    std::reverse(items.begin(), items.end());
    return Value::list_of(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list_of({});
    if (!v.is_dict()) fail("{}: items needs a mapping, not {}", where, kind_name(v));
    Args none;
    none.where = where;
    return dict_method(v.dict, "items", none);
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("{}: dictsort needs a mapping", where);
    Args none;
    none.where = where;
    List items = *dict_method(v.dict, "items", none).list;
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return lower((*x.list)[0].s) < lower((*y.list)[0].s);
    });
    return Value::list_of(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const Value& x : iterate(v, where)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); }))
        out.push_back(x);
    }
    return Value::list_of(std::move(out));
  }
  if (name == "sort") {
    List items = iterate(v, where);
    const bool rev = a.get(0, "reverse").value_or(Value::boolean(false)).truthy();
    const auto attr = a.get(2, "attribute");
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value& kx = attr ? attribute_of(x, str(*attr)) : x;
      const Value& ky = attr ? attribute_of(y, str(*attr)) : y;
      return rev ? compare(ky, kx, where) < 0 : compare(kx, ky, where) < 0;
    });
    return Value::list_of(std::move(items));
  }
  if (name == "min" || name == "max" || name == "sum") {
    const List items = iterate(v, where);
    if (name == "sum") {
      Value acc = a.get(1, "start").value_or(Value::integer(0));
      for (const Value& x : items) {
        if (acc.kind == Value::Kind::kInt && x.kind == Value::Kind::kInt) {
          if (__builtin_add_overflow(acc.i, x.i, &acc.i)) fail("{}: sum overflows", where);
        } else {
          acc = Value::number(acc.as_double() + x.as_double());
        }
      }
      return acc;
    }
    if (items.empty()) return Value::undefined();
    Value best = items[0];
    for (const Value& x : items) {
      const int c = compare(x, best, where);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  if (name == "abs") {
    if (v.kind == Value::Kind::kInt) {
      if (v.i == INT64_MIN) fail("{}: abs overflows", where);
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    return Value::number(std::fabs(v.as_double()));
  }
  if (name == "int") {
    if (v.kind == Value::Kind::kFloat) {
      if (!(std::fabs(v.f) < 9.2e18))
        fail("{}: {} does not fit an integer", where, float_repr(v.f));
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool)
      return Value::integer(v.kind == Value::Kind::kBool ? v.b : v.i);
    try {
      return Value::integer(std::stoll(strip(str(v), kSpace, true, true)));
    } catch (const std::exception&) {
      return a.get(0, "default").value_or(Value::integer(0));
    }
  }
  if (name == "float") {
    if (v.is_number()) return Value::number(v.as_double());
    try {
      return Value::number(std::stod(strip(str(v), kSpace, true, true)));
    } catch (const std::exception&) {
      return a.get(0, "default").value_or(Value::number(0));
    }
  }
  if (name == "round") {
    const int64_t prec = int_arg(a, 0, "precision", 0);
    const double m = std::pow(10.0, static_cast<double>(prec));
    return Value::number(std::nearbyint(v.as_double() * m) / m);
  }
  if (name == "indent") {
    const auto w = a.get(0, "width").value_or(Value::integer(4));
    if (!w.is_string() && (w.kind != Value::Kind::kInt || w.i < 0 || w.i > 1000)) {
      fail("{}: indent width must be an integer from 0 to 1000", where);
    }
    const std::string pad = w.is_string() ? w.s : std::string(static_cast<size_t>(w.i), ' ');
    const bool first = a.get(1, "first").value_or(Value::boolean(false)).truthy();
    const bool blank = a.get(2, "blank").value_or(Value::boolean(false)).truthy();
    std::string s = str(v), out;
    size_t p = 0;
    bool is_first = true;
    while (p <= s.size()) {
      size_t e = s.find('\n', p);
      const bool last = e == std::string::npos;
      if (last) e = s.size();
      const std::string l = s.substr(p, e - p);
      if ((!is_first || first) && (blank || !l.empty())) out += pad;
      out += l;
      if (!last) out += '\n';
      is_first = false;
      p = e + 1;
      if (last) break;
    }
    return Value::string(out);
  }
  if (name == "wordcount")
    return Value::integer(static_cast<int64_t>(split(str(v), std::nullopt, -1, false).size()));
  if (name == "map") {
    List out;
    const auto attr = a.get(99, "attribute");
    for (const Value& x : iterate(v, where)) {
      if (attr) {
        Value r = attribute_of(x, str(*attr));
        if (r.is_undefined()) {
          if (const auto d = a.get(99, "default")) r = *d;
        }
        out.push_back(r);
      } else {
        const auto f = a.get(0, "filter");
        if (!f) fail("{}: map needs a filter name or attribute=", where);
        Args rest = rest_args(a, 1);
        out.push_back(cb.filter(str(*f), x, rest));
      }
    }
    return Value::list_of(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    const size_t test_at = attr ? 1 : 0;
    const auto attr_name = attr ? a.get(0, "attribute") : std::nullopt;
    if (attr && !attr_name) fail("{}: {} needs an attribute", where, name);
    const auto test = a.get(test_at, "test");
    List out;
    for (const Value& x : iterate(v, where)) {
      const Value subject = attr ? attribute_of(x, str(*attr_name)) : x;
      Args rest = rest_args(a, test_at + 1);
      rest.kw.clear();
      const bool ok = test ? cb.test(str(*test), subject, rest) : subject.truthy();
      if (ok == keep_if) out.push_back(x);
    }
    return Value::list_of(std::move(out));
  }
  fail("{}: the filter '{}' is not supported", where, name);
}

}  // namespace strata::jinja
