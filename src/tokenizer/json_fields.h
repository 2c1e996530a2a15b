// Reading the fields of a tokenizer.json (or tokenizer_config.json) with
// errors that name the file and the field path ("tokenizer.json:
// model.vocab['a'] = -4 is not a valid token id"). Shared by the builder
// (tokenizer_json.cpp) and the pipeline parsers (json_pipeline.cpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"

namespace strata::tok {

using json = nlohmann::json;

inline constexpr int64_t kMaxTokenId =
    (int64_t{1} << 24) - 1;  // 16.7M: far above any real vocabulary

// Field access with messages that name the file and the field path.
class JsonFields {
 public:
  explicit JsonFields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void bad(std::string_view field, std::string_view what) const {
    fail("{}: {} {}", file_, field, what);
  }
  // The member, or nullptr when absent or null.
  const json* find(const json& obj, const char* key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& object(const json& obj, const char* key, const std::string& field) const {
    const json* v = find(obj, key);
    if (!v) bad(field, "is missing");
    if (!v->is_object()) bad(field, "is not an object");
    return *v;
  }
  std::string string(const json& obj, const char* key, const std::string& field) const {
    const json* v = find(obj, key);
    if (!v) bad(field, "is missing");
    if (!v->is_string()) bad(field, "is not a string");
    return v->get<std::string>();
  }
  std::string string_or(const json& obj, const char* key, const std::string& field,
                        std::string dflt) const {
    const json* v = find(obj, key);
    if (!v) return dflt;
    if (!v->is_string()) bad(field, "is not a string");
    return v->get<std::string>();
  }
  bool boolean(const json& obj, const char* key, const std::string& field, bool dflt) const {
    const json* v = find(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(field, "is not true or false");
    return v->get<bool>();
  }
  int64_t integer(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) bad(field, "is not an integer");
    return v.get<int64_t>();
  }
  int32_t token_id(const json& v, const std::string& field) const {
    const int64_t id = integer(v, field);
    if (id < 0 || id > kMaxTokenId) bad(field, fmt::format("= {} is not a valid token id", id));
    return static_cast<int32_t>(id);
  }

 private:
  std::string file_;
};

inline std::string type_of(const JsonFields& f, const json& j, const std::string& field) {
  if (!j.is_object()) f.bad(field, "is not an object");
  return f.string(j, "type", field + ".type");
}

}  // namespace strata::tok
