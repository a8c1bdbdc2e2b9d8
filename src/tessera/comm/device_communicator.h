#pragma once

#include <memory>

#include "tessera/comm/communicator.h"
#include "tessera/kernels/context.h"

namespace tessera::comm {

// The communicator that moves ctx's device memory among the ranks of `group`: on a CUDA device an
// NCCL communicator of the same ranks, made collectively over `group`; on the CPU none (null),
// since `group` itself moves host memory.
std::unique_ptr<Communicator> device_communicator(Communicator& group, const kernels::Context& ctx);

}  // namespace tessera::comm
