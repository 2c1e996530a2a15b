// Chat prompts from the model's own chat template: a Jinja template (GGUF
// tokenizer.chat_template, tokenizer_config.json, chat_template.jinja, or
// --chat-template FILE) rendered by src/jinja exactly as transformers'
// apply_chat_template renders it with jinja2. The template sees `messages`
// (a list of {"role", "content", ...}), `tools` when given,
// `add_generation_prompt`, `bos_token` and `eos_token` (the texts of the
// model's tokens), and `strftime_now` (today's date, as transformers: Llama
// 3.1+ templates write it into the system block, so the same conversation
// renders differently on another day). The template writes BOS where it
// wants it, so the rendered text is encoded without adding one.
//
// A template that does not parse, or that raises an error for a
// conversation (raise_exception: "System role not supported", "roles must
// alternate"), is an Error naming its origin and its line.
#pragma once

#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata {

namespace jinja {
class Template;
}

class Tokenizer;

// One message of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (passed as given)
  std::string content;
};

class ChatTemplate {
 public:
  // Compiles `source`; `origin` names it in messages (the model, or the
  // file). Throws Error when it is empty or does not parse.
  ChatTemplate(std::string_view source, std::string origin, std::string bos_text,
               std::string eos_text);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The model's template (or the one in `override_file` when not empty),
  // with the texts of its BOS and EOS tokens. Throws Error naming the model
  // when it has none ("pass --chat-template FILE.jinja").
  static ChatTemplate for_model(const Tokenizer& tokenizer, const std::string& model_name,
                                const std::string& override_file = {});

  // The text of a conversation: `messages` a JSON list of messages,
  // `tools` a JSON list of tool definitions or null.
  std::string render_conversation(const nlohmann::ordered_json& messages,
                                  bool add_generation_prompt = true,
                                  const nlohmann::ordered_json& tools = nullptr) const;
  std::string render(std::span<const ChatMessage> messages) const;
  // One user turn, after the system message when there is one.
  std::string render(const std::optional<std::string>& system, std::string_view user) const;

  const std::string& origin() const { return origin_; }
  // strftime_now reads this time instead of the clock (tests, reproducible renders).
  void pin_time(std::time_t t) { pinned_time_ = t; }

 private:
  std::unique_ptr<jinja::Template> template_;
  std::string origin_, bos_text_, eos_text_;
  std::optional<std::time_t> pinned_time_;
};

}  // namespace strata
