#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/jinja/chat_template.h"
#include "tessera/kernels/device.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/serve/served_adapters.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

// Where and how the served model holds its weights: on the CPU or a CUDA device, in f32, for bf16
// matmuls, or as int8 for weight-only matmuls (on the CPU), and over which ranks.
struct ServingFormat {
  model::Precision precision = model::Precision::kF32;
  model::WeightFormat weights = model::WeightFormat::kDense;
  kernels::Device device;
  // Tensor-parallel ranks that split the model, each holding a shard of every weight and of the
  // KV cache's heads; pipeline stages that split its blocks; expert-parallel ranks that split a
  // mixture's experts (each running every token, so that each owner sees them all); and the mesh
  // of tp x pp x ep ranks they form (null: this rank holds it whole), which must outlive the
  // served model.
  int64_t tp = 1, pp = 1, ep = 1;
  const comm::Mesh* mesh = nullptr;
  // LoRA adapters served per request beside the model (one rank): this many of rank at most
  // max_lora_rank; 0 serves the model alone.
  int64_t lora_slots = 0;
  int64_t max_lora_rank = 64;
  // How the KV cache holds keys and values (--kv-cache-dtype).
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
};
// Throws unless the format can serve, naming the flag at fault: --precision (f32, bf16),
// --quantize (none, int8, q4_0, q4_k), --kv-cache-dtype (f32, q8_0) or --device (cpu, cuda).
void check_serving_format(const ServingFormat& format);
std::string serving_format_name(const ServingFormat& format);  // "f32", "bf16", "int8", "q4_0", ...

// A checkpoint made ready to answer requests: the inference model built for chunks of up to
// max_step_tokens tokens at once (and at least one full context), its parameters read, and the
// tokenizer the run trained with.
struct ServedModel {
  std::filesystem::path step_dir;
  // Where the model computes (null: the CPU), and over a mesh the groups its layers talk to, the
  // ranks that serve it together (rank 0 leading), those among them that hold the slices of its
  // vocabulary, and its pipeline (stage s is rank s); declared first so that they outlive the
  // model.
  std::unique_ptr<kernels::DeviceContext> device;
  std::unique_ptr<parallel::ModelGroups> groups;
  comm::Communicator* ranks = nullptr;
  comm::Communicator* vocab_ranks = nullptr;
  comm::Communicator* stage_ranks = nullptr;
  // LoRA adapters served per request (ServingFormat::lora_slots; null: none), before the model
  // that reads them.
  std::unique_ptr<ServedAdapters> adapters;
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // The chat template of the tokenizer's tokenizer_config.json, or of --chat-template; without
  // one, chats take the built-in form (openai_api.h).
  std::optional<jinja::ChatTemplate> chat_template;
  // Tokens that end a generation besides the tokenizer's end of text: the eos tokens of the
  // tokenizer_config.json and generation_config.json, such as Llama 3's <|eot_id|>.
  std::vector<int32_t> stop_tokens;
  // How its KV caches hold keys and values.
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;

  const model::ModelConfig& config() const { return model->config(); }
  const kernels::Context& context() const {
    return device != nullptr ? device->context() : kernels::kCpuContext;
  }
  const jinja::ChatTemplate* chat_template_or_null() const {
    return chat_template ? &*chat_template : nullptr;
  }
};

// The first n floats at `values`, which the model returned, readable on the host: `values` on the
// CPU, else copied from ctx's device into `host`, which holds at least n.
const float* on_host(const kernels::Context& ctx, const float* values, int64_t n,
                     std::vector<float>& host);

// checkpoint: a run directory, its checkpoints/ folder, one step directory, or a Hugging Face
// model folder (GPT-2, Llama, Mixtral; with its tokenizer when it holds one). Over a mesh, each
// rank reads its own shard of the weights, whatever layout the checkpoint was trained on. A
// non-empty `chat_template_file` replaces the tokenizer's chat template.
ServedModel load_served_model(const std::filesystem::path& checkpoint, int64_t max_step_tokens,
                              const ServingFormat& format = {},
                              const std::filesystem::path& chat_template_file = {});

}  // namespace tessera::serve
