// Causal attention over more positions than one query block, against the formula evaluated
// directly, position by position, in double, and over chunks of query rows against the whole.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
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

// out, lse and dqkv from the definition: p_ij = softmax_j<=i(q_i . k_j / sqrt(hd)) over the keys
// j from query i's document start (doc_start[b, i], or 0 without one).
void direct(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout,
            std::vector<double>& out, std::vector<double>& lse, std::vector<double>& dqkv,
            const std::vector<int32_t>& doc_start = {}) {
  const double scale = 1 / std::sqrt(double(s.hd));
  for (int64_t b = 0; b < s.B; ++b) {
    const double* x = qkv.data() + b * s.T * s.ld();
    double* dx = dqkv.data() + b * s.T * s.ld();
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i = 0; i < s.T; ++i) {
        const int64_t first = doc_start.empty() ? 0 : doc_start[b * s.T + i];
        std::vector<double> p(i + 1), dp(i + 1);
        double max = -INFINITY, sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.hd; ++c) {
            dot += x[i * s.ld() + s.q(h) + c] * x[j * s.ld() + s.k(h) + c];
          }
          p[j] = dot * scale;
          max = std::max(max, p[j]);
        }
        for (int64_t j = first; j <= i; ++j) sum += std::exp(p[j] - max);
        lse[(b * s.H + h) * s.T + i] = max + std::log(sum);
        for (int64_t j = first; j <= i; ++j) p[j] = std::exp(p[j] - max) / sum;
        const double* g = dout.data() + (b * s.T + i) * s.C() + h * s.hd;
        double p_dp = 0;
        for (int64_t j = first; j <= i; ++j) {
          dp[j] = 0;
          for (int64_t c = 0; c < s.hd; ++c) {
            out[(b * s.T + i) * s.C() + h * s.hd + c] += p[j] * x[j * s.ld() + s.v(h) + c];
            dp[j] += g[c] * x[j * s.ld() + s.v(h) + c];
            dx[j * s.ld() + s.v(h) + c] += p[j] * g[c];
          }
          p_dp += p[j] * dp[j];
        }
        for (int64_t j = first; j <= i; ++j) {
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

// Documents packed into rows: each query sees only its own document's keys, and the documents'
// boundaries fall inside, on and across query blocks.
TEST(CausalAttention, PackedDocumentsAttendOnlyWithinThemselves) {
  const Shape s{2, 300, 4, 2, 8};
  const std::vector<std::vector<int32_t>> boundaries = {{50, 128, 129, 200}, {1, 255, 299}};
  std::vector<int32_t> doc_start(s.B * s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < s.T; ++t) {
      if (std::ranges::find(boundaries[b], t) != boundaries[b].end()) start = int32_t(t);
      doc_start[b * s.T + t] = start;
    }
  }
  const std::vector<double> qkv = random_values(s.B * s.T * s.ld(), 3);
  const std::vector<double> dout = random_values(s.B * s.T * s.C(), 4);
  std::vector<double> out(dout.size()), lse(s.B * s.H * s.T), dqkv(qkv.size(), 99.0);
  std::vector<double> scratch(attention_scratch_size(s.T) * omp_get_max_threads());
  attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), s.B, s.T, s.H,
                    s.KVH, s.hd, doc_start.data());
  attention_backward(kCpuContext, dout.data(), qkv.data(), lse.data(), dqkv.data(), scratch.data(),
                     s.B, s.T, s.H, s.KVH, s.hd, doc_start.data());
  std::vector<double> want_out(out.size()), want_lse(lse.size()), want_dqkv(qkv.size());
  direct(s, qkv, dout, want_out, want_lse, want_dqkv, doc_start);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want_out[i], 1e-12) << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], want_lse[i], 1e-12) << i;
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], want_dqkv[i], 1e-11) << i;

  std::vector<int32_t> backwards = doc_start;
  backwards[5] = 7;
  EXPECT_THROW(attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(),
                                 s.B, s.T, s.H, s.KVH, s.hd, backwards.data()),
               Error);
}

