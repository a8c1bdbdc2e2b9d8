#include "tessera/comm/device_communicator.h"

#include "tessera/core/error.h"
#if TESSERA_CUDA
#include "tessera/comm/cuda/nccl_communicator.h"
#endif

namespace tessera::comm {

std::unique_ptr<Communicator> device_communicator(Communicator& group,
                                                  const kernels::Context& ctx) {
  if (!ctx.on_cuda()) return nullptr;
#if TESSERA_CUDA
  return make_nccl_communicator(group, ctx);
#else
  fail("a CUDA device's collectives need NCCL, and this build has no CUDA backend");
#endif
}

}  // namespace tessera::comm
