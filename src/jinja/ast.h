// The syntax tree of a Jinja template (parser.h builds it, render.cpp walks
// it). Every node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace strata::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
};

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // kids: the items
    kTuple,    // kids: the items
    kDict,     // kids: key, value, key, value, ...
    kAttr,     // kids[0].name
    kItem,     // kids[0][kids[1]]
    kSlice,    // kids[0][kids[1]:kids[2]:kids[3]] (null kids: omitted)
    kCall,     // kids[0](args)
    kFilter,   // kids[0] | name(args)
    kTest,     // kids[0] is [not] name(args)
    kUnary,    // op kids[0]: "-", "+", "not"
    kBinary,   // kids[0] op kids[1]: + - * / // % ** ~ and or
    kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ...
    kCond,     // kids[0] if kids[1] else kids[2] (kids[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // kName, kAttr, kFilter, kTest; kUnary/kBinary: the operator
  std::vector<ExprPtr> kids;
  std::vector<std::string> ops;  // kCompare
  CallArgs args;                 // kCall, kFilter, kTest
  bool negated = false;          // kTest
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches, else_body
    kFor,          // targets in expr [if cond]: body, else_body
    kSet,          // target = expr (target: a name, ns.attr or a tuple of names)
    kSetBlock,     // {% set name %}body{% endset %}
    kMacro,        // name(params): body
    kCallBlock,    // {% call(params) expr %}body{% endcall %}
    kFilterBlock,  // {% filter expr %}body{% endfilter %} (expr: a filter on nothing)
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}body{% endgeneration %}: the body as it is
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;    // output, for's iterable, set's value, call's call, filter
  ExprPtr target;  // set
  ExprPtr cond;    // for's filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body body, else_body;
  std::vector<std::string> targets;                     // for's loop variables; setblock's name
  std::string name;                                     // macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro, call block
};

}  // namespace strata::jinja
