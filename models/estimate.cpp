#include "models/estimate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>

#include "meshwork/version.hpp"
#include "models/comm.hpp"
#include "models/compute_time.hpp"
#include "models/hardware.hpp"
#include "models/memory.hpp"
#include "models/op_table.hpp"
#include "models/params.hpp"
#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "report/report_io.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }
constexpr double kGiB = 1024.0 * 1024 * 1024;

// Communication overlapped with compute slows both: NCCL kernels take SMs and HBM bandwidth
// from the GEMMs. Measured ZeRO-3 steps (NAR21 Table 2) show the cost is largest when the two
// are balanced (a step a third longer than the longer of them) and vanishes when one side
// dominates (the 768- and 1,536-GPU 175B runs take the communication time whatever their
// compute). A p-norm of the two times has exactly that shape; p calibrated once on Ampere
// with NAR21 Table 2's ZeRO-3 rows (bench/RESULTS.md): 2^(1/2.4) = 1.33 at balance.
constexpr double kOverlapNorm = 2.4;
// ZeRO-3 gathers and reduces parameters layer by layer in buckets (DeepSpeed stage 3); its
// collectives sustain this fraction of a large ring's bus bandwidth (same calibration). The
// fit finds 0.72 of what one GPU's own NIC carries, an eighth of NCCL's ring between 8-GPU
// nodes (whose channels use all of a node's NICs together, models/comm): DeepSpeed's stage-3
// collectives of 2021 moved each GPU's traffic as if through its own NIC alone.
constexpr double kZero3CollectiveEfficiency = 0.72 / 8;

// Exposed time of `comm` seconds of communication running under `window` seconds of compute:
// the overlapped pair takes (comm^p + window^p)^(1/p), of which the window is compute.
double overlapped(double comm, double window) {
  if (comm <= 0) return 0;
  if (window <= 0) return comm;
  return std::pow(std::pow(comm, kOverlapNorm) + std::pow(window, kOverlapNorm), 1 / kOverlapNorm) - window;
}

// The op kinds of models/op_table.hpp. A kind's index is its enumerator's value; a kind missing
// here fails loudly (std::array::at) rather than being dropped from op_times.
constexpr OpKind kOpKinds[] = {OpKind::gemm,      OpKind::attention, OpKind::elementwise, OpKind::norm,
                               OpKind::embedding, OpKind::loss,      OpKind::optimizer};
constexpr std::size_t kNumOpKinds = std::size(kOpKinds);

// Seconds and op counts by kind (forward, backward and recompute together).
struct KindTimes {
  std::array<double, kNumOpKinds> seconds{};
  std::array<double, kNumOpKinds> count{};
  void add(OpKind k, double s) {
    const auto i = static_cast<std::size_t>(k);
    seconds.at(i) += s;
    count.at(i) += 1;
  }
  void add(const KindTimes& o) {
    for (std::size_t i = 0; i < kNumOpKinds; ++i) {
      seconds[i] += o.seconds[i];
      count[i] += o.count[i];
    }
  }
};

struct StageTimes {
  double forward_s = 0, backward_s = 0, recompute_s = 0;
  KindTimes kinds;  // the same seconds as forward_s + backward_s + recompute_s, by op kind
  double gemm_s = 0, attention_s = 0;  // what communication can hide under
  double tp_s = 0, cp_s = 0, ep_s = 0;  // per micro-batch
  double params = 0;                    // dense parameters per GPU (for DP volumes)
  double expert_params = 0;
};

}  // namespace

double hottest_expert_load(const plan::MoeConfig& moe) {
  // Dropping routers cap each expert at capacity_factor times the balanced load.
  return moe.capacity_factor > 0 ? std::min(moe.routing_imbalance, std::max(1.0, moe.capacity_factor))
                                 : moe.routing_imbalance;
}

