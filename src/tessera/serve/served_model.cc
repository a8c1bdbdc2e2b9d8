#include "tessera/serve/served_model.h"

#include <algorithm>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"

namespace tessera::serve {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

ServingFormat serving_format(const std::string& precision, const std::string& quantize) {
  check(precision == "f32" || precision == "bf16", "--precision must be f32 or bf16, not '{}'",
        precision);
  check(quantize == "none" || quantize == "int8", "--quantize must be none or int8, not '{}'",
        quantize);
  check(quantize == "none" || precision == "f32",
        "--quantize int8 multiplies int8 weights with f32 activations; drop --precision {}",
        precision);
  return {model::precision_from_name(precision),
          quantize == "int8" ? model::WeightFormat::kInt8 : model::WeightFormat::kDense};
}

std::string serving_format_name(const ServingFormat& format) {
  if (format.weights == model::WeightFormat::kInt8) return "int8";
  return std::string(model::precision_name(format.precision));
}

ServedModel load_served_model(const fs::path& checkpoint, int64_t max_step_tokens,
                              const ServingFormat& format) {
  ServedModel served;
  served.step_dir = ckpt::checkpoint_step_dir(checkpoint);
  const fs::path& step_dir = served.step_dir;
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const model::ModelConfig mc = ckpt::checkpoint_model_config(step_dir, manifest);
  model::ModelOptions options;
  options.precision = format.precision;
  options.weights = format.weights;
  // Chunks of one step share the model's buffers of max_batch x max_seq tokens.
  const int64_t max_batch = std::max<int64_t>(1, (max_step_tokens + mc.max_seq - 1) / mc.max_seq);
  served.model = std::make_unique<model::Transformer>(mc, max_batch, mc.max_seq,
                                                      /*training=*/false, options);
  const std::span<float> params = served.model->params();
  ckpt::read_state_range(step_dir, mc, served.model->layout(), ckpt::StatePart::kParams, 0,
                         int64_t(params.size()), params.data());
  served.tokenizer = checkpoint_tokenizer(step_dir, manifest.metadata);
  check(served.tokenizer->vocab_size() <= mc.vocab_size,
        "{}: the tokenizer has {} tokens but the model only {} (model.vocab_size)",
        step_dir.string(), served.tokenizer->vocab_size(), mc.vocab_size);
  return served;
}

}  // namespace tessera::serve
