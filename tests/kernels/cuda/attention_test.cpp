// The CUDA causal attention (direct forward and backward, and the tiled flash forward)
// against kernels/attention.hpp in double, per (sequence, head), for float and bf16 tensors.
#include "kernels/cuda/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "kernels/attention.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

// Float bounds (bf16 keeps kOutputBound<T>'s output rounding, which dominates): the forward
// sums up to seq ~ 100 exps and products, ~1e-6 measured against double; backward adds
// dS = P (dP - D), which cancels where dP ~ D, so it gets 5x that margin.
template <class T>
constexpr double kForwardBound = std::is_same_v<T, float> ? 2e-5 : kOutputBound<T>;
template <class T>
constexpr double kBackwardBound = std::is_same_v<T, float> ? 5e-5 : kOutputBound<T>;

struct Shape {
  Index heads, seq, dim;
};
// One query, rows within a warp, seq not a multiple of the 32-key tile, head_dim not a
// multiple of 32 and at the flash kernel's limit (128).
constexpr Shape kShapes[] = {{1, 1, 8}, {2, 7, 16}, {3, 45, 40}, {2, 100, 64}, {1, 70, 128}};

// The reference for every (sequence, head) block of [heads * seq, dim] host data.
struct Reference {
  Mat<double> out, dq, dk, dv;
  Vec<double> logsumexp;
};

Reference reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<float>& dout, const std::vector<float>& out_for_backward, const Shape& s) {
  const Index rows = s.heads * s.seq;
  Reference r{Mat<double>(rows, s.dim), Mat<double>(rows, s.dim), Mat<double>(rows, s.dim), Mat<double>(rows, s.dim),
              Vec<double>(rows)};
  const Mat<double> qm = as_mat(q, rows, s.dim), km = as_mat(k, rows, s.dim), vm = as_mat(v, rows, s.dim),
                    dom = as_mat(dout, rows, s.dim), om = as_mat(out_for_backward, rows, s.dim);
  for (Index h = 0; h < s.heads; ++h) {
    const auto block = [&](const Mat<double>& m) -> Mat<double> { return m.middleRows(h * s.seq, s.seq); };
    const auto f = kernels::causal_attention_forward<double>(block(qm), block(km), block(vm));
    r.out.middleRows(h * s.seq, s.seq) = f.out;
    r.logsumexp.segment(h * s.seq, s.seq) = f.logsumexp;
    // Backward from the GPU's own (rounded) out, as the GPU's D_i = rowsum(dout * out) uses it.
    const auto g = kernels::causal_attention_backward<double>(block(dom), block(qm), block(km), block(vm), block(om),
                                                              f.logsumexp);
    r.dq.middleRows(h * s.seq, s.seq) = g.dq;
    r.dk.middleRows(h * s.seq, s.seq) = g.dk;
    r.dv.middleRows(h * s.seq, s.seq) = g.dv;
  }
  return r;
}

template <class T>
class CausalAttention : public ::testing::Test {};
TYPED_TEST_SUITE(CausalAttention, ElementTypes, ElementTypeNames);

