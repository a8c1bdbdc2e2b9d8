// Kernels for mixed-precision training: matmul operands stored as bf16 or f16 bit patterns
// (uint16_t), products accumulated and written in f32. Everything else of the kernel layer's
// contract holds here too: raw row-major buffers, no model knowledge, parameter gradients
// accumulate.
//
// gemm_low runs oneDNN's bf16/f16 matmul when the CPU has the instructions for it and otherwise
// widens the operands to f32 for sgemm, so results agree between machines to f32 rounding. The
// matmul primitives are built once per shape and kept; calls are serialised (each already uses
// every core), so gemm_low is safe but not concurrent across threads.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/kernels/context.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

enum class LowPrecision { kBf16, kF16 };

// Round to nearest even; NaN stays NaN, f16 overflow gives inf, subnormals are kept (not
// flushed), so the result is the same bit pattern on every build and at every array position.
void cast_to_low(const Context& ctx, const float* x, uint16_t* y, int64_t n, LowPrecision p);
// Exact: every bf16 and f16 value is an f32.
void cast_from_low(const Context& ctx, const uint16_t* x, float* y, int64_t n, LowPrecision p);

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op transposes when the flag is set. A and
// B are low precision, C is f32 and the sums are accumulated in f32. With beta 0, C is not read.
void gemm_low(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
              float beta, float* C, int64_t ldc, LowPrecision p);

// y[M,out] = x[M,in] * w[out,in]^T + b[out] (b may be null). Fewer than 32 rows (decoding) skip
// gemm_low for a path that reads each weight once, multiplying bf16 pairs exactly with
// AVX512_BF16 where the CPU has it.
void linear_forward_low(const Context& ctx, const uint16_t* x, const uint16_t* w, const float* b,
                        float* y, int64_t M, int64_t in, int64_t out, LowPrecision p);
// dy_low is dy rounded to p. dx = dy * w (written); dw += dy^T * x; db += column sums of the f32
// dy, so the bias gradient does not lose precision. As in linear_backward, dx, dw and db may each
// be null (dy with db, x with dw, w with dx) to run the input and weight gradients apart.
void linear_backward_low(const Context& ctx, const float* dy, const uint16_t* dy_low,
                         const uint16_t* x, const uint16_t* w, float* dx, float* dw, float* db,
                         int64_t M, int64_t in, int64_t out, LowPrecision p);

// AdamW as adamw_update does it (kernels/ops.h), on f32 master weights whose parameters are kept
// in low precision, in one pass: each gradient (f32 in `grad`, or bf16 in `grad_bf16`, the other
// null) is multiplied by grad_scale (clipping, loss scaling), the master weight updated, and its
// rounding to p written into params_low, as cast_to_low would write it.
void adamw_update_low(const Context& ctx, float* master, const float* grad,
                      const uint16_t* grad_bf16, float grad_scale, float* m, float* v, int64_t n,
                      const AdamWParams& hyper, uint16_t* params_low, LowPrecision p);

// True when no element is inf or NaN: dynamic loss scaling skips the step otherwise.
bool all_finite(const Context& ctx, const float* x, int64_t n);

// Which implementation gemm_low uses. kAuto takes oneDNN's matmul where the CPU's low-precision
// dot products beat f32 FMAs (AMX, or AVX512_BF16 on AMD) and the portable path elsewhere; tests
// and benchmarks pin one path to compare them.
enum class LowPrecisionGemmPath { kAuto, kPortable, kOneDnn };
void set_low_precision_gemm_path(LowPrecisionGemmPath path);
// Whether gemm_low multiplies p with oneDNN's matmul on this machine (else it widens to f32).
bool low_precision_gemm_uses_onednn(LowPrecision p);
// The implementation gemm_low uses for p on this machine, for the run's log, e.g.
// "oneDNN matmul (brg:avx512_core_bf16)" or "portable (f32 conversion + sgemm)".
std::string low_precision_gemm_path(LowPrecision p);

}  // namespace tessera::kernels