void attach_memory(const plan::Plan& p, report::Report& r) {
  r.memory.clear();
  r.fits = true;
  for (const auto& sm : stage_memory(p)) {
    report::StageMemory row;
    row.stage = sm.stage;
    row.layers = sm.layers;
    row.weights_gib = sm.weights_bytes / kGiB;
    row.gradients_gib = sm.gradients_bytes / kGiB;
    row.optimizer_gib = sm.optimizer_bytes / kGiB;
    row.activations_gib = sm.activations_bytes / kGiB;
    row.buffers_gib = sm.buffers_bytes / kGiB;
    row.total_gib = sm.total_bytes / kGiB;
    row.capacity_gib = sm.capacity_bytes / kGiB;
    row.fits = sm.fits();
    row.headroom_gib = sm.headroom_bytes / kGiB;
    row.tight = sm.tight();
    r.fits = r.fits && row.fits;
    r.memory.push_back(row);
  }
  const auto* big = r.largest_stage();
  if (!big) return;
  char buf[240];
  switch (r.memory_verdict()) {
    case report::MemoryVerdict::fits: return;
    case report::MemoryVerdict::tight:
      for (const auto& m : r.memory) {
        if (!m.tight) continue;
        std::snprintf(buf, sizeof buf, "fits tightly: stage %lld leaves %.1f GiB of %.1f GiB free, less than the %.1f GiB headroom (cluster.memory_headroom_fraction)",
                      static_cast<long long>(m.stage), m.capacity_gib - m.total_gib, m.capacity_gib, m.headroom_gib);
        r.notes.emplace_back(buf);
        return;
      }
      return;
    case report::MemoryVerdict::does_not_fit: break;
  }
  std::snprintf(buf, sizeof buf, "does not fit: stage %lld needs %.1f GiB per GPU of %.1f GiB",
                static_cast<long long>(big->stage), big->total_gib, big->capacity_gib);
  r.notes.emplace_back(buf);
}

