#include "tessera/interop/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/core/q4_0.h"
#include "tessera/core/q4_k.h"
#include "tessera/interop/gguf_names.h"
#include "tessera/model/model_layout.h"

namespace tessera::interop {
namespace {

using model::Architecture;
using model::ModelConfig;

// llama.cpp's general.file_type: the type most tensors have.
uint32_t file_type(GgufWeights weights) {
  switch (weights) {
    case GgufWeights::f32:
      return 0;
    case GgufWeights::f16:
      return 1;
    case GgufWeights::q8_0:
      return 7;
    case GgufWeights::q4_0:
      return 2;
    case GgufWeights::q4_k_m:
      return 15;
  }
  return 0;
}

// Whether llama-quantize's Q4_K_M gives tensor `name` more bits: attn_v and ffn_down in the first
// and last eighth of the layers and every third layer between, as its use_more_bits chooses.
bool more_bits(const std::string& name, int64_t n_layer) {
  int layer = 0;
  char kind[16] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%15[a-z_]", &layer, kind) != 2) return false;
  if (std::string_view(kind) != "attn_v" && std::string_view(kind) != "ffn_down") return false;
  const int64_t eighth = n_layer / 8;
  return layer < eighth || layer >= 7 * n_layer / 8 || (layer - eighth) % 3 == 2;
}

// Adds tensors that are rows of Tessera parameters, read from the flat buffer when written.
class TensorAdder {
 public:
  TensorAdder(const ModelConfig& config, std::span<const float> params, GgufWeights weights,
              GgufWriter& gguf)
      : layout_(model::model_layout(config)), params_(params), weights_(weights), gguf_(gguf) {
    check(int64_t(params.size()) == layout_.params.total(),
          "GGUF export: {} parameter values given, the model's layout holds {}", params.size(),
          layout_.params.total());
  }

  // A norm's scale or shift, or a bias: always f32.
  void vector(const std::string& name, const std::string& param) {
    const model::ParamInfo& p = layout_.params.find(param);
    const float* src = params_.data() + p.offset;
    gguf_.add_tensor(name, {p.shape.numel()}, GgmlType::f32,
                     [src](std::span<float> out) { std::copy(src, src + out.size(), out.data()); });
  }

  const model::ModelSpec& spec() const { return layout_.spec; }

  // Rows [row_begin, row_begin + rows) of a matrix parameter [out, in]; `permute_heads` > 0
  // reorders each head's rows from rotate-half halves into interleaved pairs.
  void matrix(const std::string& name, const std::string& param, int64_t row_begin = 0,
              int64_t rows = -1, int64_t permute_heads = 0) {
    const model::ParamInfo& p = layout_.params.find(param);
    const int64_t width = p.shape[p.shape.rank() - 1];
    if (rows < 0) rows = p.shape.numel() / width;
    const float* src = params_.data() + p.offset + row_begin * width;
    const bool head = layout_.has_head && p.offset == layout_.head_weight();
    gguf_.add_tensor(name, {rows, width}, matrix_type(width, head, name),
                     [src, rows, width, permute_heads](std::span<float> out) {
                       if (permute_heads == 0) {
                         std::copy(src, src + rows * width, out.data());
                         return;
                       }
                       const int64_t head = rows / permute_heads;
                       for (int64_t r = 0; r < rows; ++r) {
                         const float* row = src + gguf_rope_row(r, head) * width;
                         std::copy(row, row + width, out.data() + r * width);
                       }
                     });
  }

 private:
  GgmlType matrix_type(int64_t width, bool head, const std::string& name) const {
    switch (weights_) {
      case GgufWeights::f32:
        return GgmlType::f32;
      case GgufWeights::f16:
        return GgmlType::f16;
      case GgufWeights::q8_0:
        return width % kQ8BlockSize == 0 ? GgmlType::q8_0 : GgmlType::f16;
      case GgufWeights::q4_0:
        if (width % kQ4_0BlockSize != 0) return GgmlType::f16;
        return head ? GgmlType::q8_0 : GgmlType::q4_0;
      case GgufWeights::q4_k_m:
        if (width % kQ4_0BlockSize != 0) return GgmlType::f16;
        if (head || more_bits(name, int64_t(layout_.blocks.size()))) return GgmlType::q8_0;
        return width % kQ4KBlockSize == 0 ? GgmlType::q4_k : GgmlType::q4_0;
    }
    return GgmlType::f32;
  }

