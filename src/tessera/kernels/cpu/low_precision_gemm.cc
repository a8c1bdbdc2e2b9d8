#include <algorithm>
#include <atomic>
#include <mutex>
#include <string_view>
#include <vector>

#include "tessera/core/cpu_model.h"
#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/low_precision_convert.h"
#include "tessera/kernels/cpu/onednn_matmul.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

namespace {

constexpr std::string_view kPortablePath = "portable (f32 conversion + sgemm)";

std::atomic<LowPrecisionGemmPath> path_choice{LowPrecisionGemmPath::kAuto};

// The portable path's f32 operands, grown as needed and kept; its calls are serialised.
struct WidenedOperands {
  std::mutex mutex;
  std::vector<float> values;
};

WidenedOperands& widened_operands() {
  static WidenedOperands instance;
  return instance;
}

MatmulOperands operands_of(LowPrecision p) {
  return p == LowPrecision::kBf16 ? MatmulOperands::kBf16 : MatmulOperands::kF16;
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
  return cpu_has_amx_bf16() || __builtin_cpu_is("amd");
}

namespace {

// Copies the rows x cols block of a low-precision matrix into a packed f32 one.
void widen(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst,
           LowPrecision p) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) from_low_serial(src + r * ld, dst + r * cols, cols, p);
}

void gemm_portable(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                   float* C, int64_t ldc, LowPrecision p) {
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const size_t needed = static_cast<size_t>(a_rows * a_cols + b_rows * b_cols);
  WidenedOperands& w = widened_operands();
  std::lock_guard lock(w.mutex);
  if (w.values.size() < needed) w.values.resize(needed);
  float* a = w.values.data();
  float* b = a + a_rows * a_cols;
  widen(A, a_rows, a_cols, lda, a, p);
  widen(B, b_rows, b_cols, ldb, b, p);
  gemm<float>(kCpuContext, trans_a, trans_b, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
}

}  // namespace

std::string low_precision_gemm_path(LowPrecision p) {
  if (!low_precision_gemm_uses_onednn(p)) return std::string(kPortablePath);
  const std::string impl = onednn_matmul_impl(operands_of(p));
  if (impl.empty()) return std::string(kPortablePath);
  return fmt::format("oneDNN matmul ({})", impl);
}

void set_low_precision_gemm_path(LowPrecisionGemmPath path) { path_choice.store(path); }

namespace cpu {

namespace {

void cpu_gemm_low(const Context&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, LowPrecision p) {
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
  if (low_precision_gemm_uses_onednn(p) && onednn_matmul(operands_of(p), trans_a, trans_b, M, N, K,
                                                         alpha, A, lda, B, ldb, beta, C, ldc)) {
    return;
  }
  gemm_portable(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, p);
}

}  // namespace

void add_low_precision_gemm_kernels(Backend& backend) { backend.gemm_low = cpu_gemm_low; }

}  // namespace cpu

}  // namespace tessera::kernels
