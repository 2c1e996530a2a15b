// Strict reading of the small YAML documents of policy/ (hardware profiles,
// model shapes, policies). Every accessor names the file and the dotted key
// in its error ("t4.yaml: links.cpu_to_gpu: 'fast' is not a size ..."), so a
// bad file always ends in one actionable line. Unknown keys are errors too: a
// misspelt key must not silently fall back to a default.
//
// Internal to policy/: the only place outside the .cpp files that sees
// yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace strata::yaml_fields {

// Parses YAML text; `source` names it in errors (a path, or "preset
// models/opt-30b.yaml"). Syntax errors report line and column.
YAML::Node parse(const std::string& text, const std::string& source);
// The text of a file; a missing or unreadable file is an Error naming it.
std::string read_text(const std::string& path);

// One mapping node and where it sits: the source and the dotted path of keys
// leading to it ("" for the document root).
class Map {
 public:
  Map(YAML::Node node, std::string source, std::string path);

  const std::string& source() const { return source_; }
  // "links.cpu_to_gpu" for key "cpu_to_gpu" under "links".
  std::string key_path(std::string_view key) const;
  bool has(std::string_view key) const;
  // Throws naming the first key not in `known`, and lists the known keys.
  void check_keys(std::initializer_list<std::string_view> known) const;

  Map map(std::string_view key) const;  // required mapping
  std::optional<Map> optional_map(std::string_view key) const;
  YAML::Node node(std::string_view key) const;  // required, any kind

  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  int64_t integer(std::string_view key, int64_t min_value) const;
  std::optional<int64_t> optional_integer(std::string_view key, int64_t min_value) const;
  double number(std::string_view key) const;
  std::optional<double> optional_number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  std::optional<bool> optional_boolean(std::string_view key) const;
  // A byte count or a rate in bytes per second: "16G", "0.473G", "512M", or
  // a plain number of bytes ("1e9", "4096").
  double bytes(std::string_view key) const;
  std::optional<double> optional_bytes(std::string_view key) const;

  // Throws Error "<source>: <key path>: <problem>".
  [[noreturn]] void fail_at(std::string_view key, const std::string& problem) const;

 private:
  YAML::Node node_;
  std::string source_;
  std::string path_;
};

// The scalar text of a node (for messages), made printable.
std::string scalar_text(const YAML::Node& node);
// Text from a file made safe for a one-line message: control characters
// escaped, long text clipped.
std::string printable(std::string_view text);

}  // namespace strata::yaml_fields
