// LayerNorm, RMSNorm, bias+GeLU and SwiGLU: defining properties, hand-computed values, and
// backward against finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace meshwork::kernels {
namespace {

using testing::expect_gradient;
using testing::random_mat;
using testing::random_vec;
using testing::weighted_sum;

TEST(LayerNorm, RowsHaveZeroMeanAndUnitVariance) {
  std::mt19937_64 rng(1);
  const Mat<double> x = random_mat(5, 16, rng, -3.0, 7.0);
  const Vec<double> ones = Vec<double>::Ones(16), zeros = Vec<double>::Zero(16);
  const auto f = layernorm_forward<double>(x, ones, zeros, 0.0);
  for (Index r = 0; r < x.rows(); ++r) {
    EXPECT_NEAR(f.y.row(r).mean(), 0.0, 1e-14);
    EXPECT_NEAR(f.y.row(r).squaredNorm() / 16.0, 1.0, 1e-13);  // biased variance, as Ba et al.
    EXPECT_NEAR(f.mean(r), x.row(r).mean(), 1e-14);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(2);
  Mat<double> x = random_mat(4, 6, rng);
  Vec<double> gamma = random_vec(6, rng, 0.5, 1.5), beta = random_vec(6, rng);
  const Mat<double> w = random_mat(4, 6, rng);
  const double eps = 1e-5;
  const auto loss = [&] {
    return weighted_sum(layernorm_forward<double>(x, gamma, beta, eps).y, w);
  };
  const auto f = layernorm_forward<double>(x, gamma, beta, eps);
  const auto g = layernorm_backward<double>(w, x, gamma, f.mean, f.rstd);
  expect_gradient("dx", x, loss, g.dx);
  expect_gradient("dgamma", gamma, loss, g.dgamma);
  expect_gradient("dbeta", beta, loss, g.dbeta);
}

TEST(RmsNorm, RowsHaveUnitRootMeanSquare) {
  std::mt19937_64 rng(3);
  const Mat<double> x = random_mat(3, 8, rng, 0.5, 4.0);  // non-zero mean: RMSNorm keeps it
  const auto f = rmsnorm_forward<double>(x, Vec<double>::Ones(8), 0.0);
  for (Index r = 0; r < x.rows(); ++r) {
    EXPECT_NEAR(std::sqrt(f.y.row(r).squaredNorm() / 8.0), 1.0, 1e-14);
    EXPECT_GT(f.y.row(r).mean(), 0.0);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  Mat<double> x = random_mat(4, 6, rng);
  Vec<double> gamma = random_vec(6, rng, 0.5, 1.5);
  const Mat<double> w = random_mat(4, 6, rng);
  const auto loss = [&] { return weighted_sum(rmsnorm_forward<double>(x, gamma, 1e-6).y, w); };
  const auto g =
      rmsnorm_backward<double>(w, x, gamma, rmsnorm_forward<double>(x, gamma, 1e-6).rstd);
  expect_gradient("dx", x, loss, g.dx);
  expect_gradient("dgamma", gamma, loss, g.dgamma);
}

TEST(BiasGelu, MatchesTheTanhApproximationByHand) {
  Mat<double> x(1, 3);
  x << -1.0, 0.0, 1.0;
  Vec<double> bias(3);
  bias << 0.0, 0.0, 0.5;
  const Mat<double> y = bias_gelu_forward<double>(x, bias);
  const auto by_hand = [](double z) {
    return 0.5 * z * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (z + 0.044715 * z * z * z)));
  };
  EXPECT_DOUBLE_EQ(y(0, 0), by_hand(-1.0));  // -0.15880800939172324
  EXPECT_NEAR(y(0, 0), -0.158808, 1e-6);
  EXPECT_EQ(y(0, 1), 0.0);
  EXPECT_DOUBLE_EQ(y(0, 2), by_hand(1.5));
}

TEST(BiasGelu, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(5);
  Mat<double> x = random_mat(3, 5, rng, -3.0, 3.0);
  Vec<double> bias = random_vec(5, rng);
  const Mat<double> w = random_mat(3, 5, rng);
  const auto loss = [&] { return weighted_sum(bias_gelu_forward<double>(x, bias), w); };
  const auto g = bias_gelu_backward<double>(w, x, bias);
  expect_gradient("dx", x, loss, g.dx);
  expect_gradient("dbias", bias, loss, g.dbias);
}

TEST(SwiGlu, GateIsTheFirstHalfAndUpTheSecond) {
  Mat<double> gate_up(1, 4);
  gate_up << 1.0, 0.0, 2.0, 5.0;  // gate = [1, 0], up = [2, 5]
  const Mat<double> y = swiglu_forward<double>(gate_up);
  ASSERT_EQ(y.cols(), 2);
  EXPECT_DOUBLE_EQ(y(0, 0), 1.0 / (1.0 + std::exp(-1.0)) * 2.0);  // silu(1) * 2
  EXPECT_EQ(y(0, 1), 0.0);                                        // silu(0) = 0 whatever up is
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(6);
  Mat<double> gate_up = random_mat(3, 8, rng, -3.0, 3.0);
  const Mat<double> w = random_mat(3, 4, rng);
  const auto loss = [&] { return weighted_sum(swiglu_forward<double>(gate_up), w); };
  expect_gradient("dgate_up", gate_up, loss, swiglu_backward<double>(w, gate_up));
}

TEST(Layers, ShapeMismatchesThrowInvalidArgument) {
  const Mat<float> x = Mat<float>::Ones(2, 4);
  EXPECT_THROW(layernorm_forward<float>(x, Vec<float>::Ones(3), Vec<float>::Zero(4), 1e-5f),
               std::invalid_argument);
  EXPECT_THROW(
      rmsnorm_backward<float>(Mat<float>::Ones(2, 3), x, Vec<float>::Ones(4), Vec<float>::Ones(2)),
      std::invalid_argument);
  EXPECT_THROW(bias_gelu_forward<float>(x, Vec<float>::Zero(5)), std::invalid_argument);
  EXPECT_THROW(swiglu_forward<float>(Mat<float>::Ones(2, 3)), std::invalid_argument);
  try {
    layernorm_forward<float>(x, Vec<float>::Ones(3), Vec<float>::Zero(4), 1e-5f);
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "layernorm_forward: gamma has 3 values for x [2, 4]");
  }
}

}  // namespace
}  // namespace meshwork::kernels

