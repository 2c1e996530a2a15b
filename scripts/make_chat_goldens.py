#!/usr/bin/env python3
"""Golden renderings of the chat templates in tests/data/chat-templates/.

Each template is rendered with Python's jinja2 the way transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, the loopcontrols extension, a `generation` block that renders
its body, tojson as json.dumps with ensure_ascii=False, raise_exception,
strftime_now) for every conversation below, with and without the generation
prompt where it matters, and written to
tests/data/chat-templates/goldens.json: per case the template, the
conversation, the variables and the exact text, or the error the template
raised. strftime_now is pinned to 2026-01-15 so the goldens do not change
with the day; the tests pin the renderer to the same date.

Needs only jinja2 (pip install jinja2):  python3 scripts/make_chat_goldens.py
"""
import datetime
import json
import os

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "tests", "data", "chat-templates")
DATE = datetime.datetime(2026, 1, 15, 9, 30, 0)


class Generation(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return DATE.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALL = {"type": "function", "id": "call_1a2b3c4d5",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are a terse assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hi, I am Ada."},
                   {"role": "assistant", "content": "Nice to meet you, Ada!"},
                   {"role": "user", "content": "What is my name?"}],
    "system_multi_turn": [{"role": "system", "content": "Answer in French."},
                          {"role": "user", "content": "Good morning"},
                          {"role": "assistant", "content": "Bonjour !"},
                          {"role": "user", "content": "How are you?"}],
    "ends_with_assistant": [{"role": "user", "content": "Say yes."},
                            {"role": "assistant", "content": "Yes."}],
    "unicode": [{"role": "system", "content": "Réponds poliment. 你好 🌍"},
                {"role": "user", "content": "Ünïcödé — “quotes” and emoji 🎉\ttab"}],
    "whitespace": [{"role": "user", "content": "  padded question?  \n\n"},
                   {"role": "assistant", "content": "\n An answer. \n"},
                   {"role": "user", "content": "line one\nline two"}],
    "empty_system": [{"role": "system", "content": ""},
                     {"role": "user", "content": "Nothing to add."}],
    "thinking": [{"role": "user", "content": "Think first: 3*7?"},
                 {"role": "assistant", "content": "<think>\n3 times 7 is 21.\n</think>\n\n21"},
                 {"role": "user", "content": "And 3*8?"}],
    "tools": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tool_call": [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_1a2b3c4d5", "name": "get_weather",
                   "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"}],
    "quotes_and_braces": [{"role": "user", "content": "Print {{ x }} and {% y %} and 'single' \"double\" \\ back"}],
}
WITH_TOOLS = {"tools", "tool_call"}

