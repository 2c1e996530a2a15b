// Strict JSON for model files (safetensors headers, config.json, index
// files): parse errors and duplicate object keys become an Error naming the
// file, and typed look-ups name the file and the key when a value is missing
// or of the wrong type. Numbers that must be sizes are checked to be
// non-negative integers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

using Json = nlohmann::json;

// Parses `text` read from `path`; throws Error naming the file on bad JSON or
// a key repeated inside one object (which JSON parsers silently resolve in
// different ways). `what` names the content in the message ("safetensors
// header", "config").
Json parse_json(const std::string& path, std::string_view text, std::string_view what = "JSON");

// Reads and parses a whole file; throws Error naming it when it cannot be read.
Json read_json_file(const std::string& path, std::string_view what = "JSON");

// JSON's own name for a value's type ("string", "number", ...), for messages.
std::string_view json_type_name(const Json& v);

// Typed fields of a JSON object read from `path`. A key that is absent or
// null reads as nullopt; a present key of the wrong type throws Error naming
// the file and the key.
class JsonObject {
 public:
  JsonObject(const Json& obj, std::string path, std::string context = {});

  const Json& json() const { return obj_; }
  const std::string& path() const { return path_; }
  bool has(std::string_view key) const;  // present and not null

  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_number(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;

  // Present and an integer >= min_value, else Error naming the key.
  int64_t require_int(std::string_view key, int64_t min_value = 1) const;
  // get_int with a range check (Error when outside [min_value, max_value]).
  std::optional<int64_t> get_int_in(std::string_view key, int64_t min_value, int64_t max_value) const;

  // Message prefix "path: key 'k'" (with context, "path: context.k").
  std::string where(std::string_view key) const;

 private:
  const Json& obj_;
  std::string path_;
  std::string context_;
};

}  // namespace strata
