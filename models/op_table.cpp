#include "models/op_table.hpp"

#include <algorithm>

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

double act_bytes(const plan::Plan& p) { return activation_bytes(p.training.precision); }

struct Builder {
  const plan::Plan& p;
  std::vector<Op> ops;
  double tokens;      // tokens of one micro-batch on this rank: b s / cp
  double sp_tokens;   // tokens of norms and elementwise ops: / tp with sequence parallelism
  double t;           // tensor-parallel size
  double e;           // bytes per element
  bool fp8 = false;   // the layers' linear GEMMs in FP8 (training.precision fp8)

  // A GEMM and its backward: input gradient [m x n] x [n x k] and weight gradient [k x m] x [m x n],
  // each with the forward's FLOPs. A layer's linear GEMM in FP8 casts its input [m x k] in the
  // forward and its output's gradient [m x n] in the backward (kFp8CastBytesPerElement); the
  // router stays in bf16 (`linear` false), as Megatron with Transformer Engine runs it.
  void gemm(const std::string& name, double m, double n, double k, bool linear = true) {
    const double flops = 2 * m * n * k;
    const double bytes = e * (m * k + k * n + m * n);
    const double cast = fp8 && linear ? kFp8CastBytesPerElement : 0;
    ops.push_back({name, OpKind::gemm, OpPhase::forward, flops, bytes, {m, n, k}, cast * m * k});
    ops.push_back({name, OpKind::gemm, OpPhase::backward_input, flops, bytes, {m, k, n}, cast * m * n});
    ops.push_back({name, OpKind::gemm, OpPhase::backward_weight, flops, bytes, {k, n, m}});
  }

  // Memory-bound op over `elements` values read and written `passes` times; backward twice.
  void elementwise(const std::string& name, OpKind kind, double elements, double passes) {
    const double bytes = e * elements * passes;
    ops.push_back({name, kind, OpPhase::forward, 0, bytes, {}});
    ops.push_back({name, kind, OpPhase::backward_input, 0, 2 * bytes, {}});
  }
};

}  // namespace

bool recomputes_layer(const plan::TrainingConfig& training, std::int64_t index_in_chunk) {
  if (training.recompute != plan::Recompute::full) return false;
  return training.recompute_method == plan::RecomputeMethod::uniform || index_in_chunk < training.recompute_num_layers;
}

std::vector<Op> layer_ops(const plan::Plan& p, bool moe_layer) {
  return layer_ops(p, moe_layer, p.training.recompute == plan::Recompute::full &&
                                     (p.training.recompute_method == plan::RecomputeMethod::uniform ||
                                      p.training.recompute_num_layers > 0));
}

std::vector<Op> layer_ops(const plan::Plan& p, bool moe_layer, bool recomputed) {
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const double cp = d(par.context_parallel_size);
  Builder b{p, {}, d(p.training.micro_batch_size) * d(m.seq_length) / cp, 0, d(par.tensor_model_parallel_size),
            act_bytes(p), p.training.precision == plan::Precision::fp8};
  b.sp_tokens = par.sequence_parallel ? b.tokens / b.t : b.tokens;
  const double h = d(m.hidden_size);
  const double a = d(m.num_attention_heads);

  // Attention block.
  b.elementwise("input_norm", OpKind::norm, b.sp_tokens * h, 2);
  double q_width = a * d(m.kv_channels);
  double kv_width = d(m.num_query_groups) * d(m.kv_channels);
  double d_qk = d(m.kv_channels);
  double d_v = d(m.kv_channels);
  if (m.mla.enabled()) {
    const auto& x = m.mla;
    d_qk = d(x.qk_head_dim + x.qk_pos_emb_head_dim);
    d_v = d(x.v_head_dim);
    if (x.q_lora_rank > 0) {
      // The down-projections are replicated over TP in Megatron-core; counted here as if split,
      // so that a TP group's ops add up to the model's FLOPs (the redundancy is < 2% of a layer).
      b.gemm("q_down", b.tokens, d(x.q_lora_rank) / b.t, h);
      b.gemm("q_up", b.tokens, a * d_qk / b.t, d(x.q_lora_rank));
    } else {
      b.gemm("q", b.tokens, a * d_qk / b.t, h);
    }
    b.gemm("kv_down", b.tokens, d(x.kv_lora_rank + x.qk_pos_emb_head_dim) / b.t, h);
    b.gemm("kv_up", b.tokens, a * (d(x.qk_head_dim) + d_v) / b.t, d(x.kv_lora_rank));
    q_width = a * d_v;
  } else {
    b.gemm("qkv", b.tokens, (q_width + 2 * kv_width) / b.t, h);
  }
  // Q K^T and attention x V: each query of this rank's tokens against all s keys.
  const double heads = a / b.t;
  const double core = 2 * b.tokens * d(m.seq_length) * heads * (d_qk + d_v);
  const double scores = d(p.training.micro_batch_size) * heads * (d(m.seq_length) / cp) * d(m.seq_length);
  double core_bytes = b.e * b.tokens * heads * (2 * d_qk + 2 * d_v);  // read Q, K, V, write O
  // Without flash attention the s x s scores are written, softmaxed, dropped out and read
  // back: about five passes over them (KOR22 §4.1 counts 5as^2b bytes of them stored).
  if (!p.training.flash_attention) core_bytes += 5 * b.e * scores;
  b.ops.push_back({"attention", OpKind::attention, OpPhase::forward, core, core_bytes, {}});
  b.ops.push_back({"attention", OpKind::attention, OpPhase::backward_input, 2 * core, 2 * core_bytes, {}});
  switch (p.training.recompute) {
    case plan::Recompute::selective:
      b.ops.push_back({"attention", OpKind::attention, OpPhase::recompute, core, core_bytes, {}});
      break;
    default: break;
  }
  b.gemm("attention_out", b.tokens, h, q_width / b.t);
  b.elementwise("attention_residual", OpKind::elementwise, b.sp_tokens * h, 3);

  // MLP block.
  b.elementwise("mlp_norm", OpKind::norm, b.sp_tokens * h, 2);
  const bool gated = m.activation == plan::Activation::swiglu;
  auto mlp = [&](const std::string& prefix, double tokens, double ffn) {
    b.gemm(prefix + "_fc1", tokens, (gated ? 2 : 1) * ffn / b.t, h);
    b.elementwise(prefix + "_act", OpKind::elementwise, tokens * ffn / b.t, gated ? 3 : 2);
    b.gemm(prefix + "_fc2", tokens, h, ffn / b.t);
  };
  if (moe_layer) {
    const auto& moe = m.moe;
    b.gemm("router", b.sp_tokens, d(moe.num_moe_experts), h, false);
    // Each rank's experts take, on average, k tokens per token of its EP group's ranks; the
    // hottest rank takes routing_imbalance times that.
    const double routed = b.tokens * d(moe.moe_router_topk) *
                          (moe.capacity_factor > 0 ? std::min(moe.routing_imbalance, std::max(1.0, moe.capacity_factor))
                                                   : moe.routing_imbalance);
    mlp("expert", routed, d(moe.moe_ffn_hidden_size));
    if (moe.moe_shared_expert_intermediate_size > 0) mlp("shared_expert", b.tokens, d(moe.moe_shared_expert_intermediate_size));
  } else {
    mlp("mlp", b.tokens, d(m.ffn_hidden_size));
  }
  b.elementwise("mlp_residual", OpKind::elementwise, b.sp_tokens * h, 3);

  if (p.training.recompute == plan::Recompute::full && recomputed) {
    std::vector<Op> again;
    for (const auto& op : b.ops) {
      if (op.phase == OpPhase::forward) {
        Op r = op;
        r.phase = OpPhase::recompute;
        again.push_back(r);
      }
    }
    b.ops.insert(b.ops.end(), again.begin(), again.end());
  }
  return b.ops;
}

