// The CUDA backend's f32 kernels of ops.h against the CPU's: matmuls, linears, norms, activations,
// embeddings, the losses, the reductions and the optimizer step. Each test runs the same random
// inputs through both, forward and backward; gradient outputs start non-zero on both sides, so an
// accumulating (+=) output that overwrites, or a written one that accumulates, shows.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/expect_error.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using cuda_testing::agrees;
using cuda_testing::agrees_relative;
using cuda_testing::CudaTest;
using cuda_testing::kExact;
using cuda_testing::kF32Element;
using cuda_testing::kF32Tensor;
using cuda_testing::on_both;
using cuda_testing::random_tokens;
using cuda_testing::Twin;
using testing::random_vector;

// sum_squares accumulates in double on both sides: only the order of the sums may differ.
constexpr double kSumSquaresTolerance = 1e-9;

std::vector<float> shifted(std::vector<float> v, float by) {
  for (float& x : v) x += by;
  return v;
}

class CudaGemm : public CudaTest {};

TEST_F(CudaGemm, MatchesCpuForEveryTransposeAndBetaWithPaddedLeadingDimensions) {
  struct Shape {
    int64_t M, N, K;
  };
  uint64_t seed = 100;
  for (Shape s : {Shape{13, 17, 19}, Shape{256, 384, 128}, Shape{1, 257, 64}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(::testing::Message()
                       << "M=" << s.M << " N=" << s.N << " K=" << s.K << " trans_a=" << ta
                       << " trans_b=" << tb << " beta=" << beta);
          // Padding past each row's last column must be skipped on input and left alone in C.
          const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 7;
          const int64_t a_rows = ta ? s.K : s.M, b_rows = tb ? s.N : s.K;
          Twin<float> a(gpu(), random_vector<float>(a_rows * lda, ++seed));
          Twin<float> b(gpu(), random_vector<float>(b_rows * ldb, ++seed));
          Twin<float> c(gpu(), random_vector<float>(s.M * ldc, ++seed));
          on_both(gpu(), [&](const Context& ctx) {
            gemm<float>(ctx, ta, tb, s.M, s.N, s.K, 0.75f, a.on(ctx), lda, b.on(ctx), ldb, beta,
                        c.on(ctx), ldc);
          });
          EXPECT_TRUE(agrees(c, kF32Tensor));
        }
      }
    }
  }
}

class CudaLinear : public CudaTest {};

TEST_F(CudaLinear, ForwardMatchesCpuWithAndWithoutBias) {
  struct Shape {
    int64_t M, in, out;
  };
  // Fewer than 16 rows take the CPU's decoding path, more its GEMM.
  for (Shape s : {Shape{1, 67, 45}, Shape{5, 67, 45}, Shape{37, 67, 45}, Shape{128, 256, 320}}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "M=" << s.M << " in=" << s.in << " out=" << s.out << " bias=" << bias);
      Twin<float> x(gpu(), random_vector<float>(s.M * s.in, 1));
      Twin<float> w(gpu(), random_vector<float>(s.out * s.in, 2, 0.2));
      Twin<float> b(gpu(), random_vector<float>(s.out, 3));
      Twin<float> y(gpu(), random_vector<float>(s.M * s.out, 4));  // written, not read
      on_both(gpu(), [&](const Context& ctx) {
        linear_forward<float>(ctx, x.on(ctx), w.on(ctx), bias ? b.on(ctx) : nullptr, y.on(ctx), s.M,
                              s.in, s.out);
      });
      EXPECT_TRUE(agrees(y, kF32Tensor));
    }
  }
}

