#include "tessera/serve/served_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/core/json_file.h"
#include "tessera/core/text_corpus.h"
#include "tessera/interop/gguf_import.h"
#include "tessera/interop/gguf_tokenizer.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/model/device_support.h"
#include "tessera/model/lora_merge.h"
#include "tessera/model/serving_memory.h"
#include "tessera/tokenizer/bpe_tokenizer.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"

namespace tessera::serve {

namespace fs = std::filesystem;

void check_serving_format(const ServingFormat& format) {
  using model::Precision;
  const bool quantized = format.weights != model::WeightFormat::kDense;
  const bool cuda = format.device.kind == kernels::DeviceKind::kCuda;
  check(format.precision != Precision::kF16, "--precision must be f32 or bf16, not 'f16'");
  check(!quantized || format.precision == Precision::kF32,
        "--quantize {} multiplies quantised weights with f32 activations; drop --precision {}",
        enum_name(format.weights), enum_name(format.precision));
  check(!cuda || kernels::cuda_device_count() > 0, "--device cuda, but {}",
        kernels::cuda_unavailable_reason());
  check(!cuda || format.kv_dtype == kernels::KvDtype::kF32,
        "--kv-cache-dtype {} is read by the CPU's attention; the CUDA backend holds the cache in "
        "f32: drop one of --device cuda and --kv-cache-dtype",
        enum_name(format.kv_dtype));
  model::check_device_runs(format.device.kind, {.quantized_weights = format.weights},
                           fmt::format("--device {} with --quantize {}",
                                       enum_name(format.device.kind), enum_name(format.weights)));
}

const float* on_host(const kernels::Context& ctx, const float* values, int64_t n,
                     std::vector<float>& host) {
  if (!ctx.on_cuda()) return values;
  check(int64_t(host.size()) >= n, "on_host: {} floats do not fit a buffer of {}", n, host.size());
  kernels::copy_to_host(ctx, host.data(), values, sizeof(float) * size_t(n));
  return host.data();
}

std::string serving_format_name(const ServingFormat& format) {
  if (format.weights != model::WeightFormat::kDense) return std::string(enum_name(format.weights));
  return std::string(enum_name(format.precision));
}

namespace {

// The device, the mesh's groups and the inference model of `mc`, its chunks of one step sharing
// buffers of max_batch x max_seq.
void build_inference_model(const model::ModelConfig& mc, int64_t max_step_tokens,
                           const ServingFormat& format, ServedModel& served) {
  served.device = std::make_unique<kernels::DeviceContext>(format.device);
  served.kv_dtype = format.kv_dtype;
  model::ModelOptions options;
  options.context = &served.context();
  options.precision = format.precision;
  options.weights = format.weights;
  if (format.mesh != nullptr) {
    const comm::MeshShape& shape = format.mesh->shape();
    check(shape.dp == shape.ep,
          "serving splits a model over tensor-parallel, pipeline and expert-parallel ranks (--tp, "
          "--pp, --ep), not the mesh {}",
          shape.str());
    check(shape.ep == 1 || mc.is_moe(),
          "--ep {} splits a mixture's experts, but the model has dense MLPs (model.moe.n_experts "
          "is 0)",
          shape.ep);
    check(shape.pp <= mc.n_layer, "--pp {} splits the model into more stages than its {} blocks",
          shape.pp, mc.n_layer);
    model::check_device_runs(
        format.device.kind, {.tp = shape.tp, .pp = shape.pp, .ep = shape.ep, .moe = mc.is_moe()},
        fmt::format("--device {} over {}", enum_name(format.device.kind), shape.str()));
    served.groups = std::make_unique<parallel::ModelGroups>(*format.mesh, mc, false,
                                                            parallel::DpTokens::kShared);
    // The planner's split (plan --serve): stage s holds blocks [s L / pp, (s + 1) L / pp).
    const int64_t stage = format.mesh->coords().pp;
    served.groups->set_stage_blocks(stage * mc.n_layer / shape.pp,
                                    (stage + 1) * mc.n_layer / shape.pp);
    served.ranks = &format.mesh->world();
    served.vocab_ranks = &format.mesh->tp();
    served.stage_ranks = &format.mesh->pp();
    options.parallel = &served.groups->parallel();
  }
  if (format.lora_slots > 0) {
    check(format.device.kind == kernels::DeviceKind::kCpu,
          "--lora adapters are served on the CPU; drop --device cuda");
    served.adapters = std::make_unique<ServedAdapters>(
        mc, format.lora_slots, format.max_lora_rank,
        model::inference_max_batch(mc, max_step_tokens) * mc.max_seq,
        served.groups != nullptr ? served.groups->parallel().sharding : model::Sharding{});
    options.adapters = &served.adapters->bank();
  }
  served.model = std::make_unique<model::Transformer>(
      mc, model::inference_max_batch(mc, max_step_tokens), mc.max_seq, /*training=*/false, options);
}

// Each parameter's slice this rank holds, padding zero, from the whole model's `values` laid out
// as `whole` (its canonical layout).
void place_whole_params(const model::ParameterLayout& whole, std::span<const float> values,
                        const std::string& source, model::Transformer& model) {
  const std::span<float> params = model.params();
  for (const model::ParamInfo& p : model.layout().entries()) {
    const model::ParamInfo& from = whole.find(p.name);
    check(from.shape == p.global_shape, "{}: {} has the shape {} but the served model needs {}",
          source, p.name, from.shape.str(), p.global_shape.str());
    p.placement.take(values.data() + from.offset, params.data() + p.offset, p.shape.numel());
  }
}

// A Hugging Face model folder read in place: its weights, and its tokenizer when it has one
// (a folder Tessera exported from a byte-level run has none, and reads bytes).
ServedModel load_hf_folder(const fs::path& dir, int64_t max_step_tokens,
                           const ServingFormat& format) {
  interop::HfImport imported = interop::import_hf(dir);
  ServedModel served;
  served.step_dir = dir;
  build_inference_model(imported.config, max_step_tokens, format, served);
  place_whole_params(model::model_layout(imported.config).params, imported.params, dir.string(),
                     *served.model);
  const bool has_tokenizer = tokenizer::holds_tokenizer(dir);
  if (!has_tokenizer) spdlog::info("{} holds no tokenizer: reading text as bytes", dir.string());
  served.tokenizer = tokenizer::load_tokenizer(has_tokenizer ? dir.string() : "byte");
  return served;
}

// A GGUF file read in place: its weights decoded to f32 (quantised again as `format` says) and
// its tokenizer, or bytes where it has none.
ServedModel load_gguf_file(const interop::GgufFile& file, int64_t max_step_tokens,
                           const ServingFormat& format) {
  const interop::GgufImport imported = interop::import_gguf(file);
  ServedModel served;
  served.step_dir = file.source();
  build_inference_model(imported.config, max_step_tokens, format, served);
  place_whole_params(model::model_layout(imported.config).params, imported.params, file.source(),
                     *served.model);
  std::optional<tokenizer::BpeVocab> vocab = interop::import_gguf_vocab(file);
  if (!vocab) spdlog::info("{} holds no tokenizer: reading text as bytes", file.source());
  served.tokenizer =
      vocab ? std::make_unique<tokenizer::BpeTokenizer>(std::move(*vocab), "gguf", file.source())
            : tokenizer::load_tokenizer("byte");
  return served;
}

std::optional<nlohmann::json> read_json_if_present(const fs::path& path) {
  if (!is_file(path)) return std::nullopt;
  return read_json_file(path);
}

// The chat template and the tokens that end a turn, from the tokenizer's config (read from
// `config_file`; none for bytes) and the model folder's generation_config.json (none for a file).
void read_chat_settings(const std::optional<nlohmann::json>& config, const fs::path& config_file,
                        const fs::path& model_dir, const fs::path& chat_template_file,
                        ServedModel& served) {
  std::vector<int32_t>& stops = served.stop_tokens;
  if (config && config->is_object()) {
    const std::string eos = jinja::special_token_text(*config, "eos_token");
    for (const auto& [spelled, id] : served.tokenizer->special_tokens()) {
      if (!eos.empty() && spelled == eos) stops.push_back(id);
    }
  }
  if (auto generation = model_dir.empty()
                            ? std::nullopt
                            : read_json_if_present(model_dir / "generation_config.json");
      generation && generation->is_object() && generation->contains("eos_token_id")) {
    const nlohmann::json& eos = (*generation)["eos_token_id"];
    for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
      if (id.is_number_integer() && id.get<int64_t>() >= 0 &&
          id.get<int64_t>() < served.tokenizer->vocab_size()) {
        stops.push_back(id.get<int32_t>());
      }
    }
  }
  served.chat_template = jinja::load_chat_template(config, config_file, chat_template_file);
}

// The first bytes of a GGUF file.
bool is_gguf_file(const fs::path& path) {
  if (!fs::is_regular_file(path)) return false;
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof magic);
  return std::string_view(magic, sizeof magic) == "GGUF";
}

}  // namespace

