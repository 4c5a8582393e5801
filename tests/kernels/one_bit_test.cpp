// 1-bit compression with error feedback: what is sent plus what is kept equals what was owed,
// and over many steps the updates sent track the gradients.
#include "kernels/one_bit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace meshwork::kernels {
namespace {

template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

TEST(OneBit, DecompressedPlusNewErrorIsGradientPlusOldError) {
  std::mt19937_64 rng(40);
  const std::size_t n = 100;  // not a multiple of 64: a partly filled last word
  const std::vector<float> grad = random_values<float>(n, rng, 1.0);
  const std::vector<float> old_error = random_values<float>(n, rng, 0.3);
  std::vector<float> error = old_error, sent(n);
  const auto c = one_bit_compress<float>(grad, error);
  one_bit_decompress<float>(c, sent);
  ASSERT_EQ(c.sign_bits.size(), 2U);
  EXPECT_EQ(c.sign_bits[1] >> (n - 64), 0U) << "bits past the last value stay clear";
  double abs_sum = 0;
  for (std::size_t i = 0; i < n; ++i)
    abs_sum += std::abs(static_cast<double>(grad[i] + old_error[i]));
  EXPECT_EQ(c.scale, static_cast<float>(abs_sum / n));
  for (std::size_t i = 0; i < n; ++i) {
    const float owed = grad[i] + old_error[i];
    EXPECT_EQ(std::signbit(sent[i]), std::signbit(owed)) << i;
    EXPECT_EQ(std::abs(sent[i]), c.scale) << i;
    // The residual is defined as owed - sent, so that much is bit-exact...
    EXPECT_EQ(std::bit_cast<std::uint32_t>(error[i]), std::bit_cast<std::uint32_t>(owed - sent[i]))
        << i;
    // ...and adding it back rounds twice: (owed - sent) + sent is within two half-ulps of owed
    // (each rounding errs by at most 2^-24 of its result).
    const float tolerance = 0x1p-23f * (std::abs(owed) + std::abs(sent[i]));
    EXPECT_NEAR(sent[i] + error[i], owed, tolerance) << i;
  }
}

double norm(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x * x;
  return std::sqrt(sum);
}

TEST(OneBit, ErrorFeedbackKeepsTheSentSumNextToTheGradientSum) {
  // Gradients with a steady per-coordinate drift (which sign-only updates distort: every
  // coordinate moves by the same scale) plus noise.
  std::mt19937_64 rng(41);
  const std::size_t n = 64;
  const int steps = 2000;
  const std::vector<double> drift = random_values<double>(n, rng, 1.0);
  std::vector<double> error(n, 0.0), sent(n), no_feedback_sent(n);
  std::vector<double> grad_sum(n, 0.0), sent_sum(n, 0.0), no_feedback_sum(n, 0.0);
  double max_grad_norm = 0, max_error_norm[2] = {0, 0};  // over the first and second half
  for (int t = 0; t < steps; ++t) {
    std::vector<double> grad = random_values<double>(n, rng, 0.5);
    for (std::size_t i = 0; i < n; ++i) grad[i] += drift[i];
    one_bit_decompress<double>(one_bit_compress<double>(grad, error), sent);
    std::vector<double> discarded(n, 0.0);  // no feedback: the residual is dropped every step
    one_bit_decompress<double>(one_bit_compress<double>(grad, discarded), no_feedback_sent);
    for (std::size_t i = 0; i < n; ++i) {
      grad_sum[i] += grad[i];
      sent_sum[i] += sent[i];
      no_feedback_sum[i] += no_feedback_sent[i];
    }
    max_grad_norm = std::max(max_grad_norm, norm(grad));
    double& half = max_error_norm[2 * t / steps];
    half = std::max(half, norm(error));
  }
  double drift_with = 0, drift_without = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Telescoping: sum sent = sum (g_t + e_{t-1} - e_t) = sum g - e_T.
    EXPECT_NEAR(sent_sum[i], grad_sum[i] - error[i], 1e-9 * steps) << i;
    drift_with = std::max(drift_with, std::abs(sent_sum[i] - grad_sum[i]));
    drift_without = std::max(drift_without, std::abs(no_feedback_sum[i] - grad_sum[i]));
  }
  // The scaled sign C(x) = (|x|_1 / n) sign(x) has |x - C(x)|^2 = |x|^2 - |x|_1^2 / n
  // <= (1 - 1/n) |x|^2, so |e_t| <= q (|e_{t-1}| + G) with q = sqrt(1 - 1/n), and
  // |e_t| <= q / (1 - q) G for every t (the argument of Karimireddy et al. 2019).
  const double q = std::sqrt(1.0 - 1.0 / static_cast<double>(n));
  EXPECT_LT(std::max(max_error_norm[0], max_error_norm[1]), q / (1 - q) * max_grad_norm);
  // In practice far below that, and not growing with the step count.
  EXPECT_LT(max_error_norm[1], 1.5 * max_error_norm[0]);
  EXPECT_GT(drift_without, 20 * drift_with) << "without feedback the sums drift apart";
}

TEST(OneBit, MismatchedSpansThrowInvalidArgument) {
  std::vector<float> grad(10), error(9), out(9);
  EXPECT_THROW(one_bit_compress<float>(grad, error), std::invalid_argument);
  error.resize(10);
  EXPECT_THROW(one_bit_decompress<float>(one_bit_compress<float>(grad, error), out),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
