// One bf16 training step of CudaGpt against the CPU's fp32 GptChunk on a small model, both
// initialised from the same seed: the loss, every parameter's gradient and every parameter
// after AdamW agree to bf16 accuracy (AdamW's first step to within 2 lr), on either attention
// path. Skips without a device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "exec/cuda/gpt_cuda.hpp"
#include "exec/gpt.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// ||a - b|| / ||b||, the error of a whole tensor (single elements of a bf16 result may be far
// off where the fp32 value is near 0).
double relative_error(const std::vector<float>& a, const float* b, std::size_t n) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

plan::ModelConfig small_model(bool swiglu) {
  plan::ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;  // GQA
  m.kv_channels = 16;
  m.ffn_hidden_size = 128;
  m.seq_length = 32;
  m.vocab_size = 256;
  m.activation = swiglu ? plan::Activation::swiglu : plan::Activation::gelu;
  m.normalization = swiglu ? plan::Normalization::rmsnorm : plan::Normalization::layernorm;
  m.add_bias_linear = !swiglu;
  m.untie_embeddings_and_output_weights = swiglu;
  // Llama-shaped: RoPE in place of the learned table (gpt_kernels' gpt_rope against kernels/rope).
  m.position_embedding_type = swiglu ? plan::PositionEmbedding::rope : plan::PositionEmbedding::learned_absolute;
  return m;
}

void compare_one_step(bool swiglu, AttentionPath attention = AttentionPath::automatic) {
  const auto m = small_model(swiglu);
  const std::uint64_t seed = 7;
  const kernels::AdamWHyperparams hp{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  Batch batch;
  batch.samples = 2;
  batch.seq = m.seq_length;
  std::mt19937_64 g(3);
  for (std::int64_t i = 0; i < batch.samples * batch.seq; ++i) {
    batch.ids.push_back(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(m.vocab_size)));
    batch.targets.push_back(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(m.vocab_size)));
  }
  LocalGroup tp("tp");
  GptChunk cpu(m, 0, m.num_layers, true, true, seed, TensorParallel{&tp, false});
  (void)cpu.forward(0, batch, Mat(), 1.0);
  (void)cpu.backward(0, Mat());

  CudaGpt gpu(m, seed, hp, true, attention);
  ASSERT_EQ(gpu.specs().size(), cpu.params().size());
  const double loss = gpu.forward_backward(batch, 1.0);
  // automatic keeps the direct kernels below kMaterialisedMinSeq (32 tokens here).
  EXPECT_EQ(gpu.attention_path(), attention == AttentionPath::automatic ? AttentionPath::flash_direct : attention);
  EXPECT_NEAR(loss, cpu.loss_sum(), 2e-2 * cpu.loss_sum());
  for (auto& p : cpu.params()) {
    const auto n = static_cast<std::size_t>(p.grad.size());
    if (p.spec.name.ends_with(".k.bias")) {
      // Zero in exact arithmetic (softmax is invariant to q.b_k, the same for every key): both
      // sides hold rounding noise, bf16's far larger, so the bound is against the key weight's
      // gradient, as --verify floors its comparisons (exec/execute.cpp).
      const auto gb = gpu.grad(p.spec.name);
      const auto gw = gpu.grad(p.spec.name.substr(0, p.spec.name.size() - 4) + "weight");
      double nb = 0, nw = 0;
      for (const float x : gb) nb += static_cast<double>(x) * x;
      for (const float x : gw) nw += static_cast<double>(x) * x;
      EXPECT_LT(std::sqrt(nb), 1e-2 * std::sqrt(nw)) << p.spec.name;
      continue;
    }
    EXPECT_LT(relative_error(gpu.grad(p.spec.name), p.grad.data(), n), 5e-2) << p.spec.name;
  }
  gpu.optimizer_step(1);
  for (auto& p : cpu.params()) {
    // AdamW is elementwise: one parameter at a time is the trainer's flat step.
    const auto n = static_cast<std::size_t>(p.value.size());
    std::vector<float> exp_avg(n, 0.0F), exp_avg_sq(n, 0.0F);
    kernels::adamw_step<float>(std::span<float>(p.value.data(), n), std::span<const float>(p.grad.data(), n), exp_avg, exp_avg_sq, 1, hp);
    // Adam's first step moves each value by lr * g / (|g| + eps) plus the decay: a gradient
    // near 0 may change sign between bf16 and fp32, so values agree to 2 lr, not better.
    const auto after = gpu.param(p.spec.name);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(static_cast<double>(after[i]) - p.value.data()[i]));
    EXPECT_LE(worst, 2.01 * hp.lr) << p.spec.name;
  }
  const auto ms = gpu.op_ms();
  for (const char* c : {"gemm", "attention", "norm", "elementwise", "embedding", "loss", "optimizer"}) EXPECT_GT(ms.count(c), 0U) << c;
}

TEST(CudaGpt, OneBf16StepMatchesTheCpuGeluLayerNormTied) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  compare_one_step(false);
}

TEST(CudaGpt, OneBf16StepMatchesTheCpuSwigluRmsNormUntied) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  compare_one_step(true);
}

// S = Q K^T, the causal softmax and P V as batched GEMMs, with GQA's shared keys and values
// (4 heads in 2 query groups) expanded per head and their gradients summed over the group.
TEST(CudaGpt, OneBf16StepMatchesTheCpuMaterialisedAttention) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  compare_one_step(true, AttentionPath::materialised);
  compare_one_step(false, AttentionPath::materialised);
}

TEST(CudaGpt, AttentionPathNamesRoundTrip) {
  for (const AttentionPath p : {AttentionPath::automatic, AttentionPath::materialised, AttentionPath::flash_direct}) {
    EXPECT_EQ(parse_attention_path(attention_path_name(p)), p);
  }
  EXPECT_THROW((void)parse_attention_path("flash"), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::exec::cuda
