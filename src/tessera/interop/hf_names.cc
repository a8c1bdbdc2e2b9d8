#include "tessera/interop/hf_names.h"

#include <fmt/format.h>

#include <cmath>

#include "tessera/core/error.h"

namespace tessera::interop {
namespace {

using model::Architecture;
using model::ModelConfig;
using nlohmann::json;

constexpr const char* kGpt2 = "GPT2LMHeadModel";
constexpr const char* kLlama = "LlamaForCausalLM";
constexpr const char* kMixtral = "MixtralForCausalLM";
constexpr const char* kQwen3 = "Qwen3ForCausalLM";  // a dense Llama with QK-norm

// GPT-2's LayerNorm epsilon is fixed in Tessera (model.norm_eps applies to Llama's RMSNorm).
constexpr double kGpt2LayerNormEps = 1e-5;

// Builds the list; `whole` maps all of a parameter, `part` some of its rows.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(const model::ModelLayout& layout) : layout_(layout) {}

  void whole(std::string hf_name, const std::string& param, bool transposed = false) {
    const Shape& s = layout_.params.find(param).shape;
    std::vector<int64_t> hf_shape;
    for (int i = 0; i < s.rank(); ++i) hf_shape.push_back(s[i]);
    if (transposed) std::swap(hf_shape[0], hf_shape[1]);
    const int64_t width = s.rank() >= 2 ? s[s.rank() - 1] : 1;
    tensors.push_back({std::move(hf_name), hf_shape, param, 0, s.numel() / width, transposed});
  }

  void part(std::string hf_name, const std::string& param, int64_t row_begin, int64_t rows) {
    const Shape& s = layout_.params.find(param).shape;
    const int64_t width = s[s.rank() - 1];
    tensors.push_back({std::move(hf_name), {rows, width}, param, row_begin, rows, false});
  }

  std::vector<HfTensor> tensors;

