#include "tessera/train/hf_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/core/error.h"
#include "tessera/interop/gguf_tokenizer.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/interop/peft_adapter.h"
#include "tessera/model/lora_merge.h"
#include "tessera/model/model_config_keys.h"
#include "tessera/model/model_layout.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/tokenizer/tokenizer_copy.h"
#include "tessera/train/run_config.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointsDir = "checkpoints";

}  // namespace

Config hf_run_config(const model::ModelConfig& m, const std::string& tokenizer) {
  Config config(run_config_schema());
  write_settings(model::model_settings(), m, config);
  if (m.lora.enabled()) write_settings(model::lora_settings(), m.lora, config);
  config.set("train.seq_len", std::min(config.get_int("train.seq_len"), m.max_seq));
  if (tokenizer != "byte") config.set("data.tokenizer", tokenizer);
  run_config_from(config);  // the same validation a run of this config gets
  return config;
}

std::string hf_folder_tokenizer(const fs::path& hf) {
  return tokenizer::holds_tokenizer(hf) ? fs::absolute(hf).string() : "byte";
}

namespace {

// Writes the new run folder `out`: config.toml, checkpoints/step-000000 holding `params` of model
// `mc` (and its adapters, whose base is the same step) with `imported_from` in its metadata, and
// a copy of the tokenizer unless it is "byte".
fs::path write_imported_run(const fs::path& out_dir, const model::ModelConfig& mc,
                            std::span<const float> params, const std::string& tokenizer,
                            const nlohmann::json& imported_from) {
  const fs::path out = fs::absolute(out_dir);
  if (const auto existing = ckpt::find_latest(out / kCheckpointsDir)) {
    fail("{}: already holds checkpoint {}; import into a new folder", out.string(),
         existing->string());
  }
  const std::unique_ptr<tokenizer::Tokenizer> loaded = tokenizer::load_tokenizer(tokenizer);
  check(loaded->vocab_size() <= mc.vocab_size,
        "tokenizer {}: {} tokens, but the model has only {} (vocab_size)", tokenizer,
        loaded->vocab_size(), mc.vocab_size);
  std::error_code ec;
  fs::create_directories(out, ec);
  check(!ec, "{}: cannot create the run folder: {}", out.string(), ec.message());
  nlohmann::json tokenizer_meta = "byte";
  if (tokenizer != "byte") {
    const fs::path copy = out / tokenizer::kTokenizerCopyDir;
    tokenizer::copy_tokenizer(tokenizer, copy);
    tokenizer_meta = {{"kind", loaded->kind()}, {"dir", copy.string()}};
  }
  const Config config = hf_run_config(
      mc, tokenizer == "byte" ? "byte" : (out / tokenizer::kTokenizerCopyDir).string());
  {
    std::ofstream resolved(out / "config.toml");
    resolved << config.to_toml();
    check(resolved.good(), "{}: cannot write config.toml", out.string());
  }
  nlohmann::json metadata = {{"config", config.to_json()},
                             {"model", enum_name(mc.arch)},
                             {"tokenizer", tokenizer_meta},
                             {"imported_from", imported_from}};
  if (mc.lora.enabled()) metadata["lora_base"] = ckpt::step_dir_name(0);
  const model::ModelLayout layout = model::model_layout(mc);
  return ckpt::save(out / kCheckpointsDir, 0,
                    model::named_views(layout.params, const_cast<float*>(params.data())), metadata,
                    /*keep_last=*/0);
}

}  // namespace

fs::path import_hf_run(const fs::path& hf, const fs::path& out, const std::string& tokenizer,
                       const fs::path& peft) {
  interop::HfImport imported = interop::import_hf(hf);
  nlohmann::json from = {{"dir", fs::absolute(hf).string()},
                         {"architecture", imported.architecture}};
  if (peft.empty()) {
    return write_imported_run(out, imported.config, imported.params, tokenizer, from);
  }
  const interop::PeftImport adapters = interop::import_peft(peft, imported.config);
  imported.params.insert(imported.params.end(), adapters.adapters.begin(), adapters.adapters.end());
  from["adapters"] = fs::absolute(peft).string();
  return write_imported_run(out, adapters.config, imported.params, tokenizer, from);
}

GgufRun import_gguf_run(const fs::path& gguf, const fs::path& out, const std::string& tokenizer) {
  const interop::GgufFile file(gguf);
  GgufRun run{.step = {}, .imported = interop::import_gguf(file)};
  const nlohmann::json from = {{"gguf", fs::absolute(gguf).string()},
                               {"architecture", run.imported.architecture},
                               {"types", run.imported.types}};
  const std::optional<tokenizer::BpeVocab> vocab =
      tokenizer.empty() ? interop::import_gguf_vocab(file) : std::nullopt;
  if (!vocab) {
    run.step = write_imported_run(out, run.imported.config, run.imported.params,
                                  tokenizer.empty() ? "byte" : tokenizer, from);
    return run;
  }
  // The vocabulary is saved where write_imported_run copies a tokenizer from.
  const fs::path saved = fs::temp_directory_path() / fmt::format("tessera-gguf-vocab-{}", getpid());
  fs::create_directories(saved);
  tokenizer::write_hf_tokenizer_files(*vocab, run.imported.config.max_seq, saved);
  try {
    run.step =
        write_imported_run(out, run.imported.config, run.imported.params, saved.string(), from);
  } catch (...) {
    fs::remove_all(saved);
    throw;
  }
  fs::remove_all(saved);
  return run;
}

fs::path merge_lora_run(const fs::path& checkpoint, const fs::path& out) {
  const fs::path step_dir = ckpt::checkpoint_step_dir(checkpoint);
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const auto [config, params] = ckpt::read_checkpoint_params(step_dir, manifest);
  check(config.lora.enabled(), "{}: holds no LoRA adapters to merge", step_dir.string());
  const model::MergedModel merged = model::merge_lora(config, params);
  return write_imported_run(out, merged.config, merged.params,
                            ckpt::checkpoint_tokenizer(step_dir, manifest.metadata),
                            {{"dir", fs::absolute(step_dir).string()}, {"merged_adapters", true}});
}

}  // namespace tessera::train
