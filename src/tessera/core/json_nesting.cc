#include "tessera/core/json_nesting.h"

#include <algorithm>

namespace tessera {

int64_t json_nesting_depth(std::string_view text, int64_t limit) {
  int64_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        deepest = std::max(deepest, ++depth);
        if (deepest > limit) return limit + 1;
        break;
      case ']':
      case '}':
        depth = std::max<int64_t>(depth - 1, 0);
        break;
      default:
        break;
    }
  }
  return deepest;
}

}  // namespace tessera
