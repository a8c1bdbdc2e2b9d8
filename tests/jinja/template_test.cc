// The Jinja engine of chat templates: whitespace control, loops and scopes, macros, expressions,
// filters and tests, errors with their line and column, and the bounds on hostile templates.
//
// The expected renderings are what Python's jinja2 renders with the settings of transformers'
// apply_chat_template, which the engine follows. Where @huggingface/jinja (the reference of
// tests/serve/chat_template_test.cc) renders something else, a comment at the test says what.
#include "tessera/jinja/template.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/jinja/lexer.h"
#include "tessera/jinja/limits.h"
#include "tessera/jinja/parser.h"
#include "tessera/jinja/renderer.h"

namespace tessera::jinja {
namespace {

using nlohmann::ordered_json;

std::string render(std::string_view source, const ordered_json& context = ordered_json::object()) {
  return JinjaTemplate(source).render(context);
}

// The message of the Error that parsing or rendering throws.
std::string error_of(std::string_view source,
                     const ordered_json& context = ordered_json::object()) {
  try {
    JinjaTemplate(source).render(context);
  } catch (const Error& e) {
    return e.what();
  }
  return "(rendered without an error)";
}

void expect_error(std::string_view source, const std::string& mentions,
                  const ordered_json& context = ordered_json::object()) {
  const std::string message = error_of(source, context);
  EXPECT_NE(message.find(mentions), std::string::npos) << source << "\n  gave: " << message;
}

// The reference prints none and undefined as "", booleans as true/false and lists and dicts as
// JSON: ["a", null]. Python's str() is what a model was trained on.
TEST(JinjaTemplate, PrintsValuesAsPythonsStrDoes) {
  EXPECT_EQ(render("[{{ none }}][{{ missing }}][{{ true }}][{{ False }}]"),
            "[None][][True][False]");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}, (1,), ('x', 2)] }}"),
            "[1, 'a', None, True, 1.5, [2], {'k': 'v'}, (1,), ('x', 2)]");
  EXPECT_EQ(render(R"({{ ["it's", 'say "hi"', 'both \' and "', 'tab\t'] }})"),
            R"(["it's", 'say "hi"', 'both \' and "', 'tab\t'])");
  EXPECT_EQ(render("{{ 10 / 4 }} {{ 10 / 5 }} {{ 0.1 * 3 }} {{ 1e16 }} {{ 123456789.0 * 10 }} "
                   "{{ 1.0e-7 }} {{ -0.0 }} {{ 2 ** 62 }} {{ 2 ** 0.5 }} {{ 2.50 }}"),
            "2.5 2.0 0.30000000000000004 1e+16 1234567890.0 1e-07 -0.0 4611686018427387904 "
            "1.4142135623730951 2.5");
  EXPECT_EQ(render("{{ dict(a=1, b=2) }} {{ namespace(a=1) }}"),
            "{'a': 1, 'b': 2} <Namespace {'a': 1}>");
  EXPECT_EQ(render("{{ x }}{{ y }}", {{"x", 1.0}, {"y", 2}}), "1.02");
}

