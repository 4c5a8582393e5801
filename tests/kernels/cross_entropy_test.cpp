// Softmax cross-entropy: a hand-computed example, backward against finite differences, and
// the vocab-parallel pieces with 1, 2 and 3 shards against the unsharded loss and gradient.
#include "kernels/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace meshwork::kernels {
namespace {

using testing::random_mat;
using testing::relative_error;

TEST(CrossEntropy, MatchesAHandComputedTwoByThreeExample) {
  Mat<double> logits(2, 3);
  logits << 1, 2, 3,  //
      1, 1, 1;
  const std::vector<std::int64_t> targets = {2, 0};
  const auto ce = softmax_cross_entropy<double>(logits, targets);
  // Row 0: log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2) = 0.40760596444438013.
  // Row 1: log(3 e) - 1 = log 3 = 1.0986122886681096. Mean of the two:
  EXPECT_NEAR(ce.mean_loss, 0.7531091265562448, 1e-15);
  // dlogits = (softmax - onehot) / 2 tokens.
  Mat<double> expected(2, 3);
  expected << 0.04501528658519024, 0.12236423552739885, 0.332620477887411 - 0.5,  //
      1.0 / 6 - 0.5, 1.0 / 6, 1.0 / 6;
  EXPECT_LT((ce.dlogits - expected).cwiseAbs().maxCoeff(), 1e-15);
  EXPECT_NEAR(ce.dlogits(0, 2), -0.167379522112589, 1e-15);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(20);
  Mat<double> logits = random_mat(4, 7, rng, -3.0, 3.0);
  const std::vector<std::int64_t> targets = {0, 6, 3, 3};
  const auto loss = [&] { return softmax_cross_entropy<double>(logits, targets).mean_loss; };
  testing::expect_gradient("dlogits", logits, loss,
                           softmax_cross_entropy<double>(logits, targets).dlogits);
}

TEST(CrossEntropy, LargeLogitsDoNotOverflow) {
  Mat<float> logits(1, 2);
  logits << 1000.0f, 0.0f;  // exp(1000) overflows float; the max shift avoids it
  const std::vector<std::int64_t> target = {1};
  EXPECT_FLOAT_EQ(softmax_cross_entropy<float>(logits, target).mean_loss, 1000.0f);
}

// Runs the three steps on `shards` column slices, with the all-reduces done by hand.
CrossEntropy<float> sharded_cross_entropy(const Mat<float>& logits,
                                          const std::vector<std::int64_t>& targets, Index shards) {
  const Index vocab = logits.cols(), tokens = logits.rows();
  std::vector<Index> begin(static_cast<std::size_t>(shards) + 1);
  for (Index s = 0; s <= shards; ++s)
    begin[static_cast<std::size_t>(s)] = s * vocab / shards;  // uneven widths
  const auto local = [&](Index s) -> Mat<float> {
    return logits.middleCols(
        begin[static_cast<std::size_t>(s)],
        begin[static_cast<std::size_t>(s) + 1] - begin[static_cast<std::size_t>(s)]);
  };
  Vec<float> max = Vec<float>::Constant(tokens, -std::numeric_limits<float>::infinity());
  for (Index s = 0; s < shards; ++s)
    max = max.cwiseMax(vocab_parallel_local_max<float>(local(s)));  // MAX
  VocabParallelPartialSums<float> sums{Vec<float>::Zero(tokens), Vec<float>::Zero(tokens)};
  for (Index s = 0; s < shards; ++s) {  // SUM
    const auto part = vocab_parallel_partial_sums<float>(local(s), max, targets,
                                                         begin[static_cast<std::size_t>(s)]);
    sums.sum_exp += part.sum_exp;
    sums.target_logit_minus_max += part.target_logit_minus_max;
  }
  CrossEntropy<float> out{0.0f, Mat<float>(tokens, vocab)};
  for (Index s = 0; s < shards; ++s) {
    const auto ce = vocab_parallel_loss_and_grad<float>(local(s), max, sums, targets,
                                                        begin[static_cast<std::size_t>(s)]);
    if (s > 0) {
      EXPECT_EQ(ce.mean_loss, out.mean_loss) << "every rank computes the same loss";
    }
    out.mean_loss = ce.mean_loss;
    out.dlogits.middleCols(begin[static_cast<std::size_t>(s)], ce.dlogits.cols()) = ce.dlogits;
  }
  return out;
}

TEST(VocabParallelCrossEntropy, OneTwoAndThreeShardsMatchTheUnshardedResult) {
  std::mt19937_64 rng(21);
  const Mat<float> logits = random_mat<float>(6, 11, rng, -4.0, 4.0);
  const std::vector<std::int64_t> targets = {0, 10, 3, 5, 7, 3};  // in every shard of every split
  const auto whole = softmax_cross_entropy<float>(logits, targets);
  for (const Index shards : {1, 2, 3}) {
    const auto split = sharded_cross_entropy(logits, targets, shards);
    EXPECT_NEAR(split.mean_loss, whole.mean_loss, 1e-6 * whole.mean_loss) << shards << " shards";
    EXPECT_LT(relative_error(split.dlogits, whole.dlogits), 1e-6) << shards << " shards";
    if (shards == 1) {
      EXPECT_EQ(split.mean_loss, whole.mean_loss);
      EXPECT_EQ(split.dlogits, whole.dlogits);
    }
  }
}

TEST(CrossEntropy, BadTargetsAndShapesThrowInvalidArgument) {
  const Mat<float> logits = Mat<float>::Zero(2, 3);
  const std::vector<std::int64_t> out_of_vocab = {0, 3}, negative = {-1, 0}, too_few = {0};
  EXPECT_THROW(softmax_cross_entropy<float>(logits, out_of_vocab), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy<float>(logits, negative), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy<float>(logits, too_few), std::invalid_argument);
  EXPECT_THROW(vocab_parallel_partial_sums<float>(logits, Vec<float>::Zero(3),
                                                  std::vector<std::int64_t>{0, 1}, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
