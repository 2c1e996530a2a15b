// Chat templates (a model file's content): the input is a Jinja template,
// parsed and rendered for a small conversation with tools, as --chat and
// render-chat run it.
#include "fuzz_input.h"
#include "jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const jinja::Dict vars = [] {
    jinja::Dict d;
    d.set("messages", jinja::from_json(nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi \u00e9 {{ x }}"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 1.5]}}}]},
      {"role": "tool", "content": "42"}])")));
    d.set("tools", jinja::from_json(nlohmann::ordered_json::parse(
                       R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])")));
    d.set("add_generation_prompt", jinja::Value::boolean(true));
    d.set("bos_token", jinja::Value::string("<s>"));
    d.set("eos_token", jinja::Value::string("</s>"));
    d.set("strftime_now", jinja::strftime_now_function(0));
    return d;
  }();
  return fuzz::guarded([&] {
    const jinja::Template t(fuzz::as_text(data, size), "fuzz.jinja");
    (void)t.render(vars);
  });
}
