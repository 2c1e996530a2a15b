// Chat templates through the Jinja interpreter (chat_template.h).
#include "generate/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace strata {

ChatTemplate::ChatTemplate(std::string_view source, std::string origin, std::string bos_text,
                           std::string eos_text)
    : origin_(std::move(origin)), bos_text_(std::move(bos_text)), eos_text_(std::move(eos_text)) {
  if (source.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    fail(
        "{}: the chat template is empty; pass --chat-template FILE.jinja, or write the prompts in "
        "the model's own format without --chat",
        origin_);
  }
  template_ = std::make_unique<jinja::Template>(source, origin_);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::for_model(const Tokenizer& tokenizer, const std::string& model_name,
                                     const std::string& override_file) {
  const int32_t bos = tokenizer.bos_id();
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  std::string bos_text = bos >= 0 ? tokenizer.token_text(bos) : "";
  std::string eos_text = eos.empty() ? "" : tokenizer.token_text(eos.front());
  if (!override_file.empty()) {
    std::ifstream in(override_file, std::ios::binary);
    if (!in) fail("{}: cannot read the chat template (--chat-template)", override_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ChatTemplate(ss.str(), override_file, std::move(bos_text), std::move(eos_text));
  }
  if (tokenizer.chat_template().empty()) {
    fail(
        "{}: the model has no chat template; pass --chat-template FILE.jinja, or write the "
        "prompts in the model's own format without --chat",
        model_name);
  }
  return ChatTemplate(tokenizer.chat_template(), model_name + " (its chat template)",
                      std::move(bos_text), std::move(eos_text));
}

std::string ChatTemplate::render_conversation(const nlohmann::ordered_json& messages,
                                              bool add_generation_prompt,
                                              const nlohmann::ordered_json& tools) const {
  jinja::Dict vars;
  vars.set("messages", jinja::from_json(messages));
  if (!tools.is_null()) vars.set("tools", jinja::from_json(tools));
  vars.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.set("bos_token", jinja::Value::string(bos_text_));
  vars.set("eos_token", jinja::Value::string(eos_text_));
  if (pinned_time_) vars.set("strftime_now", jinja::strftime_now_function(pinned_time_));
  return template_->render(vars);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render_conversation(list);
}

std::string ChatTemplate::render(const std::optional<std::string>& system,
                                 std::string_view user) const {
  std::vector<ChatMessage> messages;
  if (system) messages.push_back({"system", *system});
  messages.push_back({"user", std::string(user)});
  return render(messages);
}

}  // namespace strata
