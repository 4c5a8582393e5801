#pragma once
// Parameter counts of a model: per layer kind, embeddings, totals and the parameters a token
// activates (MoE: the routed top-k and the shared experts). Dense GPT (Narayanan et al. 2021
// eq. 2), GQA, SwiGLU, MLA (DeepSeek-V2/V3) and MoE with dense first layers.

#include <cstdint>

#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::models {

struct LayerParams {
  double attention = 0;     // projections (and MLA's latent norms), biases included
  double mlp = 0;           // the dense MLP of a dense layer
  double router = 0;        // MoE layer: the gating matrix
  double experts = 0;       // MoE layer: all routed experts
  double expert_one = 0;    // MoE layer: one routed expert
  double shared_expert = 0; // MoE layer: the shared experts
  double norms = 0;         // the two norms of a layer
};

struct ParamCounts {
  LayerParams layer;
  std::int64_t dense_layers = 0;  // layers with a dense MLP
  std::int64_t moe_layers = 0;
  double embedding = 0;        // V x h
  double position = 0;         // s x h for learned absolute positions
  double final_norm = 0;
  double lm_head = 0;          // V x h when untied, else 0 (shared with the embedding)
  double total = 0;
  double active = 0;           // per token: top-k routed experts instead of all

  [[nodiscard]] double dense_layer() const { return layer.attention + layer.mlp + layer.norms; }
  [[nodiscard]] double moe_layer() const {
    return layer.attention + layer.router + layer.experts + layer.shared_expert + layer.norms;
  }
};

// Weights of the attention projections and of an MLP's GEMMs, without biases or norms: what
// a token multiplies by (FLOPs are twice these).
double attention_matmul_params(const plan::ModelConfig& m);
double mlp_matmul_params(const plan::ModelConfig& m, std::int64_t ffn);
// Parameters of one MLP of width `ffn`: two GEMMs for gelu, three for swiglu.
double mlp_params(const plan::ModelConfig& m, std::int64_t ffn);
ParamCounts count_params(const plan::ModelConfig& m);
// The three figures a Report and `show` print.
report::Parameters parameter_summary(const plan::ModelConfig& m);

// Is layer `index` (0-based) a MoE layer? (Inline: asked of every layer of every stage.)
inline bool is_moe_layer(const plan::ModelConfig& m, std::int64_t index) { return m.is_moe() && index >= m.moe.first_k_dense_layers; }

}  // namespace meshwork::models
