// One request of an OpenAI batch file (the Batch API's JSONL input, which
// vLLM's run-batch also reads):
//
//   {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
//    "body": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}}
//
// url "/v1/chat/completions" takes "messages" (a list of {"role", "content"},
// content a string or a list of {"type": "text", "text"} parts, joined with
// "\n"); url "/v1/completions" takes "prompt" (a string, or a list holding
// one string). Body parameters read: "max_tokens" / "max_completion_tokens"
// (integer >= 1), "temperature" (0 to 2), "top_p" (above 0, at most 1),
// "seed" (integer: the request's own random stream, so equal requests with
// equal seeds give equal completions), "stop" (a string or up to 4 strings).
// "model", "user", "metadata", "store", "service_tier" and "stream_options"
// are accepted and do not change the output; "n" 1, "stream" false,
// "logprobs" false / null (0 asks for the chosen tokens' log probabilities:
// refused), "echo" false, "best_of" 1,
// "frequency_penalty" / "presence_penalty" 0 and "suffix" null likewise.
// Anything else, or another value of those, is an unsupported parameter.
//
// A line with a problem does not stop the job: it is answered with an error
// (openai_response.h), so parse_openai_request never throws for a line's
// content. Error codes: "invalid_json" (not a JSON object, not UTF-8),
// "invalid_request" (a field missing or of the wrong type or range),
// "unsupported_parameter", "invalid_url", "duplicate_custom_id" (set by the
// prompt file reader); the driver adds "context_length_exceeded" and
// "chat_template_error".
#pragma once

#include <string_view>

#include "generate/prompt_file.h"

namespace strata {

// Whether `line` (the first record of a JSONL file) is an OpenAI batch
// request: a JSON object with a "custom_id" or with "url" and "body".
bool looks_like_openai_request(std::string_view line);

// Reads `line` (line `rec.line` of the file) into `rec`: id (the custom_id),
// endpoint, text or messages, overrides. A problem sets rec.error_code and
// rec.error (a message naming the line and the field) instead.
void parse_openai_request(std::string_view line, PromptRecord& rec);

}  // namespace strata
