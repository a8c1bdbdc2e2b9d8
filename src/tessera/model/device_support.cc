#include "tessera/model/device_support.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/backend.h"

namespace tessera::model {

namespace {

// The kernel a format's matrices need that the backend lacks, if any: a 4-bit model's head
// multiplies in int8, and a q4_k model's narrow matrices in q4_0.
const char* weight_kernel_missing(const kernels::Backend& backend, WeightFormat format) {
  const bool q4 = format == WeightFormat::kQ4_0 || format == WeightFormat::kQ4_K;
  if (format == WeightFormat::kQ4_K && backend.linear_forward_q4k == nullptr) {
    return "linear_forward_q4k";
  }
  if (q4 && backend.linear_forward_q4 == nullptr) return "linear_forward_q4";
  if (format != WeightFormat::kDense && backend.linear_forward_int8 == nullptr) {
    return "linear_forward_int8";
  }
  return nullptr;
}

}  // namespace

void check_device_runs(kernels::DeviceKind kind, const DeviceNeeds& needs, std::string_view asked) {
  const kernels::Backend* backend = kernels::backend_of(kind);
  check(backend != nullptr, "{}, but this build has no CUDA backend", asked);
  std::vector<std::string> refused, reasons;
  if (!backend->host_memory) {
    if (needs.tp > 1) refused.push_back(fmt::format("tensor parallelism (mesh.tp {})", needs.tp));
    if (needs.pp > 1) refused.push_back(fmt::format("pipeline parallelism (mesh.pp {})", needs.pp));
    if (needs.ep > 1) refused.push_back(fmt::format("expert parallelism (mesh.ep {})", needs.ep));
    if (needs.cp > 1) refused.push_back(fmt::format("context parallelism (mesh.cp {})", needs.cp));
    if (needs.moe) refused.push_back("mixtures of experts (model.moe)");
    if (!refused.empty()) {
      // MPI carries the tensor-, pipeline-, expert- and context-parallel exchanges, and the MoE
      // layer routes tokens between its experts in host buffers.
      reasons.push_back(
          "tensor, pipeline, expert and context parallelism and mixtures of experts keep their "
          "activations in host memory");
    }
  }
  if (const char* kernel = weight_kernel_missing(*backend, needs.quantized_weights)) {
    refused.push_back(fmt::format("{} weights", enum_name(needs.quantized_weights)));
    reasons.push_back(fmt::format("the {} backend has no {} kernel", backend->device, kernel));
  }
  if (needs.qk_norm && backend->ops.head_rmsnorm_forward == nullptr) {
    refused.push_back("QK-norm (model.qk_norm)");
    reasons.push_back(
        fmt::format("the {} backend has no head_rmsnorm_forward kernel", backend->device));
  }
  check(refused.empty(), "{}, but a {} device cannot run {}: {}; they run on the CPU", asked,
        backend->device, fmt::join(refused, ", "), fmt::join(reasons, ", and "));
}

}  // namespace tessera::model
