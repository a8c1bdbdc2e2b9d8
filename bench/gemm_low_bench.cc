// f32 sgemm against bf16 gemm_low on a transformer block's matmuls (d_model 256 and 768, 4096
// tokens): the forward x * W^T, the input gradient dy * W and the weight gradient dy^T * x of the
// qkv, MLP-up (fc) and MLP-down (proj) layers. gemm_low runs twice, on the path it picks for this
// machine and forced to the portable one. Each keeps its best of --reps timed calls, alternating,
// so a noisy shared machine is compared at its quietest. Prints GFLOP/s and the ratio of bf16 (the
// picked path) to f32 per shape, then one 'RESULT {...}' JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"

using namespace tessera;
using kernels::LowPrecision;

namespace {

struct Shape {
  std::string name;
  bool trans_a, trans_b;
  int64_t M, N, K;
};

// Linear layers y[T,out] = x[T,in] * W[out,in]^T, each with its three matmuls.
std::vector<Shape> block_shapes(int64_t C, int64_t T) {
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  std::vector<Shape> shapes;
  for (Layer l : {Layer{"qkv", C, 3 * C}, Layer{"fc", C, 4 * C}, Layer{"proj", 4 * C, C}}) {
    const std::string n = l.name;
    shapes.push_back({n + " x*W^T", false, true, T, l.out, l.in});
    shapes.push_back({n + " dy*W", false, false, T, l.in, l.out});
    shapes.push_back({n + " dy^T*x", true, false, l.out, l.in, T});
  }
  return shapes;
}

template <typename F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 4096, reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int64_t v = std::stoll(argv[i + 1]);
    if (k == "--tokens") {
      T = v;
    } else if (k == "--reps") {
      reps = v;
    } else if (k == "--threads") {
      set_num_threads(int(v));
    } else {
      std::fprintf(stderr, "unknown flag %s (--tokens, --reps, --threads)\n", k.c_str());
      return 2;
    }
  }
  const LowPrecision p = LowPrecision::kBf16;
  const std::string path = kernels::low_precision_gemm_path(p);
  std::printf("bf16 path: %s; %d threads; best of %lld\n", path.c_str(), num_threads(),
              static_cast<long long>(reps));
  std::printf("%-5s %-13s %6s %6s %6s %10s %10s %7s %13s\n", "C", "matmul", "M", "N", "K",
              "f32 GF/s", "bf16 GF/s", "ratio", "portable GF/s");
  nlohmann::json rows = nlohmann::json::array();
  CounterRng rng(1, 0);
  for (int64_t C : {256, 768}) {
    for (const Shape& s : block_shapes(C, T)) {
      const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
      std::vector<float> a(s.M * s.K), b(s.K * s.N), c(s.M * s.N);
      for (size_t i = 0; i < a.size(); ++i) a[i] = float(rng.normal(i));
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(rng.normal(a.size() + i));
      std::vector<uint16_t> a_low(a.size()), b_low(b.size());
      kernels::cast_to_low(kernels::kCpuContext, a.data(), a_low.data(), int64_t(a.size()), p);
      kernels::cast_to_low(kernels::kCpuContext, b.data(), b_low.data(), int64_t(b.size()), p);
      auto f32 = [&] {
        kernels::gemm<float>(kernels::kCpuContext, s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f,
                             a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.N);
      };
      auto on = [&](kernels::LowPrecisionGemmPath path) {
        return [&, path] {
          kernels::set_low_precision_gemm_path(path);
          kernels::gemm_low(kernels::kCpuContext, s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f,
                            a_low.data(), lda, b_low.data(), ldb, 0.0f, c.data(), s.N, p);
        };
      };
      const auto low = on(kernels::LowPrecisionGemmPath::kOneDnn);
      const auto portable = on(kernels::LowPrecisionGemmPath::kPortable);
      f32();  // warm-up: page faults, JIT code, the primitive cache, the portable scratch
      low();
      portable();
      double best_f32 = std::numeric_limits<double>::infinity(), best_low = best_f32,
             best_portable = best_f32;
      for (int64_t r = 0; r < reps; ++r) {
        best_f32 = std::min(best_f32, seconds(f32));
        best_low = std::min(best_low, seconds(low));
        best_portable = std::min(best_portable, seconds(portable));
      }
      const double gflop = 2e-9 * double(s.M) * double(s.N) * double(s.K);
      const double f32_rate = gflop / best_f32, low_rate = gflop / best_low,
                   portable_rate = gflop / best_portable;
      std::printf("%-5lld %-13s %6lld %6lld %6lld %10.1f %10.1f %7.2f %13.1f\n",
                  static_cast<long long>(C), s.name.c_str(), static_cast<long long>(s.M),
                  static_cast<long long>(s.N), static_cast<long long>(s.K), f32_rate, low_rate,
                  low_rate / f32_rate, portable_rate);
      rows.push_back({{"d_model", C},
                      {"matmul", s.name},
                      {"M", s.M},
                      {"N", s.N},
                      {"K", s.K},
                      {"f32_gflops", f32_rate},
                      {"bf16_gflops", low_rate},
                      {"ratio", low_rate / f32_rate},
                      {"portable_gflops", portable_rate}});
    }
  }
  nlohmann::json result = {{"bf16_path", path}, {"threads", num_threads()}, {"rows", rows}};
  std::printf("RESULT %s\n", result.dump().c_str());
}
