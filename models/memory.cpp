#include "models/memory.hpp"

#include <algorithm>

#include "models/op_table.hpp"
#include "models/params.hpp"
#include "plan/derived.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }
constexpr double kGiB = 1024.0 * 1024 * 1024;

// Runtime memory outside the model: CUDA context, cuBLAS workspaces, NCCL channels and the
// caching allocator's fragmentation. ~1.5 GiB is what PyTorch + NCCL jobs show on H100/A100
// (CUDA context ~0.5 GiB, NCCL buffers ~0.5-1 GiB at scale); an assumption, not a measurement.
constexpr double kRuntimeOverheadBytes = 1.5 * kGiB;
// Megatron-core's DDP gradient bucket: 40M parameters (bucket_size default), double-buffered.
constexpr double kGradBucketParams = 40e6;

}  // namespace

double gradient_bytes(plan::Precision precision) {
  // fp16: 16-bit gradients (ZeRO's 2 + 2 + 12). bf16 and fp8: Megatron-LM keeps fp32 main
  // gradients (arguments.py sets accumulate_allreduce_grads_in_fp32 with --bf16), 6 + 12 bytes.
  return precision == plan::Precision::fp16 ? 2 : 4;
}

ModelStateBytes model_state_bytes_per_param(std::int64_t zero_stage, double shards, plan::Precision precision) {
  // Mixed precision: 16-bit weights, gradients as gradient_bytes(), fp32 master weights + Adam
  // m and v (K = 12). fp32 training: 4-byte weights and gradients, Adam m and v (K = 8).
  const bool fp32 = precision == plan::Precision::fp32;
  const double w = fp32 ? 4 : 2, g = gradient_bytes(precision), k = fp32 ? 8 : 12;
  const double n = std::max(1.0, shards);
  switch (zero_stage) {
    case 0: return {w, g, k};
    case 1: return {w, g, k / n};
    case 2: return {w, g / n, k / n};
    default: return {w / n, g / n, k / n};
  }
}

double layer_activation_bytes(const plan::Plan& p, bool moe_layer) {
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const double t = d(par.tensor_model_parallel_size);
  const double cp = d(par.context_parallel_size);
  const double s = d(m.seq_length) / cp;  // tokens of this rank
  const double b = d(p.training.micro_batch_size);
  const double h = d(m.hidden_size);
  const double a = d(m.num_attention_heads);
  const double e = activation_bytes(p.training.precision);
  const double sbh = s * b * h;

  if (p.training.recompute == plan::Recompute::full) {
    return e * sbh / (par.sequence_parallel ? t : 1);  // only the layer input: 2sbh (KOR22 Table 2)
  }

  // KOR22 §4.1, per layer, in 16-bit units (1 byte for dropout masks):
  //   kept whole without SP: two norm inputs 4sbh, QKV input 2sbh, MLP input 2sbh, two dropout
  //   masks 2sbh = 10sbh; split over TP: Q, K, V, attention output, MLP hidden.
  double replicated = (2 * e) * sbh + e * sbh + e * sbh + 2 * sbh * (e / 2);
  double q = a * d(m.kv_channels), kv = d(m.num_query_groups) * d(m.kv_channels), v_out = q;
  if (m.mla.enabled()) {
    q = a * d(m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim);
    kv = a * d(m.mla.qk_head_dim) + a * d(m.mla.v_head_dim) / 2;  // K and V: counted below as 2 kv
    v_out = a * d(m.mla.v_head_dim);
  }
  double split = e * s * b * (q + 2 * kv) + e * s * b * v_out;  // Q, K, V; attention output (proj input)
  // Attention scores: 5 a s^2 b (softmax 2, dropout mask 1, dropout output 2); none with flash
  // attention or selective recompute (which recomputes them), only the softmax statistics.
  if (!p.training.flash_attention && p.training.recompute == plan::Recompute::none) {
    split += 5 * a * s * d(m.seq_length) * b;
  } else if (p.training.flash_attention) {
    split += 4 * a * s * b;  // fp32 log-sum-exp per query and head
  }
  // MLP: fc1 output and activation output of width f (gelu: 2 x 2sbf = 16sbh at f = 4h);
  // SwiGLU keeps both branches (2f) and the product (f).
  const bool gated = m.activation == plan::Activation::swiglu;
  auto mlp = [&](double tokens, double ffn) { return e * tokens * ffn * (gated ? 3 : 2); };
  if (moe_layer) {
    const double routed = s * b * d(m.moe.moe_router_topk) * m.moe.routing_imbalance;
    split += mlp(routed, d(m.moe.moe_ffn_hidden_size)) + e * routed * h;  // expert inputs (permuted tokens)
    if (m.moe.moe_shared_expert_intermediate_size > 0) split += mlp(s * b, d(m.moe.moe_shared_expert_intermediate_size));
    replicated += 4 * s * b * d(m.moe.num_moe_experts);  // router logits in fp32
  } else {
    split += mlp(s * b, d(m.ffn_hidden_size));
  }
  return split / t + (par.sequence_parallel ? replicated / t : replicated);
}