TEST(JinjaTemplate, StringLiteralsDecodeAsPython) {
  EXPECT_EQ(render(R"({{ 'a' }}{{ "b" }}{{ 'it''s' }}{{ "a" "b" }})"), "abitsab");
  EXPECT_EQ(render(R"({{ "tab\tnew\nq\\ \x41\u00e9\U0001F600 \d \'" }})"),
            "tab\tnew\nq\\ Aé😀 \\d '");
}

TEST(JinjaTemplate, WhitespaceFollowsTrimAndLstripBlocks) {
  EXPECT_EQ(render("{%- if true -%}   a   {%- endif -%}   |"), "a|");
  EXPECT_EQ(render("{% if true %}\n  b\n{% endif %}|"), "  b\n|");
  EXPECT_EQ(render("  {% if true %}c{% endif %}  |"), "c  |");
  EXPECT_EQ(render("|  {% if true %}c{% endif %}  |"), "|  c  |");
  EXPECT_EQ(render("{#- comment -#}   d   {# comment #}\nx"), "d   x");
  EXPECT_EQ(render("x\n  {%+ if true %}e{% endif %}"), "x\n  e");
  EXPECT_EQ(render("a\n  {{ 'b' }}\n  {{- 'c' -}}  \nd"), "a\n  bcd");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n"), "    1\n    2\n");
  // Windows line breaks are read as \n, and one line break at the very end goes.
  EXPECT_EQ(render("{% if true %}\r\na\r\n{% endif %}\r\n"), "a\n");
  EXPECT_EQ(
      render("{% raw %}{{ not parsed }}{% endraw %}|{% generation %}g{{ 1 }}{% endgeneration %}"),
      "{{ not parsed }}|g1");
}

TEST(JinjaTemplate, Loops) {
  EXPECT_EQ(render("{% for i in range(5) if i is odd %}{{ loop.index }}/{{ loop.length }}:{{ i }}"
                   "{{ ',' if not loop.last }}{% else %}none{% endfor %}"),
            "1/2:1,2/2:3");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}|"
                   "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}"),
            "b=1;a=2;|ba");
  // The reference refuses to loop over a string.
  EXPECT_EQ(render("{% for c in \"héllo\" %}{{ c }}.{% endfor %}|"
                   "{% for a, b in [[1, 2], (3, 4), \"xy\"] %}{{ a }}{{ b }}{% endfor %}"),
            "h.é.l.l.o.|1234xy");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.previtem is defined }}{{ loop.nextitem }}"
                   "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.index0 }}"
                   "{{ loop.cycle('o', 'e') }}{% endfor %}"),
            "Falseb21True0oTrue10False1e");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}"
                   "{{ loop.index }};{% endfor %}"),
            "121;122;");
  EXPECT_EQ(render("{% for m in messages %}{{ m.content|trim }}{% if not loop.last %}|{% endif %}"
                   "{% endfor %}",
                   {{"messages", {{{"content", " a "}}, {{"content", "b\n"}}}}}),
            "a|b");
  EXPECT_EQ(render("{% for x in missing %}x{% else %}nothing{% endfor %}"), "nothing");
  expect_error("{% for x in 5 %}{% endfor %}", "'int' object is not iterable");
  expect_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack");
}

// The reference keeps a set inside a loop from one iteration to the next (2341 here); jinja2
// starts each iteration afresh, which is why templates count with namespace().
TEST(JinjaTemplate, ScopesAreJinjas) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}"
                   "{{ x }}"),
            "2221");
  EXPECT_EQ(render("{% for i in [1] %}{% set inner = 5 %}{% endfor %}{{ inner is defined }}"
                   "{% if true %}{% set outer = 6 %}{% endif %}{{ outer }}"),
            "False6");
  EXPECT_EQ(render("{% set ns = namespace(n=0, items=[]) %}{% for x in range(3) %}"
                   "{% set ns.n = ns.n + x %}{% set ns.items = ns.items + [x] %}{% endfor %}"
                   "{{ ns.n }} {{ ns.items }} {{ ns.missing is defined }}"),
            "3 [0, 1, 2] False");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}"
                   "{% set s %}block {{ a }}{% endset %}[{{ s }}]"),
            "12(1, 2)[block 1]");
  EXPECT_EQ(
      render("{% set messages = messages[1:] %}{{ messages|length }}", {{"messages", {1, 2, 3}}}),
      "2");
  expect_error("{% set x = 1 %}{% set x.a = 2 %}", "only a namespace() takes attributes");
}

TEST(JinjaTemplate, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} "
                   "{{ greet() }}"),
            "Hello A! Hello B? Hello C. Hello !");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(5) }}"),
            "54321");
  EXPECT_EQ(render("{% macro m() %}{{ v }}{% endmacro %}{% set v = 'late' %}{{ m() }}"), "late");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes at most 1 arguments");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "takes no argument 'b'");
  expect_error("{% macro m(a=1, b) %}{% endmacro %}", "without a default follows");
}

