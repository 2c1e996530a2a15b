#include "io/json.h"

#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/one_line.h"

namespace strata {

Json parse_json(const std::string& path, std::string_view text, std::string_view what) {
  // One set of keys per open object: a key seen twice in the same object is an
  // error, the same key in different objects is fine.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto check_keys = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), check_keys);
  } catch (const Json::exception& e) {
    fail("{}: {} is not valid JSON: {}", path, what, one_line(e.what(), 300));
  }
  if (!duplicate.empty()) {
    fail("{}: {} has the key '{}' twice in one object", path, what, one_line(duplicate, 200));
  }
  return j;
}

Json read_json_file(const std::string& path, std::string_view what) {
  MappedFile f(path);
  return parse_json(path, {reinterpret_cast<const char*>(f.data()), f.size()}, what);
}

std::string_view json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    default: return "an unknown value";
  }
}

JsonObject::JsonObject(const Json& obj, std::string path, std::string context)
    : obj_(obj), path_(std::move(path)), context_(std::move(context)) {
  if (!obj_.is_object()) {
    fail("{}: {} is {}, expected a JSON object", path_, context_.empty() ? "the content" : context_,
         json_type_name(obj_));
  }
}

std::string JsonObject::where(std::string_view key) const {
  if (context_.empty()) return fmt::format("{}: key '{}'", path_, key);
  return fmt::format("{}: key '{}.{}'", path_, context_, key);
}

bool JsonObject::has(std::string_view key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

std::optional<int64_t> JsonObject::get_int(std::string_view key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail("{} is {}, out of range", where(key), u);
    return static_cast<int64_t>(u);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  // Some writers store whole numbers as floats ("4096.0").
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    fail("{} is {}, expected an integer", where(key), d);
  }
  fail("{} is {}, expected an integer", where(key), json_type_name(*it));
}

std::optional<double> JsonObject::get_number(std::string_view key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail("{} is {}, expected a number", where(key), json_type_name(*it));
  return it->get<double>();
}

std::optional<bool> JsonObject::get_bool(std::string_view key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail("{} is {}, expected true or false", where(key), json_type_name(*it));
  return it->get<bool>();
}

std::optional<std::string> JsonObject::get_string(std::string_view key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail("{} is {}, expected a string", where(key), json_type_name(*it));
  return it->get<std::string>();
}

int64_t JsonObject::require_int(std::string_view key, int64_t min_value) const {
  auto v = get_int(key);
  if (!v) fail("{} is missing; it is required", where(key));
  if (*v < min_value) fail("{} is {}, expected at least {}", where(key), *v, min_value);
  return *v;
}

std::optional<int64_t> JsonObject::get_int_in(std::string_view key, int64_t min_value,
                                              int64_t max_value) const {
  auto v = get_int(key);
  if (v && (*v < min_value || *v > max_value)) {
    fail("{} is {}, expected a value in [{}, {}]", where(key), *v, min_value, max_value);
  }
  return v;
}

}  // namespace strata
