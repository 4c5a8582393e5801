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
  // router stays in bf16 (`linear` false: no casts, and the 16-bit peak, Op::sixteen_bit), as
  // Megatron with Transformer Engine runs it.
  // `groups`: a grouped GEMM of that many members (an MoE layer's local experts), each
  // [m / groups x k] x [k x n] with weights of its own: `m` rows in all, groups x k x n weights.
  void gemm(std::string_view name, double m, double n, double k, bool linear = true, double groups = 1) {
    const double flops = 2 * m * n * k;
    const double bytes = e * (m * k + groups * k * n + m * n);
    const double cast = fp8 && linear ? kFp8CastBytesPerElement : 0;
    const bool sixteen_bit = fp8 && !linear;
    ops.push_back({name, OpKind::gemm, OpPhase::forward, flops, bytes, {m, n, k}, cast * m * k, groups, sixteen_bit});
    ops.push_back({name, OpKind::gemm, OpPhase::backward_input, flops, bytes, {m, k, n}, cast * m * n, groups, sixteen_bit});
    ops.push_back({name, OpKind::gemm, OpPhase::backward_weight, flops, bytes, {k, n, m}, 0, groups, sixteen_bit});
  }

  // A memory-bound op whose backward moves `backward_bytes` (not twice its forward's).
  void streamed(std::string_view name, double forward_bytes, double backward_bytes) {
    ops.push_back({name, OpKind::elementwise, OpPhase::forward, 0, forward_bytes, {}});
    ops.push_back({name, OpKind::elementwise, OpPhase::backward_input, 0, backward_bytes, {}});
  }

  // Memory-bound op over `elements` values read and written `passes` times; backward twice.
  void elementwise(std::string_view name, OpKind kind, double elements, double passes) {
    const double bytes = e * elements * passes;
    ops.push_back({name, kind, OpPhase::forward, 0, bytes, {}});
    ops.push_back({name, kind, OpPhase::backward_input, 0, 2 * bytes, {}});
  }
};

}  // namespace

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
  b.ops.reserve(64);  // an MoE layer with shared experts and recomputation: about 50
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
  struct MlpNames {
    std::string_view fc1, act, fc2;
  };
  auto mlp = [&](const MlpNames& name, double tokens, double ffn, double groups = 1) {
    b.gemm(name.fc1, tokens, (gated ? 2 : 1) * ffn / b.t, h, true, groups);
    b.elementwise(name.act, OpKind::elementwise, tokens * ffn / b.t, gated ? 3 : 2);
    b.gemm(name.fc2, tokens, h, ffn / b.t, true, groups);
  };
  if (moe_layer) {
    // Megatron-core's MoE layer (TopKRouter, then the all-to-all token dispatcher's permute,
    // the experts, and its unpermute), op by op; with SP each TP rank routes its 1/TP of the
    // tokens. The dispatch and combine between them are models/layer_comm's.
    const auto& moe = m.moe;
    const double experts = d(moe.num_moe_experts);
    const double k = d(moe.moe_router_topk);
    b.gemm("router", b.sp_tokens, experts, h, false);
    // The router's softmax and top-k in fp32 (TopKRouter's scores are computed in float32):
    // read the logits, write the probabilities, read them for the top-k, write each token's k
    // expert indices (8 bytes) and gates (4). Backward: the softmax's gradient reads the
    // probabilities and their gradient and writes the logits'.
    const double router_scores = 4 * b.sp_tokens * experts;
    b.streamed("router_topk", 3 * router_scores + 12 * b.sp_tokens * k, 3 * router_scores);
    // Permute: each of the k copies of a token read and written in its expert's order
    // (moe_utils.permute's index_select); backward, the copies' gradients read and summed back
    // into their token (a scatter-add of as many rows).
    const double copies = b.e * b.sp_tokens * k * h;
    b.streamed("moe_permute", 2 * copies, 2 * copies);
    // Each rank's experts take, on average, k tokens per token of its EP group's ranks; the
    // hottest rank takes routing_imbalance times that. Its local experts run as one grouped
    // GEMM (Op::gemm_groups).
    const double routed = b.tokens * k *
                          (moe.capacity_factor > 0 ? std::min(moe.routing_imbalance, std::max(1.0, moe.capacity_factor))
                                                   : moe.routing_imbalance);
    const double local_experts = experts / d(std::max<std::int64_t>(1, par.expert_model_parallel_size));
    mlp({"expert_fc1", "expert_act", "expert_fc2"}, routed, d(moe.moe_ffn_hidden_size), local_experts);
    if (moe.moe_shared_expert_intermediate_size > 0) mlp({"shared_expert_fc1", "shared_expert_act", "shared_expert_fc2"}, b.tokens, d(moe.moe_shared_expert_intermediate_size));
    // Unpermute: each token's k expert outputs read back into token order, weighted by their
    // gates and summed (moe_utils.unpermute). Backward: the output's gradient read, written
    // once per copy times its gate, and the copies' outputs read again for the gates' gradient.
    const double token_rows = b.e * b.sp_tokens * h;
    b.streamed("moe_unpermute", copies + token_rows, 2 * copies + token_rows);
  } else {
    mlp({"mlp_fc1", "mlp_act", "mlp_fc2"}, b.tokens, d(m.ffn_hidden_size));
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

std::vector<BatchTensor> batch_tensors(const plan::Plan& p, bool first, bool last) {
  // Megatron-LM's get_batch_on_this_tp_rank (megatron/training/utils.py): int64 tokens, labels
  // and position ids, a float32 loss mask and a bool b x 1 x s x s causal mask, each
  // micro_batch_size x seq_length; the first stage takes tokens, the mask and positions, the
  // last labels, the loss mask and the mask, a one-stage pipeline all five; middle stages none.
  const double b = d(p.training.micro_batch_size), s = d(p.model.seq_length);
  const bool mask = p.training.attention_mask_in_batch;
  std::vector<BatchTensor> out;
  out.reserve(5);
  if (first) out.push_back({"tokens", 8 * b * s});
  if (last) out.push_back({"labels", 8 * b * s});
  if (last) out.push_back({"loss_mask", 4 * b * s});
  if ((first || last) && mask) out.push_back({"attention_mask", b * s * s});
  if (first) out.push_back({"position_ids", 8 * b * s});
  return out;
}

Op batch_op(const plan::Plan& p, bool first, bool last) {
  // What the stage's GPU copies from the host: with tp_broadcast TP rank 0 copies all five
  // tensors whatever its stage (get_batch_on_this_tp_rank moves the batch to the GPU before it
  // picks which to broadcast), and the others receive their stage's; with every_rank each GPU
  // copies its stage's alone.
  const bool all = p.training.data_loading == plan::DataLoading::tp_broadcast;
  double bytes = 0;
  for (const BatchTensor& t : batch_tensors(p, first || all, last || all)) bytes += t.bytes;
  return {first && last ? "batch" : first ? "batch_inputs" : "batch_targets", OpKind::data, OpPhase::forward, 0, bytes, {}};
}

std::vector<Op> first_stage_ops(const plan::Plan& p) {
  const double tokens = d(p.training.micro_batch_size) * d(p.model.seq_length) / d(p.parallelism.context_parallel_size);
  const double e = act_bytes(p);
  const double h = d(p.model.hidden_size);
  const bool one_stage = p.parallelism.pipeline_model_parallel_size == 1;
  return {batch_op(p, true, one_stage),
          {"embedding", OpKind::embedding, OpPhase::forward, 0, e * tokens * h * 2, {}},
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
  // The final norm's backward moves twice its forward's bytes, as a layer's norms do. The head
  // runs in 16 bits in an FP8 plan (Op::sixteen_bit).
  const bool fp8 = p.training.precision == plan::Precision::fp8;
  std::vector<Op> ops;
  // A one-stage pipeline loads its batch with the first stage's ops.
  if (p.parallelism.pipeline_model_parallel_size > 1) ops.push_back(batch_op(p, false, true));
  const std::vector<Op> rest = {{"final_norm", OpKind::norm, OpPhase::forward, 0, e * tokens * h * 2, {}},
          {"final_norm", OpKind::norm, OpPhase::backward_input, 0, 2 * e * tokens * h * 2, {}},
          {"lm_head", OpKind::gemm, OpPhase::forward, flops, bytes, {tokens, v, h}, 0, 1, fp8},
          {"lm_head", OpKind::gemm, OpPhase::backward_input, flops, bytes, {tokens, h, v}, 0, 1, fp8},
          {"lm_head", OpKind::gemm, OpPhase::backward_weight, flops, bytes, {h, v, tokens}, 0, 1, fp8},
          {"loss", OpKind::loss, OpPhase::forward, 0, 4 * tokens * v * 3, {}},
          {"loss", OpKind::loss, OpPhase::backward_input, 0, 4 * tokens * v * 2, {}}};
  ops.insert(ops.end(), rest.begin(), rest.end());
  return ops;
}

std::vector<const Op*> backward_order(const std::vector<Op>& ops, bool weights) {
  std::vector<const Op*> out;
  auto find = [&](std::string_view name, OpPhase phase) -> const Op* {
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
    case OpKind::data: return "data";
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
