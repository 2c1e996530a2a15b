// A Jinja template interpreter for what chat templates use, with jinja2's
// output byte for byte under transformers' settings (trim_blocks,
// lstrip_blocks, loop controls, tojson without ASCII escapes,
// raise_exception, strftime_now). No C++ Jinja library is packaged for
// Debian; this is the subset Hugging Face chat templates are written in
// (lexer.h, parser.h for the syntax; builtins.h for filters, tests and
// methods). Rendering runs in a sandbox as transformers' does: nothing
// outside the template's variables is reachable, and lists and dicts cannot
// be changed (only namespaces, through `set ns.attr`).
//
// Errors (syntax, an unknown filter or test, a type error, raise_exception)
// are an Error naming the template and its line.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace strata::jinja {

// transformers' strftime_now(format): the local time formatted with
// strftime, at `pinned` instead of the clock when given.
Value strftime_now_function(std::optional<std::time_t> pinned = std::nullopt);

class Template {
 public:
  // Parses `source`; `name` names it in messages (a file or a model).
  Template(std::string_view source, std::string name);

  // Renders with `variables` (messages, tools, add_generation_prompt,
  // bos_token, ...) beside the globals range, namespace, dict,
  // raise_exception and strftime_now.
  std::string render(const Dict& variables) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<Body> body_;
};

}  // namespace strata::jinja
