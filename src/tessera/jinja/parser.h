// Parses a template's tokens into statements (text, {{ }}, if, for, set, macro, break, continue,
// generation) as jinja2 does, and checks at parse time what jinja2 checks when it compiles:
// unknown tags, filters and tests, blocks left open, break or continue outside a loop. Nesting is
// bounded here, before anything recurses over it.
#pragma once

#include <vector>

#include "tessera/jinja/ast.h"
#include "tessera/jinja/lexer.h"

namespace tessera::jinja {

Body parse(std::vector<Token> tokens);

}  // namespace tessera::jinja
