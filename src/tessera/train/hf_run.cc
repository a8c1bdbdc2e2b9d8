#include "tessera/train/hf_run.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/error.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/model/model_config_keys.h"
#include "tessera/model/model_layout.h"
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
  config.set("train.seq_len", std::min(config.get_int("train.seq_len"), m.max_seq));
  if (tokenizer != "byte") config.set("data.tokenizer", tokenizer);
  run_config_from(config);  // the same validation a run of this config gets
  return config;
}

std::string hf_folder_tokenizer(const fs::path& hf) {
  return tokenizer::holds_tokenizer(hf) ? fs::absolute(hf).string() : "byte";
}

fs::path import_hf_run(const fs::path& hf, const fs::path& out_dir, const std::string& tokenizer) {
  const fs::path out = fs::absolute(out_dir);
  if (const auto existing = ckpt::find_latest(out / kCheckpointsDir)) {
    fail("{}: already holds checkpoint {}; import into a new folder", out.string(),
         existing->string());
  }
  const std::unique_ptr<tokenizer::Tokenizer> loaded = tokenizer::load_tokenizer(tokenizer);
  interop::HfImport imported = interop::import_hf(hf);
  const model::ModelConfig& mc = imported.config;
  check(loaded->vocab_size() <= mc.vocab_size,
        "tokenizer {}: {} tokens, but the model of {} has only {} (vocab_size)", tokenizer,
        loaded->vocab_size(), hf.string(), mc.vocab_size);

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
  const nlohmann::json metadata = {
      {"config", config.to_json()},
      {"model", enum_name(mc.arch)},
      {"tokenizer", tokenizer_meta},
      {"imported_from",
       {{"dir", fs::absolute(hf).string()}, {"architecture", imported.architecture}}}};
  const model::ModelLayout layout = model::model_layout(mc);
  return ckpt::save(out / kCheckpointsDir, 0,
                    model::named_views(layout.params, imported.params.data()), metadata,
                    /*keep_last=*/0);
}

}  // namespace tessera::train
