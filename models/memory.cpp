#include "models/memory.hpp"

#include <algorithm>

#include "models/layer_comm.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "models/params.hpp"
#include "plan/derived.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }
constexpr double kGiB = 1024.0 * 1024 * 1024;

// Runtime memory outside the model: CUDA context, cuBLAS workspaces and NCCL's channel buffers.
// ~1.5 GiB is what PyTorch + NCCL jobs show on H100/A100 (CUDA context ~0.5 GiB, NCCL buffers
// ~0.5-1 GiB at scale); an assumption, not a measurement. The allocator's fragmentation is the
// headroom's (memory.hpp), not this term's.
constexpr double kRuntimeOverheadBytes = 1.5 * kGiB;

// Megatron-core's gradient bucket, max(40M, 1M x DP) parameters
// (megatron/core/distributed/distributed_data_parallel.py; the Program's buckets are the same).

}  // namespace

double runtime_overhead_bytes() { return kRuntimeOverheadBytes; }

double gradient_bytes(const plan::TrainingConfig& training) {
  // fp16: 16-bit gradients (ZeRO's 2 + 2 + 12). bf16 and fp8: Megatron-LM keeps fp32 main
  // gradients (arguments.py sets accumulate_allreduce_grads_in_fp32 with --bf16), 6 + 12 bytes,
  // unless they are reduced in bf16 (--grad-reduce-in-bf16: the DDP buffer in bf16).
  if (training.precision == plan::Precision::fp16) return 2;
  return training.grad_reduce_in_bf16 && training.precision != plan::Precision::fp32 ? 2 : 4;
}

double state_bytes(plan::Precision dtype) {
  switch (dtype) {
    case plan::Precision::fp32: return 4;
    case plan::Precision::fp8: return 1;
    default: return 2;
  }
}

double optimizer_state_bytes_per_param(const plan::TrainingConfig& training) {
  const auto& st = training.optimizer_states;
  double master = 0;  // fp32 training updates its weights in place
  if (training.precision != plan::Precision::fp32) {
    switch (st.master_weights) {
      case plan::MasterWeights::fp32: master = 4; break;
      case plan::MasterWeights::fp16:
      case plan::MasterWeights::remainders: master = 2; break;  // an fp16 copy, or an int16 remainder
      case plan::MasterWeights::none: master = 0; break;
    }
  }
  return master + state_bytes(st.exp_avg) + state_bytes(st.exp_avg_sq);
}

ModelStateBytes model_state_bytes_per_param(std::int64_t zero_stage, double shards, const plan::TrainingConfig& training) {
  // Mixed precision: 16-bit weights, gradients as gradient_bytes(), the optimizer's master
  // weights and Adam m and v (K = 12 with fp32 states, ZeRO's). fp32 training: 4-byte weights
  // and gradients, Adam m and v (K = 8).
  const bool fp32 = training.precision == plan::Precision::fp32;
  const double w = fp32 ? 4 : 2, g = gradient_bytes(training), k = optimizer_state_bytes_per_param(training);
  const double n = std::max(1.0, shards);
  switch (zero_stage) {
    case 0: return {w, g, k};
    case 1: return {w, g, k / n};
    case 2: return {w, g / n, k / n};
    default: return {w / n, g / n, k / n};
  }
}

double layer_activation_bytes(const plan::Plan& p, bool moe_layer) {
  return layer_activation_bytes(p, moe_layer, p.training.recompute == plan::Recompute::full);
}

