// The prompts of a batch job, read from a file in one of three formats:
//
//   plain text  one prompt per line, taken as it is written: no escapes are
//               interpreted ("\n" stays a backslash and an n), a trailing
//               "\r" (CRLF files) is dropped, leading and trailing spaces are
//               kept (they change the tokens). Lines that are empty or only
//               white space are skipped.
//   JSONL       one JSON object per line: "prompt" (string, required), and
//               optionally "id" (string or number), "max_new_tokens"
//               (integer >= 1), "temperature" (number >= 0), "stop" (string
//               or list of strings) and "system" (string, the system message
//               with --chat). Other keys are ignored. Blank lines are skipped.
//   OpenAI      the OpenAI batch format (openai_request.h): one request per
//               line; a line with a problem becomes an error answer for
//               that line instead of failing the file. The custom_id is the id,
//               and two lines with one custom_id are an error on the second.
//
// JSONL is chosen when the file name ends in ".jsonl" or its first
// non-blank character is '{' (so a plain-text file whose first prompt starts
// with '{' must be turned into JSONL); it is the OpenAI format when its first
// record looks like a request (looks_like_openai_request). A format given by
// the caller overrides the guess. A UTF-8 byte-order mark is ignored.
//
// A prompt's id defaults to its 0-based line index in the file (blank lines
// count), so an id always leads back to its line. Per-prompt fields override
// the command-line options for that prompt ("stop" replaces the --stop list).
// Every error names the file, the 1-based line number and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/chat_template.h"

namespace strata {

// Where an OpenAI batch request is addressed; kNone for the other formats.
enum class Endpoint { kNone, kChatCompletions, kCompletions };

struct PromptRecord {
  size_t index = 0;   // position among the prompts (0-based), the output order
  int64_t line = 0;   // 1-based line in the file
  nlohmann::json id;  // string or number, written back as given
  std::string text;
  std::optional<int32_t> max_new_tokens;
  std::optional<float> temperature;
  std::optional<std::vector<std::string>> stop;
  std::optional<std::string> system;
  // The OpenAI batch format only:
  Endpoint endpoint = Endpoint::kNone;
  std::vector<ChatMessage> messages;  // kChatCompletions: the conversation
  std::optional<float> top_p;
  std::optional<uint64_t> seed;  // the request's own random stream
  std::string error_code;        // non-empty: the line is answered with this error
  std::string error;             // the error's message
};

enum class PromptFormat { kText, kJsonl, kOpenAi };

// "text", "jsonl", "openai".
std::string_view prompt_format_name(PromptFormat f);

struct PromptFile {
  std::string path;
  PromptFormat format = PromptFormat::kText;
  uint64_t content_hash = 0;  // hash of the file's bytes (identifies it for resuming)
  std::vector<PromptRecord> prompts;
};

// Reads and validates `path`; throws Error naming the file (and the line and
// field) when it cannot be read, is not valid UTF-8 JSON, or holds no prompt.
// `format`: the caller's choice, or nullopt to tell from the file.
PromptFile read_prompt_file(const std::string& path,
                            std::optional<PromptFormat> format = std::nullopt);

// The same from text already in memory (`path` is used in messages and for
// the format choice).
PromptFile parse_prompt_file(const std::string& path, std::string_view content,
                             std::optional<PromptFormat> format = std::nullopt);

// Throws Error naming the line when `text` is not valid UTF-8.
void check_utf8(const std::string& path, int64_t line, std::string_view text);

// 64-bit FNV-1a of `bytes`: the identity of a prompt file and of settings.
uint64_t fnv1a64(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ULL);

}  // namespace strata
