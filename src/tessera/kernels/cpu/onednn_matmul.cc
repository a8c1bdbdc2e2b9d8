#include "tessera/kernels/cpu/onednn_matmul.h"

#include <bit>
#include <cstddef>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::kernels {

namespace {

// Everything a matmul primitive is specialised on. alpha and beta are kept as bits so that the
// key compares by identity even for NaN.
struct Key {
  MatmulOperands operands;
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  uint32_t alpha, beta;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = static_cast<size_t>(k.operands) * 4 + k.trans_a * 2 + k.trans_b;
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc, int64_t(k.alpha), int64_t(k.beta)}) {
      h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h;
  }
};

// A primitive with its memory objects, whose data handles are rebound on every call.
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
};

// Scratchpads are 64-byte aligned, as oneDNN's own allocations are.
struct alignas(64) CacheLine {
  std::byte bytes[64];
};

struct OnednnState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;  // guards everything below and serialises the calls
  // A null entry remembers that oneDNN has no fast matmul for the key.
  std::unordered_map<Key, std::unique_ptr<Matmul>, KeyHash> matmuls;
  std::vector<CacheLine> scratchpad;  // shared by every primitive, grows only
};

OnednnState& onednn_state() {
  static OnednnState instance;
  return instance;
}

dnnl::memory::data_type data_type(MatmulOperands o) {
  switch (o) {
    case MatmulOperands::kBf16:
      return dnnl::memory::data_type::bf16;
    case MatmulOperands::kF16:
      return dnnl::memory::data_type::f16;
    case MatmulOperands::kInt8:
      return dnnl::memory::data_type::s8;
  }
  return dnnl::memory::data_type::undef;
}

std::optional<dnnl::matmul::primitive_desc> describe(const Key& k, const dnnl::engine& engine) {
  using dims = dnnl::memory::dims;
  const auto type = data_type(k.operands);
  // Strides express the transposes and leading dimensions, so operands are never copied.
  const dnnl::memory::desc a({k.M, k.K}, type, k.trans_a ? dims{1, k.lda} : dims{k.lda, 1});
  const dnnl::memory::desc b({k.K, k.N}, type, k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1});
  const dnnl::memory::desc c({k.M, k.N}, dnnl::memory::data_type::f32, dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const float alpha = std::bit_cast<float>(k.alpha), beta = std::bit_cast<float>(k.beta);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// Caller holds the backend's mutex.
Matmul* find_or_create(OnednnState& be, const Key& k) {
  auto [it, inserted] = be.matmuls.try_emplace(k);
  if (!inserted) return it->second.get();
  std::optional<dnnl::matmul::primitive_desc> pd = describe(k, be.engine);
  if (!pd) return nullptr;
  auto m = std::make_unique<Matmul>();
  m->primitive = dnnl::matmul(*pd);
  m->a = dnnl::memory(pd->src_desc(), be.engine, nullptr);
  m->b = dnnl::memory(pd->weights_desc(), be.engine, nullptr);
  m->c = dnnl::memory(pd->dst_desc(), be.engine, nullptr);
  m->scratchpad = dnnl::memory(pd->scratchpad_desc(), be.engine, nullptr);
  m->args = {{DNNL_ARG_SRC, m->a},
             {DNNL_ARG_WEIGHTS, m->b},
             {DNNL_ARG_DST, m->c},
             {DNNL_ARG_SCRATCHPAD, m->scratchpad}};
  const size_t lines =
      (pd->scratchpad_desc().get_size() + sizeof(CacheLine) - 1) / sizeof(CacheLine);
  if (be.scratchpad.size() < lines) be.scratchpad.resize(lines);
  it->second = std::move(m);
  return it->second.get();
}

}  // namespace

bool onednn_matmul(MatmulOperands operands, bool trans_a, bool trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                   float beta, float* C, int64_t ldc) {
  OnednnState& be = onednn_state();
  std::lock_guard lock(be.mutex);
  const Key key{operands,
                trans_a,
                trans_b,
                M,
                N,
                K,
                lda,
                ldb,
                ldc,
                std::bit_cast<uint32_t>(alpha),
                std::bit_cast<uint32_t>(beta)};
  Matmul* m = find_or_create(be, key);
  if (m == nullptr) return false;
  // oneDNN takes non-const handles; it only reads the source and weights.
  m->a.set_data_handle(const_cast<void*>(A));
  m->b.set_data_handle(const_cast<void*>(B));
  m->c.set_data_handle(C);
  m->scratchpad.set_data_handle(be.scratchpad.data());
  m->primitive.execute(be.stream, m->args);
  be.stream.wait();
  return true;
}

std::string onednn_matmul_impl(MatmulOperands operands) {
  // A dense linear layer's forward stands for all the model's shapes. (Padded leading dimensions
  // can get oneDNN's gemm:jit kernels instead of brgemm.)
  const Key key{operands, false, true, 256, 256, 256, 256, 256, 256, std::bit_cast<uint32_t>(1.0f),
                0};
  std::optional<dnnl::matmul::primitive_desc> pd = describe(key, onednn_state().engine);
  return pd ? std::string(pd->impl_info_str()) : std::string();
}

}  // namespace tessera::kernels