TEST_F(CudaLinear, BackwardMatchesCpuForEveryChoiceOfGradients) {
  const int64_t in = 67, out = 45;
  for (int64_t M : {5, 37}) {
    // Every non-empty subset of {dx, dw, db}; x goes with dw and w with dx, null otherwise, as
    // the zero-bubble schedule calls it.
    for (int wanted = 1; wanted < 8; ++wanted) {
      const bool want_dx = wanted & 1, want_dw = wanted & 2, want_db = wanted & 4;
      SCOPED_TRACE(::testing::Message()
                   << "M=" << M << " dx=" << want_dx << " dw=" << want_dw << " db=" << want_db);
      Twin<float> dy(gpu(), random_vector<float>(M * out, 11));
      Twin<float> x(gpu(), random_vector<float>(M * in, 12));
      Twin<float> w(gpu(), random_vector<float>(out * in, 13, 0.2));
      Twin<float> dx(gpu(), random_vector<float>(M * in, 14));    // written
      Twin<float> dw(gpu(), random_vector<float>(out * in, 15));  // accumulated
      Twin<float> db(gpu(), random_vector<float>(out, 16));       // accumulated
      on_both(gpu(), [&](const Context& ctx) {
        linear_backward<float>(ctx, dy.on(ctx), want_dw ? x.on(ctx) : nullptr,
                               want_dx ? w.on(ctx) : nullptr, want_dx ? dx.on(ctx) : nullptr,
                               want_dw ? dw.on(ctx) : nullptr, want_db ? db.on(ctx) : nullptr, M,
                               in, out);
      });
      EXPECT_TRUE(agrees(dx, kF32Tensor)) << "dx";
      EXPECT_TRUE(agrees(dw, kF32Tensor)) << "dw";
      EXPECT_TRUE(agrees(db, kF32Tensor)) << "db";
    }
  }
}

class CudaNorm : public CudaTest {};

TEST_F(CudaNorm, LayerNormForwardAndBackwardMatchCpu) {
  const int64_t M = 37;
  for (int64_t C : {768, 13}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " C=" << C);
    // An offset, so the mean is not near zero and its subtraction matters.
    Twin<float> x(gpu(), shifted(random_vector<float>(M * C, 21, 2.0), 0.5f));
    Twin<float> gamma(gpu(), shifted(random_vector<float>(C, 22, 0.3), 1.0f));
    Twin<float> beta(gpu(), random_vector<float>(C, 23, 0.3));
    Twin<float> y(gpu(), random_vector<float>(M * C, 24));
    Twin<float> mean(gpu(), random_vector<float>(M, 25)), rstd(gpu(), random_vector<float>(M, 26));
    on_both(gpu(), [&](const Context& ctx) {
      layernorm_forward<float>(ctx, x.on(ctx), gamma.on(ctx), beta.on(ctx), y.on(ctx), mean.on(ctx),
                               rstd.on(ctx), M, C);
    });
    EXPECT_TRUE(agrees(y, kF32Tensor)) << "y";
    EXPECT_TRUE(agrees(mean, kF32Tensor)) << "mean";
    EXPECT_TRUE(agrees(rstd, kF32Element)) << "rstd";

    // Backward from the CPU's statistics on both sides, so it is checked on its own.
    mean.assign(mean.cpu());
    rstd.assign(rstd.cpu());
    Twin<float> dy(gpu(), random_vector<float>(M * C, 27));
    Twin<float> dx(gpu(), random_vector<float>(M * C, 28));  // accumulated: the residual stream
    Twin<float> dgamma(gpu(), random_vector<float>(C, 29)),
        dbeta(gpu(), random_vector<float>(C, 30));
    on_both(gpu(), [&](const Context& ctx) {
      layernorm_backward<float>(ctx, dy.on(ctx), x.on(ctx), gamma.on(ctx), mean.on(ctx),
                                rstd.on(ctx), dx.on(ctx), dgamma.on(ctx), dbeta.on(ctx), M, C);
    });
    EXPECT_TRUE(agrees(dx, kF32Tensor)) << "dx";
    EXPECT_TRUE(agrees(dgamma, kF32Tensor)) << "dgamma";
    EXPECT_TRUE(agrees(dbeta, kF32Tensor)) << "dbeta";
  }
}

