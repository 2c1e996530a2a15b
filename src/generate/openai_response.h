// The answer to one OpenAI batch request (openai_request.h): one line of the
// output file, shaped as the OpenAI Batch API and vLLM's run-batch write it,
// so tools that read those read it.
//
// Answered:
//   {"id": "batch_req_<hex>", "custom_id": "...",
//    "response": {"status_code": 200, "request_id": "req_<hex>",
//                 "body": {"id": "chatcmpl-<hex>", "object": "chat.completion",
//                          "created": <unix time>, "model": "<model>",
//                          "choices": [{"index": 0,
//                                       "message": {"role": "assistant", "content": "..."},
//                                       "logprobs": null, "finish_reason": "stop"}],
//                          "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}},
//    "error": null}
// A completions request has "object": "text_completion", an id "cmpl-<hex>"
// and choices [{"index": 0, "text": "...", "logprobs": null, "finish_reason"}].
// finish_reason is "stop" (an end token or a stop string) or "length".
//
// Not answered (a problem with the line, or a prompt longer than the context):
//   {"id": "batch_req_<hex>", "custom_id": "..." (null when the line has none),
//    "response": null, "error": {"code": "...", "message": "line 7: ..."}}
//
// The ids are hashes of the request's position and custom_id, so a rerun of
// the same file gives the same ids; only "created" tells the runs apart.
#pragma once

#include <cstdint>
#include <string>

#include "generate/driver.h"

namespace strata {

// The answer line for `job`; `model` names the model in the body, `created`
// is the Unix time of the answer. A job with an error_code gets the error
// shape (completion and finish_reason are then unused).
OrderedJson openai_answer(const Job& job, const std::string& completion, size_t completion_tokens,
                          const char* finish_reason, const std::string& model, int64_t created);

}  // namespace strata