std::vector<Op> first_stage_ops(const plan::Plan& p) {
  const double tokens = d(p.training.micro_batch_size) * d(p.model.seq_length) / d(p.parallelism.context_parallel_size);
  const double e = act_bytes(p);
  const double h = d(p.model.hidden_size);
  return {{"embedding", OpKind::embedding, OpPhase::forward, 0, e * tokens * h * 2, {}},
          {"embedding", OpKind::embedding, OpPhase::backward_weight, 0, e * tokens * h * 2, {}}};
}

std::vector<Op> last_stage_ops(const plan::Plan& p) {
  const double t = d(p.parallelism.tensor_model_parallel_size);
  const double tokens = d(p.training.micro_batch_size) * d(p.model.seq_length) / d(p.parallelism.context_parallel_size);
  const double e = act_bytes(p);
  const double h = d(p.model.hidden_size);
  const double v = d(p.model.vocab_size) / t;
  const double flops = 2 * tokens * h * v;
  const double bytes = e * (tokens * h + h * v + tokens * v);
  // Logits in fp32 for the loss: softmax, then its gradient (Megatron's vocab-parallel cross
  // entropy). Each op with its backward parts after it, as a layer's (backward_order reverses).
  // The final norm's backward moves twice its forward's bytes, as a layer's norms do.
  return {{"final_norm", OpKind::norm, OpPhase::forward, 0, e * tokens * h * 2, {}},
          {"final_norm", OpKind::norm, OpPhase::backward_input, 0, 2 * e * tokens * h * 2, {}},
          {"lm_head", OpKind::gemm, OpPhase::forward, flops, bytes, {tokens, v, h}},
          {"lm_head", OpKind::gemm, OpPhase::backward_input, flops, bytes, {tokens, h, v}},
          {"lm_head", OpKind::gemm, OpPhase::backward_weight, flops, bytes, {h, v, tokens}},
          {"loss", OpKind::loss, OpPhase::forward, 0, 4 * tokens * v * 3, {}},
          {"loss", OpKind::loss, OpPhase::backward_input, 0, 4 * tokens * v * 2, {}}};
}

std::vector<const Op*> backward_order(const std::vector<Op>& ops, bool weights) {
  std::vector<const Op*> out;
  auto find = [&](const std::string& name, OpPhase phase) -> const Op* {
    for (const Op& op : ops) {
      if (op.name == name && op.phase == phase) return &op;
    }
    return nullptr;
  };
  for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
    if (op->phase == OpPhase::backward_input) {
      out.push_back(&*op);
      if (const Op* w = find(op->name, OpPhase::backward_weight); weights && w != nullptr) out.push_back(w);
    } else if (op->phase == OpPhase::backward_weight && weights && find(op->name, OpPhase::backward_input) == nullptr) {
      out.push_back(&*op);
    }
  }
  return out;
}

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::gemm: return "gemm";
    case OpKind::attention: return "attention";
    case OpKind::elementwise: return "elementwise";
    case OpKind::norm: return "norm";
    case OpKind::embedding: return "embedding";
    case OpKind::loss: return "loss";
    case OpKind::optimizer: return "optimizer";
  }
  return "?";
}

std::string_view to_string(OpPhase p) {
  switch (p) {
    case OpPhase::forward: return "forward";
    case OpPhase::backward_input: return "backward_input";
    case OpPhase::backward_weight: return "backward_weight";
    case OpPhase::recompute: return "recompute";
  }
  return "?";
}

}  // namespace meshwork::models