double layer_activation_bytes(const plan::Plan& p, bool moe_layer, bool recomputed) {
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

  if (recomputed && p.training.recompute == plan::Recompute::full) {
    return e * sbh / (par.sequence_parallel ? t : 1);  // only the layer input: 2sbh (KOR22 Table 2)
  }

  // KOR22 §4.1, per layer, in 16-bit units (1 byte for dropout masks):
  //   kept whole without SP: two norm inputs 4sbh, QKV input 2sbh, MLP input 2sbh, and with
  //   dropout its two masks after attention and MLP 2sbh (10sbh in all); split over TP: Q, K,
  //   V, attention output, MLP hidden. Without dropout (Llama and most decoders since) no mask
  //   is stored.
  const double hidden_masks = m.hidden_dropout > 0 ? 2 * sbh * (e / 2) : 0;
  double replicated = (2 * e) * sbh + e * sbh + e * sbh + hidden_masks;
  double q = a * d(m.kv_channels), kv = d(m.num_query_groups) * d(m.kv_channels), v_out = q;
  if (m.mla.enabled()) {
    q = a * d(m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim);
    kv = a * d(m.mla.qk_head_dim) + a * d(m.mla.v_head_dim) / 2;  // K and V: counted below as 2 kv
    v_out = a * d(m.mla.v_head_dim);
  }
  double split = e * s * b * (q + 2 * kv) + e * s * b * v_out;  // Q, K, V; attention output (proj input)
  // Attention scores unfused: the softmax output 2as^2b and, with attention dropout, its mask
  // as^2b and output 2as^2b (KOR22's 5as^2b). None with flash attention or selective
  // recompute (which recomputes them); flash keeps only the softmax statistics.
  if (!p.training.flash_attention && p.training.recompute != plan::Recompute::selective) {
    split += (m.attention_dropout > 0 ? 5 : 2) * a * s * d(m.seq_length) * b;
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

std::int64_t peak_chunks_in_flight(const plan::Plan& p, std::int64_t stage, std::int64_t micro_batches) {
  const std::int64_t pp = p.parallelism.pipeline_model_parallel_size;
  const std::int64_t m = micro_batches;
  // Without a pipeline, gradient accumulation frees each micro-batch's activations after its
  // backward, whatever the schedule is called.
  if (pp <= 1) return std::min<std::int64_t>(m, 1);
  // The schedule's own count (models/schedules.cpp), which the Program's checker holds it to.
  return in_flight_bound(p.parallelism.pipeline_schedule, pp, stage, m, p.parallelism.virtual_pipeline_model_parallel_size);
}

double in_flight_micro_batches(const plan::Plan& p, std::int64_t stage, std::int64_t micro_batches) {
  const bool interleaved = p.parallelism.pipeline_schedule == plan::PipelineSchedule::interleaved &&
                           p.parallelism.pipeline_model_parallel_size > 1;
  const double v = interleaved ? d(p.parallelism.virtual_pipeline_model_parallel_size) : 1;
  return d(peak_chunks_in_flight(p, stage, micro_batches)) / v;
}

namespace {

// The activation bytes a stage holds at its peak: each model chunk's bytes per micro-batch
// times the chunk's micro-batches in flight. When the chunks differ (uneven ends, layouts),
// the stage's schedule is replayed: a forward adds its chunk's bytes, a backward (the input
// gradient, for zero-bubble) frees them.
double peak_in_flight_bytes(const plan::Plan& p, std::int64_t stage, std::int64_t micro_batches,
                            const std::vector<double>& chunk_bytes) {
  const bool equal = std::all_of(chunk_bytes.begin(), chunk_bytes.end(), [&](double b) { return b == chunk_bytes.front(); });
  if (equal) return d(peak_chunks_in_flight(p, stage, micro_batches)) * chunk_bytes.front();
  const auto& par = p.parallelism;
  const auto items = stage_schedule(par.pipeline_schedule, par.pipeline_model_parallel_size, stage, micro_batches,
                                    static_cast<std::int64_t>(chunk_bytes.size()));
  double now = 0, peak = 0;
  for (const auto& it : items) {
    const double b = chunk_bytes[static_cast<std::size_t>(it.chunk)];
    if (it.pass == Pass::forward) {
      now += b;
      peak = std::max(peak, now);
    } else if (it.pass != Pass::backward_weight) {
      now -= b;
    }
  }
  return peak;
}

}  // namespace

namespace {

// The kept gradient buffer of `dense` and `expert` held parameters at their states' bytes.
double buffer_bytes(double dense, double expert, const ModelStateBytes& dense_state, const ModelStateBytes& expert_state) {
  return dense * dense_state.gradients + expert * expert_state.gradients;
}

}  // namespace

double gradient_buffer_bytes(const plan::Plan& p, double dense, double expert) {
  const auto& par = p.parallelism;
  const auto dense_state = model_state_bytes_per_param(par.zero_stage, d(dp_groups(p, false).shard_size), p.training);
  const auto expert_state = model_state_bytes_per_param(par.zero_stage, d(dp_groups(p, true).shard_size), p.training);
  return buffer_bytes(dense, expert, dense_state, expert_state);
}

std::vector<StageMemory> stage_memory(const plan::Plan& p) {
  const auto chunks = plan::layers_per_chunk(p);
  if (chunks.empty()) return {};
  return stage_memory(p, chunks, plan::chunk_first_layers(chunks), plan::micro_batches_per_step(p));
}

std::vector<StageMemory> stage_memory(const plan::Plan& p, const std::vector<std::vector<std::int64_t>>& chunks,
                                      const std::vector<std::vector<std::int64_t>>& firsts, std::int64_t micro_batches) {
  std::vector<StageMemory> out;
  if (chunks.empty()) return out;
  out.reserve(chunks.size());
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const ParamCounts c = count_params(m);
  const double t = d(par.tensor_model_parallel_size);
  const double ep = d(par.expert_model_parallel_size);
  // Dense parameters are sharded by ZeRO over DP x CP (Megatron's distributed optimizer uses
  // the data-parallel group with context parallelism), expert parameters over expert-DP, or
  // over one distributed-optimizer instance of each (models::dp_groups).
  const double dense_shards = d(dp_groups(p, false).shard_size);
  const double expert_shards = d(dp_groups(p, true).shard_size);
  const auto dense_state = model_state_bytes_per_param(par.zero_stage, dense_shards, p.training);
  const auto expert_state = model_state_bytes_per_param(par.zero_stage, expert_shards, p.training);
  const double e = activation_bytes(p.training.precision);
  const double w_bytes = p.training.precision == plan::Precision::fp32 ? 4 : 2;
  const bool full = p.training.recompute == plan::Recompute::full;
  const bool uniform = p.training.recompute_method == plan::RecomputeMethod::uniform;
  const std::int64_t group = std::max<std::int64_t>(1, p.training.recompute_num_layers);

  // A layer's activations depend only on its kind ([moe][recomputed]): computed once, not per
  // layer of every stage.
  double layer_bytes[2][2];
  for (int moe = 0; moe < 2; ++moe) {
    for (int rec = 0; rec < 2; ++rec) layer_bytes[moe][rec] = moe == 1 && !m.is_moe() ? 0 : layer_activation_bytes(p, moe == 1, rec == 1);
  }

  // A layer's dense parameters, and those a GPU holds, by kind ([moe]).
  const double kind_dense[2] = {c.dense_layer(), c.layer.attention + c.layer.norms + c.layer.router + c.layer.shared_expert};
  const double kind_params[2] = {c.dense_layer() / t, kind_dense[1] / t + c.layer.experts / (t * ep)};

  const std::int64_t pp = par.pipeline_model_parallel_size;
  std::vector<double> chunk_bytes;  // per chunk of the stage, a micro-batch's activations
  for (std::int64_t stage = 0; stage < pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    double dense = 0, expert = 0, largest_layer = 0, transient_act = 0;
    chunk_bytes.clear();
    const auto& stage_chunks = chunks[static_cast<std::size_t>(stage)];
    for (std::size_t ch = 0; ch < stage_chunks.size(); ++ch) {
      const std::int64_t first = firsts[static_cast<std::size_t>(stage)][ch];
      const std::int64_t n = stage_chunks[ch];
      sm.layers += n;
      double bytes = 0;
      double group_full = 0;  // full activations of the recomputed group being backpropagated
      // k modulo the recomputed group, counted (a division a layer was a third of this
      // function's time, issue 18)
      std::int64_t k_in_group = 0;
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t k_mod_group = k_in_group;
        k_in_group = k_in_group + 1 == group ? 0 : k_in_group + 1;
        const bool moe = is_moe_layer(m, first + k);
        dense += kind_dense[moe];
        if (moe) expert += c.layer.experts;
        largest_layer = std::max(largest_layer, kind_params[moe]);
        const bool recomputed = recomputes_layer(p.training, k);
        if (!recomputed) {
          bytes += layer_bytes[moe][0];
          continue;
        }
        // uniform: one checkpoint (the group's input) per group of recompute_num_layers
        // layers; block: one per recomputed layer. During its backward a group's full
        // activations exist for one micro-batch.
        const std::int64_t in_group = uniform ? k_mod_group : 0;
        if (in_group == 0) bytes += layer_bytes[moe][1];
        if (in_group == 0) group_full = 0;
        group_full += layer_bytes[moe][0];
        transient_act = std::max(transient_act, group_full);
      }
      chunk_bytes.push_back(bytes);
    }
    if (stage == 0) dense += c.embedding + c.position;
    if (stage == pp - 1) dense += c.final_norm + (c.lm_head > 0 ? c.lm_head : (pp > 1 ? c.embedding : 0));
    dense /= t;
    expert /= t * ep;
    sm.params = dense + expert;
    sm.weights_bytes = dense * dense_state.weights + expert * expert_state.weights;
    sm.gradients_bytes = buffer_bytes(dense, expert, dense_state, expert_state);
    sm.optimizer_bytes = dense * dense_state.optimizer + expert * expert_state.optimizer;
    // ZeRO-3 (FSDP) gathers a layer's parameters before each use and frees them after (reshard
    // after forward, FSDP's default): the layer in use and the one prefetched (FSDP prefetches
    // one module ahead and its rate limiter allows two all-gathers in flight).
    if (par.zero_stage >= 3 && dense_shards > 1) sm.weights_bytes += 2 * largest_layer * w_bytes;
    // ZeRO 2 and 3 keep only a shard of the gradients: each bucket is computed whole and
    // reduce-scattered, one filling while the one before it reduces. ZeRO 0 and 1 reduce in
    // buckets that are views of the gradient buffer (Megatron-core's ParamAndGradBuffer): no
    // memory of their own.
    if (par.zero_stage >= 2 && dense_shards > 1) {
      sm.gradients_bytes += 2 * std::min(grad_bucket_params(p), sm.params) * gradient_bytes(p.training);
    }

    sm.in_flight_micro_batches = in_flight_micro_batches(p, stage, micro_batches);
    double act = peak_in_flight_bytes(p, stage, micro_batches, chunk_bytes);
    if (full) act += transient_act;
    const double sbh = d(m.seq_length) / d(par.context_parallel_size) * d(p.training.micro_batch_size) * d(m.hidden_size);
    // KOR22 §4.2: the embedding's dropout mask on the first stage, for each micro-batch in
    // flight (none without dropout), and the output layer's fp32 logits on the last stage
    // (4 s b (h + V) / t).
    if (stage == 0 && m.hidden_dropout > 0) act += sm.in_flight_micro_batches * sbh * (e / 2) / t;
    if (stage == pp - 1) act += 4 * (sbh + sbh / d(m.hidden_size) * d(m.vocab_size)) / t;
    sm.activations_bytes = act;

    sm.buffers_bytes = kRuntimeOverheadBytes;
    sm.total_bytes = sm.weights_bytes + sm.gradients_bytes + sm.optimizer_bytes + sm.activations_bytes + sm.buffers_bytes;
    sm.capacity_bytes = p.cluster.gpu.hbm_gib * kGiB;
    sm.headroom_bytes = p.cluster.memory_headroom_fraction * sm.capacity_bytes;
    out.push_back(sm);
  }
  return out;
}

}  // namespace meshwork::models