TEST(JinjaTemplate, Expressions) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 % -3 }} "
                   "{{ 7.5 // 2 }} {{ 1_000 + 0x10 + 0o7 + 0b11 }} {{ 1e3 }}"),
            "7 9 64 4 -2 3.0 1026 1000.0");
  EXPECT_EQ(render("{{ 1 + (2 ~ 3)|int }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ not 1 == 2 }} "
                   "{{ 1 in [1, 2] and 'b' not in 'abc' }} {{ -7 // 2 }} {{ -7 % 3 }}"),
            "24 True False True False -4 2");
  EXPECT_EQ(render("{{ none or 'x' }} {{ 0 and 'y' }} {{ [] or {} }} {{ 'a' if false }}|"
                   "{{ 'a' if true else 'b' if false else 'c' }}"),
            "x 0 {} |a");
  EXPECT_EQ(render("{{ (1,) }}{{ () }}{{ (1, 2) == (1, 2) }}{{ [1, 2] == (1, 2) }}"
                   "{{ {'a': 1} == {'a': 1} }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}"
                   "{{ [1, 2] < [1, 3] }}"),
            "(1,)()TrueFalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ -1 }}{{ +1 }}{{ - -1 }}{{ 3 - -1 }}{{ [1,2,][1] }}{{ {'a': 1,}['a'] }}"),
            "-111421");
  EXPECT_EQ(
      render("{{ 'x' * 3 }} {{ [1] * 3 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true ~ nope }}"),
      "xxx [1, 1, 1] [1, 2] a1NoneTrue");
  EXPECT_EQ(
      render("{{ [1,2,3][1:] }} {{ [1,2,3][:-1] }} {{ [1,2,3][::-1] }} {{ [1,2,3,4,5][1:4:2] }} "
             "{{ 'héllo'[1:3] }} {{ 'abc'[-1] }} {{ [1,2][5] is undefined }} {{ (1,2,3)[1:] }}"),
      "[2, 3] [1, 2] [3, 2, 1] [2, 4] él c True (2, 3)");
  const ordered_json messages = {
      {"messages",
       {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}}};
  EXPECT_EQ(render("{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages|length }} "
                   "{{ messages[-1].role }} {{ 'role' in messages[0] }} "
                   "{{ messages[0].missing is defined }}",
                   messages),
            "user Hi 2 assistant True False");
  // An attribute is a method before it is a key; an item is a key first.
  EXPECT_EQ(render("{{ {'items': 5}['items'] }} {{ {'items': 5}.items()|list }}"),
            "5 [('items', 5)]");
  EXPECT_EQ(render("{{ none.x is defined }}{{ 1.x is defined }}{{ 'abc'.x is defined }}"),
            "FalseFalseFalse");
  expect_error("{{ 'a' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'");
  expect_error("{{ 1 / 0 }}", "division by zero");
  expect_error("{{ 2 ** 70 }}", "integer overflow");
  expect_error("{{ foo.bar.baz is defined }}", "'foo' is undefined");
  expect_error("{{ messages[0]['role'] }}", "'list object' has no element 0",
               {{"messages", ordered_json::array()}});
}

