// A JSON Schema validator for the keywords the test schemas use (draft
// 2020-12 meanings): type (a name or a list), const, enum, required,
// properties, additionalProperties (false), items, minItems, maxItems,
// minimum, minLength, pattern (ECMAScript, searched), oneOf, anyOf, and $ref
// to "#/$defs/<name>". Any other keyword in a schema is an error, so a schema
// never checks less than it says.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::test {

class JsonSchema {
 public:
  explicit JsonSchema(nlohmann::json schema) : root_(std::move(schema)) {}

  // The problems of `value`, each "<json pointer>: <what>"; empty when it is valid.
  std::vector<std::string> validate(const nlohmann::json& value) const {
    std::vector<std::string> problems;
    check(root_, value, "", problems);
    return problems;
  }

 private:
  static bool has_type(const nlohmann::json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer")
      return v.is_number_integer() || (v.is_number_float() && v == std::floor(v.get<double>()));
    if (t == "number") return v.is_number();
    throw std::invalid_argument("unknown type in schema: " + t);
  }

  const nlohmann::json& resolve(const std::string& ref) const {
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) throw std::invalid_argument("unsupported $ref " + ref);
    return root_.at("$defs").at(ref.substr(prefix.size()));
  }

  void check(const nlohmann::json& s, const nlohmann::json& v, const std::string& at,
             std::vector<std::string>& out) const {
    for (const auto& [key, arg] : s.items()) {
      if (key == "$schema" || key == "$defs" || key == "title" || key == "description" ||
          key == "$id") {
        continue;
      } else if (key == "$ref") {
        check(resolve(arg.get<std::string>()), v, at, out);
      } else if (key == "type") {
        bool ok = false;
        for (const auto& t : arg.is_array() ? arg : nlohmann::json::array({arg})) {
          ok = ok || has_type(v, t.get<std::string>());
        }
        if (!ok) out.push_back(at + ": is " + v.type_name() + ", expected type " + arg.dump());
      } else if (key == "const") {
        if (v != arg) out.push_back(at + ": is " + v.dump() + ", expected " + arg.dump());
      } else if (key == "enum") {
        if (std::find(arg.begin(), arg.end(), v) == arg.end()) {
          out.push_back(at + ": " + v.dump() + " is not one of " + arg.dump());
        }
      } else if (key == "required") {
        for (const auto& k : arg) {
          if (v.is_object() && !v.contains(k.get<std::string>())) {
            out.push_back(at + ": missing " + k.get<std::string>());
          }
        }
      } else if (key == "properties") {
        for (const auto& [name, sub] : arg.items()) {
          if (v.is_object() && v.contains(name)) check(sub, v[name], at + "/" + name, out);
        }
      } else if (key == "additionalProperties") {
        if (arg != false) throw std::invalid_argument("additionalProperties must be false");
        if (!v.is_object()) continue;
        const nlohmann::json& props =
            s.contains("properties") ? s["properties"] : nlohmann::json::object();
        for (const auto& [name, sub] : v.items()) {
          if (!props.contains(name)) out.push_back(at + ": unexpected " + name);
        }
      } else if (key == "items") {
        if (!v.is_array()) continue;
        for (size_t i = 0; i < v.size(); ++i) check(arg, v[i], at + "/" + std::to_string(i), out);
      } else if (key == "minItems" || key == "maxItems") {
        if (!v.is_array()) continue;
        const size_t n = arg.get<size_t>();
        if (key == "minItems" ? v.size() < n : v.size() > n) {
          out.push_back(at + ": " + std::to_string(v.size()) + " items, " + key + " " + arg.dump());
        }
      } else if (key == "minimum") {
        if (v.is_number() && v.get<double>() < arg.get<double>()) {
          out.push_back(at + ": " + v.dump() + " is below " + arg.dump());
        }
      } else if (key == "minLength") {
        if (v.is_string() && v.get<std::string>().size() < arg.get<size_t>()) {
          out.push_back(at + ": shorter than " + arg.dump());
        }
      } else if (key == "pattern") {
        if (v.is_string() &&
            !std::regex_search(v.get<std::string>(), std::regex(arg.get<std::string>()))) {
          out.push_back(at + ": " + v.dump() + " does not match " + arg.dump());
        }
      } else if (key == "oneOf" || key == "anyOf") {
        size_t n_ok = 0;
        std::vector<std::string> why;
        for (const auto& sub : arg) {
          std::vector<std::string> p;
          check(sub, v, at, p);
          if (p.empty()) ++n_ok;
          why.insert(why.end(), p.begin(), p.end());
        }
        if (n_ok == 0) {
          out.push_back(at + ": matches none of " + key + " (" + (why.empty() ? "" : why.front()) +
                        " ...)");
        } else if (key == "oneOf" && n_ok > 1) {
          out.push_back(at + ": matches " + std::to_string(n_ok) + " of oneOf");
        }
      } else {
        throw std::invalid_argument("unsupported schema keyword " + key);
      }
    }
  }

  nlohmann::json root_;
};

}  // namespace strata::test
