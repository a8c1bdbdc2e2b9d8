#include "tessera/train/run_config.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tessera/core/error.h"

namespace tessera::train {
namespace {

std::string error_of(const Config& config) {
  try {
    run_config_from(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_with(std::string_view assignment) {
  Config config(run_config_schema());
  config.set_override(assignment);
  return error_of(config);
}

TEST(RunConfig, DefaultsAreTheTinyModel) {
  const RunConfig run = run_config_from(Config(run_config_schema()));
  EXPECT_EQ(run.model.vocab_size, 256);
  EXPECT_EQ(run.model.n_layer, 4);
  EXPECT_EQ(run.model.n_head, 4);
  EXPECT_EQ(run.model.d_model, 256);
  EXPECT_EQ(run.model.max_seq, 256);
  EXPECT_EQ(run.train.batch_size, 16);
  EXPECT_EQ(run.train.seq_len, 256);
  EXPECT_EQ(run.train.steps, 600);
  EXPECT_EQ(run.train.grad_accum, 1);
  EXPECT_DOUBLE_EQ(run.train.lr, 2e-3);
  EXPECT_DOUBLE_EQ(run.train.min_lr, 2e-4);
  EXPECT_EQ(run.train.warmup_steps, 50);
  EXPECT_DOUBLE_EQ(run.train.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(run.train.beta1, 0.9);
  EXPECT_DOUBLE_EQ(run.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(run.train.eps, 1e-8);
  EXPECT_DOUBLE_EQ(run.train.grad_clip, 1.0);
  EXPECT_EQ(run.train.seed, 1337);
  EXPECT_EQ(run.train.threads, 0);
  EXPECT_EQ(run.train.eval_every, 100);
  EXPECT_EQ(run.train.eval_batches, 8);
  EXPECT_EQ(run.train.log_every, 10);
  EXPECT_EQ(run.data.path, "");
  EXPECT_DOUBLE_EQ(run.data.val_fraction, 0.1);
  EXPECT_EQ(run.checkpoint.every, 200);
  EXPECT_EQ(run.checkpoint.keep_last, 2);
}

// A config file must state the model's shape; architecture options default to GPT-2's.
TEST(RunConfig, EveryKeyHasHelpAndTheModelShapeIsRequired) {
  const std::set<std::string> shape = {"model.vocab_size", "model.n_layer", "model.n_head",
                                       "model.d_model", "model.max_seq"};
  for (const ConfigKey& key : run_config_schema()) {
    EXPECT_FALSE(key.help.empty()) << key.name;
    EXPECT_EQ(key.required_in_file, shape.contains(key.name)) << key.name;
  }
}

TEST(RunConfig, LlamaAndMixtureKeysReachTheModelConfig) {
  Config config(run_config_schema());
  for (const char* set :
       {"model.arch=llama", "model.n_kv_head=2", "model.ffn_hidden=96", "model.rope_theta=5e5",
        "model.norm_eps=1e-6", "model.tie_embeddings=false", "model.moe_experts=8",
        "model.moe_top_k=1", "model.moe_shared_experts=2", "model.moe_capacity_factor=1.5",
        "model.moe_aux_loss_coef=0.02", "train.precision=bf16", "train.recompute=selective"}) {
    config.set_override(set);
  }
  const RunConfig run = run_config_from(config);
  const model::ModelConfig& m = run.model;
  EXPECT_EQ(m.arch, model::Architecture::kLlama);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.ffn(), 96);
  EXPECT_DOUBLE_EQ(m.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(m.moe.n_experts, 8);
  EXPECT_EQ(m.moe.top_k, 1);
  EXPECT_EQ(m.moe.n_shared, 2);
  EXPECT_DOUBLE_EQ(m.moe.capacity_factor, 1.5);
  EXPECT_DOUBLE_EQ(m.moe.aux_loss_coef, 0.02);
  EXPECT_EQ(run.train.precision, model::Precision::kBf16);
  EXPECT_EQ(run.train.recompute, model::Recompute::kSelective);
}

TEST(RunConfig, OverridesReachTheStructs) {
  Config config(run_config_schema());
  config.set_override("train.lr=3e-4");
  config.set_override("data.path=corpus.txt");
  config.set_override("checkpoint.every=0");
  const RunConfig run = run_config_from(config);
  EXPECT_DOUBLE_EQ(run.train.lr, 3e-4);
  EXPECT_EQ(run.data.path, "corpus.txt");
  EXPECT_EQ(run.checkpoint.every, 0);
}

TEST(RunConfig, InvalidValuesNameTheirKey) {
  struct Case {
    const char* assignment;
    const char* expected;
  };
  const Case cases[] = {
      {"train.batch_size=0", "train.batch_size"},
      {"train.seq_len=0", "train.seq_len"},
      {"train.steps=0", "train.steps"},
      {"train.grad_accum=0", "train.grad_accum"},
      {"train.eval_batches=0", "train.eval_batches"},
      {"train.log_every=0", "train.log_every"},
      {"train.lr=0", "train.lr"},
      {"train.min_lr=-1e-5", "train.min_lr"},
      {"train.min_lr=0.01", "train.min_lr"},
      {"train.warmup_steps=-1", "train.warmup_steps"},
      {"train.beta1=1", "train.beta1"},
      {"train.beta2=-0.1", "train.beta2"},
      {"train.eps=0", "train.eps"},
      {"train.grad_clip=-1", "train.grad_clip"},
      {"train.weight_decay=-0.1", "train.weight_decay"},
      {"train.threads=-1", "train.threads"},
      {"train.device=gpu", "train.device"},
      {"train.eval_every=-1", "train.eval_every"},
      {"data.val_fraction=0", "data.val_fraction"},
      {"data.val_fraction=1", "data.val_fraction"},
      {"checkpoint.every=-1", "checkpoint.every"},
      {"checkpoint.keep_last=0", "checkpoint.keep_last"},
      {"model.vocab_size=0", "model.vocab_size"},
      {"model.n_layer=0", "model.n_layer"},
      {"model.n_head=0", "model.n_head"},
      {"model.max_seq=0", "model.max_seq"},
      {"train.seq_len=512", "train.seq_len (512) exceeds model.max_seq (256)"},
      {"model.d_model=250", "model.d_model (250) must be divisible by model.n_head (4)"},
  };
  for (const Case& c : cases) {
    const std::string message = error_with(c.assignment);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.assignment << " gave '" << message << "'";
  }
}

TEST(RunConfig, BoundaryValuesAreAccepted) {
  Config config(run_config_schema());
  for (const char* a : {"train.min_lr=0", "train.warmup_steps=0", "train.beta1=0",
                        "train.grad_clip=0", "train.weight_decay=0", "train.eval_every=0",
                        "checkpoint.every=0", "checkpoint.keep_last=1", "train.seq_len=256"}) {
    config.set_override(a);
  }
  EXPECT_NO_THROW(run_config_from(config));
  config.set_override("train.min_lr=2e-3");  // equal to lr
  EXPECT_NO_THROW(run_config_from(config));
}

TEST(RunConfig, ShippedConfigsLoadAndValidate) {
  Config tiny(run_config_schema());
  tiny.load_file(TESSERA_SOURCE_DIR "/configs/tiny.toml");
  // tiny.toml is the defaults written out, so it must match a config with no file at all.
  EXPECT_EQ(tiny.to_json(), Config(run_config_schema()).to_json());
  EXPECT_NO_THROW(run_config_from(tiny));

  Config gpt2(run_config_schema());
  gpt2.load_file(TESSERA_SOURCE_DIR "/configs/gpt2-124m.toml");
  const RunConfig run = run_config_from(gpt2);
  EXPECT_EQ(run.model.vocab_size, 50257);
  EXPECT_EQ(run.model.n_layer, 12);
  EXPECT_EQ(run.model.n_head, 12);
  EXPECT_EQ(run.model.d_model, 768);
  EXPECT_EQ(run.model.max_seq, 1024);
  EXPECT_EQ(run.train.batch_size, 4);
  EXPECT_EQ(run.train.seq_len, 64);
  EXPECT_DOUBLE_EQ(run.train.lr, 6e-4);
  EXPECT_DOUBLE_EQ(run.train.min_lr, 6e-5);
  EXPECT_EQ(run.train.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(run.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(run.train.weight_decay, 0.1);
}

}  // namespace
}  // namespace tessera::train