TEST(JinjaTemplate, Filters) {
  EXPECT_EQ(render("{{ '  Hi There  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'hello world'|title }}|"
                   "{{ 'HeLLo'|lower }}{{ 'HeLLo'|upper }}|{{ 'abc'|length }}{{ [1,2]|count }}"
                   "{{ {'a':1}|length }}{{ missing|length }}|{{ 'héllo'|length }}"),
            "Hi There|hi|Hello World|helloHELLO|3210|5");
  EXPECT_EQ(render("{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ [3,1,2]|sort(reverse=true) }} "
                   "{{ [{'n':2},{'n':1}]|sort(attribute='n') }}"),
            "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [{'n': 1}, {'n': 2}]");
  EXPECT_EQ(
      render("{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ 'abc'|first }}{{ []|first is undefined }} "
             "{{ [1,2,3]|join }} {{ [1,2,3]|join(', ') }} "
             "{{ [{'a':'x'},{'a':'y'}]|join('-', attribute='a') }}"),
      "13aTrue 123 1, 2, 3 x-y");
  EXPECT_EQ(render("{{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} {{ 'abc'|list }} "
                   "{{ {'a':1,'b':2}|list }} {{ {'a':1}|items|list }}"),
            "[3, 2, 1] cba ['a', 'b', 'c'] ['a', 'b'] [('a', 1)]");
  EXPECT_EQ(
      render(
          "{{ [{'r':'u','c':1},{'r':'a','c':2},{'r':'u','c':3}]|selectattr('r','equalto','u')"
          "|map(attribute='c')|list }} {{ [{'r':'u'},{'r':'a'}]|rejectattr('r','eq','u')|list }} "
          "{{ [0,1,2,'',none,'x']|select|list }} {{ [1,2,3,4]|reject('odd')|list }} "
          "{{ [1,2,3]|select('gt', 1)|list }}"),
      "[1, 3] [{'r': 'a'}] [1, 2, 'x'] [2, 4] [2, 3]");
  EXPECT_EQ(
      render(
          "{{ [{'a':{'b':1}},{'a':{'b':2}}]|map(attribute='a.b')|list }} "
          "{{ [{'x':1},{}]|map(attribute='x', default=0)|list }} {{ ['a','b']|map('upper')|join }} "
          "{{ [1,'a',1,'A']|unique|list }} {{ [' a ', 'b ']|map('trim')|list }}"),
      "[1, 2] [1, 0] AB [1, 'a'] ['a', 'b']");
  EXPECT_EQ(
      render("{{ none|selectattr('type', 'equalto', 'x')|list }}{{ none|map('upper')|list }}"),
      "[][]");
  EXPECT_EQ(render("{{ 'a'|default('b') }}{{ missing|default('b') }}{{ none|default('b') }}"
                   "{{ ''|default('b', true) }}{{ missing|d('z') }}"),
            "abNonebz");
  EXPECT_EQ(
      render("{{ '42'|int + 1 }} {{ '4.5'|float }} {{ 3.9|int }} {{ true|int }} {{ 42|float }} "
             "{{ 'x'|int(7) }} {{ '3.7'|int }} {{ -3|abs }} {{ -2.5|abs }} {{ 5|string ~ 'x' }} "
             "{{ none|string }} {{ [1]|string }}"),
      "43 4.5 3 1 42.0 7 3 3 2.5 5x None [1]");
  EXPECT_EQ(render("{{ 'a b  c'|replace(' ', '_') }} {{ 'aaa'|replace('a', 'b', 2) }} "
                   "{{ 'ab'|replace('', '-') }} {{ 'hELLO wORLD'|capitalize }} {{ 'x'|safe }} "
                   "{{ \"they're o'neil-x (y\"|title }}"),
            "a_b__c bba -a-b- Hello world x They're O'neil-X (Y");
  EXPECT_EQ(render("[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}]"
                   "[{{ 'a\\n\\nb\\n'|indent(first=true, blank=true) }}]"),
            "[a\n    b\n\n    c][  a\n  b][    a\n    \n    b\n    ]");
  expect_error("{{ 'a'|frobnicate }}", "no filter named 'frobnicate'");
  expect_error("{{ 5|length }}", "object of type 'int' has no len()");
  expect_error("{{ [1]|join(d=1, x=2) }}", "unexpected keyword argument 'x'");
}

// Hugging Face's tojson is json.dumps(ensure_ascii=False) with its separators: ", " and ": ",
// and "," with ": " when indenting. It keeps the key order it was given.
TEST(JinjaTemplate, Tojson) {
  EXPECT_EQ(
      render("{{ {'a': 1, 'b': [1, 2.5, none, true, \"x\\\"y\"]}|tojson }} {{ 'é\\n'|tojson }} "
             "{{ 'é😀'|tojson(ensure_ascii=true) }} {{ {'b':1,'a':2}|tojson(sort_keys=true) }} "
             "{{ {'a':1}|tojson(separators=(',',':')) }}"),
      "{\"a\": 1, \"b\": [1, 2.5, null, true, \"x\\\"y\"]} \"é\\n\" "
      "\"\\u00e9\\ud83d\\ude00\" {\"a\": 2, \"b\": 1} {\"a\":1}");
  EXPECT_EQ(render("{{ [1,[2,{}],[]]|tojson(indent=2) }}"),
            "[\n  1,\n  [\n    2,\n    {}\n  ],\n  []\n]");
  EXPECT_EQ(
      render("{{ tool|tojson }}", {{"tool", {{"name", "f"}, {"description", "d"}, {"a", 1.0}}}}),
      "{\"name\": \"f\", \"description\": \"d\", \"a\": 1.0}");
  expect_error("{{ missing|tojson }}", "Object of type Undefined is not JSON serializable");
  expect_error("{{ namespace()|tojson }}", "Object of type Namespace is not JSON serializable");
}

