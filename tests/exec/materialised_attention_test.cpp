// The CUDA backend's materialised attention (cuBLAS products around the causal softmax) against
// kernels/attention.hpp in double, whole and cut into causal row blocks, with the [seq, seq]
// tensors filled with NaN beforehand: a product that read past its block's end, or a softmax
// that left a zero unwritten where a product reads, would spread the NaN. Skips without a
// device; the choice of row blocks is checked everywhere.
#include "exec/cuda/materialised_attention.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::exec::cuda {
namespace {

using namespace kernels::cuda::gpu_test;
using kernels::Index;
using kernels::Mat;
using bf16 = __nv_bfloat16;
using kernels::cuda::DeviceBuffer;

TEST(MaterialisedAttention, RowBlocksHalveWhileBlocksStayLargeAndAligned) {
  EXPECT_EQ(causal_row_blocks(4096), 8);   // 512 rows a block, capped at 8 blocks
  EXPECT_EQ(causal_row_blocks(2048), 8);   // 256 rows
  EXPECT_EQ(causal_row_blocks(1536), 4);   // 384 rows; 8 would leave 192
  EXPECT_EQ(causal_row_blocks(512), 2);
  EXPECT_EQ(causal_row_blocks(256), 1);
  EXPECT_EQ(causal_row_blocks(1000), 1);   // 500 rows is not a multiple of 8
  EXPECT_EQ(causal_row_blocks(7), 1);
}

TEST(MaterialisedAttention, BlocksThatDoNotDivideTheSequenceAreRefused) {
  MESHWORK_REQUIRE_GPU();
  // Refused before any product: the null pointers are never reached.
  Gemm gemm;
  EXPECT_THROW(materialised_attention_forward(gemm, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 60, 8, nullptr, 4),
               std::invalid_argument);  // blocks of 15 rows
  EXPECT_THROW(materialised_attention_backward(gemm, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, 1, 64, 8, nullptr, 3),
               std::invalid_argument);
}

TEST(MaterialisedAttention, CausalBlocksMatchTheCpuAttention) {
  MESHWORK_REQUIRE_GPU();
  const Index bh = 3, seq = 64, dim = 32;
  const auto n = static_cast<std::size_t>(bh * seq * dim), nn = static_cast<std::size_t>(bh * seq * seq);
  std::mt19937_64 rng(601);
  const auto q = rounded_to<bf16>(random_values(n, rng)), k = rounded_to<bf16>(random_values(n, rng)),
             v = rounded_to<bf16>(random_values(n, rng)), dout = rounded_to<bf16>(random_values(n, rng));
  // The references, head by head.
  std::vector<double> out_ref(n), dq_ref(n), dk_ref(n), dv_ref(n);
  for (Index h = 0; h < bh; ++h) {
    const auto part = [&](const std::vector<float>& x) {
      return as_mat(std::vector<float>(x.begin() + h * seq * dim, x.begin() + (h + 1) * seq * dim), seq, dim);
    };
    const auto fwd = kernels::causal_attention_forward<double>(part(q), part(k), part(v));
    const auto grads = kernels::causal_attention_backward<double>(part(dout), part(q), part(k), part(v), fwd.out, fwd.logsumexp);
    const auto put = [&](std::vector<double>& to, const Mat<double>& m) {
      std::memcpy(to.data() + h * seq * dim, m.data(), sizeof(double) * static_cast<std::size_t>(m.size()));
    };
    put(out_ref, fwd.out);
    put(dq_ref, grads.dq);
    put(dk_ref, grads.dk);
    put(dv_ref, grads.dv);
  }
  Gemm gemm;
  for (const Index blocks : {Index{1}, Index{2}, Index{4}, Index{8}}) {
    SCOPED_TRACE("row blocks " + std::to_string(blocks));
    auto q_d = upload<bf16>(q), k_d = upload<bf16>(k), v_d = upload<bf16>(v), dout_d = upload<bf16>(dout);
    DeviceBuffer<bf16> probs(nn), scratch(nn), out(n), dq(n), dk(n), dv(n);
    // 0xFFFF is a bf16 NaN.
    MESHWORK_CUDA_CHECK(cudaMemset(probs.data(), 0xFF, nn * sizeof(bf16)));
    MESHWORK_CUDA_CHECK(cudaMemset(scratch.data(), 0xFF, nn * sizeof(bf16)));
    materialised_attention_forward(gemm, q_d.data(), k_d.data(), v_d.data(), probs.data(), out.data(), bh, seq, dim, nullptr, blocks);
    materialised_attention_backward(gemm, dout_d.data(), q_d.data(), k_d.data(), v_d.data(), probs.data(), scratch.data(), dq.data(),
                                    dk.data(), dv.data(), bh, seq, dim, nullptr, blocks);
    MESHWORK_CUDA_CHECK(cudaDeviceSynchronize());
    // P and dS pass through bf16 between the products: twice an output's rounding.
    expect_close(download(out), out_ref, 2 * kOutputBound<bf16>, "out");
    expect_close(download(dq), dq_ref, 2 * kOutputBound<bf16>, "dq");
    expect_close(download(dk), dk_ref, 2 * kOutputBound<bf16>, "dk");
    expect_close(download(dv), dv_ref, 2 * kOutputBound<bf16>, "dv");
    // Past each row's block end P is left as it was: the products never wrote there.
    const auto p = download(probs);
    const Index t = seq / blocks;
    for (Index i = 0; i < seq; ++i) {
      const Index end = (i / t + 1) * t;
      if (end < seq) {
        EXPECT_TRUE(std::isnan(p[static_cast<std::size_t>(i * seq + end)])) << "P(" << i << ", " << end << ") was written";
      }
      if (end - 1 > i) {
        EXPECT_EQ(p[static_cast<std::size_t>(i * seq + end - 1)], 0.0f) << "masked P(" << i << ", " << end - 1 << ")";
      }
    }
  }
}

}  // namespace
}  // namespace meshwork::exec::cuda
