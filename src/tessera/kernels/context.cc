#include "tessera/kernels/context.h"

#include "tessera/core/error.h"

namespace tessera::kernels {

std::string_view device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

DeviceKind device_kind_from_name(std::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  fail("unknown device '{}': choose cpu or cuda", name);
}

}  // namespace tessera::kernels
