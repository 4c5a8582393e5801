// Ring attention (kernels/context_parallel_attention): the members of a CP group, each with
// its share of the sequence, together compute what one rank computes on the whole sequence.
#include "kernels/context_parallel_attention.hpp"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "tests/kernels/gradient_check.hpp"

namespace meshwork::kernels {
namespace {

// Rows of `full` ([samples * seq, cols]) at `positions` of each sample.
Mat<double> rows_at(const Mat<double>& full, Index seq, const std::vector<Index>& positions) {
  const Index samples = full.rows() / seq;
  Mat<double> out(samples * static_cast<Index>(positions.size()), full.cols());
  for (Index s = 0; s < samples; ++s) {
    for (std::size_t i = 0; i < positions.size(); ++i) out.row(s * static_cast<Index>(positions.size()) + static_cast<Index>(i)) = full.row(s * seq + positions[i]);
  }
  return out;
}

TEST(ContextParallel, LoadBalancedChunksPairAnEarlyWithALateOne) {
  EXPECT_EQ(context_parallel_positions(8, 2, 0), (std::vector<Index>{0, 1, 6, 7}));
  EXPECT_EQ(context_parallel_positions(8, 2, 1), (std::vector<Index>{2, 3, 4, 5}));
  EXPECT_EQ(context_parallel_positions(8, 2, 1, false), (std::vector<Index>{4, 5, 6, 7}));
  EXPECT_EQ(context_parallel_positions(4, 1, 0), (std::vector<Index>{0, 1, 2, 3}));
  EXPECT_THROW(context_parallel_positions(6, 2, 0), std::invalid_argument);  // 6 is not 2 x 2 chunks
  EXPECT_THROW(context_parallel_positions(8, 2, 2), std::invalid_argument);
}

// Every member's queries over every member's blocks, in each member's ring order, give the
// whole sequence's causal attention on that member's rows; each block's K and V gradients
// summed over the members give the whole sequence's. Load-balanced and contiguous chunks.
void check_members_reproduce_one_rank(Index cp, bool load_balance) {
  std::mt19937_64 rng(11);
  const Index samples = 2, seq = 12, heads = 2, d = 3;
  const Mat<double> q = testing::random_mat(samples * seq, heads * d, rng), k = testing::random_mat(samples * seq, heads * d, rng),
                    v = testing::random_mat(samples * seq, heads * d, rng), dout = testing::random_mat(samples * seq, heads * d, rng);
  const auto whole = multi_head_causal_attention_forward<double>(q, k, v, heads, seq);
  const auto whole_grads = multi_head_causal_attention_backward<double>(dout, q, k, v, whole.out, whole.logsumexp, heads, seq);
  std::vector<std::vector<Index>> positions;
  for (Index m = 0; m < cp; ++m) positions.push_back(context_parallel_positions(seq, cp, m, load_balance));
  std::vector<Mat<double>> dk_sum, dv_sum;
  for (Index m = 0; m < cp; ++m) {
    dk_sum.push_back(Mat<double>::Zero(samples * seq / cp, heads * d));
    dv_sum.push_back(Mat<double>::Zero(samples * seq / cp, heads * d));
  }
  for (Index r = 0; r < cp; ++r) {
    std::vector<Mat<double>> kb, vb;
    std::vector<std::vector<Index>> kp;
    std::vector<Index> owner;
    for (Index i = 0; i < cp; ++i) {
      owner.push_back((r - i + cp) % cp);
      kb.push_back(rows_at(k, seq, positions[static_cast<std::size_t>(owner.back())]));
      vb.push_back(rows_at(v, seq, positions[static_cast<std::size_t>(owner.back())]));
      kp.push_back(positions[static_cast<std::size_t>(owner.back())]);
    }
    const auto& mine = positions[static_cast<std::size_t>(r)];
    const Mat<double> qr = rows_at(q, seq, mine), dr = rows_at(dout, seq, mine);
    const auto f = blockwise_causal_attention_forward<double>(qr, mine, kb, vb, kp, heads);
    EXPECT_LT(testing::relative_error(f.out, rows_at(whole.out, seq, mine)), 1e-12) << "member " << r;
    EXPECT_LT(testing::relative_error(f.logsumexp, rows_at(whole.logsumexp, seq, mine)), 1e-12) << "member " << r;
    const auto g = blockwise_causal_attention_backward<double>(dr, qr, mine, kb, vb, kp, f.out, f.logsumexp, heads);
    EXPECT_LT(testing::relative_error(g.dq, rows_at(whole_grads.dq, seq, mine)), 1e-12) << "member " << r;
    for (std::size_t i = 0; i < owner.size(); ++i) {
      dk_sum[static_cast<std::size_t>(owner[i])] += g.dk[i];
      dv_sum[static_cast<std::size_t>(owner[i])] += g.dv[i];
    }
  }
  for (Index m = 0; m < cp; ++m) {
    const auto& at = positions[static_cast<std::size_t>(m)];
    EXPECT_LT(testing::relative_error(dk_sum[static_cast<std::size_t>(m)], rows_at(whole_grads.dk, seq, at)), 1e-12) << "block " << m;
    EXPECT_LT(testing::relative_error(dv_sum[static_cast<std::size_t>(m)], rows_at(whole_grads.dv, seq, at)), 1e-12) << "block " << m;
  }
}

TEST(ContextParallel, MembersTogetherComputeTheWholeSequencesAttention) {
  for (const Index cp : {1, 2, 3}) {
    check_members_reproduce_one_rank(cp, true);
    check_members_reproduce_one_rank(cp, false);
  }
}

// A block that no query of this member may see (all its keys later) changes nothing, and a NaN
// in a visible key reaches the output as the causal kernel's does.
TEST(ContextParallel, MaskedBlocksAreSkippedAndNaNPropagates) {
  std::mt19937_64 rng(5);
  const Index heads = 1, d = 2;
  const std::vector<Index> early{0, 1}, late{2, 3};
  const Mat<double> q = testing::random_mat(2, d, rng), k0 = testing::random_mat(2, d, rng), v0 = testing::random_mat(2, d, rng);
  const Mat<double> k1 = testing::random_mat(2, d, rng), v1 = testing::random_mat(2, d, rng);
  const std::vector<Mat<double>> k_one{k0}, v_one{v0}, k_two{k0, k1}, v_two{v0, v1};
  const std::vector<std::vector<Index>> p_one{early}, p_two{early, late};
  const auto one = blockwise_causal_attention_forward<double>(q, early, k_one, v_one, p_one, heads);
  const auto two = blockwise_causal_attention_forward<double>(q, early, k_two, v_two, p_two, heads);
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.logsumexp, two.logsumexp);
  Mat<double> bad = k0;
  bad(0, 0) = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Mat<double>> k_bad{bad};
  const auto f = blockwise_causal_attention_forward<double>(q, early, k_bad, v_one, p_one, heads);
  EXPECT_TRUE(f.out.array().isNaN().all());
  const std::vector<Mat<double>> k_short{Mat<double>(3, d)};
  EXPECT_THROW(blockwise_causal_attention_forward<double>(q, early, k_short, v_one, p_one, heads), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
