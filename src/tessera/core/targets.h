// Training targets: the token each position is trained to predict, or kIgnoredTarget where the
// loss skips the position (the prompt of a chat example, the separator between documents).
#pragma once

#include <cstdint>

namespace tessera {

inline constexpr int32_t kIgnoredTarget = -1;

}  // namespace tessera
