#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

// How deeply arrays and objects nest in JSON text, found by one pass over its bytes without
// parsing it, and stopping as soon as the depth passes `limit`: text from a network is checked
// with it before a parser or an error message walks a structure of unbounded depth. Brackets
// inside strings do not count. Returns the deepest nesting seen, or limit + 1 when it is deeper.
int64_t json_nesting_depth(std::string_view text, int64_t limit);

}  // namespace tessera
