// Prompt file reading (prompt_file.h).
#include "generate/prompt_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <unordered_map>

#include "core/error.h"
#include "generate/openai_request.h"
#include "io/json.h"
#include "io/one_line.h"
#include "tokenizer/unicode.h"

namespace strata {
namespace {

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string where(const std::string& path, int64_t line) {
  return fmt::format("{}:{}", path, line);
}

void parse_jsonl_line(const std::string& path, int64_t line, std::string_view text,
                      PromptRecord& rec) {
  const std::string at = where(path, line);
  const Json j = parse_json(at, text, "the line");
  if (!j.is_object()) {
    fail("{}: the line is {}, expected a JSON object with a \"prompt\" field", at,
         json_type_name(j));
  }
  auto field = [&](const char* key) -> const Json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  const Json* prompt = field("prompt");
  if (!prompt) fail("{}: field 'prompt' is missing; every line needs one", at);
  if (!prompt->is_string()) {
    fail("{}: field 'prompt' is {}, expected a string", at, json_type_name(*prompt));
  }
  rec.text = prompt->get<std::string>();

  if (const Json* id = field("id")) {
    if (!id->is_string() && !id->is_number()) {
      fail("{}: field 'id' is {}, expected a string or a number", at, json_type_name(*id));
    }
    rec.id = *id;
  }
  if (const Json* v = field("max_new_tokens")) {
    double d = v->is_number() ? v->get<double>() : std::nan("");
    if (!v->is_number() || d != std::floor(d) || d < 1 ||
        d > static_cast<double>(std::numeric_limits<int32_t>::max())) {
      fail("{}: field 'max_new_tokens' is {}, expected an integer >= 1", at,
           v->is_number() ? one_line(v->dump(), 40) : std::string(json_type_name(*v)));
    }
    rec.max_new_tokens = static_cast<int32_t>(d);
  }
  if (const Json* v = field("temperature")) {
    const double d = v->is_number() ? v->get<double>() : -1.0;
    if (!v->is_number() || !(d >= 0) || !std::isfinite(d)) {
      fail("{}: field 'temperature' is {}, expected a number >= 0", at,
           v->is_number() ? one_line(v->dump(), 40) : std::string(json_type_name(*v)));
    }
    rec.temperature = static_cast<float>(d);
  }
  if (const Json* v = field("stop")) {
    std::vector<std::string> stops;
    if (v->is_string()) {
      stops.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) {
          fail("{}: field 'stop' item {} is {}, expected a string", at, i, json_type_name((*v)[i]));
        }
        stops.push_back((*v)[i].get<std::string>());
      }
    } else {
      fail("{}: field 'stop' is {}, expected a string or a list of strings", at,
           json_type_name(*v));
    }
    for (const std::string& s : stops) {
      if (s.empty()) fail("{}: field 'stop' holds an empty string; remove it", at);
    }
    rec.stop = std::move(stops);
  }
  if (const Json* v = field("system")) {
    if (!v->is_string())
      fail("{}: field 'system' is {}, expected a string", at, json_type_name(*v));
    rec.system = v->get<std::string>();
  }
}

}  // namespace

// A line that is not UTF-8: one error naming the line, the column (1-based
// byte) and the bytes there.
void check_utf8(const std::string& path, int64_t line, std::string_view text) {
  for (size_t p = 0; p < text.size();) {
    const tok::Utf8Step st = tok::utf8_step(text, p);
    if (st.kind == tok::Utf8Step::kValid) {
      p += st.len;
      continue;
    }
    std::string bytes;
    for (size_t i = p; i < std::min(text.size(), p + 4); ++i)
      bytes += fmt::format("{}0x{:02X}", i == p ? "" : " ", static_cast<unsigned char>(text[i]));
    fail("{}: byte {} is not UTF-8 ({}{}); save the prompt file as UTF-8", where(path, line), p + 1,
         bytes,
         st.kind == tok::Utf8Step::kIncomplete ? ": a character cut off at the end of the line"
                                               : "");
  }
}

std::string_view prompt_format_name(PromptFormat f) {
  switch (f) {
    case PromptFormat::kText:
      return "text";
    case PromptFormat::kJsonl:
      return "jsonl";
    case PromptFormat::kOpenAi:
      return "openai";
  }
  return "?";
}

uint64_t fnv1a64(std::string_view bytes, uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

PromptFile parse_prompt_file(const std::string& path, std::string_view content,
                             std::optional<PromptFormat> format) {
  PromptFile pf;
  pf.path = path;
  pf.content_hash = fnv1a64(content);
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);

  const size_t first = content.find_first_not_of(" \t\r\n\f\v");
  if (format) {
    pf.format = *format;
  } else if (ends_with(path, ".jsonl") ||
             (first != std::string_view::npos && content[first] == '{')) {
    const size_t first_end = first == std::string_view::npos ? first : content.find('\n', first);
    const bool openai = first != std::string_view::npos &&
                        looks_like_openai_request(content.substr(first, first_end - first));
    pf.format = openai ? PromptFormat::kOpenAi : PromptFormat::kJsonl;
  }

  std::unordered_map<std::string, int64_t> custom_ids;  // OpenAI: custom_id -> its line
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank(line)) continue;
    PromptRecord rec;
    rec.index = pf.prompts.size();
    rec.line = line_no;
    rec.id = line_no - 1;
    if (pf.format == PromptFormat::kOpenAi) {
      parse_openai_request(line, rec);
      if (rec.id.is_string()) {
        const auto [it, fresh] = custom_ids.emplace(rec.id.get<std::string>(), line_no);
        if (!fresh && rec.error_code.empty()) {
          rec.error_code = "duplicate_custom_id";
          rec.error = fmt::format("line {}: custom_id {} was already used on line {}", line_no,
                                  one_line(rec.id.dump(), 80), it->second);
        }
      }
    } else {
      check_utf8(path, line_no, line);
      if (pf.format == PromptFormat::kJsonl) {
        parse_jsonl_line(path, line_no, line, rec);
      } else {
        rec.text = std::string(line);
      }
    }
    pf.prompts.push_back(std::move(rec));
  }
  if (pf.prompts.empty()) {
    fail("{}: no prompts in the file (it is empty or only blank lines); write one prompt per line",
         path);
  }
  return pf;
}

PromptFile read_prompt_file(const std::string& path, std::optional<PromptFormat> format) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail("{}: is a directory, expected a prompt file (.txt or .jsonl)", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the prompt file; check the path", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: cannot read the prompt file", path);
  return parse_prompt_file(path, ss.str(), format);
}

}  // namespace strata
