// The serving layer: turns a checkpoint into text. It reads checkpoints and runs the model
// forward; it never trains or writes checkpoints.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "tessera/model/transformer.h"
#include "tessera/serve/decode_ranks.h"
#include "tessera/serve/kv_cache.h"
#include "tessera/serve/sampler.h"
#include "tessera/serve/served_model.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

class TextGenerator {
 public:
  // checkpoint: a run directory, its checkpoints/ folder or one step directory.
  explicit TextGenerator(const std::filesystem::path& checkpoint, const ServingFormat& format = {});
  ~TextGenerator();

  // Streams each generated piece of text to on_text as soon as it is sampled. The prompt runs
  // once and each new token then costs one token's work, through the KV cache. When the context
  // fills up, the oldest tokens slide out of the window, and every later token reruns the whole
  // window: shifted positions make the cached keys and values stale. With `allow_special`,
  // special tokens spelled in the prompt are those tokens.
  void generate(const std::string& prompt, bool allow_special, int64_t max_tokens,
                const SamplerParams& params, const std::function<void(std::string_view)>& on_text);

  // Over tensor-parallel ranks (ServingFormat::tp), the first generates and the others follow its
  // steps until it is destroyed.
  bool leads() const { return ranks_.leader(); }
  void follow();

  const model::ModelConfig& model_config() const { return served_.config(); }
  const std::filesystem::path& step_dir() const { return served_.step_dir; }

 private:
  ServedModel served_;
  PagedKvCache cache_;
  DecodeRanks ranks_;
};

}  // namespace tessera::serve
