// The values of the Jinja interpreter (template.h), with Python's meanings,
// since chat templates are written against jinja2 running in Python: None,
// booleans, integers, floats, strings (UTF-8; lengths, indices and slices
// count code points), lists, dicts (string keys, insertion order) and
// callables (macros, methods, functions). Undefined is a name or key that
// does not exist: it prints as "", is false, and iterates as empty.
//
// str() and repr() follow Python's: None, True, 1.0, ['a', "it's"],
// {'k': 1}. to_json is transformers' tojson (json.dumps with
// ensure_ascii=False).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::jinja {

struct Value;
struct Args;
using List = std::vector<Value>;
using Function = std::function<Value(Args&)>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                 // kString; for kUndefined, the name that was not found
  std::shared_ptr<List> list;    // kList (tuples too)
  std::shared_ptr<Dict> dict;    // kDict (namespaces and loop objects too)
  std::shared_ptr<Function> fn;  // kFunction
  bool is_namespace = false;     // a dict whose attributes `set` may assign
  bool is_tuple = false;         // a list written as a tuple: repr (a, b)

  Value() = default;
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value undefined(std::string name = {});
  static Value list_of(List items);
  static Value tuple_of(List items);
  static Value dict_of(Dict d);
  static Value function(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool truthy() const;
  double as_double() const;  // numbers and booleans
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  std::string where;  // "template line N" for messages

  // Argument `i`, or keyword `name`, or nullopt.
  std::optional<Value> get(size_t i, std::string_view name) const;
};

// Python's str(): strings as they are, everything else as repr.
std::string str(const Value& v);
// Python's repr().
std::string repr(const Value& v);
// transformers' tojson: json.dumps(v, ensure_ascii=False, indent=indent,
// sort_keys=sort_keys). Undefined and callables are an Error.
std::string to_json(const Value& v, std::optional<int> indent = std::nullopt,
                    bool sort_keys = false);

Value from_json(const nlohmann::ordered_json& j);

// Python's ==, and the ordering of numbers with numbers and strings with
// strings (an Error otherwise, naming `where`).
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, const std::string& where);

// Strings as code points, for len(), indexing and slicing.
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);

// Python's repr of a float: the shortest text that reads back, "1.0", "1e-05", "1e+16".
std::string float_repr(double v);

const char* kind_name(const Value& v);  // "str", "int", "list", ... as Python names them

}  // namespace strata::jinja
