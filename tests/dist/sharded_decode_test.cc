// Decoding split over tensor- and expert-parallel ranks gives the one-rank model's next-token
// logits: every rank of the job runs the same chunks (prompts in pieces, then one token at a time
// for two sequences at once) over a KV cache of its own heads, a mixture's experts split over the
// expert-parallel ranks (carved out of data-parallel ranks that share the tokens, as serving
// runs them), and the vocabulary slices the head returns, gathered over the tensor-parallel
// group, are the whole model's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/comm/world.h"
#include "tessera/core/threading.h"
#include "tessera/model/serving_memory.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/runtime/decoder.h"
#include "tests/model/small_configs.h"

namespace tessera::testing {
namespace {

constexpr int64_t kBlockTokens = 4;
constexpr int64_t kSequences = 2;

// Each sequence's blocks, over storage for the model's own key/value rows.
class Cache {
 public:
  explicit Cache(const model::Transformer& m) {
    const model::KvRows rows = model::kv_rows(m.model_layout());
    const int64_t per_seq = m.config().max_seq / kBlockTokens + 1;
    const int64_t floats = kSequences * per_seq * kBlockTokens * rows.row_width;
    storage_.assign(2 * rows.layers * floats, 0.0f);
    for (int64_t l = 0; l < rows.layers; ++l) {
      k_.push_back(storage_.data() + 2 * l * floats);
      v_.push_back(storage_.data() + (2 * l + 1) * floats);
    }
    for (int64_t s = 0; s < kSequences; ++s) {
      for (int64_t j = 0; j < per_seq; ++j) tables_[s].push_back(int32_t(j * kSequences + s));
    }
  }
  runtime::KvCacheView view() const { return {k_, v_, kBlockTokens}; }
  const std::vector<int32_t>& table(int64_t s) const { return tables_[s]; }

 private:
  std::vector<float> storage_;
  std::vector<void*> k_, v_;
  std::vector<int32_t> tables_[kSequences];
};

// The whole vocabulary's logits of `rows` rows from each tensor-parallel rank's slice.
std::vector<float> gathered(comm::Communicator& tp, const model::VocabShard& vocab,
                            const float* slice, int64_t rows) {
  const int64_t part = rows * vocab.local;
  std::vector<float> all(part * tp.size());
  const std::vector<int64_t> counts(tp.size(), part);
  tp.all_gather(slice, all.data(), counts, DType::f32);
  std::vector<float> out(rows * vocab.vocab_size);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < vocab.vocab_size; ++v) {
      out[r * vocab.vocab_size + v] =
          all[(v / vocab.local) * part + r * vocab.local + v % vocab.local];
    }
  }
  return out;
}

struct Case {
  const char* name;
  model::ModelConfig config;
  comm::MeshShape mesh;
};

// Every model over all the job's ranks as tp, and the mixture also as ep and, on 4 ranks, as
// tp = 2 x ep = 2.
std::vector<Case> cases(int ranks) {
  auto [gpt2, llama, moe] = model::small_configs(20);
  gpt2.n_head = 4;          // so that 1, 2 and 4 ranks split it
  gpt2.vocab_size = 50257;  // padded to a multiple of the ranks
  moe.moe.n_experts = 4;
  const comm::MeshShape tp{.tp = ranks}, ep{.dp = ranks, .ep = ranks};
  std::vector<Case> out = {
      {"gpt2-50257", gpt2, tp}, {"llama-gqa", llama, tp}, {"moe", moe, tp}, {"moe", moe, ep}};
  if (ranks == 4) out.push_back({"moe", moe, {.dp = 2, .tp = 2, .ep = 2}});
  return out;
}

TEST(ShardedDecode, GivesTheOneRankModelsLogits) {
  comm::Communicator& world = comm::world();
  const int threads = num_threads();
  set_num_threads(1);  // the ranks of a test job share the machine's cores
  for (const Case& c : cases(world.size())) {
    SCOPED_TRACE(fmt::format("{} over {}", c.name, c.mesh.str()));
    const model::ModelConfig& mc = c.config;
    const comm::Mesh mesh(world, c.mesh);
    const parallel::ModelGroups groups(mesh, mc, /*sequence_parallel=*/false,
                                       parallel::DpTokens::kShared);
    model::ModelOptions options;
    options.parallel = &groups.parallel();
    model::Transformer split(mc, 1, mc.max_seq, /*training=*/false, options);
    model::Transformer whole(mc, 1, mc.max_seq, /*training=*/false);
    split.init_weights(11);
    whole.init_weights(11);
    const Cache split_cache(split), whole_cache(whole);
    runtime::Decoder split_decoder(split), whole_decoder(whole);

    std::vector<int32_t> tokens[kSequences] = {{3, 17, 5, 9, 1, 22, 4}, {8, 2, 26}};
    int64_t cached[kSequences] = {0, 0};
    double worst = 0;
    // Prompts in two pieces, then five tokens each, every step both sequences together.
    for (int step = 0; step < 7; ++step) {
      std::vector<runtime::DecodeChunk> chunks;
      for (int64_t s = 0; s < kSequences; ++s) {
        const int64_t size = int64_t(tokens[s].size());
        const int64_t end = step == 0 ? (size + 1) / 2 : size;
        chunks.push_back(
            {tokens[s].data() + cached[s], end - cached[s], cached[s], split_cache.table(s)});
        cached[s] = end;
      }
      std::vector<runtime::DecodeChunk> whole_chunks = chunks;
      for (int64_t s = 0; s < kSequences; ++s) whole_chunks[s].block_table = whole_cache.table(s);
      const float* expected = whole_decoder.decode(whole_cache.view(), whole_chunks);
      const std::vector<float> logits =
          gathered(mesh.tp(), split.model_layout().vocab,
                   split_decoder.decode(split_cache.view(), chunks), kSequences);
      for (int64_t s = 0; s < kSequences; ++s) {
        const float* e = expected + s * mc.vocab_size;
        for (int64_t v = 0; v < mc.vocab_size; ++v) {
          worst = std::max(worst, double(std::abs(logits[s * mc.vocab_size + v] - e[v])));
        }
        if (step > 0) tokens[s].push_back(int32_t(std::max_element(e, e + mc.vocab_size) - e));
      }
    }
    EXPECT_LE(worst, 1e-5);
    if (world.rank() == 0) {
      std::printf("  %s over %s: worst logit difference %.2e\n", c.name, c.mesh.str().c_str(),
                  worst);
    }
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace tessera::testing