ServedModel load_served_model(const fs::path& checkpoint, int64_t max_step_tokens,
                              const ServingFormat& format, const fs::path& chat_template_file) {
  ServedModel served;
  std::optional<nlohmann::json> tokenizer_config;
  fs::path config_file, model_dir, tokenizer_dir;
  if (is_gguf_file(checkpoint)) {
    const interop::GgufFile file(checkpoint);
    served = load_gguf_file(file, max_step_tokens, format);
    tokenizer_config = interop::gguf_tokenizer_config(file);
    config_file = checkpoint;
  } else if (interop::is_hf_model_folder(checkpoint)) {
    served = load_hf_folder(checkpoint, max_step_tokens, format);
    model_dir = checkpoint;
    if (tokenizer::holds_tokenizer(checkpoint)) tokenizer_dir = checkpoint;
  } else {
    served.step_dir = ckpt::checkpoint_step_dir(checkpoint);
    const fs::path& step_dir = served.step_dir;
    const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
    const model::ModelConfig mc = ckpt::checkpoint_model_config(step_dir, manifest);
    if (mc.lora.enabled()) {
      // A LoRA run's adapters, folded into its base: served at the plain model's speed.
      const auto [adapted, values] = ckpt::read_checkpoint_params(step_dir, manifest);
      const model::MergedModel merged = model::merge_lora(adapted, values);
      build_inference_model(merged.config, max_step_tokens, format, served);
      place_whole_params(model::model_layout(merged.config).params, merged.params,
                         step_dir.string(), *served.model);
    } else {
      build_inference_model(mc, max_step_tokens, format, served);
      const std::span<float> params = served.model->params();
      ckpt::read_state_range(step_dir, mc, served.model->layout(), ckpt::StatePart::kParams, 0,
                             int64_t(params.size()), params.data());
    }
    const std::string tokenizer = ckpt::checkpoint_tokenizer(step_dir, manifest.metadata);
    served.tokenizer = tokenizer::load_tokenizer(tokenizer);
    if (tokenizer != "byte") tokenizer_dir = model_dir = tokenizer;
  }
  if (!tokenizer_dir.empty()) {
    config_file = tokenizer_dir / tokenizer::kHfTokenizerConfigFile;
    tokenizer_config = read_json_if_present(config_file);
  }
  read_chat_settings(tokenizer_config, config_file, model_dir, chat_template_file, served);
  check(served.tokenizer->vocab_size() <= served.config().vocab_size,
        "{}: the tokenizer has {} tokens but the model only {} (model.vocab_size)",
        served.step_dir.string(), served.tokenizer->vocab_size(), served.config().vocab_size);
  return served;
}

}  // namespace tessera::serve
