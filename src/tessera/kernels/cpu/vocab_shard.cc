#include <algorithm>
#include <cmath>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void vocab_shard_embedding_forward(const Context&, const int32_t* tokens, const T* wte,
                                   int64_t first, int64_t count, T* x, int64_t N, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(N * C));
#pragma omp parallel for schedule(static) if (N > 1)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = int64_t(tokens[i]) - first;
    T* out = x + i * C;
    if (id >= 0 && id < count) {
      std::copy(wte + id * C, wte + (id + 1) * C, out);
    } else {
      std::fill(out, out + C, T(0));
    }
  }
}

template <typename T>
void vocab_shard_embedding_backward(const Context&, const T* dx, const int32_t* tokens, T* dwte,
                                    int64_t first, int64_t count, int64_t N, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(N * C));
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < N; ++i) {
      const int64_t id = int64_t(tokens[i]) - first;
      if (id < 0 || id >= count) continue;
      const T* d = dx + i * C;
      T* row = dwte + id * C;
      for (int64_t c = c0; c < c1; ++c) row[c] += d[c];
    }
  });
}

template <typename T>
void position_embedding_forward(const Context&, const T* wpe, T* x, int64_t first_row, int64_t rows,
                                int64_t T_, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(rows * C));
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* pos = wpe + ((first_row + r) % T_) * C;
    T* out = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[c] += pos[c];
  }
}

template <typename T>
void position_embedding_backward(const Context&, const T* dx, T* dwpe, int64_t first_row,
                                 int64_t rows, int64_t T_, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(rows * C));
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* d = dx + r * C;
      T* pos = dwpe + ((first_row + r) % T_) * C;
      for (int64_t c = c0; c < c1; ++c) pos[c] += d[c];
    }
  });
}

template <typename T>
void vocab_shard_row_max(const Context&, const T* logits, int64_t M, int64_t V, int64_t ld,
                         T* max) {
  const OpScope scope(OpClass::kLoss, 0, double(sizeof(T)) * double(M * V));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const T* row = logits + m * ld;
    T best = V > 0 ? row[0] : -INFINITY;
#pragma omp simd reduction(max : best)
    for (int64_t v = 0; v < V; ++v) best = std::max(best, row[v]);
    max[m] = best;
  }
}

template <typename T>
void vocab_shard_exp_sums(const Context&, T* logits, const T* max, const int32_t* targets,
                          int64_t first, int64_t M, int64_t V, int64_t ld, T* sums,
                          T* target_logits, bool keep_exponentials) {
  const OpScope scope(OpClass::kLoss, 0,
                      (keep_exponentials ? 2.0 : 1.0) * double(sizeof(T)) * double(M * V));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    T* row = logits + m * ld;
    const int64_t id = int64_t(targets[m]) - first;
    target_logits[m] = id >= 0 && id < V ? row[id] : T(0);
    T sum = 0;
    if (keep_exponentials) {
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; ++v) {
        row[v] = exp_fast(row[v] - max[m]);
        sum += row[v];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; ++v) sum += exp_fast(row[v] - max[m]);
    }
    sums[m] = sum;
  }
}

template <typename T>
void vocab_shard_softmax_grad(const Context&, T* exponentials, const int32_t* targets,
                              int64_t first, const T* sums, int64_t M, int64_t V, int64_t ld,
                              T grad_scale) {
  const OpScope scope(OpClass::kLoss, 0, 2.0 * double(sizeof(T)) * double(M * V));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    T* row = exponentials + m * ld;
    if (targets[m] == kIgnoredTarget) {
      std::fill(row, row + ld, T(0));
      continue;
    }
    const T factor = grad_scale / sums[m];
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) row[v] *= factor;
    std::fill(row + V, row + ld, T(0));
    const int64_t id = int64_t(targets[m]) - first;
    if (id >= 0 && id < V) row[id] -= grad_scale;
  }
}

template <typename T>
void add_bias(const Context&, T* y, const T* b, int64_t M, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(M * C));
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    T* row = y + m * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] += b[c];
  }
}

}  // namespace

void add_vocab_shard_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.vocab_shard_embedding_forward = vocab_shard_embedding_forward<float>;
  backend.ops.vocab_shard_embedding_backward = vocab_shard_embedding_backward<float>;
  backend.ops.position_embedding_forward = position_embedding_forward<float>;
  backend.ops.position_embedding_backward = position_embedding_backward<float>;
  backend.ops.vocab_shard_row_max = vocab_shard_row_max<float>;
  backend.ops.vocab_shard_exp_sums = vocab_shard_exp_sums<float>;
  backend.ops.vocab_shard_softmax_grad = vocab_shard_softmax_grad<float>;
  backend.ops.add_bias = add_bias<float>;
  f64.vocab_shard_embedding_forward = vocab_shard_embedding_forward<double>;
  f64.vocab_shard_embedding_backward = vocab_shard_embedding_backward<double>;
  f64.position_embedding_forward = position_embedding_forward<double>;
  f64.position_embedding_backward = position_embedding_backward<double>;
  f64.vocab_shard_row_max = vocab_shard_row_max<double>;
  f64.vocab_shard_exp_sums = vocab_shard_exp_sums<double>;
  f64.vocab_shard_softmax_grad = vocab_shard_softmax_grad<double>;
  f64.add_bias = add_bias<double>;
}

}  // namespace tessera::kernels::cpu
