// OpenAI batch answers (openai_response.h).
#include "generate/openai_response.h"

#include "core/error.h"

namespace strata {
namespace {

std::string hex_id(const Job& job, std::string_view salt) {
  const std::string key = fmt::format("{}|{}|{}", salt, job.index, job.id.dump());
  return fmt::format("{:016x}", fnv1a64(key));
}

}  // namespace

OrderedJson openai_answer(const Job& job, const std::string& completion, size_t completion_tokens,
                          const char* finish_reason, const std::string& model, int64_t created) {
  STRATA_ASSERT(job.endpoint != Endpoint::kNone || !job.error_code.empty());
  OrderedJson a;
  a["id"] = "batch_req_" + hex_id(job, "batch");
  a["custom_id"] = job.id.is_string() ? OrderedJson(job.id.get<std::string>()) : OrderedJson();
  if (!job.error_code.empty()) {
    a["response"] = nullptr;
    a["error"] = {{"code", job.error_code}, {"message", job.skipped}};
    return a;
  }
  const bool chat = job.endpoint == Endpoint::kChatCompletions;
  OrderedJson choice;
  choice["index"] = 0;
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", completion}};
  } else {
    choice["text"] = completion;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;

  OrderedJson body;
  body["id"] = (chat ? "chatcmpl-" : "cmpl-") + hex_id(job, "body");
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = created;
  body["model"] = model;
  body["choices"] = OrderedJson::array({choice});
  body["usage"] = {{"prompt_tokens", job.tokens.size()},
                   {"completion_tokens", completion_tokens},
                   {"total_tokens", job.tokens.size() + completion_tokens}};

  a["response"] = {
      {"status_code", 200}, {"request_id", "req_" + hex_id(job, "request")}, {"body", body}};
  a["error"] = nullptr;
  return a;
}

}  // namespace strata
