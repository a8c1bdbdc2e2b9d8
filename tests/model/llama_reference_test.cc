// Llama and Mixture-of-Experts forward/backward against PyTorch (tests/reference/
// llama_reference.py, run with Debian's python3-torch) from identical weights: GQA and MQA, tied
// and untied embeddings, top-2 routing with a shared expert, capacity dropping, and RoPE scaled as
// Llama 3.1's rope_scaling, linearly and by YaRN, at positions past the context it stretches.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/model/reference_fixture.h"

namespace tessera::model {
namespace {

using namespace reference;

class LlamaReference : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaReference, MatchesPyTorchLossAndGradients) {
  const Fixture* f = fixture("llama_reference.py", "--config " + GetParam());
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->config.arch, Architecture::kLlama);
  Transformer model(f->config, f->B, f->T, /*training=*/true);
  load_parameters(*f, model);

  model.zero_grad();
  const float loss =
      runtime::TrainStep(model).forward_backward(f->inputs(), f->targets(), f->B, f->T, 1.0f);
  std::printf("loss %.7f (PyTorch %.7f), aux %.7g (PyTorch %.7g)\n", loss, f->loss,
              model.aux_loss(), f->aux_loss);
  EXPECT_LT(std::abs(loss - f->loss) / std::abs(f->loss), 1e-4);
  if (f->config.is_moe()) {
    ASSERT_GT(f->aux_loss, 0);
    EXPECT_LT(std::abs(model.aux_loss() - f->aux_loss) / f->aux_loss, 1e-4);
    if (f->config.moe.capacity_factor > 0) {
      EXPECT_GT(model.dropped_assignments(), 0) << "the capacity case should drop assignments";
    }
  }
  expect_grads_match(*f, model, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaReference,
                         ::testing::Values("llama-gqa", "llama-mqa-tied", "moe-top2",
                                           "moe-capacity", "llama3-rope", "linear-rope",
                                           "yarn-rope"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace tessera::model
