#include "models/params.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

double attention_params(const plan::ModelConfig& m) {
  double p = attention_matmul_params(m);
  if (m.mla.enabled()) {
    // The latents' RMSNorms (DeepSeek-V2 §2.1.2).
    p += d(m.mla.kv_lora_rank) + (m.mla.q_lora_rank > 0 ? d(m.mla.q_lora_rank) : 0);
  } else if (m.add_bias_linear) {
    const double q_width = d(m.num_attention_heads) * d(m.kv_channels);
    const double kv_width = d(m.num_query_groups) * d(m.kv_channels);
    p += q_width + 2 * kv_width + d(m.hidden_size);
  }
  return p;
}

double norm_params(const plan::ModelConfig& m) {
  // LayerNorm has a scale and a shift, RMSNorm a scale only.
  return m.normalization == plan::Normalization::layernorm ? 2 * d(m.hidden_size) : d(m.hidden_size);
}

}  // namespace

double attention_matmul_params(const plan::ModelConfig& m) {
  const double h = d(m.hidden_size);
  const double a = d(m.num_attention_heads);
  if (m.mla.enabled()) {
    // DeepSeek-V2 (arXiv:2405.04434) §2.1.2: queries through a rank-q_lora latent to
    // a * (qk + rope) heads; keys/values through a rank-kv_lora latent plus a shared rotary key
    // of width rope; values a * v; output a * v -> h.
    const auto& x = m.mla;
    const double qk = d(x.qk_head_dim + x.qk_pos_emb_head_dim);
    const double q = x.q_lora_rank > 0 ? h * d(x.q_lora_rank) + d(x.q_lora_rank) * a * qk : h * a * qk;
    const double kv = h * d(x.kv_lora_rank + x.qk_pos_emb_head_dim) + d(x.kv_lora_rank) * a * d(x.qk_head_dim + x.v_head_dim);
    return q + kv + a * d(x.v_head_dim) * h;
  }
  // Q: h -> a*d; K, V: h -> g*d each (GQA); O: a*d -> h.
  const double q_width = a * d(m.kv_channels);
  const double kv_width = d(m.num_query_groups) * d(m.kv_channels);
  return h * q_width + 2 * h * kv_width + q_width * h;
}

double mlp_matmul_params(const plan::ModelConfig& m, std::int64_t ffn) {
  // gelu: h -> f -> h; swiglu: two h -> f projections (gate and up), f -> h.
  return (m.activation == plan::Activation::swiglu ? 3 : 2) * d(m.hidden_size) * d(ffn);
}

double mlp_params(const plan::ModelConfig& m, std::int64_t ffn) {
  double p = mlp_matmul_params(m, ffn);
  if (m.add_bias_linear) p += (m.activation == plan::Activation::swiglu ? 2 : 1) * d(ffn) + d(m.hidden_size);
  return p;
}

report::Parameters parameter_summary(const plan::ModelConfig& m) {
  const ParamCounts c = count_params(m);
  return {c.total, c.active, c.embedding + c.position + c.lm_head};
}

ParamCounts count_params(const plan::ModelConfig& m) {
  ParamCounts c;
  const double h = d(m.hidden_size);
  c.layer.attention = attention_params(m);
  c.layer.norms = 2 * norm_params(m);
  c.layer.mlp = mlp_params(m, m.ffn_hidden_size);
  if (m.is_moe()) {
    c.moe_layers = m.num_layers - m.moe.first_k_dense_layers;
    c.dense_layers = m.moe.first_k_dense_layers;
    c.layer.router = h * d(m.moe.num_moe_experts);
    c.layer.expert_one = mlp_params(m, m.moe.moe_ffn_hidden_size);
    c.layer.experts = d(m.moe.num_moe_experts) * c.layer.expert_one;
    if (m.moe.moe_shared_expert_intermediate_size > 0) {
      c.layer.shared_expert = mlp_params(m, m.moe.moe_shared_expert_intermediate_size);
    }
  } else {
    c.dense_layers = m.num_layers;
  }
  c.embedding = d(m.vocab_size) * h;
  if (m.position_embedding_type == plan::PositionEmbedding::learned_absolute) c.position = d(m.seq_length) * h;
  c.final_norm = norm_params(m);
  if (m.untie_embeddings_and_output_weights) c.lm_head = d(m.vocab_size) * h;

  const double outside = c.embedding + c.position + c.final_norm + c.lm_head;
  c.total = outside + d(c.dense_layers) * c.dense_layer() + d(c.moe_layers) * c.moe_layer();
  const double active_moe_layer = c.layer.attention + c.layer.norms + c.layer.router + c.layer.shared_expert +
                                  d(m.moe.moe_router_topk) * c.layer.expert_one;
  c.active = outside + d(c.dense_layers) * c.dense_layer() + d(c.moe_layers) * active_moe_layer;
  return c;
}

}  // namespace meshwork::models