TYPED_TEST(CausalAttention, DirectForwardAndBackwardMatchTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(601);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("heads " + std::to_string(s.heads) + " seq " + std::to_string(s.seq) + " dim " + std::to_string(s.dim));
    const auto n = static_cast<std::size_t>(s.heads * s.seq * s.dim);
    const auto rows = static_cast<std::size_t>(s.heads * s.seq);
    // q scaled up so that the softmax is far from uniform (scores of a few units).
    const auto q = rounded_to<T>(random_values(n, rng, -3.0, 3.0));
    const auto k = rounded_to<T>(random_values(n, rng)), v = rounded_to<T>(random_values(n, rng)),
               dout = rounded_to<T>(random_values(n, rng));
    DeviceBuffer<T> q_d = upload<T>(q), k_d = upload<T>(k), v_d = upload<T>(v), dout_d = upload<T>(dout), out_d(n),
                    dq_d(n), dk_d(n), dv_d(n);
    DeviceBuffer<float> lse_d(rows);
    cuda::causal_attention_forward<T>(q_d.data(), k_d.data(), v_d.data(), out_d.data(), lse_d.data(), s.heads, s.seq,
                                      s.dim, nullptr);
    cuda::causal_attention_backward<T>(dout_d.data(), q_d.data(), k_d.data(), v_d.data(), out_d.data(), lse_d.data(),
                                       dq_d.data(), dk_d.data(), dv_d.data(), s.heads, s.seq, s.dim, nullptr);
    const auto out = download(out_d);
    const Reference r = reference(q, k, v, dout, out, s);
    expect_close(out, r.out, kForwardBound<T>, "out");
    expect_close(lse_d.download(), r.logsumexp, kFloatOutputBound, "logsumexp");
    expect_close(download(dq_d), r.dq, kBackwardBound<T>, "dq");
    expect_close(download(dk_d), r.dk, kBackwardBound<T>, "dk");
    expect_close(download(dv_d), r.dv, kBackwardBound<T>, "dv");
  }
}

TYPED_TEST(CausalAttention, FlashForwardMatchesTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(602);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("heads " + std::to_string(s.heads) + " seq " + std::to_string(s.seq) + " dim " + std::to_string(s.dim));
    const auto n = static_cast<std::size_t>(s.heads * s.seq * s.dim);
    const auto q = rounded_to<T>(random_values(n, rng, -3.0, 3.0));
    const auto k = rounded_to<T>(random_values(n, rng)), v = rounded_to<T>(random_values(n, rng));
    DeviceBuffer<T> q_d = upload<T>(q), k_d = upload<T>(k), v_d = upload<T>(v), out_d(n);
    DeviceBuffer<float> lse_d(static_cast<std::size_t>(s.heads * s.seq));
    cuda::flash_attention_forward<T>(q_d.data(), k_d.data(), v_d.data(), out_d.data(), lse_d.data(), s.heads, s.seq,
                                     s.dim, nullptr);
    const Reference r = reference(q, k, v, v, v, s);  // dout, out unused here
    expect_close(download(out_d), r.out, kForwardBound<T>, "flash out");
    expect_close(lse_d.download(), r.logsumexp, kFloatOutputBound, "flash logsumexp");
  }
}

TYPED_TEST(CausalAttention, NaNKeyPoisonsOnlyTheRowsThatSeeIt) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  const Index seq = 40, dim = 8;  // key 33 sits in the second 32-key tile
  const auto n = static_cast<std::size_t>(seq * dim);
  std::vector<float> k(n, 0.25f);
  k[static_cast<std::size_t>(33 * dim + 3)] = std::nanf("");
  DeviceBuffer<T> q_d = upload<T>(std::vector<float>(n, 0.5f)), k_d = upload<T>(k),
                  v_d = upload<T>(std::vector<float>(n, 1.0f)), out_d(n);
  DeviceBuffer<float> lse_d(static_cast<std::size_t>(seq));
  for (const bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "direct");
    if (flash)
      cuda::flash_attention_forward<T>(q_d.data(), k_d.data(), v_d.data(), out_d.data(), lse_d.data(), 1, seq, dim,
                                       nullptr);
    else
      cuda::causal_attention_forward<T>(q_d.data(), k_d.data(), v_d.data(), out_d.data(), lse_d.data(), 1, seq, dim,
                                        nullptr);
    const auto out = download(out_d);
    const auto lse = lse_d.download();
    for (Index i = 0; i < seq; ++i) {
      const bool sees_nan = i >= 33;
      EXPECT_EQ(std::isnan(out[static_cast<std::size_t>(i * dim)]), sees_nan) << "row " << i;
      EXPECT_EQ(std::isnan(lse[static_cast<std::size_t>(i)]), sees_nan) << "row " << i;
    }
  }
}

TEST(CausalAttentionShapes, FlashRejectsHeadDimsBeyondItsRegisters) {
  EXPECT_THROW(cuda::flash_attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 129, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::causal_attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 0, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