TEST_F(CudaNorm, RmsNormForwardAndBackwardMatchCpu) {
  const int64_t M = 37;
  for (int64_t C : {768, 13}) {
    for (float eps : {1e-5f, 1e-6f}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " C=" << C << " eps=" << eps);
      Twin<float> x(gpu(), random_vector<float>(M * C, 31, 2.0));
      Twin<float> gamma(gpu(), shifted(random_vector<float>(C, 32, 0.3), 1.0f));
      Twin<float> y(gpu(), random_vector<float>(M * C, 33));
      Twin<float> rstd(gpu(), random_vector<float>(M, 34));
      on_both(gpu(), [&](const Context& ctx) {
        rmsnorm_forward<float>(ctx, x.on(ctx), gamma.on(ctx), y.on(ctx), rstd.on(ctx), M, C, eps);
      });
      EXPECT_TRUE(agrees(y, kF32Element)) << "y";
      EXPECT_TRUE(agrees(rstd, kF32Element)) << "rstd";

      rstd.assign(rstd.cpu());
      Twin<float> dy(gpu(), random_vector<float>(M * C, 35));
      Twin<float> dx(gpu(), random_vector<float>(M * C, 36));  // accumulated
      Twin<float> dgamma(gpu(), random_vector<float>(C, 37));
      on_both(gpu(), [&](const Context& ctx) {
        rmsnorm_backward<float>(ctx, dy.on(ctx), x.on(ctx), gamma.on(ctx), rstd.on(ctx), dx.on(ctx),
                                dgamma.on(ctx), M, C);
      });
      EXPECT_TRUE(agrees(dx, kF32Tensor)) << "dx";
      EXPECT_TRUE(agrees(dgamma, kF32Tensor)) << "dgamma";
    }
  }
}

class CudaElementwise : public CudaTest {};

