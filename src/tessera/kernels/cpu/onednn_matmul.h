// oneDNN's matmul for operands the engine keeps in 16 or 8 bits: bf16 and f16 (gemm_low) and
// int8 (the int8 linear layers' prefill). A primitive is made once per shape and kept, with its
// memory objects rebound on every call, so a call after the first allocates nothing; calls are
// serialised (each already uses every core), so this is safe but not concurrent across threads.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::kernels {

enum class MatmulOperands { kBf16, kF16, kInt8 };

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op transposing when its flag is set; A and
// B hold `operands`, C is f32 (int8 products are summed exactly in int32, then converted). With
// beta 0, C is not read. Returns false, touching nothing, where oneDNN has only its reference
// kernels for the shape: they are far slower than the callers' own paths.
bool onednn_matmul(MatmulOperands operands, bool trans_a, bool trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                   float beta, float* C, int64_t ldc);

// The kernel oneDNN picks for a dense layer's product in `operands` (e.g. "brg:avx512_core_bf16"),
// or empty where it has only reference kernels.
std::string onednn_matmul_impl(MatmulOperands operands);

}  // namespace tessera::kernels
