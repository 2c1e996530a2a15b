// `strata render-chat`: prints the text the model is fed for a conversation,
// exactly (no newline added): the model's chat template (or
// --chat-template FILE) rendered with the messages of a JSON file, the tools
// of another when given, and the generation prompt unless
// --no-generation-prompt (src/generate/chat_template.h). Only the tokenizer
// is read; no weights are loaded.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "generate/chat_template.h"
#include "io/json.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using OrderedJson = nlohmann::ordered_json;

// The JSON of `path` with its key order kept (tools are written with tojson).
OrderedJson read_ordered_json(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the {} file; check the path", path, flag);
  std::ostringstream ss;
  ss << in.rdbuf();
  (void)parse_json(path, ss.str(), flag);  // UTF-8, syntax and repeated keys, named
  return OrderedJson::parse(ss.str());
}

struct Options {
  std::string model, chat_template, messages, tools;
  bool no_generation_prompt = false;
};

int run(const Options& o) {
  OrderedJson messages = read_ordered_json(o.messages, "--messages");
  if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
  if (!messages.is_array() || messages.empty()) {
    fail(
        "{}: expected a non-empty list of messages ({{\"role\": ..., \"content\": ...}}), or an "
        "object with one under \"messages\"",
        o.messages);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      fail("{}: message {} has no \"role\" string", o.messages, i);
    }
  }
  OrderedJson tools = nullptr;
  if (!o.tools.empty()) {
    tools = read_ordered_json(o.tools, "--tools");
    if (tools.is_object() && tools.contains("tools")) tools = tools["tools"];
    if (!tools.is_array()) fail("{}: expected a list of tool definitions", o.tools);
  }
  const auto tokenizer = Tokenizer::from_path(o.model);
  const ChatTemplate chat = ChatTemplate::for_model(*tokenizer, o.model, o.chat_template);
  const std::string text = chat.render_conversation(messages, !o.no_generation_prompt, tools);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    fail("cannot write the rendered text to stdout");
  }
  return 0;
}

const Command kRenderChat{
    "render-chat", "Print the text a conversation becomes through the model's chat template", 75,
    [](CLI::App& sub) -> Runner {
      auto o = std::make_shared<Options>();
      sub.add_option("--model", o->model, "GGUF file, tokenizer.json, or model directory")
          ->required();
      sub.add_option("--messages", o->messages,
                     "JSON file: a list of messages {\"role\", \"content\", ...} (or an object "
                     "with one under \"messages\")")
          ->required();
      sub.add_option("--tools", o->tools, "JSON file: a list of tool definitions for the template");
      sub.add_option("--chat-template", o->chat_template,
                     "Jinja file to use instead of the model's chat template");
      sub.add_flag("--no-generation-prompt", o->no_generation_prompt,
                   "End after the last message (no assistant header)");
      return [o]() { return run(*o); };
    }};

}  // namespace
}  // namespace strata::cli
