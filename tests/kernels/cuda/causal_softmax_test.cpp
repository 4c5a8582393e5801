// The CUDA causal softmax (the fast path's middle step) against the softmax definition in
// double, and, composed with host GEMMs as the backend composes it with cuBLAS, against
// kernels/attention.hpp.
#include "kernels/cuda/causal_softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "kernels/attention.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

// Row i of one [seq, seq] score matrix: P_ij = exp(scale s_ij) / sum_{k <= i} exp(scale s_ik)
// for j <= i (Vaswani et al. 2017, eq. 1, with the causal mask), 0 above the diagonal.
Mat<double> causal_softmax_reference(const Mat<double>& s, double scale) {
  Mat<double> p = Mat<double>::Zero(s.rows(), s.cols());
  for (Index i = 0; i < s.rows(); ++i) {
    const double m = (scale * s.row(i).head(i + 1)).maxCoeff();
    double sum = 0.0;
    for (Index j = 0; j <= i; ++j) sum += std::exp(scale * s(i, j) - m);
    for (Index j = 0; j <= i; ++j) p(i, j) = std::exp(scale * s(i, j) - m) / sum;
  }
  return p;
}

// dS = scale * P * (dP - rowsum(dP * P)) below the diagonal, 0 above.
Mat<double> causal_softmax_backward_reference(const Mat<double>& dp, const Mat<double>& p, double scale) {
  Mat<double> ds = Mat<double>::Zero(p.rows(), p.cols());
  for (Index i = 0; i < p.rows(); ++i) {
    const double d = (dp.row(i).head(i + 1).array() * p.row(i).head(i + 1).array()).sum();
    for (Index j = 0; j <= i; ++j) ds(i, j) = scale * p(i, j) * (dp(i, j) - d);
  }
  return ds;
}

template <class T>
class CausalSoftmax : public ::testing::Test {};
TYPED_TEST_SUITE(CausalSoftmax, ElementTypes, ElementTypeNames);

TYPED_TEST(CausalSoftmax, MatchesTheDefinitionAndZeroesTheMask) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(501);
  // The warp-per-row kernels (seq not a multiple of 8, and every fp32 shape), then bf16's
  // block-per-row kernels with 1, 1 (a partial last vector per row), 2, 4 and 8 vectors per thread.
  for (const auto& [batch, seq] :
       {std::pair<Index, Index>{1, 1}, {3, 5}, {2, 33}, {4, 100}, {2, 8}, {3, 64}, {1, 1000}, {1, 1032}, {1, 2056}, {1, 4104}}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + " seq " + std::to_string(seq));
    const auto n = static_cast<std::size_t>(batch * seq * seq);
    const float scale = 0.125f;  // 1/sqrt(64)
    const auto scores = rounded_to<T>(random_values(n, rng, -20.0, 20.0));
    const auto dprobs = rounded_to<T>(random_values(n, rng));
    DeviceBuffer<T> scores_d = upload<T>(scores), dprobs_d = upload<T>(dprobs), probs_d(n), dscores_d(n);
    cuda::causal_softmax_forward<T>(scores_d.data(), probs_d.data(), batch, seq, scale, nullptr);
    // The backward reads the GPU's own (rounded) P, so the reference takes that P too.
    cuda::causal_softmax_backward<T>(dprobs_d.data(), probs_d.data(), dscores_d.data(), batch, seq, scale, nullptr);
    const auto probs = download(probs_d);
    const auto dscores = download(dscores_d);
    const Mat<double> all_scores = as_mat(scores, batch * seq, seq), all_dprobs = as_mat(dprobs, batch * seq, seq);
    const Mat<double> gpu_probs = as_mat(probs, batch * seq, seq);
    Mat<double> p_ref(batch * seq, seq), ds_ref(batch * seq, seq);
    for (Index b = 0; b < batch; ++b) {
      p_ref.middleRows(b * seq, seq) = causal_softmax_reference(all_scores.middleRows(b * seq, seq), scale);
      ds_ref.middleRows(b * seq, seq) = causal_softmax_backward_reference(all_dprobs.middleRows(b * seq, seq),
                                                                          gpu_probs.middleRows(b * seq, seq), scale);
    }
    // Row sums of up to 4,104 exps: fp32 within the float bound; bf16 by its output rounding.
    expect_close(probs, p_ref, kOutputBound<T>, "probs");
    expect_close(dscores, ds_ref, kOutputBound<T>, "dscores");
    for (Index r = 0; r < batch * seq; ++r)
      for (Index j = r % seq + 1; j < seq; ++j) {
        EXPECT_EQ(probs[static_cast<std::size_t>(r * seq + j)], 0.0f) << "masked P(" << r << ", " << j << ")";
        EXPECT_EQ(dscores[static_cast<std::size_t>(r * seq + j)], 0.0f) << "masked dS(" << r << ", " << j << ")";
      }
  }
}