# The language itself, one feature per case: (template, variables).
LANGUAGE = [
    ("a {{ x }} b\n", {"x": 1}),
    ("  {% if true %}\n    yes\n  {% endif %}\nend", {}),
    ("{%- if true -%}   x   {%- endif -%}  \n", {}),
    ("  {%+ if true %}kept{% endif +%}\nnext", {}),
    ("a {# comment #}\n  {# whole line #}\nb", {}),
    ("{% for m in xs %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("{% for m in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     {"xs": [1, 2]}),
    ("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     {"xs": [1, 2, 3, 4, 5]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}", {"d": {"b": 1, "a": [1, "x"]}}),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", {}),
    ("{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t %}block {{ a }}{% endset %}[{{ t }}]", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ada') }} {{ greet('Bob', punct='?') }}", {}),
    ("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("{% macro inner() %}{{ caller is defined }}{% endmacro %}{% macro outer(n) %}[{{ caller() }}|"
     "{{ inner() }}|{{ n }}]{% endmacro %}{% call outer(1) %}x{% endcall %}{{ outer is defined }}",
     {}),
    ("{{ none }} {{ true }} {{ 1.0 }} {{ 1.5e-7 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e16 }}", {}),
    ("{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ \"it's\" }} {{ ('t', 1) }}", {}),
    ("{{ 'abc'[1] }}{{ 'héllo'[1:3] }}{{ xs[-1] }}{{ xs[::-1] }}{{ xs[1:] }}{{ 'abcdef'[::2] }}", {"xs": [1, 2, 3]}),
    ("{{ 'a' ~ 1 ~ none }} {{ 'x' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 'b' > 'a' }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}", {}),
    ("{{ x if x else 'no' }} {{ 'y' if false }}|{{ not x and 1 or 2 }}", {"x": 0}),
    ("{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | upper }}{{ 'Hello' | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("{{ xs | length }} {{ 'héllo' | length }} {{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ xs | sum }} {{ xs | max }} {{ xs | min }}",
     {"xs": [3, 1, 2]}),
    ("{{ d | tojson }} {{ d | tojson(indent=2) }} {{ 'ü\"\\n' | tojson }} {{ [] | tojson }} {{ {} | tojson }}",
     {"d": {"a": 1, "b": [True, None, 1.5, "é"], "c": {}}}),
    ("{{ users | map(attribute='name') | join(' ') }} {{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | rejectattr('admin') | list | length }}",
     {"users": [{"name": "ada", "admin": True}, {"name": "bob", "admin": False}]}),
    ("{{ xs | select('odd') | list }} {{ xs | reject('equalto', 2) | list }} {{ xs | map('string') | join('-') }} {{ users | selectattr('role', 'equalto', 'user') | list | length }}",
     {"xs": [1, 2, 3], "users": [{"role": "user"}, {"role": "tool"}]}),
    ("{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ x | d('no') }} {{ 'a-b' | replace('-', '+') }} {{ 3.7 | int }} {{ '4' | int + 1 }} {{ -3 | abs }} {{ 2.567 | round(1) }}",
     {"x": 0}),
    ("{{ d | items | list }} {{ d | dictsort }} {{ [3, 1, 2] | sort }} {{ [1, 1, 2] | unique | list }} {{ 'a b  c' | wordcount }} {{ 'line1\nline2' | indent(2) }}",
     {"d": {"b": 2, "a": 1}}),
    ("{{ x is defined }} {{ y is defined }} {{ x is string }} {{ 3 is number }} {{ none is none }} {{ d is mapping }} {{ d is iterable }} {{ 4 is divisibleby(2) }} {{ 3 is odd }} {{ x is not none }} {{ true is sameas true }}",
     {"x": "s", "d": {}}),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'k=v=w'.split('=', 1) }} {{ 'a.b.c'.rsplit('.', 1) }} {{ '  x '.strip() }}|{{ 'xxax'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}",
     {}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hello'.replace('l', 'L') }} {{ 'Hello'.find('l') }} {{ 'Hello'.upper() }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.count('a') }}",
     {}),
    ("{{ d.get('a') }} {{ d.get('z', 'none') }} {{ d.get('z') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.a }} {{ d['a'] }} {{ d.missing }}|",
     {"d": {"a": 1}}),
    ("{% if x %}a{% elif y %}b{% else %}c{% endif %}{% if not x and not y %}d{% endif %}", {"x": False, "y": True}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ messages[0]['content'] }} {{ messages[-1].role }}",
     {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("{{- bos_token -}}\n{%- for m in messages -%}\n  {{- m.role | upper }}: {{ m.content | trim }}\n{% endfor -%}\n",
     {"bos_token": "<s>", "messages": [{"role": "user", "content": " hi "}]}),
    ("{{ \"say \\\"hi\\\"\\n\\t\\u00e9\\x41\" }} {{ 'it\\'s' }}", {}),
    ("{{ 'x' ~ strftime_now('%Y-%m-%d %d %b %Y') }}", {}),
    ("{{ 5 if x is defined and x > 3 else 0 }} {{ (1, 2) | list }} {{ -(2) }} {{ 2 * -3 }} {{ 1 + 2 * 3 - 4 / 2 }}", {"x": 4}),
]


def main():
    env = environment()
    cases = []
    for name in sorted(os.listdir(DIR)):
        if not name.endswith(".jinja"):
            continue
        source = open(os.path.join(DIR, name), encoding="utf-8").read()
        template = env.from_string(source)
        for conv_name, messages in CONVERSATIONS.items():
            for add_gen in (True, False):
                if conv_name != "ends_with_assistant" and not add_gen and conv_name not in ("user", "multi_turn"):
                    continue
                variables = {"messages": messages, "add_generation_prompt": add_gen,
                             "bos_token": "<|bos|>", "eos_token": "<|eos|>"}
                if conv_name in WITH_TOOLS:
                    variables["tools"] = [WEATHER]
                case = {"template": name, "conversation": conv_name, "variables": variables}
                try:
                    case["text"] = template.render(**variables)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    language = []
    for source, variables in LANGUAGE:
        case = {"source": source, "variables": variables}
        try:
            case["text"] = env.from_string(source).render(**variables)
        except jinja2.exceptions.TemplateError as e:
            case["error"] = str(e)
        language.append(case)
    out = os.path.join(DIR, "goldens.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "date": DATE.isoformat(), "cases": cases,
                   "language": language}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print(f"{len(cases)} cases ({n_err} raise an error), {len(language)} language cases -> {out}")


if __name__ == "__main__":
    main()
