// Cuts a Jinja template into text and tag tokens the way jinja2 does with
// transformers' settings: trim_blocks (the first newline after a block or
// comment tag is dropped), lstrip_blocks (spaces and tabs before a block or
// comment tag that starts its line are dropped), "-" in a tag strips all
// white space on that side, "+" turns the two settings off for that tag,
// newlines are "\n", and one newline at the end of the template is dropped
// (keep_trailing_newline=False). Comments leave no token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;  // kString: the value with escapes undone
  int line = 0;
};

// Throws Error naming `name` and the line for an unclosed tag or string, or a
// character that is not part of Jinja's syntax.
std::vector<Token> lex(std::string_view source, const std::string& name);

}  // namespace strata::jinja