// The fast path as the backend runs it, S = Q K^T -> softmax -> O = P V and back, with host
// GEMMs in double standing in for cuBLAS: O, dQ and dK equal kernels/attention.hpp's.
TEST(CausalSoftmaxFastPath, ComposesToTheCpuAttention) {
  MESHWORK_REQUIRE_GPU();
  std::mt19937_64 rng(502);
  const Index seq = 45, dim = 24;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const Mat<double> q = as_mat(random_values(seq * dim, rng), seq, dim), k = as_mat(random_values(seq * dim, rng), seq, dim),
                    v = as_mat(random_values(seq * dim, rng), seq, dim), dout = as_mat(random_values(seq * dim, rng), seq, dim);
  const auto to_floats = [](const Mat<double>& m) {
    std::vector<float> f(static_cast<std::size_t>(m.size()));
    for (Index i = 0; i < m.size(); ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(m.data()[i]);
    return f;
  };
  const Mat<double> s = q * k.transpose();
  DeviceBuffer<float> s_d = upload<float>(to_floats(s)), p_d(static_cast<std::size_t>(seq * seq));
  cuda::causal_softmax_forward<float>(s_d.data(), p_d.data(), 1, seq, static_cast<float>(scale), nullptr);
  const Mat<double> p = as_mat(p_d.download(), seq, seq);
  const auto reference = kernels::causal_attention_forward<double>(q, k, v);
  // O = P V from fp32 P: P's fp32 error (~1e-7 relative) passes straight through.
  expect_close(to_floats(p * v), reference.out, kFloatOutputBound, "out = P V");

  const Mat<double> dp = dout * v.transpose();
  DeviceBuffer<float> dp_d = upload<float>(to_floats(dp)), ds_d(static_cast<std::size_t>(seq * seq));
  cuda::causal_softmax_backward<float>(dp_d.data(), p_d.data(), ds_d.data(), 1, seq, static_cast<float>(scale),
                                       nullptr);
  const Mat<double> ds = as_mat(ds_d.download(), seq, seq);  // scale already applied
  const auto grads = kernels::causal_attention_backward<double>(dout, q, k, v, reference.out, reference.logsumexp);
  // dS = P (dP - D) cancels where dP ~ D: allow 5x the float bound.
  expect_close(to_floats(ds * k), grads.dq, 5 * kFloatOutputBound, "dq = dS K");
  expect_close(to_floats(ds.transpose() * q), grads.dk, 5 * kFloatOutputBound, "dk = dS^T Q");
}

// With block_rows (the causal GEMMs' blocks), row i is read to its diagonal and written to its
// block's end, and nothing past that: scores past the block end are NaN (they would poison a
// row that read them) and the output there keeps what it held.
TYPED_TEST(CausalSoftmax, BlockRowsWriteToTheBlockEndOnly) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(503);
  // seq 60, blocks of 20: the warp-per-row kernels; seq 64, blocks of 16: bf16's block-per-row.
  for (const auto& [seq, block] : {std::pair<Index, Index>{60, 20}, {64, 16}}) {
    SCOPED_TRACE("seq " + std::to_string(seq) + " block_rows " + std::to_string(block));
    const auto n = static_cast<std::size_t>(seq * seq);
    const float scale = 0.25f, sentinel = 7.0f;
    auto scores = rounded_to<T>(random_values(n, rng, -4.0, 4.0));
    const auto dprobs = rounded_to<T>(random_values(n, rng));
    for (Index i = 0; i < seq; ++i)
      for (Index j = (i / block + 1) * block; j < seq; ++j) scores[static_cast<std::size_t>(i * seq + j)] = std::nanf("");
    const std::vector<float> filled(n, sentinel);
    DeviceBuffer<T> scores_d = upload<T>(scores), dprobs_d = upload<T>(dprobs), probs_d = upload<T>(filled),
                    dscores_d = upload<T>(filled);
    cuda::causal_softmax_forward<T>(scores_d.data(), probs_d.data(), 1, seq, scale, nullptr, block);
    cuda::causal_softmax_backward<T>(dprobs_d.data(), probs_d.data(), dscores_d.data(), 1, seq, scale, nullptr, block);
    const auto probs = download(probs_d), dscores = download(dscores_d);
    Mat<double> s = as_mat(scores, seq, seq);
    for (Index i = 0; i < seq; ++i)
      for (Index j = i + 1; j < seq; ++j) s(i, j) = 0.0;  // masked: the reference reads none of them
    const Mat<double> p_ref = causal_softmax_reference(s, scale);
    // The backward reads the GPU's own P at j <= i only.
    const Mat<double> ds_ref = causal_softmax_backward_reference(as_mat(dprobs, seq, seq), as_mat(probs, seq, seq), scale);
    for (Index i = 0; i < seq; ++i) {
      const Index end = (i / block + 1) * block;
      for (Index j = 0; j < seq; ++j) {
        const auto at = static_cast<std::size_t>(i * seq + j);
        if (j >= end) {
          EXPECT_EQ(probs[at], sentinel) << "P(" << i << ", " << j << ") past the block end was written";
          EXPECT_EQ(dscores[at], sentinel) << "dS(" << i << ", " << j << ") past the block end was written";
        } else if (j > i) {
          EXPECT_EQ(probs[at], 0.0f) << "masked P(" << i << ", " << j << ")";
          EXPECT_EQ(dscores[at], 0.0f) << "masked dS(" << i << ", " << j << ")";
        } else {
          EXPECT_NEAR(probs[at], p_ref(i, j), 1e-2 * std::abs(p_ref(i, j)) + 1e-6) << "P(" << i << ", " << j << ")";
          EXPECT_NEAR(dscores[at], ds_ref(i, j), 2e-2 * std::abs(ds_ref(i, j)) + 1e-4) << "dS(" << i << ", " << j << ")";
        }
      }
    }
  }
}