TEST(JinjaTemplate, Tests) {
  EXPECT_EQ(
      render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is number }}"
             "{{ true is number }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}"
             "{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}"
             "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is in [1] }}"
             "{{ 'A' is upper }}{{ 'a' is lower }}{{ range is callable }}{{ true is true }}"
             "{{ 0 is false }}{{ 'a' is not string }}{{ 2 is eq 2 }}{{ 'u' is equalto 'u' }}"),
      "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalse"
      "FalseTrueTrue");
  expect_error("{{ 1 is frobbed }}", "no test named 'frobbed'");
}

TEST(JinjaTemplate, StringAndDictMethods) {
  EXPECT_EQ(
      render("{{ '  x  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ ' a '.rstrip() }}|"
             "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
             "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }} "
             "{{ 'hello world'.title() }} {{ 'aXb'.upper() }}{{ 'aXb'.lower() }} "
             "{{ 'a-b'.replace('-', '+') }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }} "
             "{{ ', '.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }}"),
      "x|axx| a|['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] TrueTrue Hello World AXBaxb a+b 2 "
      "2 a, b ['a', 'b', 'c']");
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 2) }} "
                   "{{ {'a': 1}.keys()|list }} {{ {'a': 1}.values()|list }}"),
            "1None2 ['a'] [1]");
  expect_error("{{ [1].append(2) }}", "not allowed");
  expect_error("{{ {'a': 1}.update({}) }}", "not allowed");
}

TEST(JinjaTemplate, ParseErrorsNameLineAndColumn) {
  expect_error("line one\n{{ 'a' ", "template line 2, column 1: '{{' is never closed");
  expect_error("{% if x %}\n  {% for y in z %}\n{% endif %}",
               "line 3, column 4: unexpected 'endif': the innermost open block is the 'for' at "
               "line 2, column 3");
  expect_error("{% for x in y %}", "line 1, column 17: the template ends before '{% endfor %}'");
  expect_error("{{ x | }}", "line 1, column 8: expected a filter name");
  expect_error("ab\n  {% include 'x' %}", "line 2, column 6: unknown tag 'include'");
  expect_error("{{ 'abc }}", "line 1, column 4: the string is never closed");
  expect_error("{{ a $ b }}", "line 1, column 6: unexpected character '$'");
  expect_error("{% break %}", "line 1, column 4: 'break' outside a loop");
  expect_error("{{ (1 ] }}", "unexpected ']', expected ')'");
  expect_error("{# unclosed", "the comment is never closed");
  expect_error("{{ x }}\n\n   {{ y.z }}", "line 3, column 8: 'y' is undefined");
}

TEST(JinjaTemplate, RaiseExceptionCarriesItsMessage) {
  expect_error("{% if true %}\n  {{ raise_exception('Roles must alternate!') }}{% endif %}",
               "template line 2, column 6: Roles must alternate!");
}

TEST(JinjaTemplate, ContextMustBeAnObject) { expect_error("x", "must be a JSON object", {1, 2}); }

