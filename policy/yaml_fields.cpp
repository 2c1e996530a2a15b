// Strict YAML field access for policy/ documents; see yaml_fields.h.
#include "policy/yaml_fields.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

namespace strata::yaml_fields {

namespace {

std::optional<double> parse_double(const std::string& text) {
  double v = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
    if (out.size() > 200) {
      out += "...";
      break;
    }
  }
  return out;
}

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return printable(node.Scalar());
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "nothing";
}

YAML::Node parse(const std::string& text, const std::string& source) {
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) fail("{}: the document is empty; expected a YAML mapping of keys", source);
    if (!root.IsMap()) fail("{}: expected a YAML mapping of keys at the top level", source);
    return root;
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.mark.column + 1,
         printable(e.msg));
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file; check the path", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return ss.str();
}

Map::Map(YAML::Node node, std::string source, std::string path)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)) {}

std::string Map::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void Map::fail_at(std::string_view key, const std::string& problem) const {
  fail("{}: {}: {}", source_, printable(key_path(key)), problem);
}

bool Map::has(std::string_view key) const {
  const YAML::Node n = node_[std::string(key)];
  return n.IsDefined() && !n.IsNull();
}

void Map::check_keys(std::initializer_list<std::string_view> known) const {
  for (const auto& kv : node_) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string("?");
    bool ok = false;
    for (std::string_view k : known) ok = ok || (k == key);
    if (!ok) {
      std::string list;
      for (std::string_view k : known) {
        if (!list.empty()) list += ", ";
        list += k;
      }
      fail("{}: {}: unknown key; the keys here are: {}", source_, printable(key_path(key)), list);
    }
  }
}

YAML::Node Map::node(std::string_view key) const {
  if (!has(key)) fail_at(key, "missing; add this key");
  return node_[std::string(key)];
}

Map Map::map(std::string_view key) const {
  YAML::Node n = node(key);
  if (!n.IsMap()) fail_at(key, "expected a mapping of keys, found " + scalar_text(n));
  return Map(n, source_, key_path(key));
}

std::optional<Map> Map::optional_map(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return map(key);
}

std::string Map::string(std::string_view key) const {
  YAML::Node n = node(key);
  if (!n.IsScalar()) fail_at(key, "expected a single value, found " + scalar_text(n));
  return n.Scalar();
}

std::optional<std::string> Map::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

double Map::number(std::string_view key) const {
  const std::string text = string(key);
  std::optional<double> v = parse_double(text);
  if (!v) fail_at(key, "'" + printable(text) + "' is not a number");
  return *v;
}

std::optional<double> Map::optional_number(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return number(key);
}

int64_t Map::integer(std::string_view key, int64_t min_value) const {
  const std::string text = string(key);
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    fail_at(key, "'" + printable(text) + "' is not a whole number");
  }
  if (v < min_value)
    fail_at(key, fmt::format("{} is below the smallest allowed value {}", v, min_value));
  return v;
}

std::optional<int64_t> Map::optional_integer(std::string_view key, int64_t min_value) const {
  if (!has(key)) return std::nullopt;
  return integer(key, min_value);
}

bool Map::boolean(std::string_view key) const {
  std::string text = string(key);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text == "true" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "no" || text == "off") return false;
  fail_at(key, "'" + printable(string(key)) + "' is not true or false");
}

std::optional<bool> Map::optional_boolean(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return boolean(key);
}

double Map::bytes(std::string_view key) const {
  const std::string text = string(key);
  if (std::optional<double> v = parse_double(text)) {
    if (*v < 0) fail_at(key, "'" + printable(text) + "' is negative");
    return *v;
  }
  try {
    return static_cast<double>(parse_bytes(text, key_path(key)));
  } catch (const Error&) {
    fail_at(key, "'" + printable(text) +
                     "' is not a size; write e.g. 16G, 0.473G, 512M or a number of bytes");
  }
}

std::optional<double> Map::optional_bytes(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return bytes(key);
}

}  // namespace strata::yaml_fields
