// Parses the tokens of a Jinja template (lexer.h) into its syntax tree
// (ast.h). Statements: if / elif / else, for (with tuple targets, an `if`
// filter, `else`, loop.*), set (a name, a namespace attribute, a tuple of
// names; and the block form), macro, call, filter, break, continue and
// transformers' generation block. Expressions: literals, lists, tuples,
// dicts, attributes, subscripts and slices, calls with keyword arguments,
// filters, tests, the arithmetic, comparison, membership and logic operators
// and the conditional expression, with jinja2's precedences. Anything else
// is an Error naming the template and the line.
#pragma once

#include <string>
#include <string_view>

#include "jinja/ast.h"

namespace strata::jinja {

Body parse(std::string_view source, const std::string& name);

}  // namespace strata::jinja