// A sequence split over context-parallel ranks as model::SequenceSplit splits it: each rank's two
// chunks of query rows (an early and a late one, 150 rows each, so query blocks end inside them)
// give those rows of the whole sequence's output and log-sum-exp, and the ranks' dqkv sum to the
// whole sequence's; with packed documents too, one of them crossing the ranks' chunks.
TEST(CausalAttention, QueryChunksOfEveryRankMakeUpTheWholeSequence) {
  const Shape s{2, 600, 4, 2, 8};
  const int64_t ranks = 2, length = s.T / (2 * ranks), Tq = 2 * length;
  std::vector<int32_t> doc_start(s.B * s.T);
  for (int64_t t = 0; t < s.T; ++t) {
    doc_start[t] = t < 140 ? 0 : t < 460 ? 140 : 460;
    doc_start[s.T + t] = t < 3 ? 0 : 3;
  }
  for (const bool documents : {false, true}) {
    SCOPED_TRACE(documents ? "packed documents" : "one document a row");
    const int32_t* starts = documents ? doc_start.data() : nullptr;
    const std::vector<double> qkv = random_values(s.B * s.T * s.ld(), 5);
    const std::vector<double> dout = random_values(s.B * s.T * s.C(), 6);
    std::vector<double> out(dout.size()), lse(s.B * s.H * s.T), dqkv(qkv.size());
    std::vector<double> scratch(attention_scratch_size(s.T) * omp_get_max_threads());
    attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), s.B, s.T,
                      s.H, s.KVH, s.hd, starts);
    attention_backward(kCpuContext, dout.data(), qkv.data(), lse.data(), dqkv.data(),
                       scratch.data(), s.B, s.T, s.H, s.KVH, s.hd, starts);
    std::vector<double> summed(qkv.size(), 0.0);
    for (int64_t rank = 0; rank < ranks; ++rank) {
      const QueryChunks q{
          .count = 2, .length = length, .start = {rank * length, (2 * ranks - 1 - rank) * length}};
      // This rank's rows of dout, chunk after chunk.
      std::vector<double> my_dout(s.B * Tq * s.C());
      for (int64_t b = 0; b < s.B; ++b) {
        for (int64_t c = 0; c < 2; ++c) {
          std::copy_n(dout.begin() + (b * s.T + q.start[c]) * s.C(), length * s.C(),
                      my_dout.begin() + (b * Tq + c * length) * s.C());
        }
      }
      std::vector<double> my_out(my_dout.size()), my_lse(s.B * s.H * Tq);
      std::vector<double> my_dqkv(qkv.size(), 99.0);
      attention_forward(kCpuContext, qkv.data(), my_out.data(), my_lse.data(), scratch.data(), s.B,
                        s.T, s.H, s.KVH, s.hd, starts, q);
      attention_backward(kCpuContext, my_dout.data(), qkv.data(), my_lse.data(), my_dqkv.data(),
                         scratch.data(), s.B, s.T, s.H, s.KVH, s.hd, starts, q);
      for (int64_t b = 0; b < s.B; ++b) {
        for (int64_t c = 0; c < 2; ++c) {
          for (int64_t r = 0; r < length; ++r) {
            const int64_t t = q.start[c] + r, mine = b * Tq + c * length + r;
            for (int64_t i = 0; i < s.C(); ++i) {
              ASSERT_EQ(my_out[mine * s.C() + i], out[(b * s.T + t) * s.C() + i]) << t;
            }
            for (int64_t h = 0; h < s.H; ++h) {
              ASSERT_EQ(my_lse[(b * s.H + h) * Tq + c * length + r], lse[(b * s.H + h) * s.T + t]);
            }
          }
        }
      }
      for (size_t i = 0; i < summed.size(); ++i) summed[i] += my_dqkv[i];
    }
    for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(summed[i], dqkv[i], 1e-12) << i;
  }
  const QueryChunks overlapping{.count = 2, .length = 100, .start = {0, 50}};
  std::vector<double> qkv(s.B * s.T * s.ld()), out(s.B * 200 * s.C()), lse(s.B * s.H * 200);
  std::vector<double> scratch(attention_scratch_size(s.T) * omp_get_max_threads());
  EXPECT_THROW(attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(),
                                 s.B, s.T, s.H, s.KVH, s.hd, nullptr, overlapping),
               Error);
}

}  // namespace
}  // namespace tessera::kernels