TEST_F(CudaElementwise, GeluForwardAndBackwardMatchCpu) {
  for (int64_t n : {int64_t{7}, int64_t{100003}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    Twin<float> x(gpu(), random_vector<float>(n, 41, 3.0));
    Twin<float> y(gpu(), random_vector<float>(n, 42));
    on_both(gpu(), [&](const Context& ctx) { gelu_forward<float>(ctx, x.on(ctx), y.on(ctx), n); });
    EXPECT_TRUE(agrees(y, kF32Tensor)) << "y";

    Twin<float> dy(gpu(), random_vector<float>(n, 43));
    Twin<float> dx(gpu(), random_vector<float>(n, 44));  // written
    on_both(gpu(), [&](const Context& ctx) {
      gelu_backward<float>(ctx, dy.on(ctx), x.on(ctx), dx.on(ctx), n);
    });
    EXPECT_TRUE(agrees(dx, kF32Tensor)) << "dx";
  }
}

TEST_F(CudaElementwise, SwigluForwardAndBackwardMatchCpu) {
  const int64_t M = 9, F = 1003;
  Twin<float> gate_up(gpu(), random_vector<float>(M * 2 * F, 51, 2.0));
  Twin<float> out(gpu(), random_vector<float>(M * F, 52));
  on_both(gpu(), [&](const Context& ctx) {
    swiglu_forward<float>(ctx, gate_up.on(ctx), out.on(ctx), M, F);
  });
  EXPECT_TRUE(agrees(out, kF32Element)) << "out";

  Twin<float> dout(gpu(), random_vector<float>(M * F, 53));
  Twin<float> dgate_up(gpu(), random_vector<float>(M * 2 * F, 54));  // written
  on_both(gpu(), [&](const Context& ctx) {
    swiglu_backward<float>(ctx, dout.on(ctx), gate_up.on(ctx), dgate_up.on(ctx), M, F);
  });
  EXPECT_TRUE(agrees(dgate_up, kF32Tensor)) << "dgate_up";
}

TEST_F(CudaElementwise, AddScaleAndAddBiasAreExact) {
  const int64_t n = 100003;
  Twin<float> a(gpu(), random_vector<float>(n, 61)), b(gpu(), random_vector<float>(n, 62));
  Twin<float> out(gpu(), random_vector<float>(n, 63));
  on_both(gpu(),
          [&](const Context& ctx) { add<float>(ctx, a.on(ctx), b.on(ctx), out.on(ctx), n); });
  EXPECT_TRUE(agrees(out, kExact)) << "add";
  // out may alias an input.
  on_both(gpu(), [&](const Context& ctx) { add<float>(ctx, a.on(ctx), b.on(ctx), a.on(ctx), n); });
  EXPECT_TRUE(agrees(a, kExact)) << "add into a";

  on_both(gpu(), [&](const Context& ctx) { scale<float>(ctx, b.on(ctx), 0.37f, n); });
  EXPECT_TRUE(agrees(b, kExact)) << "scale";

  const int64_t M = 7, C = 129;
  Twin<float> y(gpu(), random_vector<float>(M * C, 64)), bias(gpu(), random_vector<float>(C, 65));
  on_both(gpu(), [&](const Context& ctx) { add_bias<float>(ctx, y.on(ctx), bias.on(ctx), M, C); });
  EXPECT_TRUE(agrees(y, kExact)) << "add_bias";
}

class CudaEmbedding : public CudaTest {};

TEST_F(CudaEmbedding, ForwardAndBackwardMatchCpuWithAndWithoutPositions) {
  const int64_t B = 3, Tn = 11, C = 96, V = 50;
  for (bool positions : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "wpe=" << positions);
    // 33 tokens from 50 ids: repeats, whose gradients must add up.
    Twin<int32_t> tokens(gpu(), random_tokens(B * Tn, V, 71));
    Twin<float> wte(gpu(), random_vector<float>(V * C, 72)),
        wpe(gpu(), random_vector<float>(Tn * C, 73));
    Twin<float> x(gpu(), random_vector<float>(B * Tn * C, 74));  // written
    on_both(gpu(), [&](const Context& ctx) {
      embedding_forward<float>(ctx, tokens.on(ctx), wte.on(ctx), positions ? wpe.on(ctx) : nullptr,
                               x.on(ctx), B, Tn, C);
    });
    EXPECT_TRUE(agrees(x, kExact)) << "x";

    Twin<float> dx(gpu(), random_vector<float>(B * Tn * C, 75));
    Twin<float> dwte(gpu(), random_vector<float>(V * C, 76));   // accumulated
    Twin<float> dwpe(gpu(), random_vector<float>(Tn * C, 77));  // accumulated
    on_both(gpu(), [&](const Context& ctx) {
      embedding_backward<float>(ctx, dx.on(ctx), tokens.on(ctx), dwte.on(ctx),
                                positions ? dwpe.on(ctx) : nullptr, B, Tn, C);
    });
    EXPECT_TRUE(agrees(dwte, kF32Tensor)) << "dwte";
    EXPECT_TRUE(agrees(dwpe, kF32Tensor)) << "dwpe";
  }
}

TEST_F(CudaEmbedding, VocabShardHoldsOnlyItsIds) {
  // This shard holds ids [20, 45); the tokens run over [0, 60), so many belong to other ranks.
  const int64_t N = 40, C = 72, first = 20, count = 25;
  Twin<int32_t> tokens(gpu(), random_tokens(N, 60, 81));
  Twin<float> wte(gpu(), random_vector<float>(count * C, 82));
  Twin<float> x(gpu(), random_vector<float>(N * C, 83));  // written, zeros for others' tokens
  on_both(gpu(), [&](const Context& ctx) {
    vocab_shard_embedding_forward<float>(ctx, tokens.on(ctx), wte.on(ctx), first, count, x.on(ctx),
                                         N, C);
  });
  EXPECT_TRUE(agrees(x, kExact)) << "x";

  Twin<float> dx(gpu(), random_vector<float>(N * C, 84));
  Twin<float> dwte(gpu(), random_vector<float>(count * C, 85));  // accumulated
  on_both(gpu(), [&](const Context& ctx) {
    vocab_shard_embedding_backward<float>(ctx, dx.on(ctx), tokens.on(ctx), dwte.on(ctx), first,
                                          count, N, C);
  });
  EXPECT_TRUE(agrees(dwte, kF32Tensor)) << "dwte";
}

