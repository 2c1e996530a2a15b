// Chat prompts for --chat without a Jinja engine: the model's chat template
// (GGUF tokenizer.chat_template, or tokenizer_config.json /
// chat_template.jinja) is recognised as one of two styles and rendered by
// hand, for one turn (optional system message and one user message) or for a
// whole conversation (a list of messages, as the OpenAI chat format sends),
// followed by the assistant header (add_generation_prompt):
//
//   kChatMl  <|im_start|>system\n{system}<|im_end|>\n
//            <|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n
//            (SmolLM2, Qwen2, ...); every message of a conversation is one
//            such block, its role written as given. When the template writes a fixed system
//            message for conversations without one (SmolLM2: "You are a
//            helpful AI assistant named SmolLM, ..."), that text is read out of
//            the template and used as the default.
//   kLlama3  {bos}<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>
//            <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//            <|start_header_id|>assistant<|end_header_id|>\n\n
//            A conversation whose first message is a system message has it
//            in the system block; every other message gets its own header.
//            Llama 3.1+ templates always write the system block, opening with
//            "Cutting Knowledge Date: ...\nToday Date: ...\n\n"; the date is the
//            template's fixed fallback (e.g. "26 Jul 2024"), never today's, so
//            a job renders the same prompts on any day.
//
// The BOS token's text is written first when the template refers to
// bos_token; the rendered text is then encoded without adding BOS again.
// Content is trimmed when the template trims it (Llama 3's "| trim").
// Anything else is an Error naming the model and the supported styles.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace strata {

// One message of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (written as given)
  std::string content;
};

enum class ChatStyle { kChatMl, kLlama3 };

struct ChatTemplate {
  ChatStyle style = ChatStyle::kChatMl;
  std::optional<std::string> default_system;  // used when a prompt has no system message
  std::string system_preamble;                // Llama 3.1+: opens every system block
  bool always_system = false;                 // the system block is written even when empty
  bool trim_content = false;
  std::string bos_text;  // "" when the template writes no BOS

  // Recognises `template_text` of model `model_name` (for messages).
  // `bos_text`: the text of the model's BOS token ("" when it has none).
  // Throws Error when the template is empty or of an unsupported style.
  static ChatTemplate parse(std::string_view template_text, std::string_view bos_text,
                            const std::string& model_name);

  // The prompt for one user turn, ending with the assistant header.
  std::string render(const std::optional<std::string>& system, std::string_view user) const;

  // The prompt for a conversation, ending with the assistant header. The
  // default system message is used when the first message is not a system one.
  std::string render(std::span<const ChatMessage> messages) const;
};

std::string_view chat_style_name(ChatStyle s);  // "ChatML", "Llama-3"

}  // namespace strata
