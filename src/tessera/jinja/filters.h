// The filters and tests chat templates use, with jinja2's names, parameters and semantics, and
// the tojson filter Hugging Face installs (json.dumps without HTML escaping or sorting).
#pragma once

#include <string_view>

#include "tessera/jinja/limits.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

bool is_filter(std::string_view name);
bool is_test(std::string_view name);

// `name` must be a filter or test: the parser checks names before anything runs.
Value apply_filter(std::string_view name, const Value& input, const CallArgs& args, Budget& budget);
bool apply_test(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace tessera::jinja
