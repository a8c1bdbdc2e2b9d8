// Devices and their memory (kernels/device.h) and the backend tables (kernels/backend.h) on every
// machine: without a CUDA device, asking for one fails with the reason and the CPU's "device
// memory" is plain host memory; with one, bytes survive the round trip through it. None of these
// tests skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/kernels/backend.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/ops.h"
#include "tests/expect_error.h"

namespace tessera::kernels {
namespace {

using testing::expect_error;

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  CounterRng rng(seed, 0);
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = uint8_t(rng.bits(i));
  return bytes;
}

bool all_zero(const std::vector<uint8_t>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

TEST(CudaDevice, UnavailableReasonIsGivenExactlyWhenNoDeviceCanBeUsed) {
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  } else {
    EXPECT_TRUE(cuda_backend_built());
    EXPECT_EQ(cuda_unavailable_reason(), "");
  }
}

TEST(CudaDevice, AskingForAnAbsentDeviceThrowsNamingTheReason) {
  const int count = cuda_device_count();
  if (count == 0) {
    const std::string reason = cuda_unavailable_reason();
    expect_error([] { DeviceContext device(Device{DeviceKind::kCuda, 0}); }, {reason});
  } else {
    // One past the last ordinal is absent everywhere.
    expect_error(
        [&] {
          DeviceContext device(Device{DeviceKind::kCuda, count});
        },
        {"CUDA device " + std::to_string(count)});
  }
}

TEST(CudaDevice, CpuMemoryIsPlainHostMemory) {
  DeviceContext cpu(Device{DeviceKind::kCpu, 0});
  EXPECT_FALSE(cpu.context().on_cuda());
  const Context& ctx = kCpuContext;

  const size_t n = 1003;
  DeviceArray<uint8_t> a(ctx, int64_t(n));
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), int64_t(n));
  EXPECT_TRUE(all_zero(std::vector<uint8_t>(a.data(), a.data() + n)));  // readable in place

  const std::vector<uint8_t> bytes = random_bytes(n, 1);
  copy_to_device(ctx, a.data(), bytes.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), bytes.data(), n), 0);
  DeviceArray<uint8_t> b(ctx, int64_t(n));
  copy_on_device(ctx, b.data(), a.data(), n);
  std::vector<uint8_t> back(n);
  copy_to_host(ctx, back.data(), b.data(), n);
  EXPECT_EQ(back, bytes);

  fill_zeros(ctx, a.data(), n);
  synchronize(ctx);
  EXPECT_TRUE(all_zero(std::vector<uint8_t>(a.data(), a.data() + n)));

  // Moving hands the memory over; the moved-from array owns nothing.
  uint8_t* held = b.data();
  DeviceArray<uint8_t> c = std::move(b);
  EXPECT_EQ(c.data(), held);
  EXPECT_EQ(b.data(), nullptr);
}

// Refused before any device is touched, so a context that only names a CUDA device will do.
TEST(CudaDevice, KernelsTheDeviceLacksAreRefusedByName) {
  Context cuda_named;
  cuda_named.device = Device{DeviceKind::kCuda, 0};
  std::vector<double> a(4), b(4), c(4);
  expect_error(
      [&] {
        gemm<double>(cuda_named, false, false, 2, 2, 2, 1.0, a.data(), 2, b.data(), 2, 0.0,
                     c.data(), 2);
      },
      {"gemm", "CUDA"});
  std::vector<float> x(8), scales(4), y(8), scratch(int8_linear_scratch_size(4, 2));
  std::vector<int8_t> q(16);
  const Int8Matrix w{q.data(), scales.data(), 4, 4};
  expect_error(
      [&] { linear_forward_int8(cuda_named, x.data(), w, nullptr, y.data(), 2, scratch.data()); },
      {"linear_forward_int8", "CUDA"});
}

// The entries of a table of function pointers (OpKernels), each read as a pointer.
template <typename Table>
std::vector<const void*> entries(const Table& table) {
  static_assert(sizeof(Table) % sizeof(void*) == 0);
  std::vector<const void*> out(sizeof(Table) / sizeof(void*));
  std::memcpy(out.data(), &table, sizeof(Table));
  return out;
}

// The backend tables state what each device runs: the CPU every op, in float and double; a CUDA
// device float only, without the int8 matmul, on memory that is not the host's.
TEST(CudaDevice, TheBackendTablesStateWhatEachDeviceRuns) {
  const Backend* cpu = backend_of(DeviceKind::kCpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(cpu->host_memory);
  EXPECT_NE(cpu->linear_forward_int8, nullptr);
  ASSERT_NE(double_kernels_of(DeviceKind::kCpu), nullptr);
  const std::vector<const void*> f32 = entries(cpu->ops),
                                 f64 = entries(*double_kernels_of(DeviceKind::kCpu));
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NE(f32[i], nullptr) << "the CPU's float op " << i << " of OpKernels";
    EXPECT_NE(f64[i], nullptr) << "the CPU's double op " << i << " of OpKernels";
  }
  EXPECT_EQ(double_kernels_of(DeviceKind::kCuda), nullptr);
  const Backend* cuda = backend_of(DeviceKind::kCuda);
  if (!cuda_backend_built()) {
    EXPECT_EQ(cuda, nullptr);
    return;
  }
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->device, "CUDA");
  EXPECT_FALSE(cuda->host_memory);
  EXPECT_EQ(cuda->linear_forward_int8, nullptr);
  EXPECT_NE(cuda->ops.attention_backward, nullptr);
  EXPECT_NE(cuda->paged_attention_forward, nullptr);
}

TEST(CudaDevice, DeviceMemoryRoundTripsAndZeroes) {
  if (cuda_device_count() == 0) {
    // Nothing of a device to check here; the tests above covered this machine.
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    return;
  }
  const CudaDeviceInfo info = cuda_device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.compute_major, 0);

  DeviceContext device(Device{DeviceKind::kCuda, 0});
  const Context& ctx = device.context();
  EXPECT_TRUE(ctx.on_cuda());
  // An odd size, so no copy can round it to whole words.
  const size_t n = (size_t{1} << 20) + 3;
  DeviceArray<uint8_t> a(ctx, int64_t(n)), b(ctx, int64_t(n));
  std::vector<uint8_t> back(n, 0xff);
  copy_to_host(ctx, back.data(), a.data(), n);
  EXPECT_TRUE(all_zero(back)) << "fresh device memory is zeroed";

  const std::vector<uint8_t> bytes = random_bytes(n, 2);
  copy_to_device(ctx, a.data(), bytes.data(), n);
  copy_to_host(ctx, back.data(), a.data(), n);
  EXPECT_EQ(back, bytes);

  copy_on_device(ctx, b.data(), a.data(), n);
  std::fill(back.begin(), back.end(), 0);
  copy_to_host(ctx, back.data(), b.data(), n);
  EXPECT_EQ(back, bytes);

  fill_zeros(ctx, a.data(), n);
  synchronize(ctx);
  copy_to_host(ctx, back.data(), a.data(), n);
  EXPECT_TRUE(all_zero(back));
  // fill_zeros on a's bytes only: b keeps the copy.
  copy_to_host(ctx, back.data(), b.data(), n);
  EXPECT_EQ(back, bytes);
}

}  // namespace
}  // namespace tessera::kernels
