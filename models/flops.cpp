#include "models/flops.hpp"

#include <algorithm>

#include "models/params.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

// A multiply-add is two FLOPs: a GEMM's forward FLOPs per token are twice its weights.
double attention_gemm(const plan::ModelConfig& m) { return 2 * attention_matmul_params(m); }
double mlp_gemm(const plan::ModelConfig& m, std::int64_t ffn) { return 2 * mlp_matmul_params(m, ffn); }

double attention_core(const plan::ModelConfig& m, const FlopsOptions& opt) {
  // Per query token: a heads x s keys x (d_qk for scores + d_v for the weighted sum) x 2.
  double qk = d(m.kv_channels);
  double v = d(m.kv_channels);
  if (m.mla.enabled()) {
    qk = d(m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim);
    v = d(m.mla.v_head_dim);
  }
  const double full = 2 * d(m.seq_length) * d(m.num_attention_heads) * (qk + v);
  return opt.causal_attention ? full / 2 : full;
}

}  // namespace

LayerFlops dense_layer_flops(const plan::ModelConfig& m, const FlopsOptions& opt) {
  return {attention_gemm(m) + mlp_gemm(m, m.ffn_hidden_size), attention_core(m, opt)};
}

LayerFlops moe_layer_flops(const plan::ModelConfig& m, const FlopsOptions& opt) {
  double gemm = attention_gemm(m) + 2 * d(m.hidden_size) * d(m.moe.num_moe_experts);  // router
  gemm += d(m.moe.moe_router_topk) * mlp_gemm(m, m.moe.moe_ffn_hidden_size);
  if (m.moe.moe_shared_expert_intermediate_size > 0) gemm += mlp_gemm(m, m.moe.moe_shared_expert_intermediate_size);
  return {gemm, attention_core(m, opt)};
}

double logits_flops(const plan::ModelConfig& m) { return 2 * d(m.hidden_size) * d(m.vocab_size); }

StepFlops step_flops(const plan::Plan& plan, const FlopsOptions& given) {
  FlopsOptions opt = given;
  opt.causal_attention = opt.causal_attention || plan.training.attention_flops == plan::AttentionFlops::causal;
  const auto& m = plan.model;
  const ParamCounts c = count_params(m);
  const LayerFlops dense = dense_layer_flops(m, opt);
  const LayerFlops moe = moe_layer_flops(m, opt);
  const double layers_fwd = d(c.dense_layers) * dense.total() + d(c.moe_layers) * moe.total();
  const double tokens = d(plan.training.global_batch_size) * d(m.seq_length);
  // Backward costs twice the forward (input and weight gradients): 3x in all (KOR22 §6.1).
  StepFlops f;
  f.model = 3 * tokens * (layers_fwd + logits_flops(m));
  double recomputed = 0;
  switch (plan.training.recompute) {
    case plan::Recompute::none: break;
    case plan::Recompute::selective:
      // What runs again: one forward of the attention core per layer (the op table's recompute
      // op). KOR22 eq. 8 writes 1 + s/(3h), counting it as a forward and a backward; its HFU
      // column follows that convention (selective_eq8_hardware_flops()).
      recomputed = d(c.dense_layers) * dense.attention_core + d(c.moe_layers) * moe.attention_core;
      break;
    case plan::Recompute::full: {
      if (plan.training.recompute_method == plan::RecomputeMethod::uniform) {
        recomputed = layers_fwd;
        break;
      }
      // block: the first recompute_num_layers layers of each model chunk run again.
      const auto chunks = plan::layers_per_chunk(plan);
      const auto firsts = plan::chunk_first_layers(chunks);
      for (std::size_t s = 0; s < chunks.size(); ++s) {
        for (std::size_t ch = 0; ch < chunks[s].size(); ++ch) {
          const std::int64_t first = firsts[s][ch];
          for (std::int64_t k = 0; k < std::min(chunks[s][ch], plan.training.recompute_num_layers); ++k) {
            recomputed += is_moe_layer(m, first + k) ? moe.total() : dense.total();
          }
        }
      }
      break;
    }
  }
  f.hardware = f.model + tokens * recomputed;
  return f;
}

}  // namespace meshwork::models
