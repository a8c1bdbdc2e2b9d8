// Central finite differences for kernel backward passes. Each check builds a scalar loss
// L = sum_i r_i * out_i with fixed random r, perturbs every input element by +-h and compares
// (L(x+h) - L(x-h)) / 2h with the analytic gradient by the relative error
// ||analytic - numeric||_2 / max(||analytic||_2, ||numeric||_2).
//
// Step sizes: in f64, h = 1e-5 (truncation error ~h^2 = 1e-10, rounding ~eps/h = 1e-11), and the
// bound is 1e-6. In f32, h = 1e-2, near the optimum cbrt(eps_f32) ~ 5e-3 for central
// differences, with the loss accumulated in f64; the bound is 2e-3.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tessera/core/rng.h"

namespace tessera::testing {

template <typename T>
struct Tolerance;
template <>
struct Tolerance<double> {
  static constexpr double kStep = 1e-5, kMaxRelError = 1e-6;
};
template <>
struct Tolerance<float> {
  static constexpr double kStep = 1e-2, kMaxRelError = 2e-3;
};

template <typename T>
std::vector<T> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  CounterRng rng(seed, 0);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(scale * rng.normal(i));
  return v;
}

template <typename T>
double weighted_sum(const std::vector<T>& out, const std::vector<T>& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * double(r[i]);
  return s;
}

// loss() recomputes the forward pass from the current contents of x.
template <typename T>
double relative_gradient_error(std::vector<T>& x, const std::function<double()>& loss,
                               const std::vector<T>& analytic) {
  const double h = Tolerance<T>::kStep;
  double diff2 = 0, a2 = 0, n2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    T saved = x[i];
    x[i] = T(saved + h);
    double up = loss();
    x[i] = T(saved - h);
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2 * h);
    diff2 += (analytic[i] - numeric) * (analytic[i] - numeric);
    a2 += double(analytic[i]) * analytic[i];
    n2 += numeric * numeric;
  }
  return std::sqrt(diff2) / std::max(std::sqrt(std::max(a2, n2)), 1e-300);
}

// Typed suites run every check in both precisions, each against its own tolerance.
using GradientPrecisions = ::testing::Types<double, float>;

}  // namespace tessera::testing

#define EXPECT_GRADIENT(x, loss, grad)                                       \
  EXPECT_LT(::tessera::testing::relative_gradient_error<TypeParam>(x, loss, grad), \
            ::tessera::testing::Tolerance<TypeParam>::kMaxRelError)
