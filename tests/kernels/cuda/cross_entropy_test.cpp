// The CUDA softmax cross-entropy against kernels/cross_entropy.hpp in double, for float and
// bf16 logits.
#include "kernels/cuda/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>

#include "kernels/cross_entropy.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

template <class T>
class CrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropy, ElementTypes, ElementTypeNames);

TYPED_TEST(CrossEntropy, MatchesTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(701);
  for (const auto& [rows, vocab] : {std::pair<Index, Index>{1, 1}, {3, 10}, {17, 257}, {40, 5000}}) {
    SCOPED_TRACE(shape_of(rows, vocab));
    const auto logits = rounded_to<T>(random_values(static_cast<std::size_t>(rows * vocab), rng, -8.0, 8.0));
    std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
    std::vector<std::int64_t> targets(static_cast<std::size_t>(rows));
    for (auto& t : targets) t = pick(rng);
    DeviceBuffer<T> logits_d = upload<T>(logits), dlogits_d(logits.size());
    DeviceBuffer<std::int64_t> targets_d{std::span<const std::int64_t>(targets)};
    DeviceBuffer<float> loss_d(targets.size()), lse_d(targets.size());
    cuda::cross_entropy_forward<T>(logits_d.data(), targets_d.data(), loss_d.data(), lse_d.data(), rows, vocab, nullptr);
    const float scale = 1.0f / static_cast<float>(rows);  // the gradient of the mean loss
    cuda::cross_entropy_backward<T>(logits_d.data(), targets_d.data(), lse_d.data(), dlogits_d.data(), rows, vocab,
                                    scale, nullptr);

    const Mat<double> z = as_mat(logits, rows, vocab);
    const auto ce = kernels::softmax_cross_entropy<double>(z, targets);
    // Per-row losses: the reference's mean over a single row is that row's loss.
    Vec<double> loss_ref(rows), lse_ref(rows);
    for (Index i = 0; i < rows; ++i) {
      const Mat<double> row = z.row(i);
      loss_ref(i) = kernels::softmax_cross_entropy<double>(row, std::span(targets).subspan(static_cast<std::size_t>(i), 1)).mean_loss;
      // lse = max + log sum exp(z - max), from the vocab-parallel pieces with one shard.
      const Vec<double> max = kernels::vocab_parallel_local_max<double>(row);
      lse_ref(i) = max(0) + std::log(kernels::vocab_parallel_partial_sums<double>(
                                         row, max, std::span(targets).subspan(static_cast<std::size_t>(i), 1), 0)
                                         .sum_exp(0));
    }
    // Loss and lse are fp32 whatever T: sums of up to 5000 exps, ~1e-6 relative.
    expect_close(loss_d.download(), loss_ref, kFloatOutputBound, "loss per row");
    expect_close(lse_d.download(), lse_ref, kFloatOutputBound, "logsumexp");
    expect_close(download(dlogits_d), ce.dlogits, kOutputBound<T>, "dlogits");
    const auto loss = loss_d.download();
    double mean = 0.0;
    for (const float l : loss) mean += l;
    EXPECT_NEAR(mean / static_cast<double>(rows), ce.mean_loss, 1e-5 * std::abs(ce.mean_loss) + 1e-6);
  }
}

TYPED_TEST(CrossEntropy, NaNLogitOrBadTargetMakesTheRowNaN) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  const Index rows = 3, vocab = 300;
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab), 0.0f);
  logits[static_cast<std::size_t>(0 * vocab + 299)] = std::nanf("");  // not the target
  const std::vector<std::int64_t> targets = {0, 1, vocab};             // row 2: outside the vocabulary
  DeviceBuffer<T> logits_d = upload<T>(logits), dlogits_d(logits.size());
  DeviceBuffer<std::int64_t> targets_d{std::span<const std::int64_t>(targets)};
  DeviceBuffer<float> loss_d(3), lse_d(3);
  cuda::cross_entropy_forward<T>(logits_d.data(), targets_d.data(), loss_d.data(), lse_d.data(), rows, vocab, nullptr);
  cuda::cross_entropy_backward<T>(logits_d.data(), targets_d.data(), lse_d.data(), dlogits_d.data(), rows, vocab,
                                  1.0f, nullptr);
  const auto loss = loss_d.download();
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_NEAR(loss[1], std::log(300.0), 1e-5);  // uniform logits: log(vocab)
  EXPECT_TRUE(std::isnan(loss[2]));
  const auto d = download(dlogits_d);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_FALSE(std::isnan(d[static_cast<std::size_t>(vocab)]));
  EXPECT_TRUE(std::isnan(d[static_cast<std::size_t>(2 * vocab)]));
}

}  // namespace
}  // namespace meshwork::kernels::cuda
