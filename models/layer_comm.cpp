#include "models/layer_comm.hpp"

#include <algorithm>

#include "models/compute_time.hpp"
#include "models/memory.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

}  // namespace

double hottest_expert_load(const plan::MoeConfig& moe) {
  // Dropping routers cap each expert at capacity_factor times the balanced load.
  return moe.capacity_factor > 0 ? std::min(moe.routing_imbalance, std::max(1.0, moe.capacity_factor))
                                 : moe.routing_imbalance;
}

void comm_around(const plan::Plan& p, std::string_view op, bool moe_layer, bool forward, bool before, std::vector<LayerComm>& out) {
  const auto& par = p.parallelism;
  const auto& m = p.model;
  const double t = d(par.tensor_model_parallel_size);
  const double e = activation_bytes(p.training.precision);
  // Computed where a collective is found: most ops have none (a division per op was half of
  // this function's time, which the estimate asks of every op twice).
  auto tokens = [&] { return d(p.training.micro_batch_size) * d(m.seq_length) / d(par.context_parallel_size); };
  const bool sp = par.sequence_parallel;
  if (t > 1) {
    // Megatron's f/g at the norms and residuals (Shoeybi et al. 2019 §3; with SP, Korthikanti
    // et al. 2022 §4.2.2: all-gather after the norm, reduce-scatter before the residual).
    // Forward: after a norm (SP: gather the sequence), before a residual (reduce). The backward
    // runs the mirror image: after a residual's backward (SP: gather), before a norm's (reduce).
    auto bytes = [&] { return tokens() * d(m.hidden_size) * e; };
    // The final norm feeds the column-parallel LM head as a layer norm feeds its GEMMs
    // (Megatron's f before the output layer); the vocabulary-parallel embedding's output is
    // reduced as a row-parallel layer's (VocabParallelEmbedding: all-reduce, or reduce-scatter
    // with SP), and its backward gathers the sequence back under SP.
    // An MoE layer's MLP block gathers and scatters inside its token dispatcher instead (below),
    // unless shared experts, a TP-split dense MLP beside the experts, need the sequence whole.
    const bool moe_block_gathers = !moe_layer || m.moe.moe_shared_expert_intermediate_size > 0;
    const bool norm = op == "input_norm" || (op == "mlp_norm" && moe_block_gathers) || op == "final_norm";
    const bool residual = op == "attention_residual" || (op == "mlp_residual" && moe_block_gathers);
    const Collective reduce = sp ? Collective::reduce_scatter : Collective::all_reduce;
    auto add = [&](Collective c) { out.push_back({Stream::tp, c, plan::GroupKind::tp, bytes(), "tp"}); };
    if (forward && !before && norm && sp) add(Collective::all_gather);
    if (forward && before && residual) add(reduce);
    if (!forward && !before && residual && sp) add(Collective::all_gather);
    if (!forward && before && norm) add(reduce);
    if (forward && !before && op == "embedding") add(reduce);
    if (!forward && before && op == "embedding" && sp) add(Collective::all_gather);
    // The micro-batch's load (models::batch_op): Megatron-LM's get_batch_on_this_tp_rank has
    // TP rank 0 copy it from the host and broadcast each tensor to its group, one
    // torch.distributed.broadcast a tensor; with every_rank each GPU copies its own.
    const bool batch = op == "batch" || op == "batch_inputs" || op == "batch_targets";
    if (batch && forward && !before && p.training.data_loading == plan::DataLoading::tp_broadcast) {
      for (const BatchTensor& x : batch_tensors(p, op != "batch_targets", op != "batch_inputs")) {
        out.push_back({Stream::tp, Collective::broadcast, plan::GroupKind::tp, x.bytes, "tp_batch"});
      }
    }
  }
  if (moe_layer && (par.expert_model_parallel_size > 1 || t > 1)) {
    // Megatron-core's all-to-all token dispatcher: with sequence parallelism (required for MoE
    // with TP) each TP rank routes its 1/TP of the tokens; dispatch is an all-to-all over EP,
    // then an all-gather over the experts' TP group (expert tensor parallelism = TP, each rank
    // holding a column/row slice of every local expert); combine is the reduce-scatter over TP
    // of the experts' partial outputs, then the all-to-all back. The backward mirrors both.
    const bool ep = par.expert_model_parallel_size > 1;
    auto routed = [&] { return (sp ? tokens() / t : tokens()) * d(m.moe.moe_router_topk) * hottest_expert_load(m.moe) * d(m.hidden_size) * e; };
    auto a2a = [&](std::string_view what) {
      if (ep) out.push_back({Stream::ep, Collective::all_to_all, plan::GroupKind::ep, routed(), what});
    };
    auto tp = [&](Collective c) {
      if (t > 1) out.push_back({Stream::tp, c, plan::GroupKind::tp, routed() * t, "moe_tp"});
    };
    // The dispatch follows the permute (the rows leave in their experts' order) and the
    // combine precedes the unpermute, in the forward and mirrored in the backward.
    if (forward && !before && op == "moe_permute") {
      a2a("ep_dispatch");
      tp(Collective::all_gather);
    }
    if (forward && before && op == "moe_unpermute") {
      tp(Collective::reduce_scatter);
      a2a("ep_combine");
    }
    if (!forward && !before && op == "moe_unpermute") {
      a2a("ep_combine");
      tp(Collective::all_gather);
    }
    if (!forward && before && op == "moe_permute") {
      tp(Collective::reduce_scatter);
      a2a("ep_dispatch");
    }
  }
  if (par.context_parallel_size > 1 && op == "attention") {
    // Ring attention passes K and V around the CP ring: (cp - 1) blocks before the forward and
    // again before the backward, whose K and V gradients travel the ring back to their owners
    // after it (Liu et al. 2023 §3; Megatron-core's ring attention): (cp - 1) blocks forward,
    // twice that backward. The executor plays each as the Program lists it (exec/gpt.cpp).
    const double kv = 2 * tokens() * d(m.num_query_groups) * d(m.kv_channels) / t * e;
    const double blocks = d(par.context_parallel_size - 1) * kv;
    // With the p2p ring (Megatron-core's default --cp-comm-type, Transformer Engine's
    // AttnFuncWithCPAndKVP2P) each of the cp - 1 steps' K and V travel while the block before
    // runs, so the exchange before the attention is split with it: only its last block waits
    // for the last step. The gradients' return stays after the backward, whole (the ring
    // overlaps all but its last step: priced blocking, on the safe side). With all_gather the
    // attention waits for every block.
    const bool ring = par.context_parallel_comm_type == plan::CpCommType::p2p;
    if (before) out.push_back({Stream::cp, Collective::ring_exchange, plan::GroupKind::cp, blocks, "cp", ring});
    if (!before && !forward) out.push_back({Stream::cp, Collective::ring_exchange, plan::GroupKind::cp, blocks, "cp_grad"});
  }
}

