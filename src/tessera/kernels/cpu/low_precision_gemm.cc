#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/device_dispatch.h"
#include "tessera/kernels/cpu/low_precision_convert.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

namespace {

constexpr std::string_view kPortablePath = "portable (f32 conversion + sgemm)";

std::atomic<LowPrecisionGemmPath> path_choice{LowPrecisionGemmPath::kAuto};

// Everything a matmul primitive is specialised on. alpha and beta are kept as bits so that the
// key compares by identity even for NaN.
struct Key {
  LowPrecision p;
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  uint32_t alpha, beta;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = static_cast<size_t>(k.p) * 4 + k.trans_a * 2 + k.trans_b;
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc, int64_t(k.alpha), int64_t(k.beta)}) {
      h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h;
  }
};

// A primitive with its memory objects, whose data handles are rebound on every call so that a
// call after the first allocates nothing of ours.
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
};

// Scratchpads are 64-byte aligned, as oneDNN's own allocations are.
struct alignas(64) CacheLine {
  std::byte bytes[64];
};

struct Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;  // guards everything below and serialises the calls
  // A null entry remembers that oneDNN has no fast matmul for the key.
  std::unordered_map<Key, std::unique_ptr<Matmul>, KeyHash> matmuls;
  std::vector<CacheLine> scratchpad;  // shared by every primitive, grows only
  std::vector<float> widened;         // the portable path's f32 operands, grows only
};

Backend& backend() {
  static Backend instance;
  return instance;
}

}  // namespace

bool low_precision_gemm_uses_onednn(LowPrecision p) {
  const LowPrecisionGemmPath choice = path_choice.load(std::memory_order_relaxed);
  if (choice == LowPrecisionGemmPath::kPortable) return false;
  // oneDNN 2.6 has no f16 CPU matmul (not even with AVX512_FP16): primitive creation says so
  // and the portable path takes over.
  if (p == LowPrecision::kF16) return true;
  if (!__builtin_cpu_supports("avx512bf16")) return false;
  if (choice == LowPrecisionGemmPath::kOneDnn) return true;
  // bf16 pays off where a bf16 dot product does more work per cycle than an f32 FMA: AMX tiles,
  // or AMD's AVX512_BF16 (Zen 4/5). On Intel cores without AMX VDPBF16PS issues at half the FMA
  // rate, so its two products per lane only match f32, and oneDNN's bf16 kernels measured 0.55x
  // of sgemm there, while sgemm on widened operands runs at full f32 speed.
  return __builtin_cpu_supports("amx-bf16") || __builtin_cpu_is("amd");
}

namespace {

std::optional<dnnl::matmul::primitive_desc> describe(const Key& k, const dnnl::engine& engine) {
  using dims = dnnl::memory::dims;
  const auto type =
      k.p == LowPrecision::kBf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f16;
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
    // oneDNN's reference kernels are far slower than sgemm on widened operands.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// Caller holds the backend's mutex.
Matmul* find_or_create(Backend& be, const Key& k) {
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

// Copies the rows x cols block of a low-precision matrix into a packed f32 one.
void widen(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst,
           LowPrecision p) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) from_low_serial(src + r * ld, dst + r * cols, cols, p);
}

// Caller holds the backend's mutex.
void gemm_portable(Backend& be, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                   float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                   float beta, float* C, int64_t ldc, LowPrecision p) {
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const size_t needed = static_cast<size_t>(a_rows * a_cols + b_rows * b_cols);
  if (be.widened.size() < needed) be.widened.resize(needed);
  float* a = be.widened.data();
  float* b = a + a_rows * a_cols;
  widen(A, a_rows, a_cols, lda, a, p);
  widen(B, b_rows, b_cols, ldb, b, p);
  gemm<float>(kCpuContext, trans_a, trans_b, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
}

}  // namespace

void gemm_low(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
              float beta, float* C, int64_t ldc, LowPrecision p) {
  TESSERA_ON_DEVICE(float, ctx, gemm_low, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc, p);
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(N) * double(K), 0);
  check(M >= 0 && N >= 0 && K >= 0, "gemm_low: negative size M={} N={} K={}", M, N, K);
  check(lda >= std::max<int64_t>(1, trans_a ? M : K) &&
            ldb >= std::max<int64_t>(1, trans_b ? K : N) && ldc >= std::max<int64_t>(1, N),
        "gemm_low: leading dimensions lda={} ldb={} ldc={} too small for M={} N={} K={}", lda, ldb,
        ldc, M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta * C, without handing zero-sized operands to either library
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  Backend& be = backend();
  std::lock_guard lock(be.mutex);
  Matmul* m = nullptr;
  if (low_precision_gemm_uses_onednn(p)) {
    const uint32_t alpha_bits = std::bit_cast<uint32_t>(alpha);
    const uint32_t beta_bits = std::bit_cast<uint32_t>(beta);
    const Key key{p, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha_bits, beta_bits};
    m = find_or_create(be, key);
  }
  if (m == nullptr) {
    gemm_portable(be, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, p);
    return;
  }
  // oneDNN takes non-const handles; it only reads the source and weights.
  m->a.set_data_handle(const_cast<uint16_t*>(A));
  m->b.set_data_handle(const_cast<uint16_t*>(B));
  m->c.set_data_handle(C);
  m->scratchpad.set_data_handle(be.scratchpad.data());
  m->primitive.execute(be.stream, m->args);
  be.stream.wait();
}

std::string low_precision_gemm_path(LowPrecision p) {
  if (!low_precision_gemm_uses_onednn(p)) return std::string(kPortablePath);
  // A dense linear layer's forward stands for all the model's shapes. (Padded leading dimensions
  // can get oneDNN's gemm:jit kernels instead of brgemm.)
  const Key key{p, false, true, 256, 256, 256, 256, 256, 256, std::bit_cast<uint32_t>(1.0f), 0};
  std::optional<dnnl::matmul::primitive_desc> pd = describe(key, backend().engine);
  if (!pd) return std::string(kPortablePath);
  return fmt::format("oneDNN matmul ({})", pd->impl_info_str());
}

void set_low_precision_gemm_path(LowPrecisionGemmPath path) { path_choice.store(path); }

}  // namespace tessera::kernels
