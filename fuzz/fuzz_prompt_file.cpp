// Prompt files: plain text, JSONL and OpenAI batch files (the first byte of
// the input picks the file name, and so the format rule by extension, or
// forces the OpenAI format).
#include "fuzz_input.h"
#include "generate/prompt_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size == 0) return 0;
  const char* name = data[0] % 3 == 0 ? "prompts.txt" : "prompts.jsonl";
  std::optional<PromptFormat> format;
  if (data[0] % 3 == 2) format = PromptFormat::kOpenAi;
  return fuzz::guarded(
      [&] { (void)parse_prompt_file(name, fuzz::as_text(data + 1, size - 1), format); });
}
