// How a kernel reaches the device its context names. Each CPU kernel opens with one of these
// lines, so the CPU implementation and the hand-off to another backend sit in one place:
// TESSERA_ON_DEVICE hands a call on a CUDA context to the CUDA backend's kernel of the same name
// (float only; double is for the CPU's gradient checks), and TESSERA_CPU_ONLY refuses a CUDA
// context for what only the CPU runs. A build without the CUDA backend refuses a CUDA context by
// name, though none can be made there.
#pragma once

#include <string_view>
#include <type_traits>

#include "tessera/kernels/context.h"
#if TESSERA_CUDA
#include "tessera/kernels/cuda/cuda_ops.h"
#endif

namespace tessera::kernels::detail {

[[noreturn]] void fail_off_cpu(std::string_view op, std::string_view why);

}  // namespace tessera::kernels::detail

#if TESSERA_CUDA
#define TESSERA_ON_DEVICE(T, ctx, op, ...)                                                   \
  if ((ctx).on_cuda()) {                                                                     \
    if constexpr (std::is_same_v<T, float>) {                                                \
      return ::tessera::kernels::cuda::op(ctx, __VA_ARGS__);                                 \
    } else {                                                                                 \
      ::tessera::kernels::detail::fail_off_cpu(#op, "the CUDA backend's kernels are float"); \
    }                                                                                        \
  }
#else
#define TESSERA_ON_DEVICE(T, ctx, op, ...) \
  TESSERA_CPU_ONLY(ctx, op, "this build has no CUDA backend")
#endif

#define TESSERA_CPU_ONLY(ctx, op, why) \
  if ((ctx).on_cuda()) ::tessera::kernels::detail::fail_off_cpu(#op, why)