// Every bound is an Error, never a crash, a hang or unbounded memory.
TEST(JinjaTemplate, BoundsNestingAndRecursion) {
  expect_error("{{ " + std::string(60, '(') + "1" + std::string(60, ')') + " }}",
               "nests more than 100 levels deep");
  std::string chain = "1";
  for (int i = 0; i < kMaxExpressionHeight; ++i) chain += " + 1";
  expect_error("{{ " + chain + " }}", "an expression nests more than 200 levels deep");
  std::string ifs;
  for (int i = 0; i < 120; ++i) ifs += "{% if true %}";
  expect_error(ifs, "nests more than 100 levels deep");
  expect_error("{{ " + std::string(150, '-') + "1 }}", "nests more than 100 levels deep");
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
               "macro 'f' was called more than 32 levels deep");
  expect_error(
      "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}"
      "{% endfor %}",
      "lists and dicts nest more than 64 levels deep");
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "levels deep");
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 100; ++i) deep = ordered_json::array({deep});
  expect_error("{{ x }}", "nests more than 64 levels deep", {{"x", deep}});
}

TEST(JinjaTemplate, BoundsSizes) {
  expect_error("{{ range(1000000)|length }}", "range() of 1000000 numbers passes the limit");
  expect_error("{{ range(-9223372036854775807, 9223372036854775807, 3) }}", "passes the limit");
  expect_error("{{ 'x' * 16000000 }}{{ 'x' * 1000000 }}",
               "the rendered template would pass 16777216 bytes");
  expect_error("{{ 'x' * 100000000 }}", "passes the 16777216 byte limit");
  expect_error(
      "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(30) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "the limit is 16777216");
  expect_error(std::string(kMaxTemplateBytes + 1, 'x'), "the limit is");
}

// The bounds that add up over a render, lowered so that a test reaches them quickly: each error
// names the bound.
void expect_error_within(std::string_view source, const BudgetLimits& limits,
                         const std::string& mentions) {
  std::string message = "(rendered without an error)";
  try {
    jinja::render(parse(tokenize(source)), value_from_json(ordered_json::object()), limits);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(mentions), std::string::npos) << source << "\n  gave: " << message;
}

TEST(JinjaTemplate, BoundsWhatAddsUp) {
  const std::string loops =
      "{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}";
  EXPECT_EQ(render(loops), "");
  expect_error_within(loops, {.loop_iterations = 1'000}, "loops ran more than 1000 times");
  expect_error_within(loops, {.steps = 5'000}, "took more than 5000 steps");
  expect_error_within(loops, {.items = 1'000}, "more than 1000 list and dict elements");
  expect_error_within(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
      {.items = 100'000}, "more than 100000 list and dict elements");
  expect_error_within("{% for i in range(100) %}{% set s = 'x' * 100000 %}{% endfor %}",
                      {.allocated_bytes = 1 << 20}, "more than 1048576 bytes of strings");
}

// The deepest templates the bounds let through must render within the stack a thread gets by
// default (8 MiB), sanitizers included: the bounds, not the stack, must stop recursion.
TEST(JinjaTemplate, DeepestTemplatesFitAThreadsStack) {
  std::string ifs, endifs;
  for (int i = 0; i < 38; ++i) ifs += "{% if true %}", endifs += "{% endif %}";
  const std::string recursing = "{% macro f(n) %}{% if n > 0 %}" + ifs + "{{ " +
                                std::string(25, '(') + "f(n - 1)" + std::string(25, ')') + " }}" +
                                endifs + "{% endif %}{% endmacro %}{{ f(30) }}";
  const std::string nested = "{% if true %}" + ifs + "{{ " + std::string(29, '(') + "x" +
                             std::string(29, ')') + " }}" + endifs + "{% endif %}";
  struct Job {
    std::string recursing, nested;
    std::string recursing_error, nested_output;
  } job{recursing, nested, "", ""};
  const auto run = [](void* arg) -> void* {
    Job& job = *static_cast<Job*>(arg);
    job.recursing_error = error_of(job.recursing);
    job.nested_output = render(job.nested, {{"x", 1}});
    return nullptr;
  };
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, size_t{8} << 20);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attributes, run, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attributes);
  EXPECT_NE(job.recursing_error.find("nests more than 400 levels deep as it renders"),
            std::string::npos)
      << job.recursing_error;
  EXPECT_EQ(job.nested_output, "1");
}
}  // namespace
}  // namespace tessera::jinja
