// The CUDA backend's attention kernels against the CPU's: rotary embeddings, causal grouped-query
// attention forward and backward over the packed qkv layout, and attention over a paged key/value
// cache as the server calls it (chunks of different lengths, block tables out of order).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/kernels/ops.h"
#include "tessera/kernels/paged_attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using cuda_testing::agrees;
using cuda_testing::CudaTest;
using cuda_testing::kExact;
using cuda_testing::kF32Tensor;
using cuda_testing::on_both;
using cuda_testing::Twin;
using testing::random_vector;

class CudaRope : public CudaTest {};

TEST_F(CudaRope, ForwardAndBackwardMatchCpuAtLaterPositions) {
  struct Case {
    int64_t hd, pos0;
    double theta;
  };
  // GPT-NeoX's theta from the start and from a later decoding position, and Llama 3's theta far
  // into a long context, where angles computed in float would lose their low bits.
  for (Case c : {Case{64, 0, 1e4}, Case{64, 4000, 1e4}, Case{128, 123457, 5e5}, Case{2, 7, 1e4}}) {
    SCOPED_TRACE(::testing::Message()
                 << "hd=" << c.hd << " pos0=" << c.pos0 << " theta=" << c.theta);
    const int64_t B = 2, Tn = 9, H = 8, KVH = 2, ld = (H + 2 * KVH) * c.hd;
    // v is not rotated: comparing the whole buffer checks that it is left alone.
    Twin<float> qkv(gpu(), random_vector<float>(B * Tn * ld, 201));
    on_both(gpu(), [&](const Context& ctx) {
      rope_forward<float>(ctx, qkv.on(ctx), B, Tn, H, KVH, c.hd, c.pos0, Rope{c.theta});
    });
    EXPECT_TRUE(agrees(qkv, kF32Tensor)) << "forward";

    Twin<float> dqkv(gpu(), random_vector<float>(B * Tn * ld, 202));
    on_both(gpu(), [&](const Context& ctx) {
      rope_backward<float>(ctx, dqkv.on(ctx), B, Tn, H, KVH, c.hd, c.pos0, Rope{c.theta});
    });
    EXPECT_TRUE(agrees(dqkv, kF32Tensor)) << "backward";
  }
}

// (T, head_dim, key/value heads) for 8 query heads: 8 is multi-head, 2 grouped-query.
using AttentionShape = std::tuple<int64_t, int64_t, int64_t>;

class CudaAttention : public CudaTest, public ::testing::WithParamInterface<AttentionShape> {};

std::string attention_shape_name(const ::testing::TestParamInfo<AttentionShape>& info) {
  const auto [Tn, hd, KVH] = info.param;
  return "T" + std::to_string(Tn) + "_hd" + std::to_string(hd) + "_kvh" + std::to_string(KVH);
}

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  int64_t Tn, hd, KVH;
  std::tie(Tn, hd, KVH) = GetParam();
  const int64_t B = 2, H = 8, ld = (H + 2 * KVH) * hd;
  // The CPU contract's scratch on both sides: a device kernel may use it or not.
  const int64_t scratch_size = attention_scratch_size(Tn) * omp_get_max_threads();
  Twin<float> scratch(gpu(), std::vector<float>(scratch_size));
  Twin<float> qkv(gpu(), random_vector<float>(B * Tn * ld, 211));
  Twin<float> out(gpu(), random_vector<float>(B * Tn * H * hd, 212));  // written
  Twin<float> lse(gpu(), random_vector<float>(B * H * Tn, 213));       // written
  on_both(gpu(), [&](const Context& ctx) {
    attention_forward<float>(ctx, qkv.on(ctx), out.on(ctx), lse.on(ctx), scratch.on(ctx), B, Tn, H,
                             KVH, hd);
  });
  EXPECT_TRUE(agrees(out, kF32Tensor)) << "out";
  EXPECT_TRUE(agrees(lse, kF32Tensor)) << "lse";

  // Backward from the CPU's log-sum-exp on both sides, so it is checked on its own.
  lse.assign(lse.cpu());
  Twin<float> dout(gpu(), random_vector<float>(B * Tn * H * hd, 214));
  Twin<float> dqkv(gpu(), random_vector<float>(B * Tn * ld, 215));  // written, every column
  on_both(gpu(), [&](const Context& ctx) {
    attention_backward<float>(ctx, dout.on(ctx), qkv.on(ctx), lse.on(ctx), dqkv.on(ctx),
                              scratch.on(ctx), B, Tn, H, KVH, hd);
  });
  EXPECT_TRUE(agrees(dqkv, kF32Tensor)) << "dqkv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Combine(::testing::Values(1, 7, 64, 130),
                                            ::testing::Values(32, 64, 128),
                                            ::testing::Values(8, 2)),
                         attention_shape_name);

// Documents packed into rows, their boundaries inside and across the CPU's query blocks of 128.
class CudaPackedAttention : public CudaTest {};

