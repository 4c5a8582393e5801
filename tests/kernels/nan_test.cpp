// A NaN anywhere in an input reaches the output in float: no operator hides it (a max that
// skips NaN, a sign bit read as a number, a masked-out branch), so corruption surfaces.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/one_bit.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/topk.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace meshwork::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool all_nan(const Mat<float>& m) {
  return m.array().isNaN().all();
}

TEST(NaN, PropagatesThroughEveryOperator) {
  Mat<float> x = Mat<float>::Constant(3, 4, 0.5f);
  x(1, 2) = kNaN;
  const Vec<float> ones = Vec<float>::Ones(4), zeros = Vec<float>::Zero(4);
  // Row-wise statistics: the whole NaN row, and only it.
  const Mat<float> ln = layernorm_forward<float>(x, ones, zeros, 1e-5f).y;
  EXPECT_TRUE(all_nan(ln.row(1))) << ln;
  EXPECT_FALSE(ln.row(0).array().isNaN().any());
  EXPECT_TRUE(all_nan(rmsnorm_forward<float>(x, ones, 1e-5f).y.row(1)));
  EXPECT_TRUE(std::isnan(bias_gelu_forward<float>(x, zeros)(1, 2)));
  EXPECT_TRUE(std::isnan(swiglu_forward<float>(x)(1, 0)));  // NaN in the up half

  // A NaN key poisons every row that can see it (rows >= 1), not the rows before it.
  Mat<float> k = Mat<float>::Constant(3, 4, 0.25f);
  k(1, 0) = kNaN;
  const auto att =
      causal_attention_forward<float>(x.topRows(1).replicate(3, 1), k, Mat<float>::Ones(3, 4));
  EXPECT_FALSE(att.out.row(0).array().isNaN().any());
  EXPECT_TRUE(all_nan(att.out.bottomRows(2)));
}

TEST(NaN, MakesTheLossNaNEvenInAnotherShard) {
  Mat<float> logits = Mat<float>::Zero(2, 6);
  logits(0, 5) = kNaN;
  const std::vector<std::int64_t> targets = {0, 1};  // the NaN is not even a target
  const auto ce = softmax_cross_entropy<float>(logits, targets);
  EXPECT_TRUE(std::isnan(ce.mean_loss));
  // Split in two, with the worst MAX all-reduce: one that drops NaN as fmax does. The NaN
  // shard's sum_exp is NaN, so the SUM all-reduce still carries it to every rank's loss.
  const Mat<float> left = logits.leftCols(3), right = logits.rightCols(3);
  EXPECT_TRUE(std::isnan(vocab_parallel_local_max<float>(right)(0)));
  const Vec<float> max = vocab_parallel_local_max<float>(left).binaryExpr(
      vocab_parallel_local_max<float>(right), [](float a, float b) { return std::fmax(a, b); });
  ASSERT_FALSE(std::isnan(max(0)));
  auto sums = vocab_parallel_partial_sums<float>(left, max, targets, 0);
  const auto right_sums = vocab_parallel_partial_sums<float>(right, max, targets, 3);
  sums.sum_exp += right_sums.sum_exp;
  sums.target_logit_minus_max += right_sums.target_logit_minus_max;
  EXPECT_TRUE(
      std::isnan(vocab_parallel_loss_and_grad<float>(left, max, sums, targets, 0).mean_loss));
}

TEST(NaN, ReachesParametersAndCompressedGradients) {
  std::vector<float> params = {1.0f, 2.0f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  const std::vector<float> grads = {kNaN, 0.5f};
  adamw_step<float>(params, grads, m, v, 1, AdamWHyperparams{});
  EXPECT_TRUE(std::isnan(params[0]));

  std::vector<float> error = {0.0f, 0.0f}, sent(2);
  one_bit_decompress<float>(one_bit_compress<float>(grads, error), sent);
  EXPECT_TRUE(std::isnan(sent[0]) && std::isnan(sent[1])) << "the scale is NaN, not a sign";

  std::vector<float> topk_error = {0.0f, 0.0f};
  const auto sparse = topk_compress<float>(grads, topk_error, 1);
  EXPECT_EQ(sparse.indices.at(0), 0) << "NaN ranks above every number, so it is sent";
  EXPECT_TRUE(std::isnan(sparse.values.at(0)));
}

}  // namespace
}  // namespace meshwork::kernels