bool tp_comm_overlapped(const plan::Plan& p) {
  return p.parallelism.overlap.tp_comm && p.parallelism.sequence_parallel && p.parallelism.tensor_model_parallel_size > 1;
}

GpuParams layer_params_per_gpu(const plan::Plan& p, const ParamCounts& counts, bool moe_layer) {
  const auto& lp = counts.layer;
  const double t = d(p.parallelism.tensor_model_parallel_size);
  if (!moe_layer) return {counts.dense_layer() / t, 0};
  return {(lp.attention + lp.norms + lp.router + lp.shared_expert) / t, lp.experts / (t * d(p.parallelism.expert_model_parallel_size))};
}

GpuParams end_params_per_gpu(const plan::Plan& p, const ParamCounts& counts, bool first_virtual, bool last_virtual) {
  const double t = d(p.parallelism.tensor_model_parallel_size);
  GpuParams g;
  if (first_virtual) g.dense += (counts.embedding + counts.position) / t;
  if (last_virtual) g.dense += (counts.lm_head > 0 ? counts.lm_head : (p.parallelism.pipeline_model_parallel_size > 1 ? counts.embedding : 0)) / t;
  return g;
}

DpGroups dp_groups(const plan::Plan& p, bool expert) {
  const auto& par = p.parallelism;
  const std::int64_t whole = par.context_parallel_size * (expert ? par.data_parallel_size / std::max<std::int64_t>(1, par.expert_model_parallel_size)
                                                                 : par.data_parallel_size);
  const std::int64_t n = std::max<std::int64_t>(1, par.num_distributed_optimizer_instances);
  DpGroups g;
  if (n <= 1 || whole % n != 0) {
    g.shard = g.replica = expert ? plan::GroupKind::expert_dp : plan::GroupKind::dp_cp;
    g.shard_size = whole;
    return g;
  }
  g.shard = expert ? plan::GroupKind::expert_dp_shard : plan::GroupKind::dp_shard;
  g.replica = expert ? plan::GroupKind::expert_dp_replica : plan::GroupKind::dp_replica;
  g.shard_size = whole / n;
  g.replicas = n;
  return g;
}

