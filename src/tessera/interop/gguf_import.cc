#include "tessera/interop/gguf_import.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "tessera/core/error.h"
#include "tessera/interop/gguf_names.h"
#include "tessera/model/model_layout.h"

namespace tessera::interop {
namespace {

using model::Architecture;
using model::ModelConfig;

constexpr char kRopeFreqs[] = "rope_freqs.weight";

// Llama 3's RoPE scaling from the per-pair divisors llama.cpp stores in rope_freqs.weight: the
// factor is the largest divisor; the frequency bands (low 1 or 2, high 4 or 8) and the original
// context (the file's rope.scaling.original_context_length, else Llama 3.1's 8,192, else a power
// of two) are the first that reproduce every divisor.
kernels::RopeScaling llama3_scaling(const GgufFile& f, const ModelConfig& c,
                                    const std::vector<float>& divisors) {
  const int64_t D = c.head_dim();
  check(int64_t(divisors.size()) == D / 2,
        "{}: {} holds {} values, the model's heads have {} pairs", f.source(), kRopeFreqs,
        divisors.size(), D / 2);
  kernels::RopeScaling s{.type = kernels::RopeScalingType::kLlama3};
  s.factor = *std::max_element(divisors.begin(), divisors.end());
  const std::string original =
      f.text("general.architecture") + ".rope.scaling.original_context_length";
  std::vector<int64_t> contexts = {8192};
  if (f.has(original)) contexts.insert(contexts.begin(), f.integer(original));
  for (int64_t context = 16; context <= (int64_t(1) << 20); context *= 2)
    contexts.push_back(context);
  const kernels::Rope plain{c.rope_theta, {}};
  for (const int64_t context : contexts) {
    for (const double low : {1.0, 2.0}) {
      for (const double high : {4.0, 8.0}) {
        s.original_context = context;
        s.low_freq_factor = low;
        s.high_freq_factor = high;
        bool fits = true;
        for (int64_t i = 0; i < D / 2 && fits; ++i) {
          const double divisor = kernels::rope_inverse_frequency(plain, i, D) /
                                 kernels::rope_inverse_frequency({c.rope_theta, s}, i, D);
          fits = std::abs(divisor - divisors[size_t(i)]) <= 1e-5 * divisor;
        }
        if (fits) return s;
      }
    }
  }
  fail(
      "{}: {} holds frequency divisors that Llama 3's RoPE scaling with factor {} does not give "
      "for the usual frequency bands; Tessera cannot read this scaling",
      f.source(), kRopeFreqs, s.factor);
}

void read_rope_scaling(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".rope.scaling.type";
  if (f.has(key) && f.text(key) != "none") {
    const std::string& type = f.text(key);
    check(type == "linear" || type == "yarn",
          "{}: {} is '{}'; Tessera reads linear and yarn (and Llama 3's, as {})", f.source(), key,
          type, kRopeFreqs);
    c.rope_scaling.type =
        type == "linear" ? kernels::RopeScalingType::kLinear : kernels::RopeScalingType::kYarn;
    c.rope_scaling.factor = f.number(arch + ".rope.scaling.factor");
    if (type == "yarn") {
      c.rope_scaling.original_context = f.integer(arch + ".rope.scaling.original_context_length");
    }
  }
  if (const GgufTensor* freqs = f.find(kRopeFreqs)) {
    check(c.rope_scaling.type == kernels::RopeScalingType::kNone, "{}: has both {} and {}",
          f.source(), key, kRopeFreqs);
    c.rope_scaling = llama3_scaling(f, c, f.read(*freqs));
  }
}

ModelConfig config_of(const GgufFile& f, std::string& arch) {
  arch = f.text("general.architecture");
  check(arch == "gpt2" || arch == "llama" || arch == "qwen3",
        "{}: general.architecture is '{}'; Tessera runs gpt2, llama and qwen3 (a Llama with "
        "QK-norm)",
        f.source(), arch);
  const std::string k = arch + ".";
  check(!f.has(k + "expert_count") || f.integer(k + "expert_count") == 0,
        "{}: a mixture of {} experts; Tessera imports mixtures from Hugging Face folders only",
        f.source(), f.has(k + "expert_count") ? f.integer(k + "expert_count") : 0);
  const GgufTensor* embedding = f.find("token_embd.weight");
  check(embedding != nullptr && embedding->shape.size() == 2, "{}: has no token_embd.weight matrix",
        f.source());
  // Each size is bounded by the tensors that must hold it, before any arithmetic on it.
  const auto size = [&](const std::string& key, int64_t most) {
    const int64_t v = f.integer(k + key);
    check(v >= 1 && v <= most, "{}: {}{} is {}, outside [1, {}]", f.source(), k, key, v, most);
    return v;
  };
  ModelConfig c;
  c.arch = arch == "gpt2" ? Architecture::kGpt2 : Architecture::kLlama;
  c.qk_norm = arch == "qwen3";
  c.vocab_size = embedding->shape[0];
  c.d_model = size("embedding_length", embedding->shape[1]);
  check(c.d_model == embedding->shape[1],
        "{}: {}embedding_length is {}, but token_embd.weight rows are {} wide", f.source(), k,
        c.d_model, embedding->shape[1]);
  c.n_layer = size("block_count", int64_t(f.header().tensors.size()));
  c.n_head = size("attention.head_count", c.d_model);
  c.max_seq = size("context_length", int64_t(1) << 24);
  // The MLP's width, kept as the architecture's default where it is that.
  const int64_t ffn = size("feed_forward_length", (int64_t(1) << 40) / c.d_model);
  if (c.ffn() != ffn) c.ffn_hidden = ffn;
  if (c.arch == Architecture::kGpt2) {
    const double eps = f.number(k + "attention.layer_norm_epsilon");
    check(std::abs(eps - c.norm_eps) <= 1e-6 * c.norm_eps,
          "{}: {}attention.layer_norm_epsilon is {}; Tessera's GPT-2 LayerNorm uses {}", f.source(),
          k, eps, c.norm_eps);
    // llama.cpp's gpt2 stores a tied head again as output.weight; llama-quantize may round it to
    // another type than the embedding (Q6_K beside Q4_0), and then it is a head of its own.
    const GgufTensor* output = f.find("output.weight");
    c.tie_embeddings = output == nullptr || f.read(*output) == f.read(*embedding);
    return c;
  }
  c.norm_eps = f.number(k + "attention.layer_norm_rms_epsilon");
  if (f.has(k + "attention.head_count_kv")) c.n_kv_head = size("attention.head_count_kv", c.n_head);
  if (f.has(k + "rope.freq_base")) c.rope_theta = f.number(k + "rope.freq_base");
  if (f.has(k + "attention.key_length")) {
    const int64_t head_dim = size("attention.key_length", 1 << 16);
    if (head_dim != c.d_model / c.n_head) c.head_dim_override = head_dim;
  }
  c.tie_embeddings = f.find("output.weight") == nullptr;
  read_rope_scaling(f, arch, c);
  return c;
}

// Reads the GGUF tensors of model parameters into `params`, counting each tensor it takes.
// First with params null, which checks that every parameter has its tensor, of its shape, before
// anything is allocated: the parameters then take no more values than the file's tensors.
class ParamReader {
 public:
  ParamReader(const GgufFile& f, const model::ModelLayout& layout, float* params)
      : f_(f), layout_(layout), params_(params) {}

