// OpenAI batch requests (openai_request.h).
#include "generate/openai_request.h"

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "core/error.h"
#include "io/json.h"
#include "io/one_line.h"
#include "tokenizer/unicode.h"

namespace strata {
namespace {

// A problem with the line: becomes its error answer.
struct Problem {
  std::string code, message;
};

[[noreturn]] void problem(std::string code, std::string message) {
  throw Problem{std::move(code), std::move(message)};
}

std::string shown(const Json& v) {
  return v.is_number() || v.is_boolean() ? one_line(v.dump(), 40) : std::string(json_type_name(v));
}

// The request's body and its line, with typed reads that name the field.
class Body {
 public:
  Body(const Json& body, int64_t line) : body_(body), line_(line) {}

  const Json* get(const char* key) const {
    const auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void bad(const char* key, const Json& v, std::string_view expected) const {
    problem("invalid_request",
            fmt::format("line {}: body.{} is {}, expected {}", line_, key, shown(v), expected));
  }

  [[noreturn]] void unsupported(const char* key, const Json& v, std::string_view allowed) const {
    problem("unsupported_parameter", fmt::format("line {}: body.{} = {} is not supported ({})",
                                                 line_, key, one_line(v.dump(), 60), allowed));
  }

  std::optional<double> number(const char* key, double lo, double hi, bool lo_open,
                               std::string_view expected) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    const double d = v->is_number() ? v->get<double>() : std::nan("");
    if (!v->is_number() || !std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo)) {
      bad(key, *v, expected);
    }
    return d;
  }

  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) bad(key, *v, fmt::format("an integer from {} to {}", lo, hi));
    const int64_t i = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v->get<int64_t>();
    if (i < lo || i > hi) bad(key, *v, fmt::format("an integer from {} to {}", lo, hi));
    return i;
  }

  // A parameter strata does not implement: accepted only at the value that
  // changes nothing.
  void only_default(const char* key, const std::function<bool(const Json&)>& is_default,
                    std::string_view allowed) const {
    const Json* v = get(key);
    if (v && !is_default(*v)) unsupported(key, *v, allowed);
  }

  int64_t line() const { return line_; }

 private:
  const Json& body_;
  int64_t line_;
};

std::string message_text(const Json& content, int64_t line, size_t i) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (size_t p = 0; p < content.size(); ++p) {
      const Json& part = content[p];
      const auto type = part.is_object() ? part.find("type") : part.end();
      const auto t = part.is_object() ? part.find("text") : part.end();
      if (type == part.end() || *type != "text" || t == part.end() || !t->is_string()) {
        problem("unsupported_parameter",
                fmt::format("line {}: body.messages[{}].content[{}] is not a text part "
                            "({{\"type\": \"text\", \"text\": ...}}); only text is supported",
                            line, i, p));
      }
      if (p > 0) text += '\n';
      text += t->get<std::string>();
    }
    return text;
  }
  problem("invalid_request",
          fmt::format("line {}: body.messages[{}].content is {}, expected a string or a list of "
                      "text parts",
                      line, i, json_type_name(content)));
}

std::vector<ChatMessage> read_messages(const Body& body) {
  const Json* v = body.get("messages");
  if (!v) problem("invalid_request", fmt::format("line {}: body.messages is missing", body.line()));
  if (!v->is_array() || v->empty()) body.bad("messages", *v, "a non-empty list of messages");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant"};
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& m = (*v)[i];
    if (!m.is_object()) {
      problem("invalid_request", fmt::format("line {}: body.messages[{}] is {}, expected an object",
                                             body.line(), i, json_type_name(m)));
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name" && !value.is_null()) {
        problem("unsupported_parameter",
                fmt::format("line {}: body.messages[{}].{} is not supported (a message has "
                            "\"role\", \"content\" and optionally \"name\")",
                            body.line(), i, one_line(key, 40)));
      }
    }
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string() || !roles.count(role->get<std::string>())) {
      problem("invalid_request",
              fmt::format("line {}: body.messages[{}].role is {}, expected \"system\", "
                          "\"developer\", \"user\" or \"assistant\"",
                          body.line(), i,
                          role == m.end()     ? std::string("missing")
                          : role->is_string() ? one_line(role->dump(), 40)
                                              : std::string(json_type_name(*role))));
    }
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      problem("invalid_request",
              fmt::format("line {}: body.messages[{}].content is missing", body.line(), i));
    }
    out.push_back({role->get<std::string>(), message_text(*content, body.line(), i)});
  }
  return out;
}

std::string read_prompt(const Body& body) {
  const Json* v = body.get("prompt");
  if (!v) problem("invalid_request", fmt::format("line {}: body.prompt is missing", body.line()));
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) return (*v)[0].get<std::string>();
  if (v->is_array() && v->size() > 1) {
    body.unsupported("prompt", *v, "one prompt per request: a string or a list of one string");
  }
  body.bad("prompt", *v, "a string");
}