TEST_F(CudaPackedAttention, ForwardAndBackwardMatchCpu) {
  const int64_t B = 2, Tn = 300, H = 8, KVH = 2, hd = 64, ld = (H + 2 * KVH) * hd;
  std::vector<int32_t> starts(B * Tn);
  for (int64_t t = 0; t < Tn; ++t) {
    starts[t] = t < 50 ? 0 : t < 129 ? 50 : t < 200 ? 129 : 200;
    starts[Tn + t] = t < 1 ? 0 : t < 299 ? 1 : 299;
  }
  Twin<int32_t> doc_start(gpu(), starts);
  Twin<float> scratch(gpu(),
                      std::vector<float>(attention_scratch_size(Tn) * omp_get_max_threads()));
  Twin<float> qkv(gpu(), random_vector<float>(B * Tn * ld, 221));
  Twin<float> out(gpu(), random_vector<float>(B * Tn * H * hd, 222));
  Twin<float> lse(gpu(), random_vector<float>(B * H * Tn, 223));
  on_both(gpu(), [&](const Context& ctx) {
    attention_forward<float>(ctx, qkv.on(ctx), out.on(ctx), lse.on(ctx), scratch.on(ctx), B, Tn, H,
                             KVH, hd, doc_start.on(ctx));
  });
  EXPECT_TRUE(agrees(out, kF32Tensor)) << "out";
  EXPECT_TRUE(agrees(lse, kF32Tensor)) << "lse";
  lse.assign(lse.cpu());
  Twin<float> dout(gpu(), random_vector<float>(B * Tn * H * hd, 224));
  Twin<float> dqkv(gpu(), random_vector<float>(B * Tn * ld, 225));
  on_both(gpu(), [&](const Context& ctx) {
    attention_backward<float>(ctx, dout.on(ctx), qkv.on(ctx), lse.on(ctx), dqkv.on(ctx),
                              scratch.on(ctx), B, Tn, H, KVH, hd, doc_start.on(ctx));
  });
  EXPECT_TRUE(agrees(dqkv, kF32Tensor)) << "dqkv";
}

// (query heads, key/value heads, head_dim).
using PagedShape = std::tuple<int64_t, int64_t, int64_t>;

class CudaPagedAttention : public CudaTest, public ::testing::WithParamInterface<PagedShape> {};

std::string paged_shape_name(const ::testing::TestParamInfo<PagedShape>& info) {
  const auto [H, KVH, hd] = info.param;
  return "H" + std::to_string(H) + "_kvh" + std::to_string(KVH) + "_hd" + std::to_string(hd);
}

// Four sequences share a cache of 16 blocks of 16 tokens through block tables that are not in
// order: a prefill from position 0, a decoding step after 50 cached tokens, and two chunked
// prefills that start inside the cache and cross block boundaries. A second step then decodes one
// token of each. Queries, keys and values come in one packed row per token, as the model's qkv
// projection writes them.
TEST_P(CudaPagedAttention, MatchesCpuOverChunksOfDifferentLengths) {
  int64_t H, KVH, hd;
  std::tie(H, KVH, hd) = GetParam();
  const int64_t block_tokens = 16, blocks = 16, W = KVH * hd, row = (H + 2 * KVH) * hd;
  const int64_t max_context = 64;
  const std::vector<std::vector<int32_t>> tables = {{9, 2, 14}, {5, 11, 0, 7}, {3, 15, 8}, {12, 6}};
  Twin<float> k_cache(gpu(), std::vector<float>(blocks * block_tokens * W));
  Twin<float> v_cache(gpu(), std::vector<float>(blocks * block_tokens * W));
  Twin<float> scratch(
      gpu(), std::vector<float>(paged_attention_scratch_size(max_context) * omp_get_max_threads()));
  auto cache_on = [&](const Context& ctx) {
    return PagedKv{k_cache.on(ctx), v_cache.on(ctx), block_tokens, KVH, hd};
  };
  // Writes each chunk's keys and values from its rows of `qkv`.
  auto write = [&](const Context& ctx, Twin<float>& qkv, const std::vector<PagedChunk>& chunks) {
    for (const PagedChunk& chunk : chunks) {
      const float* first = qkv.on(ctx) + chunk.row * row;
      paged_kv_write(ctx, first + H * hd, first + (H + KVH) * hd, row, cache_on(ctx), chunk);
    }
  };

  // The earlier tokens of the sequences that do not start at 0, written in an earlier step.
  const std::vector<PagedChunk> history = {
      {tables[1].data(), 0, 50, 0}, {tables[2].data(), 0, 16, 50}, {tables[3].data(), 0, 5, 66}};
  Twin<float> past(gpu(), random_vector<float>(71 * row, 221));
  on_both(gpu(), [&](const Context& ctx) { write(ctx, past, history); });

  const std::vector<std::vector<PagedChunk>> steps = {{{tables[0].data(), 0, 37, 0},
                                                       {tables[1].data(), 50, 1, 37},
                                                       {tables[2].data(), 16, 20, 38},
                                                       {tables[3].data(), 5, 11, 58}},
                                                      {{tables[0].data(), 37, 1, 0},
                                                       {tables[1].data(), 51, 1, 1},
                                                       {tables[2].data(), 36, 1, 2},
                                                       {tables[3].data(), 16, 1, 3}}};
  uint64_t seed = 230;
  for (size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const std::vector<PagedChunk>& chunks = steps[step];
    const int64_t rows = chunks.back().row + chunks.back().n;
    // Padding after each output row must be left alone.
    const int64_t ldo = H * hd + 8;
    Twin<float> qkv(gpu(), random_vector<float>(rows * row, ++seed));
    Twin<float> out(gpu(), random_vector<float>(rows * ldo, ++seed));
    on_both(gpu(), [&](const Context& ctx) {
      write(ctx, qkv, chunks);
      paged_attention_forward(ctx, qkv.on(ctx), row, out.on(ctx), ldo, cache_on(ctx), chunks.data(),
                              int64_t(chunks.size()), H, scratch.on(ctx), max_context);
    });
    EXPECT_TRUE(agrees(k_cache, kExact)) << "k cache";
    EXPECT_TRUE(agrees(v_cache, kExact)) << "v cache";
    EXPECT_TRUE(agrees(out, kF32Tensor)) << "out";
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaPagedAttention,
                         ::testing::Values(PagedShape{8, 2, 64}, PagedShape{4, 4, 128},
                                           PagedShape{8, 1, 32}),
                         paged_shape_name);

}  // namespace
}  // namespace tessera::kernels
