// Renders a parsed template against a context with jinja2's scoping (a loop's iteration and a
// macro's call are scopes of their own, an if is not) and the globals Hugging Face gives chat
// templates: range, namespace, dict, raise_exception and strftime_now. Every render is bounded
// by jinja_limits.h.
#pragma once

#include <string>

#include "tessera/jinja/ast.h"
#include "tessera/jinja/limits.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

// `context` is a dict of the variables the template sees.
std::string render(const Body& program, const Value& context, const BudgetLimits& limits = {});

}  // namespace tessera::jinja
