#include "tessera/dist/device_communicator.h"

#include "tessera/core/error.h"
#if TESSERA_CUDA
#include "tessera/dist/cuda/nccl_communicator.h"
#endif

namespace tessera::dist {

std::unique_ptr<Communicator> device_communicator(Communicator& group,
                                                  const kernels::Context& ctx) {
  if (!ctx.on_cuda()) return nullptr;
#if TESSERA_CUDA
  return make_nccl_communicator(group, ctx);
#else
  fail("a CUDA device's collectives need NCCL, and this build has no CUDA backend");
#endif
}

}  // namespace tessera::dist
