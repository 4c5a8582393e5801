#pragma once
// A GPT training step on one GPU: the model of exec::GptChunk (learned positions or RoPE, LayerNorm or
// RMSNorm, GeLU or SwiGLU, GQA, biases or none, tied or untied head; dense layers only, no
// tensor parallelism) with bf16 activations and weights in the GEMMs (cuBLASLt, fp32
// accumulation), fp32 master parameters, gradients and AdamW state. Its parameters have the
// names, shapes and row-major layout of GptChunk's (exec/params.hpp: embedding_specs,
// layer_specs, head_specs, in that order), so a CPU chunk's values can be copied in and one
// bf16 step compared with the CPU's fp32 step. Device time per op kind (models::OpKind names)
// is measured with events on the compute stream.
//
// Attention runs one of two ways (AttentionPath). flash_direct: kernels/cuda's tiled forward
// (the direct kernel past kFlashMaxHeadDim) and the direct backward, which keep only the
// logsumexp per row but whose backward (one block per query and per key row) is slow at long
// sequences. materialised: the [seq, seq] probabilities P from cuBLAS batched GEMMs and the
// causal softmax kernels (exec/cuda/materialised_attention.hpp), P of every layer kept from
// forward to backward (samples * heads * seq^2 bf16 per layer, 1 GiB for 32 heads of 4096
// tokens) plus one such scratch for backward's dP and dS; nothing is recomputed.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exec/cuda/streams.hpp"
#include "exec/gpt.hpp"
#include "exec/params.hpp"
#include "kernels/adamw.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec::cuda {

// automatic: materialised when seq >= kMaterialisedMinSeq and its memory (layers + 1 tensors of
// samples * heads * seq^2 bf16) fits in the device's free memory less a reserve, else
// flash_direct. Decided when buffers are sized (the first micro-batch, or a new sample count).
enum class AttentionPath : std::uint8_t { automatic, materialised, flash_direct };

// "automatic", "materialised", "flash_direct"; parse_attention_path throws
// std::invalid_argument for any other name.
[[nodiscard]] const char* attention_path_name(AttentionPath p);
[[nodiscard]] AttentionPath parse_attention_path(std::string_view name);

// A chosen threshold, not a measured crossover: short sequences keep the direct kernels, whose
// memory is linear in seq; long ones take the GEMMs, whose P grows as seq^2.
inline constexpr std::int64_t kMaterialisedMinSeq = 512;

class CudaGpt {
 public:
  // The whole model on the current device, parameters initialised as GptChunk's (seed).
  // Throws std::invalid_argument for what it does not run: MoE, heads not divisible by query
  // groups.
  CudaGpt(const plan::ModelConfig& m, std::uint64_t seed, const kernels::AdamWHyperparams& hp, bool timing = true,
          AttentionPath attention = AttentionPath::automatic);
  ~CudaGpt();
  CudaGpt(const CudaGpt&) = delete;
  CudaGpt& operator=(const CudaGpt&) = delete;

  [[nodiscard]] const std::vector<ParamSpec>& specs() const;
  // Row-major rows x cols of the spec, as Param::value holds it; the bf16 copy follows.
  void set_param(const std::string& name, std::span<const float> value);
  [[nodiscard]] std::vector<float> param(const std::string& name) const;
  [[nodiscard]] std::vector<float> grad(const std::string& name) const;

  // Forward and backward of one micro-batch (batch.seq must be the model's seq_length),
  // accumulating parameter gradients of loss_scale * mean loss, as GptChunk::forward and
  // backward do. Returns the micro-batch's mean loss over its tokens (waits for the device).
  double forward_backward(const Batch& batch, double loss_scale);
  // AdamW on every parameter (step 1-based), then the gradients are zeroed.
  void optimizer_step(std::int64_t step);
  void zero_grads();

  // The flat fp32 gradients on the device, flat_size() elements: each parameter's at its
  // offset, zero padding between them (kept zero by the optimizer). Work on them from another
  // stream must be ordered after the compute stream's (events) and before optimizer_step.
  [[nodiscard]] float* grad_data();
  [[nodiscard]] std::int64_t flat_size() const;
  [[nodiscard]] cudaStream_t compute_stream() const;

  // The path attention takes: the constructor's choice, or after the first forward_backward
  // what `automatic` resolved to (materialised or flash_direct).
  [[nodiscard]] AttentionPath attention_path() const;

  // Device milliseconds per op kind (models::to_string(models::OpKind)) since construction; waits for the device.
  [[nodiscard]] std::map<std::string, double, std::less<>> op_ms();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshwork::exec::cuda