report::Report estimate(const plan::Plan& p, const EstimateOptions& options) {
  report::Report r;
  r.method = report::Method::estimated;
  r.plan_name = p.name;
  r.num_gpus = p.cluster.num_gpus;

  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  const double peak = plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12;
  const plan::DerivedFigures derived = plan::derive(p);
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const double e = activation_bytes(p.training.precision);
  const double t = d(par.tensor_model_parallel_size);
  const double tokens_mb = d(p.training.micro_batch_size) * d(m.seq_length) / d(par.context_parallel_size);
  const double micro_batches = d(derived.micro_batches_per_step);
  const double pp = d(par.pipeline_model_parallel_size);
  const double v = d(par.virtual_pipeline_model_parallel_size);

  const ComputeTimer timer(p);
  const GroupNetwork tp_net = group_network(p, hw, plan::GroupKind::tp);
  const GroupNetwork cp_net = group_network(p, hw, plan::GroupKind::cp);
  const GroupNetwork ep_net = group_network(p, hw, plan::GroupKind::ep);
  const GroupNetwork pp_net = group_network(p, hw, plan::GroupKind::pp);
  const GroupNetwork dp_net = group_network(p, hw, plan::GroupKind::dp_cp);
  const GroupNetwork edp_net = group_network(p, hw, plan::GroupKind::expert_dp);

  // Op tables of the two layer kinds, timed once.
  auto time_layer = [&](bool moe, bool recomputed) {
    StageTimes s;
    for (const auto& op : layer_ops(p, moe, recomputed)) {
      const double dt = timer(op);
      s.kinds.add(op.kind, dt);
      if (op.phase == OpPhase::forward) s.forward_s += dt;
      else if (op.phase == OpPhase::recompute) s.recompute_s += dt;
      else s.backward_s += dt;
      if (op.kind == OpKind::gemm && op.phase != OpPhase::recompute) s.gemm_s += dt;
      if (op.kind == OpKind::attention && op.phase == OpPhase::forward) s.attention_s += dt;
    }
    // TP: two all-reduces forward and two backward per layer (Megatron's f/g operators; with
    // SP each is a reduce-scatter + all-gather of the same total); two more when a full
    // recompute repeats the forward.
    const double tp_msg = tokens_mb * d(m.hidden_size) * e;
    const double ar = all_reduce_s(tp_net, tp_msg);
    s.tp_s = ar * (4 + (recomputed && p.training.recompute == plan::Recompute::full ? 2 : 0));
    if (par.overlap.tp_comm) s.tp_s = overlapped(s.tp_s, s.gemm_s);
    // CP: the ring passes K and V (cp - 1) times forward and twice that backward, under the
    // attention kernels (Megatron-core's ring attention).
    if (cp_net.size > 1) {
      const double kv = 2 * tokens_mb * d(m.num_query_groups) * d(m.kv_channels) / t * e;
      const double ring = 3 * d(cp_net.size - 1) * p2p_s(cp_net, kv);
      s.cp_s = overlapped(ring, 3 * s.attention_s);
    }
    // EP: dispatch and combine all-to-all forward and backward (4), of the routed tokens.
    if (moe && ep_net.size > 1) {
      // With sequence parallelism (required for MoE with TP) each TP rank dispatches its
      // 1/TP of the tokens (Megatron-core's all-to-all dispatcher).
      const double tokens = par.sequence_parallel ? tokens_mb / t : tokens_mb;
      const double routed = tokens * d(m.moe.moe_router_topk) * hottest_expert_load(m.moe) * d(m.hidden_size) * e;
      s.ep_s = 4 * all_to_all_s(ep_net, routed);
    }
    return s;
  };
  // [moe][recomputed]: the layer kinds, each with and without full recomputation (which
  // recompute_method: block applies to some layers of a chunk only).
  StageTimes layer_times[2][2];
  for (int moe = 0; moe < (m.is_moe() ? 2 : 1); ++moe) {
    for (int rec = 0; rec < (p.training.recompute == plan::Recompute::full ? 2 : 1); ++rec) {
      layer_times[moe][rec] = time_layer(moe == 1, rec == 1);
    }
  }
  auto time_ops = [&](const std::vector<Op>& ops, StageTimes& s) {
    for (const auto& op : ops) {
      const double dt = timer(op);
      s.kinds.add(op.kind, dt);
      if (op.phase == OpPhase::forward) s.forward_s += dt;
      else s.backward_s += dt;
    }
  };

  // Per stage, per micro-batch.
  const ParamCounts counts = count_params(m);
  std::vector<StageTimes> stages;
  const auto chunks = plan::layers_per_chunk(p);
  const auto firsts = plan::chunk_first_layers(chunks);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    StageTimes s;
    for (std::size_t c = 0; c < chunks[i].size(); ++c) {
      const std::int64_t first = firsts[i][c];
      for (std::int64_t k = 0; k < chunks[i][c]; ++k) {
        const bool moe = is_moe_layer(m, first + k);
        const StageTimes& l = layer_times[moe ? 1 : 0][recomputes_layer(p.training, k) ? 1 : 0];
        s.forward_s += l.forward_s;
        s.backward_s += l.backward_s;
        s.recompute_s += l.recompute_s;
        s.kinds.add(l.kinds);
        s.tp_s += l.tp_s;
        s.cp_s += l.cp_s;
        s.ep_s += l.ep_s;
        s.params += (moe ? counts.layer.attention + counts.layer.norms + counts.layer.router + counts.layer.shared_expert
                         : counts.dense_layer()) / t;
        if (moe) s.expert_params += counts.layer.experts / (t * d(par.expert_model_parallel_size));
      }
    }
    if (i == 0) {
      time_ops(first_stage_ops(p), s);
      s.params += (counts.embedding + counts.position) / t;
    }
    if (i + 1 == chunks.size()) {
      time_ops(last_stage_ops(p), s);
      s.params += (counts.lm_head > 0 ? counts.lm_head : (pp > 1 ? counts.embedding : 0)) / t;
    }
    stages.push_back(s);
  }
  auto per_mb = [](const StageTimes& s) { return s.forward_s + s.backward_s + s.recompute_s + s.tp_s + s.cp_s + s.ep_s; };
  const StageTimes& slow = *std::max_element(stages.begin(), stages.end(),
                                             [&](const StageTimes& a, const StageTimes& b) { return per_mb(a) < per_mb(b); });
  const double stage_mb = per_mb(slow);

  report::Breakdown& b = r.breakdown;
  b.compute_s = micro_batches * (slow.forward_s + slow.backward_s);
  b.recompute_s = micro_batches * slow.recompute_s;
  b.tp_s = micro_batches * slow.tp_s;
  b.cp_s = micro_batches * slow.cp_s;
  b.ep_s = micro_batches * slow.ep_s;
  // The same compute by op kind: per step, as compute_s and recompute_s count it.
  for (const OpKind k : kOpKinds) {
    const auto i = static_cast<std::size_t>(k);
    if (slow.kinds.count[i] <= 0) continue;
    r.op_times.push_back({std::string(to_string(k)), micro_batches * slow.kinds.seconds[i],
                          std::llround(micro_batches * slow.kinds.count[i])});
  }

  // Bubble: fill and drain of the pipeline, in units of one stage's micro-batch (NAR21 §2.2:
  // (p-1)/m of the ideal time for GPipe and 1F1B, (p-1)/(v m) interleaved; ZB-H1 (p-1)/(3m),
  // Qi et al. 2023 with T_F = T_B = T_W).
  double bubble_stages = pp - 1;
  if (par.pipeline_schedule == plan::PipelineSchedule::interleaved) bubble_stages /= v;
  if (par.pipeline_schedule == plan::PipelineSchedule::zero_bubble) bubble_stages /= 3;
  b.bubble_s = bubble_stages * stage_mb;
  r.bubble_fraction = micro_batches > 0 ? bubble_stages / micro_batches : 0;

  // PP: activations forward and gradients backward per micro-batch and model chunk, split over
  // TP (NAR21 §4.1 scatter/gather). Overlapped, only the fill and drain wait for them.
  if (pp_net.size > 1) {
    const double msg = tokens_mb * d(m.hidden_size) * e / t;
    const double one = 2 * p2p_s(pp_net, msg);
    b.pp_s = par.overlap.p2p ? (pp - 1) * one : micro_batches * v * one;
  }

  // DP: gradients of the slowest stage's parameters, reduced once per step; with ZeRO >= 1
  // reduce-scatter then all-gather of the updated 16-bit parameters.
  {
    double grad_bytes = gradient_bytes(p.training.precision);
    switch (par.gradient_compression) {
      case plan::GradientCompression::none: break;
      // 1-bit Adam (Tang et al. 2021, arXiv:2102.02888): one bit per value instead of 32 (16
      // for fp16 gradients), the error-feedback buffer updated in a pass over the gradients.
      case plan::GradientCompression::onebit: grad_bytes = 1.0 / 8; break;
      // Top-k: the chosen values (16-bit) and their 32-bit indices. Sparse sets of different
      // ranks do not line up, so they are all-gathered, not ring-reduced: n times the volume.
      case plan::GradientCompression::topk:
        grad_bytes = par.topk_ratio * (e + 4) * static_cast<double>(std::max<std::int64_t>(1, dp_net.size));
        break;
    }
    double reduce = 0, gather = 0;
    auto add = [&](const GroupNetwork& net, double params) {
      if (net.size <= 1 || params <= 0) return;
      if (par.zero_stage == 0) {
        reduce += all_reduce_s(net, params * grad_bytes);
      } else if (par.zero_stage <= 2) {
        reduce += reduce_scatter_s(net, params * grad_bytes);
        gather += all_gather_s(net, params * e);
      } else {
        // ZeRO-3: parameters gathered for the forward and again for the backward of every
        // micro-batch, gradients reduce-scattered every micro-batch (Rajbhandari et al. §5.3).
        reduce += micro_batches * reduce_scatter_s(net, params * grad_bytes) / kZero3CollectiveEfficiency;
        gather += micro_batches * 2 * all_gather_s(net, params * e) / kZero3CollectiveEfficiency;
      }
    };
    add(dp_net, slow.params);
    add(edp_net, slow.expert_params);
    if (par.zero_stage == 3) {
      // Prefetched under every micro-batch's compute.
      const double window = micro_batches * (slow.forward_s + slow.backward_s + slow.recompute_s);
      b.dp_s = overlapped(reduce + gather, window);
    } else {
      // Overlapped reduction runs under the backward of the last micro-batch (Megatron-core DDP);
      // the parameter all-gather under the forward of the first.
      b.dp_s = par.overlap.grad_reduce ? overlapped(reduce, slow.backward_s) : reduce;
      b.dp_s += par.overlap.param_gather ? overlapped(gather, slow.forward_s) : gather;
    }
  }

  // Optimizer: each GPU updates the parameters it owns (all of them without ZeRO).
  {
    const double owned_dense = par.zero_stage >= 1 ? slow.params / d(dp_net.size) : slow.params;
    const double owned_expert = par.zero_stage >= 1 ? slow.expert_params / d(edp_net.size) : slow.expert_params;
    double bytes_per_param = kOptimizerBytesPerParam;
    // Compression and its error feedback read and write an fp32 residual per parameter.
    if (par.gradient_compression != plan::GradientCompression::none) bytes_per_param += 12;
    b.optimizer_s = (owned_dense + owned_expert) * bytes_per_param / timer.bytes_per_s(OpKind::optimizer);
  }

  r.step_time_s = b.total();
  const StepFlops flops = step_flops(p, options.flops);
  const double gpus = d(p.cluster.num_gpus);
  r.model_tflops_per_gpu = flops.model / r.step_time_s / gpus / 1e12;
  r.hardware_tflops_per_gpu = flops.hardware / r.step_time_s / gpus / 1e12;
  r.mfu = r.model_tflops_per_gpu * 1e12 / peak;
  r.hfu = r.hardware_tflops_per_gpu * 1e12 / peak;
  r.tokens_per_s = d(derived.tokens_per_step) / r.step_time_s;
  if (p.training.tokens > 0) r.time_to_train_s = p.training.tokens / r.tokens_per_s;

  attach_memory(p, r);

  // Power: a GPU draws between idle and TDP in proportion to its busy time; the host's parts
  // at load; the power supplies' losses on top.
  {
    const double busy = std::clamp((b.compute_s + b.recompute_s) / r.step_time_s, 0.0, 1.0);
    const double tdp = p.cluster.gpu.tdp_watts;
    r.power.gpu_watts = tdp * (hw.gpu_idle_fraction + (1 - hw.gpu_idle_fraction) * busy);
    // The host figure is for an 8-GPU node (DGX/HGX); other node sizes scale it per GPU.
    const double host = hw.host_watts_per_node * d(p.cluster.gpus_per_node) / 8;
    r.power.node_watts = (d(p.cluster.gpus_per_node) * r.power.gpu_watts + host) / hw.psu_efficiency;
    r.power.cluster_megawatts = r.power.node_watts * d(p.cluster.num_nodes()) / 1e6;
    r.power.joules_per_token = r.power.cluster_megawatts * 1e6 / r.tokens_per_s;
  }

  if (!hw.calibrated) {
    r.notes.push_back("no calibration covers " + p.cluster.gpu.name +
                      ": generic efficiencies (Ampere's fractions of its datasheet figures)");
  }
  r.provenance.meshwork_version = kVersion;
  r.provenance.meshwork_commit = kGitCommit;
  if (options.provenance) r.provenance.plan_hash = report::fnv1a_hex(plan::to_json(p).dump());
  r.provenance.hardware_profile = std::string(p.cluster.gpu.name) + " (" + std::string(hw.generation) + " calibration)";
  r.provenance.seed = p.run.seed;
  return r;
}

}  // namespace meshwork::models
