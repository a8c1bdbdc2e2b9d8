#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/hf_convert.h"
#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/data/hf_tokenizer_file.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_copy.h"
#include "tessera/model/model_layout.h"
#include "tessera/train/run_config.h"
#include "tessera/ckpt/state_reader.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: tessera convert <export|import> [flags]\n\n"
    "  export   write a checkpoint as a Hugging Face model folder (model.safetensors, "
    "config.json)\n"
    "  import   turn a Hugging Face model folder into a run folder for tessera generate\n\n"
    "Run 'tessera convert <subcommand> --help' for its flags.\n";

constexpr const char* kCheckpointsDir = "checkpoints";
constexpr const char* kTokenizerDir = "tokenizer";

// As tessera generate reads it: a run folder, its checkpoints/ folder or one step folder.
DType export_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  fail("tessera convert export: --dtype must be f32 or bf16, got '{}'", name);
}

int export_checkpoint(int argc, char** argv) {
  Flags flags("convert export",
              {{"checkpoint", "DIR", "a run folder or one checkpoint step folder (required)"},
               {"out", "DIR", "the Hugging Face model folder to write (required)"},
               {"dtype", "f32|bf16", "dtype of the stored weights (default f32)"}},
              argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Write a checkpoint's parameters as model.safetensors and config.json\n"
                         "for Hugging Face Transformers (GPT2LMHeadModel, LlamaForCausalLM or\n"
                         "MixtralForCausalLM), with its tokenizer as tokenizer.json,\n"
                         "tokenizer_config.json and generation_config.json.")
                   .c_str(),
               stdout);
    return 0;
  }
  const auto checkpoint = flags.get("checkpoint");
  const auto out = flags.get("out");
  check(checkpoint.has_value(), "tessera convert export: --checkpoint DIR is required");
  check(out.has_value(), "tessera convert export: --out DIR is required");
  const DType dtype = export_dtype(flags.get_or("dtype", "f32"));

  const fs::path step_dir = ckpt::checkpoint_step_dir(*checkpoint);
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const model::ModelConfig mc = ckpt::checkpoint_model_config(step_dir, manifest);
  const model::ModelLayout layout = model::model_layout(mc);
  std::vector<float> params(size_t(layout.params.total()));
  ckpt::read_state_range(step_dir, mc, layout.params, ckpt::StatePart::kParams, 0,
                         layout.params.total(), params.data());
  const std::string architecture = ckpt::export_hf(mc, params, *out, dtype);
  const std::string tokenizer = ckpt::checkpoint_tokenizer(step_dir, manifest.metadata);
  data::write_hf_tokenizer_files(data::read_bpe_vocab(tokenizer), mc.max_seq, *out);
  std::printf("exported %s (%s, %.2fM parameters, %s, tokenizer %s) to %s\n",
              step_dir.string().c_str(), architecture.c_str(),
              double(model::count_parameters(mc).total) / 1e6,
              std::string(dtype_name(dtype)).c_str(), tokenizer.c_str(), out->c_str());
  return 0;
}

// The resolved run config of an imported model: its model.* keys, the other settings at their
// defaults (train.seq_len shortened to fit the context), and the tokenizer for later training.
Config run_config_for(const model::ModelConfig& m, const std::string& tokenizer) {
  Config config(train::run_config_schema());
  auto set = [&config](std::string_view key, const auto& value) {
    config.set_override(fmt::format("{}={}", key, value));
  };
  set("model.arch", model::architecture_name(m.arch));
  set("model.vocab_size", m.vocab_size);
  set("model.n_layer", m.n_layer);
  set("model.n_head", m.n_head);
  set("model.d_model", m.d_model);
  set("model.max_seq", m.max_seq);
  set("model.n_kv_head", m.n_kv_head);
  set("model.ffn_hidden", m.ffn_hidden);
  set("model.rope_theta", m.rope_theta);
  set("model.norm_eps", m.norm_eps);
  set("model.tie_embeddings", m.tie_embeddings);
  set("model.moe_experts", m.moe.n_experts);
  set("model.moe_top_k", m.moe.top_k);
  set("model.moe_shared_experts", m.moe.n_shared);
  set("model.moe_capacity_factor", m.moe.capacity_factor);
  set("model.moe_aux_loss_coef", m.moe.aux_loss_coef);
  set("train.seq_len", std::min(config.get_int("train.seq_len"), m.max_seq));
  if (tokenizer != "byte") set("data.tokenizer", tokenizer);
  train::run_config_from(config);  // the same validation a run of this config gets
  return config;
}

