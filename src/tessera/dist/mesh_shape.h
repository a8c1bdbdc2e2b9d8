#pragma once

#include <cstdint>
#include <string>

namespace tessera::dist {

// The [mesh] section: how many ranks along each axis.
struct MeshShape {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t ep = 1;

  int64_t ranks() const { return dp * tp * pp * ep; }
  std::string str() const;  // "dp=2 tp=2 pp=1 ep=1"
};

}  // namespace tessera::dist