  // The tensors of the file no parameter took.
  std::vector<std::string> unread() const {
    std::vector<std::string> names;
    for (const GgufTensor& t : f_.header().tensors) {
      if (!read_.count(t.name)) names.push_back(t.name);
    }
    return names;
  }
  void take(const std::string& name) { read_.insert(name); }

  // The slice's GGUF tensor into its rows of its parameter, each head's interleaved q or k
  // pairs back in rotate-half order.
  void read(const GgufSlice& s) {
    const GgufTensor* t = f_.find(s.gguf);
    check(t != nullptr, "{}: has no tensor {} (for {})", f_.source(), s.gguf, s.param);
    const model::ParamInfo& p = layout_.params.find(s.param);
    const int64_t width = s.vector ? p.shape.numel() : p.shape[p.shape.rank() - 1];
    const int64_t n = s.rows < 0 ? p.shape.numel() / width : s.rows;
    const std::vector<int64_t> want =
        s.vector ? std::vector<int64_t>{width} : std::vector<int64_t>{n, width};
    check(t->shape == want, "{}: tensor {} has shape [{}], {} needs [{}]", f_.source(), s.gguf,
          fmt::join(t->shape, ", "), s.param, fmt::join(want, ", "));
    read_.insert(s.gguf);
    if (params_ == nullptr) return;
    const std::vector<float> values = f_.read(*t);
    float* out = params_ + p.offset + s.row * width;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t to = s.rope_heads > 0 ? gguf_rope_row(r, n / s.rope_heads) : r;
      std::copy_n(values.data() + r * width, width, out + to * width);
    }
  }

 private:
  const GgufFile& f_;
  const model::ModelLayout& layout_;
  float* params_;
  std::set<std::string> read_;
};

std::string type_counts(const GgufFile& f) {
  std::map<std::string, int> counts;
  for (const GgufTensor& t : f.header().tensors) ++counts[std::string(enum_name(t.type))];
  std::string out;
  for (const auto& [name, n] : counts)
    out += fmt::format("{}{} x {}", out.empty() ? "" : ", ", name, n);
  return out;
}

// Every parameter's tensor into `params`, or with params null only checked; returns the tensors
// of the file no parameter takes.
std::vector<std::string> read_params(const GgufFile& file, const model::ModelLayout& layout,
                                     float* params) {
  ParamReader reader(file, layout, params);
  const model::ModelSpec& spec = layout.spec;
  for (const GgufSlice& s : gguf_slices(spec)) reader.read(s);
  if (spec.tied_head && spec.gguf_stores_tied_head) reader.take("output.weight");
  reader.take(kRopeFreqs);
  return reader.unread();
}

}  // namespace

GgufImport import_gguf(const GgufFile& file) {
  GgufImport out;
  out.config = config_of(file, out.architecture);
  ModelConfig& c = out.config;
  check(c.n_layer >= 1 && c.n_layer <= int64_t(file.header().tensors.size()),
        "{}: {} blocks, but the file holds {} tensors", file.source(), c.n_layer,
        file.header().tensors.size());
  try {
    model::validate(c);
    model::check_runnable(c);
  } catch (const Error& e) {
    fail("{}: its hyperparameters make no model Tessera runs: {}", file.source(), e.what());
  }
  const model::ModelLayout layout = model::model_layout(c);
  const std::vector<std::string> unread = read_params(file, layout, nullptr);
  check(unread.empty(), "{}: tensor {} is not a parameter of this {} model ({} tensors unread)",
        file.source(), unread.empty() ? "" : unread.front(), out.architecture, unread.size());
  out.params.assign(size_t(layout.params.total()), 0.0f);
  read_params(file, layout, out.params.data());
  out.types = type_counts(file);
  return out;
}

}  // namespace tessera::interop
