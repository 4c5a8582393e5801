// Top-k sparsification with error feedback: exactly the k largest are sent, ties resolved by
// index, and what is sent plus what is kept is bit-for-bit what was owed.
#include "kernels/topk.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace meshwork::kernels {
namespace {

TEST(TopK, KeepsTheKLargestMagnitudesAndBreaksTiesByIndex) {
  const std::vector<float> grad = {0.5f, -3.0f, 2.0f, -2.0f, 0.1f, 3.0f, 2.0f};
  std::vector<float> error(grad.size(), 0.0f);
  // |3| at 1 and 5, then |2| at 2, 3 and 6: the third slot goes to the lowest index, 2.
  const auto sparse = topk_compress<float>(grad, error, 3);
  EXPECT_EQ(sparse.indices, (std::vector<std::int64_t>{1, 2, 5}));
  EXPECT_EQ(sparse.values, (std::vector<float>{-3.0f, 2.0f, 3.0f}));
  EXPECT_EQ(error, (std::vector<float>{0.5f, 0.0f, 0.0f, -2.0f, 0.1f, 0.0f, 2.0f}));
  std::vector<float> dense(grad.size());
  topk_densify<float>(sparse, dense);
  EXPECT_EQ(dense, (std::vector<float>{0.0f, -3.0f, 2.0f, 0.0f, 0.0f, 3.0f, 0.0f}));
}

TEST(TopK, SentPlusResidualIsExactlyWhatWasOwed) {
  std::mt19937_64 rng(50);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n = 257, k = 20;
  std::vector<float> grad(n), error(n);
  for (float& g : grad) g = normal(rng);
  for (float& e : error) e = 0.1f * normal(rng);
  const std::vector<float> old_error = error;
  const auto sparse = topk_compress<float>(grad, error, k);
  ASSERT_EQ(sparse.indices.size(), k);
  EXPECT_TRUE(std::is_sorted(sparse.indices.begin(), sparse.indices.end()));
  std::vector<float> dense(n);
  topk_densify<float>(sparse, dense);
  float smallest_sent = std::numeric_limits<float>::infinity(), largest_kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float owed = grad[i] + old_error[i];
    // One of the two is exactly zero, so the sum involves no rounding.
    EXPECT_EQ(dense[i] + error[i], owed) << i;
    EXPECT_TRUE(dense[i] == 0.0f || error[i] == 0.0f) << i;
    if (dense[i] != 0.0f) smallest_sent = std::min(smallest_sent, std::abs(dense[i]));
    largest_kept = std::max(largest_kept, std::abs(error[i]));
  }
  EXPECT_GE(smallest_sent, largest_kept);
}

TEST(TopK, SmallEntriesAccumulateUntilSent) {
  // Entry 1 is always smaller than entry 0, but its residual grows by 0.25 a step: after
  // 4 steps it is 1.0, ties with entry 0's 1.0, and loses the tie (higher index); at step 5
  // it is 1.25 and is sent.
  const std::vector<double> grad = {1.0, 0.25};
  std::vector<double> error = {0.0, 0.0};
  std::vector<std::int64_t> sent_index;
  for (int step = 1; step <= 5; ++step)
    sent_index.push_back(topk_compress<double>(grad, error, 1).indices.at(0));
  EXPECT_EQ(sent_index, (std::vector<std::int64_t>{0, 0, 0, 0, 1}));
  EXPECT_EQ(error, (std::vector<double>{1.0, 0.0}));
}

TEST(TopK, KOfZeroOrAllIsAllowedMoreThrows) {
  const std::vector<float> grad = {1.0f, -2.0f};
  std::vector<float> error = {0.0f, 0.0f};
  EXPECT_TRUE(topk_compress<float>(grad, error, 0).indices.empty());
  EXPECT_EQ(error, grad);
  EXPECT_EQ(topk_compress<float>(grad, error, 2).values, (std::vector<float>{2.0f, -4.0f}));
  EXPECT_EQ(error, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_THROW(topk_compress<float>(grad, error, 3), std::invalid_argument);
  std::vector<float> wrong(3);
  EXPECT_THROW(topk_compress<float>(grad, wrong, 1), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
