// Causal attention: against a direct masked softmax, causality, the multi-head layout, and
// backward against finite differences in double.
#include "kernels/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/multi_head_attention.hpp"
#include "tests/kernels/gradient_check.hpp"

namespace meshwork::kernels {
namespace {

using testing::expect_gradient;
using testing::random_mat;
using testing::weighted_sum;

// softmax(Q K^T / sqrt(d) + M) V with M = -inf above the diagonal, written out directly.
Mat<double> direct_attention(const Mat<double>& q, const Mat<double>& k, const Mat<double>& v) {
  Mat<double> s = q * k.transpose() / std::sqrt(static_cast<double>(q.cols()));
  for (Index i = 0; i < s.rows(); ++i)
    for (Index j = i + 1; j < s.cols(); ++j) s(i, j) = -std::numeric_limits<double>::infinity();
  Mat<double> p = s.array().exp().matrix();
  for (Index i = 0; i < p.rows(); ++i) p.row(i) /= p.row(i).sum();
  return p * v;
}

TEST(CausalAttention, MatchesTheMaskedSoftmaxWrittenOut) {
  std::mt19937_64 rng(10);
  const Mat<double> q = random_mat(6, 4, rng, -2.0, 2.0), k = random_mat(6, 4, rng, -2.0, 2.0),
                    v = random_mat(6, 3, rng);
  const auto f = causal_attention_forward<double>(q, k, v);
  EXPECT_LT((f.out - direct_attention(q, k, v)).cwiseAbs().maxCoeff(), 1e-14);
  // The first token sees only itself: its output is v_0 and its logsumexp its one score.
  EXPECT_NEAR((f.out.row(0) - v.row(0)).cwiseAbs().maxCoeff(), 0.0, 1e-15);
  EXPECT_NEAR(f.logsumexp(0), q.row(0).dot(k.row(0)) / 2.0, 1e-15);
}

TEST(CausalAttention, LaterKeysAndValuesDoNotChangeEarlierRows) {
  std::mt19937_64 rng(11);
  const Mat<float> q = random_mat<float>(7, 4, rng), k = random_mat<float>(7, 4, rng),
                   v = random_mat<float>(7, 4, rng);
  const auto before = causal_attention_forward<float>(q, k, v);
  for (Index changed = 1; changed < 7; ++changed) {
    Mat<float> k2 = k, v2 = v;
    k2.row(changed) *= -3.0f;
    v2.row(changed).setConstant(100.0f);
    const auto after = causal_attention_forward<float>(q, k2, v2);
    for (Index i = 0; i < changed; ++i) {
      EXPECT_EQ(after.out.row(i), before.out.row(i))
          << "row " << i << " changed with key " << changed;
      EXPECT_EQ(after.logsumexp(i), before.logsumexp(i));
    }
    EXPECT_NE(after.out.row(changed), before.out.row(changed));
  }
}

TEST(CausalAttention, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(12);
  Mat<double> q = random_mat(5, 3, rng), k = random_mat(5, 3, rng), v = random_mat(5, 4, rng);
  const Mat<double> w = random_mat(5, 4, rng);
  const auto loss = [&] { return weighted_sum(causal_attention_forward<double>(q, k, v).out, w); };
  const auto f = causal_attention_forward<double>(q, k, v);
  const auto g = causal_attention_backward<double>(w, q, k, v, f.out, f.logsumexp);
  expect_gradient("dq", q, loss, g.dq);
  expect_gradient("dk", k, loss, g.dk);
  expect_gradient("dv", v, loss, g.dv);
}

TEST(MultiHeadAttention, IsOneCallPerSequenceAndHead) {
  const Index heads = 3, d = 2, seq = 4, sequences = 2;
  std::mt19937_64 rng(13);
  const Mat<double> q = random_mat(sequences * seq, heads * d, rng),
                    k = random_mat(sequences * seq, heads * d, rng),
                    v = random_mat(sequences * seq, heads * d, rng);
  const auto f = multi_head_causal_attention_forward<double>(q, k, v, heads, seq);
  ASSERT_EQ(f.logsumexp.rows(), sequences * seq);
  ASSERT_EQ(f.logsumexp.cols(), heads);
  for (Index s = 0; s < sequences; ++s) {
    for (Index h = 0; h < heads; ++h) {
      const auto one = causal_attention_forward<double>(q.block(s * seq, h * d, seq, d),
                                                        k.block(s * seq, h * d, seq, d),
                                                        v.block(s * seq, h * d, seq, d));
      EXPECT_EQ(Mat<double>(f.out.block(s * seq, h * d, seq, d)), one.out)
          << "sequence " << s << " head " << h;
      EXPECT_EQ(Vec<double>(f.logsumexp.block(s * seq, h, seq, 1)), one.logsumexp);
    }
  }
  // The second sequence's tokens are not visible to the first's.
  Mat<double> v2 = v;
  v2.bottomRows(seq).setConstant(9.0);
  EXPECT_EQ(Mat<double>(
                multi_head_causal_attention_forward<double>(q, k, v2, heads, seq).out.topRows(seq)),
            Mat<double>(f.out.topRows(seq)));
}

TEST(MultiHeadAttention, BackwardMatchesFiniteDifferences) {
  const Index heads = 2, d = 2, seq = 3;
  std::mt19937_64 rng(14);
  Mat<double> q = random_mat(2 * seq, heads * d, rng), k = random_mat(2 * seq, heads * d, rng),
              v = random_mat(2 * seq, heads * d, rng);
  const Mat<double> w = random_mat(2 * seq, heads * d, rng);
  const auto loss = [&] {
    return weighted_sum(multi_head_causal_attention_forward<double>(q, k, v, heads, seq).out, w);
  };
  const auto f = multi_head_causal_attention_forward<double>(q, k, v, heads, seq);
  const auto g =
      multi_head_causal_attention_backward<double>(w, q, k, v, f.out, f.logsumexp, heads, seq);
  expect_gradient("dq", q, loss, g.dq);
  expect_gradient("dk", k, loss, g.dk);
  expect_gradient("dv", v, loss, g.dv);
}

TEST(Attention, ShapeMismatchesThrowInvalidArgument) {
  const Mat<float> m = Mat<float>::Ones(4, 6);
  EXPECT_THROW(causal_attention_forward<float>(m, Mat<float>::Ones(4, 5), m),
               std::invalid_argument);
  EXPECT_THROW(causal_attention_forward<float>(m, m, Mat<float>::Ones(3, 6)),
               std::invalid_argument);
  EXPECT_THROW(multi_head_causal_attention_forward<float>(m, m, m, 4, 2),
               std::invalid_argument);  // 6 % 4
  EXPECT_THROW(multi_head_causal_attention_forward<float>(m, m, m, 2, 3),
               std::invalid_argument);  // 4 % 3
}

}  // namespace
}  // namespace meshwork::kernels
