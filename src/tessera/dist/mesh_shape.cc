#include "tessera/dist/mesh_shape.h"

#include <fmt/format.h>

namespace tessera::dist {

std::string MeshShape::str() const {
  return fmt::format("dp={} tp={} pp={} ep={}", dp, tp, pp, ep);
}

}  // namespace tessera::dist
