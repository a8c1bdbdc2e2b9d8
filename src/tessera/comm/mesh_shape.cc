#include "tessera/comm/mesh_shape.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

constexpr std::array<std::pair<std::string_view, PipelineScheduleKind>, 4> kScheduleNames = {{
    {"gpipe", PipelineScheduleKind::kGPipe},
    {"1f1b", PipelineScheduleKind::k1F1B},
    {"interleaved", PipelineScheduleKind::kInterleaved1F1B},
    {"zb-h1", PipelineScheduleKind::kZeroBubbleH1},
}};

}  // namespace

PipelineScheduleKind parse_pipeline_schedule(std::string_view name) {
  for (const auto& [n, kind] : kScheduleNames) {
    if (n == name) return kind;
  }
  fail(
      "mesh.pp_schedule = '{}' is not a pipeline schedule; choose gpipe, 1f1b, interleaved or "
      "zb-h1",
      name);
}

std::string_view pipeline_schedule_name(PipelineScheduleKind kind) {
  for (const auto& [n, k] : kScheduleNames) {
    if (k == kind) return n;
  }
  return "?";
}

std::string MeshShape::str() const {
  return fmt::format("dp={} tp={} pp={} ep={}", dp, tp, pp, ep);
}

}  // namespace tessera::comm