 private:
  const model::ModelLayout& layout_;
};

// Every parameter of `parts` as Hugging Face tensors: Tessera's names after `param_prefix`
// ("blocks.3."), Hugging Face's after `hf_prefix` ("model.layers.3.").
void add_parts(LayoutBuilder& b, const std::vector<model::Part>& parts,
               const std::string& param_prefix, const std::string& hf_prefix) {
  for (const model::Part& p : parts) {
    const std::string param = param_prefix + p.name;
    for (const char* suffix : {".weight", ".bias"}) {
      const bool weight = suffix == std::string_view(".weight");
      if (!weight && !p.bias) continue;
      if (p.stack == 1 && p.external.size() == 1 && p.external[0].rows == 0) {
        check(!p.external[0].hf.empty(), "{}: Hugging Face has no tensor for it", param);
        b.whole(hf_prefix + p.external[0].hf + suffix, param + suffix, weight && p.hf_transposed);
        continue;
      }
      check(weight, "{}: a part split into several Hugging Face tensors has no bias", param);
      for (int64_t e = 0; e < p.stack; ++e) {
        int64_t row = e * p.out;
        for (const model::ExternalSlice& slice : p.external) {
          const int64_t rows = slice.rows > 0 ? slice.rows : p.out;
          const std::string name = fmt::format(fmt::runtime(slice.hf), fmt::arg("e", e));
          b.part(hf_prefix + name + suffix, param + suffix, row, rows);
          row += rows;
        }
      }
    }
  }
}

// Typed access to config.json fields, with Transformers' defaults for absent (or null) ones.
class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& source) : j_(j), source_(source) {
    check(j.is_object(), "{}: expected a JSON object, got {}", source, j.type_name());
  }

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int64_t size(const char* key) const {
    check(has(key), "{}: missing '{}'", source_, key);
    const json& v = j_[key];
    check(v.is_number_integer() && v.get<int64_t>() >= 1,
          "{}: '{}' must be an integer >= 1, got {}", source_, key, v.dump());
    return v.get<int64_t>();
  }
  int64_t size_or(const char* key, int64_t fallback) const {
    return has(key) ? size(key) : fallback;
  }

  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    check(v.is_number(), "{}: '{}' must be a number, got {}", source_, key, v.dump());
    return v.get<double>();
  }

  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    check(v.is_boolean(), "{}: '{}' must be true or false, got {}", source_, key, v.dump());
    return v.get<bool>();
  }

  std::string text_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    check(v.is_string(), "{}: '{}' must be a string, got {}", source_, key, v.dump());
    return v.get<std::string>();
  }

  // A setting Tessera supports only at one value.
  void require_flag(const char* key, bool fallback, bool wanted, const char* why) const {
    check(flag_or(key, fallback) == wanted, "{}: '{}' = {} is not supported: {}", source_, key,
          !wanted, why);
  }

  const json& at(const char* key) const { return j_[key]; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

// config.json's rope_scaling: plain ("default"), linear, llama3 (Llama 3.1 and later) or yarn
// (whose original context defaults to max_position_embeddings, max_seq here).
kernels::RopeScaling rope_scaling_of(const ConfigReader& config, int64_t max_seq) {
  const std::string source = config.source() + ": 'rope_scaling'";
  const ConfigReader r(config.at("rope_scaling"), source);
  const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
  kernels::RopeScaling s;
  if (type == "default") return s;
  check(type == "linear" || type == "llama3" || type == "yarn",
        "{} of type \"{}\" is not supported: Tessera scales RoPE as \"linear\", \"llama3\" or "
        "\"yarn\"",
        source, type);
  s.type = enum_from_name<kernels::RopeScalingType>(type, source);
  s.factor = r.number_or("factor", 0);
  check(s.factor >= 1, "{}: 'factor' must be a number >= 1", source);
  if (s.type == kernels::RopeScalingType::kLinear) return s;
  if (s.type == kernels::RopeScalingType::kYarn) {
    s.original_context = r.size_or("original_max_position_embeddings", max_seq);
    s.beta_fast = r.number_or("beta_fast", 32);
    s.beta_slow = r.number_or("beta_slow", 1);
    s.attention_factor = r.number_or("attention_factor", 0);
    check(r.flag_or("truncate", true), "{}: 'truncate' = false is not supported", source);
    if (r.has("mscale") && r.has("mscale_all_dim") && s.attention_factor == 0) {
      const auto mscale = [&](double m) { return 0.1 * m * std::log(s.factor) + 1.0; };
      s.attention_factor =
          mscale(r.number_or("mscale", 1)) / mscale(r.number_or("mscale_all_dim", 1));
    }
    check(s.beta_slow > 0 && s.beta_slow < s.beta_fast && s.attention_factor >= 0,
          "{}: 'beta_slow' ({}) must be above 0 and below 'beta_fast' ({}), and "
          "'attention_factor' ({}) not negative",
          source, s.beta_slow, s.beta_fast, s.attention_factor);
    return s;
  }
  s.low_freq_factor = r.number_or("low_freq_factor", 0);
  s.high_freq_factor = r.number_or("high_freq_factor", 0);
  check(s.low_freq_factor > 0 && s.low_freq_factor < s.high_freq_factor,
        "{}: 'low_freq_factor' ({}) must be above 0 and below 'high_freq_factor' ({})", source,
        s.low_freq_factor, s.high_freq_factor);
  s.original_context = r.size("original_max_position_embeddings");
  return s;
}

json rope_scaling_json(const kernels::RopeScaling& s) {
  using kernels::RopeScalingType;
  if (s.type == RopeScalingType::kNone) return nullptr;
  json j = {{"rope_type", std::string(enum_name(s.type))}, {"factor", s.factor}};
  if (s.type == RopeScalingType::kLlama3) {
    j["low_freq_factor"] = s.low_freq_factor;
    j["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type != RopeScalingType::kLinear) {
    j["original_max_position_embeddings"] = s.original_context;
  }
  if (s.type == RopeScalingType::kYarn) {
    j["beta_fast"] = s.beta_fast;
    j["beta_slow"] = s.beta_slow;
    if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
  }
  return j;
}

std::string model_type_of(const ConfigReader& r) {
  if (r.has("model_type")) return r.text_or("model_type", "");
  check(r.has("architectures") && r.at("architectures").is_array() &&
            !r.at("architectures").empty() && r.at("architectures")[0].is_string(),
        "{}: names neither 'model_type' nor 'architectures'", r.source());
  const std::string arch = r.at("architectures")[0].get<std::string>();
  if (arch == kGpt2) return "gpt2";
  if (arch == kLlama) return "llama";
  if (arch == kMixtral) return "mixtral";
  if (arch == kQwen3) return "qwen3";
  fail("{}: architecture '{}' is not supported ({}, {}, {} or {})", r.source(), arch, kGpt2, kLlama,
       kMixtral, kQwen3);
}

ModelConfig gpt2_from_hf(const ConfigReader& r) {
  ModelConfig c;
  c.arch = Architecture::kGpt2;
  c.vocab_size = r.size("vocab_size");
  c.d_model = r.size("n_embd");
  c.n_layer = r.size("n_layer");
  c.n_head = r.size("n_head");
  c.max_seq = r.size("n_positions");
  c.ffn_hidden = r.size_or("n_inner", 0);
  const std::string act = r.text_or("activation_function", "gelu_new");
  check(act == "gelu_new" || act == "gelu_pytorch_tanh",
        "{}: 'activation_function' = \"{}\" is not supported: Tessera's GPT-2 uses the tanh GELU "
        "(gelu_new)",
        r.source(), act);
  const double eps = r.number_or("layer_norm_epsilon", kGpt2LayerNormEps);
  check(eps == kGpt2LayerNormEps,
        "{}: 'layer_norm_epsilon' = {} is not supported: Tessera's GPT-2 uses {}", r.source(), eps,
        kGpt2LayerNormEps);
  r.require_flag("scale_attn_weights", true, true,
                 "attention scores are scaled by 1/sqrt(head_dim)");
  r.require_flag("scale_attn_by_inverse_layer_idx", false, false,
                 "attention scores are not scaled by layer");
  c.tie_embeddings = r.flag_or("tie_word_embeddings", true);
  return c;
}

// Transformers' class of a model: a Llama with QK-norm is a Qwen 3 (or, with experts, a model
// Transformers has no class for).
std::string hf_architecture(const ModelConfig& c) {
  if (c.arch == Architecture::kGpt2) return kGpt2;
  check(!c.qk_norm || !c.is_moe(),
        "model.qk_norm with model.moe_experts: Hugging Face's Mixtral has no QK-norm, so this "
        "model cannot be exported");
  if (c.qk_norm) return kQwen3;
  return c.is_moe() ? kMixtral : kLlama;
}

ModelConfig llama_from_hf(const ConfigReader& r, bool mixtral) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.vocab_size = r.size("vocab_size");
  c.d_model = r.size("hidden_size");
  c.n_layer = r.size("num_hidden_layers");
  c.n_head = r.size("num_attention_heads");
  c.n_kv_head = r.size_or("num_key_value_heads", c.n_head);
  c.ffn_hidden = r.size("intermediate_size");
  c.max_seq = r.size("max_position_embeddings");
  c.rope_theta = r.number_or("rope_theta", 1e4);
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.tie_embeddings = r.flag_or("tie_word_embeddings", false);
  const std::string act = r.text_or("hidden_act", "silu");
  check(act == "silu" || act == "swish",
        "{}: 'hidden_act' = \"{}\" is not supported: Tessera's Llama MLP is SwiGLU (silu)",
        r.source(), act);
  if (r.has("rope_scaling")) c.rope_scaling = rope_scaling_of(r, c.max_seq);
  r.require_flag("attention_bias", false, false, "Llama attention has no biases");
  r.require_flag("mlp_bias", false, false, "Llama MLPs have no biases");
  check(c.d_model % c.n_head == 0,
        "{}: 'hidden_size' ({}) must be divisible by "
        "'num_attention_heads' ({})",
        r.source(), c.d_model, c.n_head);
  const int64_t head_dim = r.size_or("head_dim", c.d_model / c.n_head);
  check(head_dim * c.n_head == c.d_model,
        "{}: 'head_dim' = {} is not supported: Tessera's heads are hidden_size / "
        "num_attention_heads = {} wide",
        r.source(), head_dim, c.d_model / c.n_head);
  if (!mixtral) return c;
  c.moe.n_experts = r.size_or("num_local_experts", 8);
  c.moe.top_k = r.size_or("num_experts_per_tok", 2);
  c.moe.aux_loss_coef = r.number_or("router_aux_loss_coef", 0.001);
  c.moe.capacity_factor = 0;  // Mixtral routes every token (dropless)
  if (r.has("sliding_window")) {
    const int64_t window = r.size("sliding_window");
    check(window >= c.max_seq,
          "{}: 'sliding_window' = {} is not supported: attention spans the whole context of {}",
          r.source(), window, c.max_seq);
  }
  return c;
}

}  // namespace