TEST_F(CudaEmbedding, PositionEmbeddingWrapsAroundTheSequence) {
  // 30 rows from row 5 of a batch of 8-token sequences: positions 5, 6, 7, 0, 1, ...
  const int64_t first_row = 5, rows = 30, Tn = 8, C = 64;
  Twin<float> wpe(gpu(), random_vector<float>(Tn * C, 91));
  Twin<float> x(gpu(), random_vector<float>(rows * C, 92));  // accumulated
  on_both(gpu(), [&](const Context& ctx) {
    position_embedding_forward<float>(ctx, wpe.on(ctx), x.on(ctx), first_row, rows, Tn, C);
  });
  EXPECT_TRUE(agrees(x, kExact)) << "x";

  Twin<float> dx(gpu(), random_vector<float>(rows * C, 93));
  Twin<float> dwpe(gpu(), random_vector<float>(Tn * C, 94));  // accumulated
  on_both(gpu(), [&](const Context& ctx) {
    position_embedding_backward<float>(ctx, dx.on(ctx), dwpe.on(ctx), first_row, rows, Tn, C);
  });
  EXPECT_TRUE(agrees(dwpe, kF32Tensor)) << "dwpe";
}

class CudaLoss : public CudaTest {};

TEST_F(CudaLoss, SoftmaxCrossEntropyMatchesCpuWithAndWithoutGradient) {
  for (int64_t V : {50257, 37}) {
    const int64_t M = V > 1000 ? 6 : 16;
    std::vector<int32_t> targets = random_tokens(M, V, 101);
    targets.front() = 0;  // the first and the last column
    targets.back() = int32_t(V - 1);
    targets[1] = kIgnoredTarget;  // no loss, a zero gradient row
    for (float grad_scale : {0.0f, 1.0f / float(M)}) {
      SCOPED_TRACE(::testing::Message() << "V=" << V << " M=" << M << " grad_scale=" << grad_scale);
      Twin<float> logits(gpu(), random_vector<float>(M * V, 102, 2.0));
      Twin<int32_t> target(gpu(), targets);
      Twin<float> losses(gpu(), random_vector<float>(M, 103));
      on_both(gpu(), [&](const Context& ctx) {
        softmax_cross_entropy<float>(ctx, logits.on(ctx), target.on(ctx), losses.on(ctx), M, V,
                                     grad_scale);
      });
      EXPECT_TRUE(agrees(losses, kF32Element)) << "losses";
      // Without a gradient the logits stay; with one, every probability is held to its own
      // size, however small: a tensor-wide scale would hide the small ones.
      EXPECT_TRUE(agrees(logits, grad_scale == 0.0f ? kExact : kF32Element)) << "logits";
    }
  }
}

