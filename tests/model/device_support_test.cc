// Which parts of a run a device takes (model/device_support.h): the CPU every part, a CUDA device
// what its kernel table allows, each refusal naming the parts and their settings. The table is
// filled without touching a device, so these run on every machine.
#include "tessera/model/device_support.h"

#include <gtest/gtest.h>

#include "tessera/kernels/device.h"
#include "tests/expect_error.h"

namespace tessera::model {
namespace {

using kernels::DeviceKind;
using testing::expect_error;

TEST(DeviceSupport, TheCpuRunsEveryPart) {
  EXPECT_NO_THROW(check_device_runs(DeviceKind::kCpu,
                                    {.tp = 2,
                                     .pp = 2,
                                     .ep = 2,
                                     .moe = true,
                                     .quantized_weights = WeightFormat::kInt8,
                                     .qk_norm = true},
                                    "cpu"));
}

TEST(DeviceSupport, ACudaDeviceRefusesWhatItsTableLacksByName) {
  if (!kernels::cuda_backend_built()) {
    expect_error([] { check_device_runs(DeviceKind::kCuda, {}, "train.device = cuda"); },
                 {"train.device = cuda", "this build has no CUDA backend"});
    return;
  }
  EXPECT_NO_THROW(check_device_runs(DeviceKind::kCuda, {}, "train.device = cuda"));
  expect_error(
      [] {
        check_device_runs(DeviceKind::kCuda, {.tp = 2, .pp = 4, .ep = 2, .moe = true},
                          "train.device = cuda");
      },
      {"train.device = cuda, but a CUDA device cannot run", "tensor parallelism (mesh.tp 2)",
       "pipeline parallelism (mesh.pp 4)", "expert parallelism (mesh.ep 2)",
       "mixtures of experts (model.moe)", "host memory", "they run on the CPU"});
  expect_error(
      [] {
        check_device_runs(DeviceKind::kCuda, {.quantized_weights = WeightFormat::kInt8},
                          "--device cuda with --quantize int8");
      },
      {"--device cuda with --quantize int8", "int8 weights", "no linear_forward_int8 kernel"});
  expect_error(
      [] {
        check_device_runs(DeviceKind::kCuda, {.quantized_weights = WeightFormat::kQ4_0},
                          "--device cuda with --quantize q4_0");
      },
      {"--device cuda with --quantize q4_0", "q4_0 weights", "no linear_forward_q4 kernel"});
  expect_error(
      [] {
        check_device_runs(DeviceKind::kCuda, {.quantized_weights = WeightFormat::kQ4_K},
                          "--device cuda with --quantize q4_k");
      },
      {"--device cuda with --quantize q4_k", "q4_k weights", "no linear_forward_q4k kernel"});
  expect_error(
      [] { check_device_runs(DeviceKind::kCuda, {.qk_norm = true}, "train.device = cuda"); },
      {"train.device = cuda", "QK-norm (model.qk_norm)", "no head_rmsnorm_forward kernel"});
}

}  // namespace
}  // namespace tessera::model
