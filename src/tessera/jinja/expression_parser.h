// Parses Jinja expressions as jinja2 does, from the loosest binding to the tightest: conditions
// (a if b else c), or, and, not, comparisons and in, + and -, ~, * / // %, **, signs, then
// attributes, items, slices, calls, filters and tests. Every node records the height of its tree,
// which is bounded, and checks at parse time that its filters and tests exist.
#pragma once

#include "tessera/jinja/ast.h"
#include "tessera/jinja/token_stream.h"

namespace tessera::jinja {

ExprPtr parse_expression(TokenStream& tokens, bool with_condition = true);

// Expressions separated by commas make a tuple and one without a comma is itself; nothing at all
// is an empty tuple only inside parentheses. A loop's iterable (`in_for`) ends before
// `recursive`.
ExprPtr parse_tuple(TokenStream& tokens, bool with_condition, bool explicit_parentheses,
                    bool in_for = false);

}  // namespace tessera::jinja
