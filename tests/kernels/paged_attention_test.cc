// Attention over the paged KV cache, f32 and q8_0: written through a block table that scatters a
// sequence's positions, the f32 cache gives softmax attention as written out below, and the q8_0
// cache the same within the rounding of its keys and values to 8 bits per block of 32.
#include "tessera/kernels/paged_attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/expect_error.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 64, kBlockTokens = 4, kContext = 23;
constexpr int64_t kWidth = kKvHeads * kHeadDim;

// One sequence's queries, keys and values at positions [0, kContext), and attention outputs over
// a cache of `dtype` whose blocks hold the sequence back to front.
struct Attention {
  std::vector<float> q = random_vector<float>(kContext * kHeads * kHeadDim, 1);
  std::vector<float> k = random_vector<float>(kContext * kWidth, 2);
  std::vector<float> v = random_vector<float>(kContext * kWidth, 3);

  std::vector<float> through_cache(KvDtype dtype) const {
    const int64_t blocks = (kContext + kBlockTokens - 1) / kBlockTokens;
    std::vector<int32_t> table(blocks);
    for (int64_t b = 0; b < blocks; ++b) table[b] = int32_t(blocks - 1 - b);
    const int64_t bytes = blocks * kBlockTokens * kv_row_bytes(dtype, kWidth);
    std::vector<uint8_t> k_cache(bytes), v_cache(bytes);
    const PagedKv kv{k_cache.data(), v_cache.data(), kBlockTokens, kKvHeads, kHeadDim, dtype};
    // Written in two chunks, a prompt and then the rest, as a server writes them.
    const PagedChunk prompt{table.data(), 0, 9, 0}, rest{table.data(), 9, kContext - 9, 9};
    paged_kv_write(kCpuContext, k.data(), v.data(), kWidth, kv, prompt);
    paged_kv_write(kCpuContext, k.data() + 9 * kWidth, v.data() + 9 * kWidth, kWidth, kv, rest);
    const PagedChunk all{table.data(), 0, kContext, 0};
    std::vector<float> out(q.size());
    std::vector<float> scratch(paged_attention_scratch_size(kContext) * omp_get_max_threads());
    paged_attention_forward(kCpuContext, q.data(), kHeads * kHeadDim, out.data(), kHeads * kHeadDim,
                            kv, &all, 1, kHeads, scratch.data(), kContext);
    return out;
  }

  // Causal softmax attention in double, head h reading key/value head h / 2.
  std::vector<double> reference() const {
    std::vector<double> out(q.size());
    for (int64_t i = 0; i < kContext; ++i) {
      for (int64_t h = 0; h < kHeads; ++h) {
        const int64_t g = h / (kHeads / kKvHeads);
        std::vector<double> s(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < kHeadDim; ++d) {
            s[j] += double(q[(i * kHeads + h) * kHeadDim + d]) * k[j * kWidth + g * kHeadDim + d];
          }
          s[j] /= std::sqrt(double(kHeadDim));
        }
        const double top = *std::max_element(s.begin(), s.end());
        double total = 0;
        for (double& x : s) total += x = std::exp(x - top);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < kHeadDim; ++d) {
            out[(i * kHeads + h) * kHeadDim + d] += s[j] / total * v[j * kWidth + g * kHeadDim + d];
          }
        }
      }
    }
    return out;
  }
};

double largest_difference(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}

TEST(PagedAttention, AnF32CacheGivesSoftmaxAttention) {
  const Attention a;
  EXPECT_LT(largest_difference(a.through_cache(KvDtype::kF32), a.reference()), 1e-4);
}

TEST(PagedAttention, AQ8_0CacheAgreesWithinItsRounding) {
  const Attention a;
  const std::vector<double> want = a.reference();
  const double f32 = largest_difference(a.through_cache(KvDtype::kF32), want);
  const double q8 = largest_difference(a.through_cache(KvDtype::kQ8_0), want);
  std::printf("largest difference from the reference: f32 cache %.2e, q8_0 cache %.2e\n", f32, q8);
  // Keys and values move by at most half a step, max|block| / 254, of values of unit spread (a
  // step of about 0.02 here); measured 1.5e-2 on these.
  EXPECT_GT(q8, f32);
  EXPECT_LT(q8, 3e-2);
}

TEST(PagedAttention, AQ8_0RowTakesAQuarterOfTheBytesAndWholeBlocks) {
  EXPECT_EQ(kv_row_bytes(KvDtype::kF32, 128), 512);
  EXPECT_EQ(kv_row_bytes(KvDtype::kQ8_0, 128), 136);
  testing::expect_error([] { kv_row_bytes(KvDtype::kQ8_0, 48); }, {"whole blocks of 32", "48"});
}

}  // namespace
}  // namespace tessera::kernels
