// Causal attention over more positions than one query block, against the formula evaluated
// directly, position by position, in double.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {
namespace {

struct Shape {
  int64_t B, T, H, KVH, hd;
  int64_t ld() const { return (H + 2 * KVH) * hd; }
  int64_t C() const { return H * hd; }
  // Offsets of query head h's, and of its key and value heads', channels in a qkv row.
  int64_t q(int64_t h) const { return h * hd; }
  int64_t k(int64_t h) const { return (H + h / (H / KVH)) * hd; }
  int64_t v(int64_t h) const { return k(h) + KVH * hd; }
};

std::vector<double> random_values(int64_t n, uint64_t stream) {
  const CounterRng rng(7, stream);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 2 * rng.uniform(i) - 1;
  return v;
}

// out, lse and dqkv from the definition: p_ij = softmax_j<=i(q_i . k_j / sqrt(hd)).
void direct(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout,
            std::vector<double>& out, std::vector<double>& lse, std::vector<double>& dqkv) {
  const double scale = 1 / std::sqrt(double(s.hd));
  for (int64_t b = 0; b < s.B; ++b) {
    const double* x = qkv.data() + b * s.T * s.ld();
    double* dx = dqkv.data() + b * s.T * s.ld();
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i = 0; i < s.T; ++i) {
        std::vector<double> p(i + 1), dp(i + 1);
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.hd; ++c) {
            dot += x[i * s.ld() + s.q(h) + c] * x[j * s.ld() + s.k(h) + c];
          }
          p[j] = dot * scale;
          max = std::max(max, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - max);
        lse[(b * s.H + h) * s.T + i] = max + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(p[j] - max) / sum;
        const double* g = dout.data() + (b * s.T + i) * s.C() + h * s.hd;
        double p_dp = 0;
        for (int64_t j = 0; j <= i; ++j) {
          dp[j] = 0;
          for (int64_t c = 0; c < s.hd; ++c) {
            out[(b * s.T + i) * s.C() + h * s.hd + c] += p[j] * x[j * s.ld() + s.v(h) + c];
            dp[j] += g[c] * x[j * s.ld() + s.v(h) + c];
            dx[j * s.ld() + s.v(h) + c] += p[j] * g[c];
          }
          p_dp += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - p_dp) * scale;
          for (int64_t c = 0; c < s.hd; ++c) {
            dx[i * s.ld() + s.q(h) + c] += ds * x[j * s.ld() + s.k(h) + c];
            dx[j * s.ld() + s.k(h) + c] += ds * x[i * s.ld() + s.q(h) + c];
          }
        }
      }
    }
  }
}

TEST(CausalAttention, ManyQueryBlocksGiveTheDirectFormulaForwardAndBackward) {
  for (const Shape s : {Shape{2, 300, 4, 2, 8}, Shape{1, 257, 2, 2, 4}, Shape{1, 128, 2, 1, 4}}) {
    const std::vector<double> qkv = random_values(s.B * s.T * s.ld(), 1);
    const std::vector<double> dout = random_values(s.B * s.T * s.C(), 2);
    std::vector<double> out(dout.size()), lse(s.B * s.H * s.T), dqkv(qkv.size());
    std::vector<double> scratch(attention_scratch_size(s.T) * omp_get_max_threads());
    attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), s.B, s.T,
                      s.H, s.KVH, s.hd);
    attention_backward(kCpuContext, dout.data(), qkv.data(), lse.data(), dqkv.data(),
                       scratch.data(), s.B, s.T, s.H, s.KVH, s.hd);
    std::vector<double> want_out(out.size()), want_lse(lse.size()), want_dqkv(qkv.size());
    direct(s, qkv, dout, want_out, want_lse, want_dqkv);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want_out[i], 1e-12) << i;
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], want_lse[i], 1e-12) << i;
    for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], want_dqkv[i], 1e-11) << i;
  }
}

}  // namespace
}  // namespace tessera::kernels