HfLayout hf_layout(const ModelConfig& c) {
  check(c.arch == Architecture::kGpt2 || c.moe.n_shared == 0,
        "model.moe_shared_experts = {}: Hugging Face's Mixtral has no shared experts, so this "
        "model cannot be exported",
        c.moe.n_shared);
  const model::ModelLayout layout = model::model_layout(c);
  const model::ModelSpec& spec = layout.spec;
  LayoutBuilder b(layout);
  add_parts(b, spec.embedding, "", "");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    add_parts(b, spec.block.parts, fmt::format("blocks.{}.", l),
              fmt::format(fmt::runtime(spec.hf_block_prefix), l));
  }
  add_parts(b, spec.head, "", "");
  HfLayout hf{hf_architecture(c), std::move(b.tensors), "", ""};
  if (c.tie_embeddings) {
    hf.tied_head = "lm_head.weight";
    hf.tied_to = spec.embedding.front().external.front().hf + ".weight";
  }
  return hf;
}

bool is_hf_buffer(Architecture arch, std::string_view name) {
  if (arch == Architecture::kGpt2) {
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
  }
  return name.ends_with(".rotary_emb.inv_freq");
}

HfSlice hf_slice(const model::ModelLayout& layout, const HfTensor& t) {
  const model::ParamInfo& p = layout.params.find(t.param);
  const int64_t width = p.shape.rank() >= 2 ? p.shape[p.shape.rank() - 1] : 1;
  check(t.row_begin >= 0 && t.rows >= 0 && (t.row_begin + t.rows) * width <= p.shape.numel(),
        "'{}': rows [{}, {}) lie outside parameter '{}' of shape {}", t.hf_name, t.row_begin,
        t.row_begin + t.rows, t.param, p.shape.str());
  return {p.offset + t.row_begin * width, width};
}