double in_flight_micro_batches(const plan::Plan& p, std::int64_t stage, std::int64_t micro_batches) {
  const double pp = d(p.parallelism.pipeline_model_parallel_size);
  const double m = d(micro_batches);
  const double i = d(stage);
  // Without a pipeline, gradient accumulation frees each micro-batch's activations after its
  // backward, whatever the schedule is called.
  if (p.parallelism.pipeline_model_parallel_size <= 1) return std::min(m, 1.0);
  switch (p.parallelism.pipeline_schedule) {
    case plan::PipelineSchedule::gpipe: return m;
    case plan::PipelineSchedule::interleaved: {
      // Megatron's interleaved schedule warms up (p - i - 1) * 2 + (v - 1) * p chunks, then
      // holds one more; a chunk is 1/v of the stage (KOR22 eq. 5 factor 1 + (p-1)/(pv) at i = 0).
      const double v = d(p.parallelism.virtual_pipeline_model_parallel_size);
      const double chunks = std::min(m * v, (pp - i - 1) * 2 + (v - 1) * pp + 1);
      return chunks / v;
    }
    case plan::PipelineSchedule::one_f_one_b:
    case plan::PipelineSchedule::zero_bubble:
      return std::min(m, pp - i);
  }
  return m;
}

std::vector<StageMemory> stage_memory(const plan::Plan& p) {
  std::vector<StageMemory> out;
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const auto layers = plan::layers_per_stage(p);
  if (!layers) return out;
  const ParamCounts c = count_params(m);
  const plan::DerivedFigures derived = plan::derive(p);
  const double t = d(par.tensor_model_parallel_size);
  const double ep = d(par.expert_model_parallel_size);
  // Dense parameters are sharded by ZeRO over DP x CP (Megatron's distributed optimizer uses
  // the data-parallel group with context parallelism); expert parameters over expert-DP.
  const double dense_shards = d(par.data_parallel_size) * d(par.context_parallel_size);
  const double expert_shards = d(derived.expert_data_parallel_size);
  const auto dense_state = model_state_bytes_per_param(par.zero_stage, dense_shards, p.training.precision);
  const auto expert_state = model_state_bytes_per_param(par.zero_stage, expert_shards, p.training.precision);
  const double e = activation_bytes(p.training.precision);

  std::int64_t first_layer = 0;
  const std::int64_t pp = par.pipeline_model_parallel_size;
  for (std::int64_t stage = 0; stage < pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    sm.layers = (*layers)[static_cast<std::size_t>(stage)];
    double dense = 0, expert = 0, act_per_mb = 0;
    for (std::int64_t l = first_layer; l < first_layer + sm.layers; ++l) {
      const bool moe = is_moe_layer(m, l);
      if (moe) {
        dense += c.layer.attention + c.layer.norms + c.layer.router + c.layer.shared_expert;
        expert += c.layer.experts;
      } else {
        dense += c.dense_layer();
      }
      act_per_mb += layer_activation_bytes(p, moe);
    }
    first_layer += sm.layers;
    if (stage == 0) dense += c.embedding + c.position;
    if (stage == pp - 1) dense += c.final_norm + (c.lm_head > 0 ? c.lm_head : (pp > 1 ? c.embedding : 0));
    dense /= t;
    expert /= t * ep;
    sm.params = dense + expert;
    sm.weights_bytes = dense * dense_state.weights + expert * expert_state.weights;
    sm.gradients_bytes = dense * dense_state.gradients + expert * expert_state.gradients;
    sm.optimizer_bytes = dense * dense_state.optimizer + expert * expert_state.optimizer;

    sm.in_flight_micro_batches = in_flight_micro_batches(p, stage, derived.micro_batches_per_step);
    const double sbh = d(m.seq_length) / d(par.context_parallel_size) * d(p.training.micro_batch_size) * d(m.hidden_size);
    double extra = 0;
    // KOR22 §4.2: the embedding's dropout output on the first stage, p micro-batches deep, and the
    // output layer's fp32 logits on the last stage (4 s b (h + V) / t).
    if (stage == 0) extra += sm.in_flight_micro_batches * sbh * (e / 2) / t;
    if (stage == pp - 1) extra += 4 * (sbh + sbh / d(m.hidden_size) * d(m.vocab_size)) / t;
    sm.activations_bytes = act_per_mb * sm.in_flight_micro_batches + extra;

    sm.buffers_bytes = kRuntimeOverheadBytes + 2 * kGradBucketParams * 4;
    sm.total_bytes = sm.weights_bytes + sm.gradients_bytes + sm.optimizer_bytes + sm.activations_bytes + sm.buffers_bytes;
    sm.capacity_bytes = p.cluster.gpu.hbm_gib * kGiB;
    out.push_back(sm);
  }
  return out;
}

}  // namespace meshwork::models
