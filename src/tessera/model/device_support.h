// Which parts of a run a kind of device can take, asked of its kernel backend
// (kernels/backend.h): the one place the layers above the kernels learn a device's limits, so
// that the model, the trainer and the server refuse the same parts in the same words.
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/kernels/context.h"
#include "tessera/model/execution.h"

namespace tessera::model {

// The parts of a run that not every device runs.
struct DeviceNeeds {
  int64_t tp = 1, pp = 1, ep = 1, cp = 1;                 // mesh.tp, mesh.pp, mesh.ep, mesh.cp
  bool moe = false;                                       // model.moe: a mixture of experts
  WeightFormat quantized_weights = WeightFormat::kDense;  // serving with --quantize
  bool qk_norm = false;                                   // model.qk_norm
};

// Throws when a device of `kind` cannot run every part of `needs`, naming each part it cannot run
// and why, after `asked`, what the user asked for ("train.device = cuda").
void check_device_runs(kernels::DeviceKind kind, const DeviceNeeds& needs, std::string_view asked);

}  // namespace tessera::model