json hf_config_json(const ModelConfig& c, DType dtype) {
  check(dtype == DType::f32 || dtype == DType::bf16,
        "config.json: torch_dtype for {} is not defined", enum_name(dtype));
  const char* torch_dtype = dtype == DType::f32 ? "float32" : "bfloat16";
  if (c.arch == Architecture::kGpt2) {
    return {{"architectures", {kGpt2}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_embd", c.d_model},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_positions", c.max_seq},
            {"n_ctx", c.max_seq},
            // null is Transformers' own spelling of the default 4 * n_embd.
            {"n_inner", c.ffn() == 4 * c.d_model ? json(nullptr) : json(c.ffn())},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", kGpt2LayerNormEps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"torch_dtype", torch_dtype}};
  }
  const std::string arch = hf_architecture(c);
  json j = {{"architectures", {arch}},
            {"model_type", arch == kMixtral ? "mixtral"
                           : arch == kQwen3 ? "qwen3"
                                            : "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model},
            {"intermediate_size", c.ffn()},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"max_position_embeddings", c.max_seq},
            {"rope_theta", c.rope_theta},
            {"rope_scaling", rope_scaling_json(c.rope_scaling)},
            {"rms_norm_eps", c.norm_eps},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", c.tie_embeddings},
            {"attention_dropout", 0.0},
            {"torch_dtype", torch_dtype}};
  if (c.is_moe()) {
    j["num_local_experts"] = c.moe.n_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["router_aux_loss_coef"] = c.moe.aux_loss_coef;
    j["sliding_window"] = nullptr;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (arch == kQwen3) {
    // Qwen 3's own default head_dim is 128, whatever the width.
    j["head_dim"] = c.head_dim();
    j["use_sliding_window"] = false;
  }
  return j;
}

ModelConfig model_config_from_hf(const json& config, const std::string& source) {
  const ConfigReader r(config, source);
  const std::string type = model_type_of(r);
  ModelConfig c;
  if (type == "gpt2") {
    c = gpt2_from_hf(r);
  } else if (type == "llama" || type == "mixtral" || type == "qwen3") {
    c = llama_from_hf(r, type == "mixtral");
    c.qk_norm = type == "qwen3";
  } else {
    fail("{}: model_type '{}' is not supported (gpt2, llama, mixtral or qwen3)", source, type);
  }
  try {
    model::validate(c);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

}  // namespace tessera::interop
