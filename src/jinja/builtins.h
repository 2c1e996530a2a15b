// Jinja's filters, tests and the methods of strings, lists and dicts, with
// jinja2's and Python's meanings (template.h). Filters: abs, capitalize,
// count, d / default, dictsort, e / escape, first, float, indent, int, items,
// join, last, length, list, lower, map, max, min, reject, rejectattr,
// replace, reverse, round, safe, select, selectattr, sort, string, sum,
// title, tojson, trim, unique, upper, wordcount. Tests: boolean, callable,
// defined, divisibleby, eq / equalto / ==, even, false, float, ge / >=,
// gt / >, in, integer, iterable, le / <=, lower, lt / <, mapping, ne / !=,
// none, number, odd, sameas, sequence, string, true, undefined, upper.
// String methods: capitalize, count, endswith, find, format-free subset:
// isalnum, isalpha, isdigit, islower, isspace, isupper, join, lower, lstrip,
// replace, rfind, rsplit, rstrip, split, splitlines, startswith, strip,
// title, upper; dict methods: get, items, keys, values.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace strata::jinja {

// How a filter or test calls back into the interpreter (map, select...).
struct Callbacks {
  std::function<Value(std::string_view filter, const Value& input, Args& args)> filter;
  std::function<bool(std::string_view test, const Value& input, Args& args)> test;
};

// Applies filter `name`; throws Error naming args.where for an unknown one.
Value apply_filter(std::string_view name, const Value& input, Args& args, const Callbacks& cb);

// Runs test `name`; throws Error for an unknown one.
bool apply_test(std::string_view name, const Value& input, Args& args);

// The attribute `name` of `obj` as jinja2 looks it up: a method of a
// string, list or dict first, then a dict's item; Undefined when neither.
Value get_attr(const Value& obj, const std::string& name);

// obj[key]: a dict's item, or a list's or string's element (negative
// indices count from the end); Undefined when there is none.
Value get_item(const Value& obj, const Value& key);

// Python's iteration: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v, const std::string& where);

// Python's len().
int64_t length(const Value& v, const std::string& where);

}  // namespace strata::jinja
