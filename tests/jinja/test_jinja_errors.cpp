// What the interpreter refuses: every error names the template and the line
// (syntax errors, unsupported statements, filters and tests, calling what is
// not callable, the sandbox's read-only lists, raise_exception, endless
// macro recursion), in one line.
#include <gtest/gtest.h>

#include "core/error.h"
#include "jinja/template.h"

namespace strata::jinja {
namespace {

std::string error_of(const std::string& source, Dict vars = {}) {
  try {
    Template t(source, "t.jinja");
    t.render(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& source, int line, const std::string& part) {
  const std::string msg = error_of(source);
  EXPECT_NE(msg.find("t.jinja"), std::string::npos) << source << " -> " << msg;
  EXPECT_NE(msg.find("template line " + std::to_string(line)), std::string::npos)
      << source << " -> " << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << source << " -> " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(JinjaErrors, NameTheTemplateAndTheLine) {
  expect_error("a\n{% if x %}\nb", 3, "missing {% endif %}");
  expect_error("a\n\n{{ x | frobnicate }}", 3, "the filter 'frobnicate' is not supported");
  expect_error("{% include 'other.jinja' %}", 1, "the statement 'include' is not supported");
  expect_error("\n{{ x is shiny }}", 2, "the test 'shiny' is not supported");
  expect_error("\n\n{{ foo() }}", 3, "'foo' is undefined");
  expect_error("{% set xs = [1] %}\n{% set _ = xs.append(2) %}", 2, "'append' is undefined");
  expect_error("x\n{{ raise_exception('Roles must alternate') }}", 2,
               "the template raised an error: Roles must alternate");
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", 1, "deeper than 64");
  expect_error("{{ 1 + 'a' }}", 1, "unsupported operand types for +: 'int' and 'str'");
  expect_error("{% for x in 5 %}{% endfor %}", 1, "'int' object is not iterable");
  expect_error("{% set x = 1 %}\n{% set x.y = 2 %}", 2, "only a namespace() takes attributes");
  expect_error("{% break %}", 1, "outside a loop");
  expect_error("{% for x in xs recursive %}{% endfor %}", 1, "recursive loops are not supported");
}

TEST(JinjaErrors, NothingRepeatedAHugeNumberOfTimesIsNothingAtOnce) {
  // Found by fuzzing: an empty list or string times 4e11 looped 4e11 times.
  Template t("{{ '' * 415555555555 }}|{{ ([] * 415555555555) | length }}", "t.jinja");
  EXPECT_EQ(t.render({}), "|0");
}

TEST(JinjaErrors, RunawayTemplatesStopWithAnError) {
  // A template is a model file's content: it must not hang, exhaust memory
  // or overflow the stack, whatever it says.
  expect_error("{{ 9223372036854775807 + 1 }}", 1, "integer overflow");
  expect_error("{{ 3 ** 99 }}", 1, "integer overflow");
  expect_error("{{ -(-9223372036854775807 - 1) }}", 1, "integer overflow");
  expect_error("{{ 99999999999999999999 }}", 1, "out of range");
  expect_error("{{ 'xx' * 100000000 }}", 1, "too large");
  expect_error("{% set m = [1, 2] %}{{ m * 400000 }}", 1, "too large");
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               1, "more than 100000 loop iterations");
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}\n{{ ns.me | tojson }}", 2,
               "deeper than 100 levels");
  expect_error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", 1,
               "nested deeper than 200 levels");
  expect_error("{{ 'x' | indent(-5) }}", 1, "indent width");
}

TEST(JinjaErrors, LexerProblemsNameTheLine) {
  for (const auto& [source, part] : std::vector<std::pair<std::string, std::string>>{
           {"a\n{{ 'unclosed }}", "a string is not closed"},
           {"a\n{{ x", "a {{ tag is not closed"},
           {"a\n{# never closed", "a comment is not closed"},
           {"a\n{{ x ; y }}", "unexpected character ';'"}}) {
    const std::string msg = error_of(source);
    EXPECT_NE(msg.find("line 2"), std::string::npos) << source << " -> " << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << source << " -> " << msg;
  }
}

TEST(JinjaErrors, WhatRendersStillRendersAfterAnError) {
  // A template object is reusable: an error leaves nothing behind.
  Template t("{% if boom %}{{ raise_exception('no') }}{% endif %}ok", "t");
  Dict boom;
  boom.set("boom", Value::boolean(true));
  EXPECT_THROW(t.render(boom), Error);
  EXPECT_EQ(t.render({}), "ok");
}

}  // namespace
}  // namespace strata::jinja