  model::ModelLayout layout_;
  std::span<const float> params_;
  GgufWeights weights_;
  GgufWriter& gguf_;
};

void add_gpt2_keys(const ModelConfig& c, GgufWriter& gguf) {
  gguf.set("gpt2.context_length", uint32_t(c.max_seq));
  gguf.set("gpt2.embedding_length", uint32_t(c.d_model));
  gguf.set("gpt2.feed_forward_length", uint32_t(c.ffn()));
  gguf.set("gpt2.block_count", uint32_t(c.n_layer));
  gguf.set("gpt2.attention.head_count", uint32_t(c.n_head));
  gguf.set("gpt2.attention.layer_norm_epsilon", float(c.norm_eps));
}

// RoPE scaling as llama.cpp's converter writes it: linear and yarn as keys; llama3 as the tensor
// rope_freqs.weight, by which llama.cpp divides each plain frequency.
void add_rope_scaling(const ModelConfig& c, const std::string& arch, GgufWriter& gguf) {
  const kernels::RopeScaling& s = c.rope_scaling;
  if (s.type == kernels::RopeScalingType::kLinear || s.type == kernels::RopeScalingType::kYarn) {
    gguf.set(arch + ".rope.scaling.type", std::string(enum_name(s.type)));
    gguf.set(arch + ".rope.scaling.factor", float(s.factor));
  }
  if (s.type == kernels::RopeScalingType::kYarn) {
    check(s.beta_fast == 32 && s.beta_slow == 1 && s.attention_factor == 0,
          "GGUF export: llama.cpp reads YaRN with beta_fast 32, beta_slow 1 and the attention "
          "factor 0.1 ln(factor) + 1; this model's model.rope_yarn_beta_fast ({}), "
          "model.rope_yarn_beta_slow ({}) or model.rope_attention_factor ({}) differ",
          s.beta_fast, s.beta_slow, s.attention_factor);
    gguf.set(arch + ".rope.scaling.original_context_length", uint32_t(s.original_context));
  } else if (s.type == kernels::RopeScalingType::kLlama3) {
    const int64_t D = c.head_dim();
    gguf.add_tensor("rope_freqs.weight", {D / 2}, GgmlType::f32, [c, D](std::span<float> out) {
      const kernels::Rope plain{c.rope_theta, {}};
      for (int64_t i = 0; i < D / 2; ++i) {
        out[size_t(i)] = float(kernels::rope_inverse_frequency(plain, i, D) /
                               kernels::rope_inverse_frequency(c.rope(), i, D));
      }
    });
  }
}

// llama.cpp's llama and qwen3 (a Llama with QK-norm) read the same keys under their own names.
void add_llama_keys(const ModelConfig& c, const std::string& arch, GgufWriter& gguf) {
  const int64_t D = c.head_dim();
  gguf.set(arch + ".context_length", uint32_t(c.max_seq));
  gguf.set(arch + ".embedding_length", uint32_t(c.d_model));
  gguf.set(arch + ".feed_forward_length", uint32_t(c.ffn()));
  gguf.set(arch + ".block_count", uint32_t(c.n_layer));
  gguf.set(arch + ".attention.head_count", uint32_t(c.n_head));
  gguf.set(arch + ".attention.head_count_kv", uint32_t(c.kv_heads()));
  gguf.set(arch + ".attention.key_length", uint32_t(D));
  gguf.set(arch + ".attention.value_length", uint32_t(D));
  gguf.set(arch + ".rope.dimension_count", uint32_t(D));
  gguf.set(arch + ".rope.freq_base", float(c.rope_theta));
  gguf.set(arch + ".attention.layer_norm_rms_epsilon", float(c.norm_eps));
  gguf.set(arch + ".vocab_size", uint32_t(c.vocab_size));
  add_rope_scaling(c, arch, gguf);
}

}  // namespace

std::string add_gguf_model(const ModelConfig& config, std::span<const float> params,
                           GgufWeights weights, GgufWriter& gguf) {
  model::check_runnable(config);
  check(!config.is_moe(),
        "GGUF export writes GPT-2 and dense Llama models; this one has {} experts "
        "(model.moe_experts): export it with --format hf instead",
        config.moe.n_experts);
  TensorAdder tensors(config, params, weights, gguf);
  const model::ModelSpec& spec = tensors.spec();
  const std::string& arch = spec.gguf_arch;
  gguf.set("general.architecture", arch);
  gguf.set("general.name", std::string("tessera-") + arch);
  gguf.set("general.file_type", file_type(weights));
  gguf.set("general.quantization_version", uint32_t(2));
  if (config.arch == Architecture::kGpt2) {
    add_gpt2_keys(config, gguf);
  } else {
    add_llama_keys(config, arch, gguf);
  }
  for (const GgufSlice& s : gguf_slices(spec)) {
    if (s.vector) {
      tensors.vector(s.gguf, s.param);
    } else {
      tensors.matrix(s.gguf, s.param, s.row, s.rows, s.rope_heads);
    }
  }
  // Without output.weight llama.cpp's llama multiplies by the token embedding; its gpt2 always
  // reads output.weight, so a tied head is stored twice, as llama.cpp's converter does.
  if (spec.tied_head && spec.gguf_stores_tied_head) tensors.matrix("output.weight", "wte.weight");
  return arch;
}

}  // namespace tessera::interop