TEST_F(CudaLoss, VocabShardPassesMatchCpuAndIgnorePadding) {
  struct Shard {
    int64_t V, ld, first;
  };
  // A small shard, and one rank's quarter of GPT-2's vocabulary, each with padding columns.
  for (Shard s : {Shard{1000, 1024, 3000}, Shard{12565, 12568, 25130}}) {
    SCOPED_TRACE(::testing::Message() << "V=" << s.V << " ld=" << s.ld << " first=" << s.first);
    const int64_t M = 7;
    std::vector<float> values = random_vector<float>(M * s.ld, 111, 2.0);
    // Padding no pass may read: its exponential would overflow any sum it reached.
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t v = s.V; v < s.ld; ++v) values[m * s.ld + v] = 1e4f;
    }
    // Targets in the shard (its first and last id among them) and outside it on both sides.
    const int32_t first = int32_t(s.first), last = int32_t(s.first + s.V - 1);
    Twin<int32_t> targets(gpu(), std::vector<int32_t>{first, last, first + 17, first - 1, last + 1,
                                                      kIgnoredTarget, last + 5000});

    Twin<float> logits(gpu(), values);
    Twin<float> max(gpu(), random_vector<float>(M, 112));
    on_both(gpu(), [&](const Context& ctx) {
      vocab_shard_row_max<float>(ctx, logits.on(ctx), M, s.V, s.ld, max.on(ctx));
    });
    EXPECT_TRUE(agrees(max, kExact)) << "row max";
    max.assign(max.cpu());

    for (bool keep : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "keep_exponentials=" << keep);
      Twin<float> row(gpu(), values);
      Twin<float> sums(gpu(), random_vector<float>(M, 113));
      Twin<float> target_logits(gpu(), random_vector<float>(M, 114));
      on_both(gpu(), [&](const Context& ctx) {
        vocab_shard_exp_sums<float>(ctx, row.on(ctx), max.on(ctx), targets.on(ctx), s.first, M, s.V,
                                    s.ld, sums.on(ctx), target_logits.on(ctx), keep);
      });
      EXPECT_TRUE(agrees(sums, kF32Element)) << "sums";
      EXPECT_TRUE(agrees(target_logits, kExact)) << "target logits";
      EXPECT_TRUE(agrees(row, keep ? kF32Element : kExact)) << "logits";
      if (!keep) continue;

      // The gradient pass from the CPU's exponentials and sums, so it is checked on its own; it
      // zeroes the padding.
      row.assign(row.cpu());
      sums.assign(sums.cpu());
      on_both(gpu(), [&](const Context& ctx) {
        vocab_shard_softmax_grad<float>(ctx, row.on(ctx), targets.on(ctx), s.first, sums.on(ctx), M,
                                        s.V, s.ld, 0.5f);
      });
      EXPECT_TRUE(agrees(row, kF32Element)) << "gradient";
    }
  }
}

class CudaReduction : public CudaTest {};

TEST_F(CudaReduction, SumSquaresMatchesCpuInDouble) {
  for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{1000003}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    Twin<float> x(gpu(), random_vector<float>(n, 121, 3.0));
    const double cpu = sum_squares<float>(kCpuContext, x.on(kCpuContext), n);
    const double cuda = sum_squares<float>(gpu(), x.on(gpu()), n);
    EXPECT_TRUE(agrees_relative(cpu, cuda, kSumSquaresTolerance));
  }
}

class CudaOptimizer : public CudaTest {};

TEST_F(CudaOptimizer, AdamWUpdateMatchesCpu) {
  const int64_t n = 100003;
  for (int64_t step : {1, 1000}) {
    SCOPED_TRACE(::testing::Message() << "step=" << step);
    const AdamWParams p{1e-2, 0.9, 0.95, 1e-8, 0.1, step};
    // Parameters the size of one step, so the step is not lost in their rounding.
    Twin<float> param(gpu(), random_vector<float>(n, 131, 0.01));
    Twin<float> grad(gpu(), random_vector<float>(n, 132));
    Twin<float> m(gpu(), random_vector<float>(n, 133, 0.1));
    std::vector<float> second = random_vector<float>(n, 134, 0.1);
    for (float& s : second) s *= s;
    Twin<float> v(gpu(), second);
    on_both(gpu(), [&](const Context& ctx) {
      adamw_update<float>(ctx, param.on(ctx), grad.on(ctx), m.on(ctx), v.on(ctx), n, p);
    });
    EXPECT_TRUE(agrees(param, kF32Tensor)) << "param";
    EXPECT_TRUE(agrees(m, kF32Tensor)) << "m";
    EXPECT_TRUE(agrees(v, kF32Element)) << "v";
  }
}

class CudaInt8 : public CudaTest {};

TEST_F(CudaInt8, LinearForwardIsRefusedByName) {
  const int64_t M = 2, in = 8, out = 4;
  DeviceArray<float> x(gpu(), M * in), scales(gpu(), out), y(gpu(), M * out),
      scratch(gpu(), int8_linear_scratch_size(in, M));
  DeviceArray<int8_t> q(gpu(), out * in);
  const Int8Matrix w{q.data(), scales.data(), out, in};
  testing::expect_error(
      [&] { linear_forward_int8(gpu(), x.data(), w, nullptr, y.data(), M, scratch.data()); },
      {"linear_forward_int8", "CUDA"});
}

}  // namespace
}  // namespace tessera::kernels