TYPED_TEST(CausalSoftmax, NaNScorePoisonsItsRowOnly) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  // seq 4: the warp-per-row kernel; seq 16: bf16's block-per-row kernel, whose masked columns
  // share a 16-byte vector with visible ones.
  for (const Index seq : {Index{4}, Index{16}}) {
    SCOPED_TRACE("seq " + std::to_string(seq));
    std::vector<float> scores(static_cast<std::size_t>(seq * seq), 0.25f);
    scores[static_cast<std::size_t>(2 * seq + 1)] = std::nanf("");  // visible from row 2
    scores[static_cast<std::size_t>(0 * seq + 3)] = std::nanf("");  // masked in row 0: never read
    DeviceBuffer<T> scores_d = upload<T>(scores), probs_d(scores.size());
    cuda::causal_softmax_forward<T>(scores_d.data(), probs_d.data(), 1, seq, 1.0f, nullptr);
    const auto p = download(probs_d);
    EXPECT_EQ(p[0], 1.0f);
    for (Index j = 0; j <= 2; ++j) EXPECT_TRUE(std::isnan(p[static_cast<std::size_t>(2 * seq + j)])) << j;
    for (Index j = 3; j < seq; ++j) EXPECT_EQ(p[static_cast<std::size_t>(2 * seq + j)], 0.0f) << "masked, row 2, " << j;
    for (Index j = 0; j <= 3; ++j) EXPECT_FALSE(std::isnan(p[static_cast<std::size_t>(3 * seq + j)])) << j;
  }
}

}  // namespace
}  // namespace meshwork::kernels::cuda
