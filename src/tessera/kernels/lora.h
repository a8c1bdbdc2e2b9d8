// LoRA's low-rank update of a linear layer, y += scale (x A^T) B^T, as GEMMs in both directions.
// The output is cut into pieces (the q, k and v of a fused projection; gate and up), piece j with
// its own A_j (rows [j rank, (j + 1) rank) of A [pieces rank, in]) and B_j (the next widths[j]
// rows of B [out, rank]), so that the down-projection of every piece, u = x A^T [M, pieces rank],
// is one GEMM.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/kernels/ops.h"

namespace tessera::kernels {

// u[M, cols] = x[M, in] A^T, A [cols, in].
template <typename T>
void lora_down(const Context& ctx, const T* x, const T* a, T* u, int64_t M, int64_t in,
               int64_t cols) {
  gemm<T>(ctx, false, true, M, cols, in, T(1), x, in, a, in, T(0), u, cols);
}

// y[M, out] += scale u_j B_j^T for every piece j.
template <typename T>
void lora_up(const Context& ctx, const T* u, const T* b, T* y, int64_t M, int64_t rank,
             std::span<const int64_t> widths, T scale) {
  const int64_t cols = rank * int64_t(widths.size());
  int64_t out = 0;
  for (int64_t w : widths) out += w;
  int64_t row = 0;
  for (size_t j = 0; j < widths.size(); ++j) {
    gemm<T>(ctx, false, true, M, widths[j], rank, scale, u + int64_t(j) * rank, cols,
            b + row * rank, rank, T(1), y + row, out);
    row += widths[j];
  }
}

// du_j = scale dy_j B_j (written), and db_j += scale dy_j^T u_j when db is not null.
template <typename T>
void lora_up_backward(const Context& ctx, const T* dy, const T* u, const T* b, T* du, T* db,
                      int64_t M, int64_t rank, std::span<const int64_t> widths, T scale) {
  const int64_t cols = rank * int64_t(widths.size());
  int64_t out = 0;
  for (int64_t w : widths) out += w;
  int64_t row = 0;
  for (size_t j = 0; j < widths.size(); ++j) {
    const int64_t w = widths[j], first = int64_t(j) * rank;
    gemm<T>(ctx, false, false, M, rank, w, scale, dy + row, out, b + row * rank, rank, T(0),
            du + first, cols);
    if (db != nullptr) {
      gemm<T>(ctx, true, false, w, rank, M, scale, dy + row, out, u + first, cols, T(1),
              db + row * rank, rank);
    }
    row += w;
  }
}

// da += du^T x when da is not null; dx += du A when dx is not null.
template <typename T>
void lora_down_backward(const Context& ctx, const T* du, const T* x, const T* a, T* da, T* dx,
                        int64_t M, int64_t in, int64_t cols) {
  if (da != nullptr) gemm<T>(ctx, true, false, cols, in, M, T(1), du, cols, x, in, T(1), da, in);
  if (dx != nullptr) gemm<T>(ctx, false, false, M, in, cols, T(1), du, cols, a, in, T(1), dx, in);
}

}  // namespace tessera::kernels
