#include "tessera/serve/text_generator.h"

namespace tessera::serve {

namespace fs = std::filesystem;

namespace {

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

TextGenerator::TextGenerator(const fs::path& checkpoint, const ServingFormat& format)
    : served_(load_served_model(checkpoint, 1, format)),
      cache_(served_.context(), served_.model->model_layout(), served_.config().max_seq,
             PagedKvCache::kDefaultBlockTokens, /*prefix_caching=*/false, served_.kv_dtype),
      ranks_(served_, 1) {}

TextGenerator::~TextGenerator() { ranks_.finish(); }

void TextGenerator::follow() { ranks_.follow(cache_.view()); }

void TextGenerator::generate(const std::string& prompt, bool allow_special, int64_t max_tokens,
                             const SamplerParams& params,
                             const std::function<void(std::string_view)>& on_text) {
  const int64_t context = served_.config().max_seq;
  check(max_tokens >= 0, "--max-tokens must be at least 0, got {}", max_tokens);
  std::vector<int32_t> tokens = allow_special ? served_.tokenizer->encode_allowing_special(prompt)
                                              : served_.tokenizer->encode(prompt);
  check(!tokens.empty(), "--prompt is empty: give at least one character to continue");
  check(int64_t(tokens.size()) <= context,
        "--prompt is {} tokens long but the model's context holds {} (model.max_seq)",
        tokens.size(), context);
  // Ids the model has but the tokenizer lacks were never trained on and cannot be decoded.
  Sampler sampler(served_.tokenizer->vocab_size(), params);
  const int64_t prompt_size = int64_t(tokens.size());
  tokens.reserve(tokens.size() + max_tokens);
  CachedSequence seq(cache_);
  int64_t window = 0;  // the first token the cache holds
  for (int64_t i = 0; i < max_tokens; ++i) {
    if (int64_t(tokens.size()) - window > context) {
      window = int64_t(tokens.size()) - context;
      seq.restart();
    }
    const std::span<const int32_t> fresh(tokens.begin() + window + cache_.length(seq.id()),
                                         tokens.end());
    check(cache_.reserve(seq.id(), int64_t(fresh.size())),
          "the KV cache has no room for {} more tokens", fresh.size());
    const runtime::DecodeChunk chunk = cache_.chunk(seq.id(), fresh);
    const float* logits = ranks_.decode(cache_.view(), {&chunk, 1});
    cache_.advance(seq.id(), fresh);
    const int32_t next = sampler.sample(logits, int64_t(tokens.size()), tokens, prompt_size);
    tokens.push_back(next);
    on_text(served_.tokenizer->decode(std::span<const int32_t>(&tokens.back(), 1)));
  }
}

}  // namespace tessera::serve