namespace meshwork::kernels {
namespace {

// RoPE (Su et al. 2021): a pair at position p turns by p * base^(-2i/d); position 0 stays put.
TEST(Rope, RotatesEachPairByItsPositionsAngle) {
  Mat<double> x(2, 4);  // seq 2: rows are positions 0 and 1; one head of width 4
  x << 1, 2, 0, 0, 1, 2, 0, 0;
  rope_apply(x, 1, 4, 2);
  EXPECT_DOUBLE_EQ(x(0, 0), 1);
  EXPECT_DOUBLE_EQ(x(0, 1), 2);
  // Position 1: dimension 0 pairs with 2 (angle 1), dimension 1 with 3 (angle 10000^-0.5).
  EXPECT_NEAR(x(1, 0), std::cos(1.0), 1e-15);
  EXPECT_NEAR(x(1, 2), std::sin(1.0), 1e-15);
  EXPECT_NEAR(x(1, 1), 2 * std::cos(0.01), 1e-15);
  EXPECT_NEAR(x(1, 3), 2 * std::sin(0.01), 1e-15);
}

// What RoPE is for: q(m) . k(n) depends on m - n only; and the inverse, which is also the
// gradient's map, undoes it.
TEST(Rope, ScoresDependOnTheOffsetAndTheInverseIsTheGradient) {
  std::mt19937_64 rng(3);
  const Index seq = 8, heads = 2, d = 6;
  Mat<double> q1 = testing::random_mat(1, heads * d, rng), k1 = testing::random_mat(1, heads * d, rng);
  auto at = [&](const Mat<double>& v, Index pos) {
    Mat<double> x = Mat<double>::Zero(seq, heads * d);
    x.row(pos) = v;
    rope_apply(x, heads, d, seq);
    return Mat<double>(x.row(pos));
  };
  const double near = (at(q1, 5).leftCols(d) * at(k1, 3).leftCols(d).transpose())(0, 0);
  const double far = (at(q1, 7).leftCols(d) * at(k1, 5).leftCols(d).transpose())(0, 0);
  EXPECT_NEAR(near, far, 1e-12);
  Mat<double> x = testing::random_mat(2 * seq, heads * d, rng), w = testing::random_mat(2 * seq, heads * d, rng);
  const Mat<double> x0 = x;
  auto loss = [&] {
    Mat<double> y = x;
    rope_apply(y, heads, d, seq);
    return (y.array() * w.array()).sum();
  };
  Mat<double> grad = w;
  rope_apply(grad, heads, d, seq, true);
  EXPECT_LT(testing::relative_error(grad, testing::numeric_gradient(x, loss)), 1e-8);
  rope_apply(x, heads, d, seq);
  rope_apply(x, heads, d, seq, true);
  EXPECT_LT((x - x0).cwiseAbs().maxCoeff(), 1e-14);
}

}  // namespace
}  // namespace meshwork::kernels
