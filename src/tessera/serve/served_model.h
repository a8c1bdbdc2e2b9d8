#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/model/transformer.h"
#include "tessera/serve/chat_template.h"

namespace tessera::serve {

// How the served model holds its weights: f32, bf16 matmuls, or int8 weight-only matmuls.
struct ServingFormat {
  model::Precision precision = model::Precision::kF32;
  model::WeightFormat weights = model::WeightFormat::kDense;
};
// The format of the --precision (f32, bf16) and --quantize (none, int8) flags; throws naming the
// flag at fault.
ServingFormat serving_format(const std::string& precision, const std::string& quantize);
std::string serving_format_name(const ServingFormat& format);  // "f32", "bf16" or "int8"

// A checkpoint made ready to answer requests: the inference model built for chunks of up to
// max_step_tokens tokens at once (and at least one full context), its parameters read, and the
// tokenizer the run trained with.
struct ServedModel {
  std::filesystem::path step_dir;
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  // The chat template of the tokenizer's tokenizer_config.json, or of --chat-template; without
  // one, chats take the built-in form (openai_api.h).
  std::optional<ChatTemplate> chat_template;
  // Tokens that end a generation besides the tokenizer's end of text: the eos tokens of the
  // tokenizer_config.json and generation_config.json, such as Llama 3's <|eot_id|>.
  std::vector<int32_t> stop_tokens;

  const model::ModelConfig& config() const { return model->config(); }
  const ChatTemplate* chat_template_or_null() const {
    return chat_template ? &*chat_template : nullptr;
  }
};

// checkpoint: a run directory, its checkpoints/ folder, one step directory, or a Hugging Face
// model folder (GPT-2, Llama, Mixtral; with its tokenizer when it holds one). A non-empty
// `chat_template_file` replaces the tokenizer's chat template.
ServedModel load_served_model(const std::filesystem::path& checkpoint, int64_t max_step_tokens,
                              const ServingFormat& format = {},
                              const std::filesystem::path& chat_template_file = {});

}  // namespace tessera::serve