void read_stop(const Body& body, PromptRecord& rec) {
  const Json* v = body.get("stop");
  if (!v) return;
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array() && v->size() <= 4) {
    for (const Json& s : *v) {
      if (!s.is_string()) body.bad("stop", *v, "a string or a list of up to 4 strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    body.bad("stop", *v, "a string or a list of up to 4 strings");
  }
  for (const std::string& s : stops) {
    if (s.empty()) body.bad("stop", *v, "non-empty strings");
  }
  rec.stop = std::move(stops);
}

void read_body(const Body& body, const Json& json, PromptRecord& rec) {
  const bool chat = rec.endpoint == Endpoint::kChatCompletions;
  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "seed",
                                               "stop",
                                               "n",
                                               "stream",
                                               "stream_options",
                                               "user",
                                               "metadata",
                                               "store",
                                               "logprobs",
                                               "frequency_penalty",
                                               "presence_penalty",
                                               "service_tier"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens"};
  static const std::set<std::string> completion_only = {"prompt", "echo", "best_of", "suffix"};
  for (const auto& [key, value] : json.items()) {
    if (value.is_null() || common.count(key) || (chat ? chat_only : completion_only).count(key)) {
      continue;
    }
    problem("unsupported_parameter",
            fmt::format("line {}: body.{} is not supported by {}", body.line(), one_line(key, 40),
                        chat ? "/v1/chat/completions" : "/v1/completions"));
  }
  if (chat) {
    rec.messages = read_messages(body);
  } else {
    rec.text = read_prompt(body);
  }
  const auto max_tokens = body.integer("max_tokens", 1, std::numeric_limits<int32_t>::max());
  const auto max_completion =
      chat ? body.integer("max_completion_tokens", 1, std::numeric_limits<int32_t>::max())
           : std::nullopt;
  if (max_tokens && max_completion && *max_tokens != *max_completion) {
    problem("invalid_request",
            fmt::format("line {}: body.max_tokens {} and body.max_completion_tokens {} disagree; "
                        "give one",
                        body.line(), *max_tokens, *max_completion));
  }
  if (max_completion) rec.max_new_tokens = static_cast<int32_t>(*max_completion);
  if (max_tokens) rec.max_new_tokens = static_cast<int32_t>(*max_tokens);
  if (const auto t = body.number("temperature", 0, 2, false, "a number from 0 to 2")) {
    rec.temperature = static_cast<float>(*t);
  }
  if (const auto p = body.number("top_p", 0, 1, true, "a number above 0 and at most 1")) {
    rec.top_p = static_cast<float>(*p);
  }
  if (const auto s = body.integer("seed", INT64_MIN, INT64_MAX)) {
    rec.seed = static_cast<uint64_t>(*s);
  }
  read_stop(body, rec);

  auto equals = [](const Json& want) { return [want](const Json& v) { return v == want; }; };
  body.only_default("n", equals(1), "one completion per request: n = 1");
  body.only_default("stream", equals(false), "a batch answers whole: stream = false");
  body.only_default(
      "logprobs", [](const Json& v) { return v == false; },
      "log probabilities are not returned: logprobs = false");
  body.only_default("frequency_penalty", equals(0), "0 only; --repetition-penalty instead");
  body.only_default("presence_penalty", equals(0), "0 only; --repetition-penalty instead");
  if (!chat) {
    body.only_default("echo", equals(false), "echo = false");
    body.only_default("best_of", equals(1), "best_of = 1");
    body.only_default(
        "suffix", [](const Json&) { return false; }, "no suffix");
  }
}

}  // namespace

bool looks_like_openai_request(std::string_view line) {
  Json j;
  try {
    j = Json::parse(line);
  } catch (const std::exception&) {
    return false;
  }
  return j.is_object() && (j.contains("custom_id") || (j.contains("url") && j.contains("body")));
}

void parse_openai_request(std::string_view line, PromptRecord& rec) {
  rec.id = nullptr;  // until the custom_id is read: the answer has custom_id null
  try {
    Json j;
    for (size_t p = 0; p < line.size();) {
      const tok::Utf8Step st = tok::utf8_step(line, p);
      if (st.kind != tok::Utf8Step::kValid) {
        problem("invalid_json", fmt::format("line {}: byte {} is not UTF-8", rec.line, p + 1));
      }
      p += st.len;
    }
    try {
      j = parse_json(fmt::format("line {}", rec.line), line, "the request");
    } catch (const Error& e) {
      problem("invalid_json", e.what());
    }
    if (!j.is_object()) {
      problem("invalid_json", fmt::format("line {}: the line is {}, expected a JSON object",
                                          rec.line, json_type_name(j)));
    }
    const auto custom_id = j.find("custom_id");
    if (custom_id == j.end() || !custom_id->is_string()) {
      problem("invalid_request",
              fmt::format("line {}: custom_id is {}, expected a string", rec.line,
                          custom_id == j.end() ? std::string("missing") : shown(*custom_id)));
    }
    rec.id = *custom_id;
    for (const auto& [key, value] : j.items()) {
      if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
        problem("invalid_request",
                fmt::format("line {}: unknown field '{}' (a request has custom_id, method, url "
                            "and body)",
                            rec.line, one_line(key, 40)));
      }
    }
    const auto method = j.find("method");
    if (method == j.end() || *method != "POST") {
      problem("invalid_request", fmt::format("line {}: method is {}, expected \"POST\"", rec.line,
                                             method == j.end() ? std::string("missing")
                                                               : one_line(method->dump(), 40)));
    }
    const auto url = j.find("url");
    if (url != j.end() && *url == "/v1/chat/completions") {
      rec.endpoint = Endpoint::kChatCompletions;
    } else if (url != j.end() && *url == "/v1/completions") {
      rec.endpoint = Endpoint::kCompletions;
    } else {
      problem("invalid_url",
              fmt::format("line {}: url is {}, expected \"/v1/chat/completions\" or "
                          "\"/v1/completions\"",
                          rec.line,
                          url == j.end() ? std::string("missing") : one_line(url->dump(), 60)));
    }
    const auto body = j.find("body");
    if (body == j.end() || !body->is_object()) {
      problem("invalid_request", fmt::format("line {}: body is {}, expected an object", rec.line,
                                             body == j.end() ? std::string("missing")
                                                             : std::string(json_type_name(*body))));
    }
    read_body(Body(*body, rec.line), *body, rec);
  } catch (const Problem& p) {
    rec.error_code = p.code;
    rec.error = p.message;
  }
}

}  // namespace strata