GradientReduction gradient_reduction(const plan::Plan& p, bool expert) {
  const auto& par = p.parallelism;
  const DpGroups groups = dp_groups(p, expert);
  const std::int64_t group_size = groups.shard_size;
  GradientReduction r;
  r.group = groups.shard;
  r.replica_group = groups.replica;
  r.collective = par.zero_stage == 0 ? Collective::all_reduce : Collective::reduce_scatter;
  r.bytes_per_param = gradient_bytes(p.training);
  switch (par.gradient_compression) {
    case plan::GradientCompression::none: break;
    case plan::GradientCompression::onebit: r.bytes_per_param = 1.0 / 8; break;
    case plan::GradientCompression::topk:
      r.collective = Collective::all_gather;
      r.bytes_per_param = par.topk_ratio * (activation_bytes(p.training.precision) + 4) * d(std::max<std::int64_t>(1, group_size));
      break;
  }
  if (groups.replicas > 1) r.replica_bytes_per_param = r.bytes_per_param / d(std::max<std::int64_t>(1, group_size));
  return r;
}

namespace {

// Adam's step with training.optimizer_states not all fp32: one fused kernel per parameter the
// GPU owns, Transformer Engine's FusedAdam with master_weights (Megatron's precision-aware
// optimizer, megatron/core/optimizer/__init__.py @23e00ed0) or Apex's DistributedFusedAdam. It
// reads the gradient as the buffer keeps it (no fp32 copy: distrib_optimizer.py hands the grad
// over as it is), reads and writes m and v in their dtypes and the master weights in theirs,
// and writes the 16-bit weight itself (no copy pass after it). With remainders it reads and
// writes the bf16 weight and its int16 remainder; with none, the 16-bit weight alone; fp32
// training, the fp32 weight.
double adam_bytes_per_param(const plan::TrainingConfig& t) {
  const auto& st = t.optimizer_states;
  double weights = 8;  // fp32 training: the weight itself, read and written
  if (t.precision != plan::Precision::fp32) {
    switch (st.master_weights) {
      case plan::MasterWeights::fp32: weights = 2 * 4 + 2; break;
      case plan::MasterWeights::fp16: weights = 2 * 2 + 2; break;
      case plan::MasterWeights::remainders: weights = 2 * (2 + 2); break;
      case plan::MasterWeights::none: weights = 2 * 2; break;
    }
  }
  return gradient_bytes(t) + weights + 2 * state_bytes(st.exp_avg) + 2 * state_bytes(st.exp_avg_sq);
}

}  // namespace

double optimizer_bytes_per_param(const plan::Plan& p) {
  const plan::TrainingConfig& t = p.training;
  const double compression = p.parallelism.gradient_compression != plan::GradientCompression::none ? 12 : 0;
  if (t.optimizer_states.classic()) {
    return kAdamBytesPerParam + (t.precision != plan::Precision::fp32 ? kMasterCopyBytesPerParam : 0) +
           (gradient_bytes(t) < 4 && t.precision != plan::Precision::fp16 ? kMainGradCopyBytesPerParam : 0) + compression;
  }
  return adam_bytes_per_param(t) + compression;
}

namespace {

// The gradients clipping and fp16's unscale work on are fp32 main gradients (or compensated ones).
bool fp32_main_gradients(const plan::Plan& p) {
  return p.training.optimizer_states.classic() || p.parallelism.gradient_compression != plan::GradientCompression::none;
}

}  // namespace

double clip_grad_bytes_per_param(const plan::Plan& p) { return fp32_main_gradients(p) ? kClipGradBytesPerParam : 3 * gradient_bytes(p.training); }

double unscale_grad_bytes_per_param(const plan::Plan& p) {
  return fp32_main_gradients(p) ? kUnscaleGradBytesPerParam : 2 * gradient_bytes(p.training);
}

double grad_bucket_params(const plan::Plan& p) { return std::max(40e6, 1e6 * d(p.parallelism.data_parallel_size)); }

std::vector<DpBucket> dp_buckets(const plan::Plan& p, const ParamCounts& counts, std::int64_t lo, std::int64_t hi, bool first_virtual,
                                 bool last_virtual) {
  const double bucket = grad_bucket_params(p);
  std::vector<DpBucket> out;
  GpuParams open = end_params_per_gpu(p, counts, false, last_virtual);  // the head's come first
  for (std::int64_t l = hi - 1; l >= lo; --l) {
    open += layer_params_per_gpu(p, counts, is_moe_layer(p.model, l));
    if (open.total() >= bucket) {
      out.push_back({l, open});
      open = {};
    }
  }
  open += end_params_per_gpu(p, counts, first_virtual, false);
  if (open.total() > 0) out.push_back({lo, open});
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace meshwork::models
