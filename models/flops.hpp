#pragma once
// FLOPs of a training step. Model FLOPs follow Korthikanti et al. 2022 (arXiv:2205.05198)
// eq. 7 (no recomputation, the full s x s attention matrix), generalised to GQA, SwiGLU, MLA
// and MoE top-k; they are MFU's numerator. Hardware FLOPs add what recomputation repeats
// (Narayanan et al. 2021 eq. 3 for full recompute; Korthikanti eq. 8 for selective): HFU.

#include "plan/plan.hpp"

namespace meshwork::models {

// Forward FLOPs of one token through one layer.
struct LayerFlops {
  double gemm = 0;            // projections, MLP or router + experts (multiply-add = 2 FLOPs)
  double attention_core = 0;  // Q K^T and attention x V

  [[nodiscard]] double total() const { return gemm + attention_core; }
};

struct FlopsOptions {
  // Count only the causal half of Q K^T and attention x V (Megatron-LM HEAD does; the papers
  // and MFU as published count the full matrix). step_flops also takes the plan's
  // training.attention_flops.
  bool causal_attention = false;
};

LayerFlops dense_layer_flops(const plan::ModelConfig& m, const FlopsOptions& opt = {});
LayerFlops moe_layer_flops(const plan::ModelConfig& m, const FlopsOptions& opt = {});
// Forward FLOPs of the LM head (logits) per token: 2 h V.
double logits_flops(const plan::ModelConfig& m);

struct StepFlops {
  double model = 0;     // forward + backward (2x forward), no recomputation
  double hardware = 0;  // plus the forward work that recomputation repeats
};

// For the whole job: global batch x sequence tokens.
StepFlops step_flops(const plan::Plan& plan, const FlopsOptions& opt = {});

}  // namespace meshwork::models
