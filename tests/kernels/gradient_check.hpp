#pragma once
// Shared by the kernels tests: seeded random tensors and central finite differences in double.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "kernels/tensor.hpp"

namespace meshwork::kernels::testing {

// Entries uniform in [lo, hi) from `rng`; every test seeds its own generator.
template <class T = double>
Mat<T> random_mat(Index rows, Index cols, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  Mat<T> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(u(rng));
  return m;
}

template <class T = double>
Vec<T> random_vec(Index size, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  return random_mat<T>(size, 1, rng, lo, hi);
}

// max |a - b| / max(max |a|, max |b|): the error relative to the gradient's scale, so entries
// that are legitimately near zero do not dominate.
template <class A, class B>
double relative_error(const A& a, const B& b) {
  const double scale = std::max({static_cast<double>(a.cwiseAbs().maxCoeff()),
                                 static_cast<double>(b.cwiseAbs().maxCoeff()), 1e-300});
  return static_cast<double>((a - b).cwiseAbs().maxCoeff()) / scale;
}

// d loss / d x by central differences, x perturbed in place and restored. Truncation error
// ~ h^2 f''' and rounding ~ 1e-16 |loss| / h, both far below the 1e-6 the tests ask.
template <class M, class Loss>
M numeric_gradient(M& x, Loss&& loss, double h = 1e-6) {
  M g(x.rows(), x.cols());
  for (Index i = 0; i < x.size(); ++i) {
    const double saved = x.data()[i];
    x.data()[i] = saved + h;
    const double up = loss();
    x.data()[i] = saved - h;
    const double down = loss();
    x.data()[i] = saved;
    g.data()[i] = (up - down) / (2 * h);
  }
  return g;
}

// The analytic gradient of `name` agrees with finite differences of `loss` w.r.t. x.
template <class M, class Loss>
void expect_gradient(const std::string& name, M& x, Loss&& loss, const M& analytic) {
  ASSERT_EQ(analytic.rows(), x.rows()) << name;
  ASSERT_EQ(analytic.cols(), x.cols()) << name;
  EXPECT_LT(relative_error(numeric_gradient(x, loss), analytic), 1e-6) << name;
}

// sum(y .* w): a scalar loss whose gradient w.r.t. y is w, so `w` is the dy fed to backward.
inline double weighted_sum(const Mat<double>& y, const Mat<double>& w) {
  return y.cwiseProduct(w).sum();
}

}  // namespace meshwork::kernels::testing
