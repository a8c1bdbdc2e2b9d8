#include "tessera/comm/mesh_shape.h"

#include <fmt/format.h>

namespace tessera::comm {

std::string MeshShape::str() const {
  return fmt::format("dp={} tp={} pp={} ep={}{}", dp, tp, pp, ep,
                     cp > 1 ? fmt::format(" cp={}", cp) : std::string());
}

}  // namespace tessera::comm