int import_model(int argc, char** argv) {
  Flags flags(
      "convert import",
      {{"hf", "DIR", "a Hugging Face model folder: config.json, model.safetensors (required)"},
       {"out", "DIR", "the run folder to create (required)"},
       {"tokenizer", "byte|DIR", "the tokenizer for generate (default byte)"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Read a Hugging Face GPT-2, Llama or Mixtral model folder into a new\n"
                         "run folder (config.toml and checkpoints/step-000000) that\n"
                         "'tessera generate --checkpoint DIR' can sample from.")
                   .c_str(),
               stdout);
    return 0;
  }
  const auto hf = flags.get("hf");
  const auto out_flag = flags.get("out");
  check(hf.has_value(), "tessera convert import: --hf DIR is required");
  check(out_flag.has_value(), "tessera convert import: --out DIR is required");
  const fs::path out = fs::absolute(*out_flag);
  if (const auto existing = ckpt::find_latest(out / kCheckpointsDir)) {
    fail("{}: already holds checkpoint {}; import into a new --out folder", out.string(),
         existing->string());
  }

  const std::string tokenizer_name = flags.get_or("tokenizer", "byte");
  const std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(tokenizer_name);
  ckpt::HfImport imported = ckpt::import_hf(*hf);
  const model::ModelConfig& mc = imported.config;
  check(tokenizer->vocab_size() <= mc.vocab_size,
        "--tokenizer {}: {} tokens, but the model of {} has only {} (vocab_size)", tokenizer_name,
        tokenizer->vocab_size(), *hf, mc.vocab_size);

  std::error_code ec;
  fs::create_directories(out, ec);
  check(!ec, "{}: cannot create the run folder: {}", out.string(), ec.message());
  nlohmann::json tokenizer_meta = "byte";
  if (tokenizer_name != "byte") {
    const fs::path copy = out / kTokenizerDir;
    data::copy_tokenizer(tokenizer_name, copy);
    tokenizer_meta = {{"kind", tokenizer->kind()}, {"dir", copy.string()}};
  }
  const Config config =
      run_config_for(mc, tokenizer_name == "byte" ? "byte" : (out / kTokenizerDir).string());
  {
    std::ofstream resolved(out / "config.toml");
    resolved << config.to_toml();
    check(resolved.good(), "{}: cannot write config.toml", out.string());
  }
  const nlohmann::json metadata = {
      {"config", config.to_json()},
      {"model", model::architecture_name(mc.arch)},
      {"tokenizer", tokenizer_meta},
      {"imported_from",
       {{"dir", fs::absolute(*hf).string()}, {"architecture", imported.architecture}}}};
  const model::ModelLayout layout = model::model_layout(mc);
  const fs::path step = ckpt::save(out / kCheckpointsDir, 0,
                                   model::named_views(layout.params, imported.params.data()),
                                   metadata, /*keep_last=*/0);
  std::printf("imported %s (%s, %.2fM parameters) into %s\n", hf->c_str(),
              imported.architecture.c_str(), double(model::count_parameters(mc).total) / 1e6,
              step.string().c_str());
  return 0;
}

}  // namespace

int convert_command(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "export") return export_checkpoint(argc - 1, argv + 1);
  if (sub == "import") return import_model(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "error: tessera convert: %s\n%s",
               sub.empty() ? "missing subcommand" : ("unknown subcommand '" + sub + "'").c_str(),
               kUsage);
  return 2;
}

}  // namespace tessera::cli
