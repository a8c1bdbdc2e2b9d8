#include "tessera/serve/text_generator.h"

#include "tessera/ckpt/checkpoint.h"
#include "tessera/train/run_config.h"
#include "tessera/train/state_checkpoint.h"

namespace tessera::serve {

namespace fs = std::filesystem;

namespace {

fs::path locate_step_dir(const fs::path& checkpoint) {
  if (fs::is_directory(checkpoint / "checkpoints"))
    return ckpt::resolve(checkpoint / "checkpoints");
  return ckpt::resolve(checkpoint);
}

// The tokenizer the run trained with: "byte", or its copy in the run folder (found next to the
// checkpoints first, so a moved run folder still works, then where the run wrote it).
std::unique_ptr<data::Tokenizer> checkpoint_tokenizer(const fs::path& step_dir,
                                                      const nlohmann::json& metadata) {
  const nlohmann::json t = metadata.value("tokenizer", nlohmann::json("byte"));
  if (t.is_string()) return data::load_tokenizer(t.get<std::string>());
  check(t.is_object() && t.contains("dir") && t["dir"].is_string(),
        "{}: manifest.json names its tokenizer as {}, not \"byte\" or {{\"kind\", \"dir\"}}",
        step_dir.string(), t.dump());
  const fs::path beside_run = step_dir.parent_path().parent_path() / "tokenizer";
  std::error_code ec;
  if (fs::is_directory(beside_run, ec)) return data::load_tokenizer(beside_run.string());
  return data::load_tokenizer(t["dir"].get<std::string>());
}

// One sequence in the cache, whose blocks go back to the pool however generate ends.
class CachedSequence {
 public:
  explicit CachedSequence(PagedKvCache& cache) : cache_(cache), id_(cache.add_sequence()) {}
  ~CachedSequence() { cache_.release(id_); }
  CachedSequence(const CachedSequence&) = delete;
  CachedSequence& operator=(const CachedSequence&) = delete;

  int64_t id() const { return id_; }
  void restart() {
    cache_.release(id_);
    id_ = cache_.add_sequence();
  }

 private:
  PagedKvCache& cache_;
  int64_t id_;
};

}  // namespace

TextGenerator::TextGenerator(const fs::path& checkpoint) : step_dir_(locate_step_dir(checkpoint)) {
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir_);
  check(manifest.metadata.contains("config"), "{}: manifest.json has no run config",
        step_dir_.string());
  Config config(train::run_config_schema());
  config.load_json(manifest.metadata["config"]);
  const model::ModelConfig mc = train::run_config_from(config).model;
  model_ = std::make_unique<model::Transformer>(mc, 1, mc.max_seq, /*training=*/false);
  cache_ = std::make_unique<PagedKvCache>(mc, mc.max_seq);
  const std::span<float> params = model_->params();
  train::read_state_range(step_dir_, model_->layout(), train::StatePart::kParams, 0,
                          int64_t(params.size()), params.data());
  tokenizer_ = checkpoint_tokenizer(step_dir_, manifest.metadata);
  check(tokenizer_->vocab_size() <= mc.vocab_size,
        "{}: the tokenizer has {} tokens but the model only {} (model.vocab_size)",
        step_dir_.string(), tokenizer_->vocab_size(), mc.vocab_size);
}

void TextGenerator::generate(const std::string& prompt, int64_t max_tokens,
                             const SamplerParams& params,
                             const std::function<void(std::string_view)>& on_text) {
  const int64_t context = model_->config().max_seq;
  check(max_tokens >= 0, "--max-tokens must be at least 0, got {}", max_tokens);
  std::vector<int32_t> tokens = tokenizer_->encode(prompt);
  check(!tokens.empty(), "--prompt is empty: give at least one character to continue");
  check(int64_t(tokens.size()) <= context,
        "--prompt is {} tokens long but the model's context holds {} (model.max_seq)",
        tokens.size(), context);
  // Ids the model has but the tokenizer lacks were never trained on and cannot be decoded.
  Sampler sampler(tokenizer_->vocab_size(), params);
  tokens.reserve(tokens.size() + max_tokens);
  CachedSequence seq(*cache_);
  int64_t window = 0;  // the first token the cache holds
  for (int64_t i = 0; i < max_tokens; ++i) {
    if (int64_t(tokens.size()) - window > context) {
      window = int64_t(tokens.size()) - context;
      seq.restart();
    }
    const std::span<const int32_t> fresh(tokens.begin() + window + cache_->length(seq.id()),
                                         tokens.end());
    check(cache_->reserve(seq.id(), int64_t(fresh.size())),
          "the KV cache has no room for {} more tokens", fresh.size());
    const model::DecodeChunk chunk = cache_->chunk(seq.id(), fresh);
    const float* logits = model_->decode(cache_->view(), {&chunk, 1});
    cache_->advance(seq.id(), int64_t(fresh.size()));
    const int32_t next = sampler.sample(logits, int64_t(tokens.size()));
    tokens.push_back(next);
    on_text(tokenizer_->decode(std::span<const int32_t>(&tokens.back(), 1)));
  }
}

}  // namespace tessera::serve
