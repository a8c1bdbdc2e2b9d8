#include "tessera/interop/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessera/core/error.h"
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
  }
  return 0;
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

  // Rows [row_begin, row_begin + rows) of a matrix parameter [out, in]; `permute_heads` > 0
  // reorders each head's rows from rotate-half halves into interleaved pairs.
  void matrix(const std::string& name, const std::string& param, int64_t row_begin = 0,
              int64_t rows = -1, int64_t permute_heads = 0) {
    const model::ParamInfo& p = layout_.params.find(param);
    const int64_t width = p.shape[p.shape.rank() - 1];
    if (rows < 0) rows = p.shape.numel() / width;
    const float* src = params_.data() + p.offset + row_begin * width;
    gguf_.add_tensor(name, {rows, width}, matrix_type(width),
                     [src, rows, width, permute_heads](std::span<float> out) {
                       if (permute_heads == 0) {
                         std::copy(src, src + rows * width, out.data());
                         return;
                       }
                       const int64_t head = rows / permute_heads, half = head / 2;
                       for (int64_t r = 0; r < rows; ++r) {
                         const int64_t h = r / head, j = (r % head) / 2, side = r % 2;
                         const float* row = src + (h * head + side * half + j) * width;
                         std::copy(row, row + width, out.data() + r * width);
                       }
                     });
  }

 private:
  GgmlType matrix_type(int64_t width) const {
    switch (weights_) {
      case GgufWeights::f32:
        return GgmlType::f32;
      case GgufWeights::f16:
        return GgmlType::f16;
      case GgufWeights::q8_0:
        return width % kQ8BlockSize == 0 ? GgmlType::q8_0 : GgmlType::f16;
    }
    return GgmlType::f32;
  }

  model::ModelLayout layout_;
  std::span<const float> params_;
  GgufWeights weights_;
  GgufWriter& gguf_;
};

void add_gpt2(const ModelConfig& c, TensorAdder& t, GgufWriter& gguf) {
  gguf.set("gpt2.context_length", uint32_t(c.max_seq));
  gguf.set("gpt2.embedding_length", uint32_t(c.d_model));
  gguf.set("gpt2.feed_forward_length", uint32_t(c.ffn()));
  gguf.set("gpt2.block_count", uint32_t(c.n_layer));
  gguf.set("gpt2.attention.head_count", uint32_t(c.n_head));
  gguf.set("gpt2.attention.layer_norm_epsilon", float(c.norm_eps));
  t.matrix("token_embd.weight", "wte.weight");
  t.matrix("position_embd.weight", "wpe.weight");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string g = fmt::format("blk.{}.", l), p = fmt::format("blocks.{}.", l);
    t.vector(g + "attn_norm.weight", p + "ln1.weight");
    t.vector(g + "attn_norm.bias", p + "ln1.bias");
    t.matrix(g + "attn_qkv.weight", p + "attn.qkv.weight");
    t.vector(g + "attn_qkv.bias", p + "attn.qkv.bias");
    t.matrix(g + "attn_output.weight", p + "attn.proj.weight");
    t.vector(g + "attn_output.bias", p + "attn.proj.bias");
    t.vector(g + "ffn_norm.weight", p + "ln2.weight");
    t.vector(g + "ffn_norm.bias", p + "ln2.bias");
    t.matrix(g + "ffn_up.weight", p + "fc.weight");
    t.vector(g + "ffn_up.bias", p + "fc.bias");
    t.matrix(g + "ffn_down.weight", p + "fcproj.weight");
    t.vector(g + "ffn_down.bias", p + "fcproj.bias");
  }
  t.vector("output_norm.weight", "lnf.weight");
  t.vector("output_norm.bias", "lnf.bias");
  // llama.cpp's gpt2 always reads output.weight; a tied head is stored twice, as its converter
  // does.
  t.matrix("output.weight", c.tie_embeddings ? "wte.weight" : "lm_head.weight");
}

void add_llama(const ModelConfig& c, TensorAdder& t, GgufWriter& gguf) {
  const int64_t D = c.head_dim(), q_rows = c.n_head * D, kv_rows = c.kv_heads() * D;
  const int64_t F = c.ffn();
  gguf.set("llama.context_length", uint32_t(c.max_seq));
  gguf.set("llama.embedding_length", uint32_t(c.d_model));
  gguf.set("llama.feed_forward_length", uint32_t(F));
  gguf.set("llama.block_count", uint32_t(c.n_layer));
  gguf.set("llama.attention.head_count", uint32_t(c.n_head));
  gguf.set("llama.attention.head_count_kv", uint32_t(c.kv_heads()));
  gguf.set("llama.attention.key_length", uint32_t(D));
  gguf.set("llama.attention.value_length", uint32_t(D));
  gguf.set("llama.rope.dimension_count", uint32_t(D));
  gguf.set("llama.rope.freq_base", float(c.rope_theta));
  gguf.set("llama.attention.layer_norm_rms_epsilon", float(c.norm_eps));
  gguf.set("llama.vocab_size", uint32_t(c.vocab_size));
  t.matrix("token_embd.weight", "wte.weight");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string g = fmt::format("blk.{}.", l), p = fmt::format("blocks.{}.", l);
    t.vector(g + "attn_norm.weight", p + "ln1.weight");
    t.matrix(g + "attn_q.weight", p + "attn.qkv.weight", 0, q_rows, c.n_head);
    t.matrix(g + "attn_k.weight", p + "attn.qkv.weight", q_rows, kv_rows, c.kv_heads());
    t.matrix(g + "attn_v.weight", p + "attn.qkv.weight", q_rows + kv_rows, kv_rows);
    t.matrix(g + "attn_output.weight", p + "attn.proj.weight");
    t.vector(g + "ffn_norm.weight", p + "ln2.weight");
    t.matrix(g + "ffn_gate.weight", p + "mlp.gate_up.weight", 0, F);
    t.matrix(g + "ffn_up.weight", p + "mlp.gate_up.weight", F, F);
    t.matrix(g + "ffn_down.weight", p + "mlp.down.weight");
  }
  t.vector("output_norm.weight", "lnf.weight");
  // Without output.weight llama.cpp's llama multiplies by the token embedding: a tied head.
  if (!c.tie_embeddings) t.matrix("output.weight", "lm_head.weight");
}

}  // namespace

GgufWeights gguf_weights_from_name(const std::string& name) {
  if (name == "f32") return GgufWeights::f32;
  if (name == "f16") return GgufWeights::f16;
  if (name == "q8_0") return GgufWeights::q8_0;
  fail("GGUF weights must be f32, f16 or q8_0, got '{}'", name);
}

std::string add_gguf_model(const ModelConfig& config, std::span<const float> params,
                           GgufWeights weights, GgufWriter& gguf) {
  model::check_runnable(config);
  check(!config.is_moe(),
        "GGUF export writes GPT-2 and dense Llama models; this one has {} experts "
        "(model.moe_experts): export it with --format hf instead",
        config.moe.n_experts);
  const std::string arch = config.arch == Architecture::kGpt2 ? "gpt2" : "llama";
  gguf.set("general.architecture", arch);
  gguf.set("general.name", std::string("tessera-") + arch);
  gguf.set("general.file_type", file_type(weights));
  gguf.set("general.quantization_version", uint32_t(2));
  TensorAdder tensors(config, params, weights, gguf);
  if (config.arch == Architecture::kGpt2) {
    add_gpt2(config, tensors, gguf);
  } else {
    add_llama(config, tensors, gguf);
  }
  return arch;
}

}  // namespace tessera::interop
