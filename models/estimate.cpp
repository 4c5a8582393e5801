#include "models/estimate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

#include "meshwork/version.hpp"
#include "models/calibration_set.hpp"
#include "models/comm.hpp"
#include "models/compute_time.hpp"
#include "models/dp_replay.hpp"
#include "models/end_of_step.hpp"
#include "models/hardware.hpp"
#include "models/headline.hpp"
#include "models/layer_comm.hpp"
#include "models/memory.hpp"
#include "models/op_table.hpp"
#include "models/params.hpp"
#include "models/pipeline.hpp"
#include "models/regime.hpp"
#include "models/sm_share.hpp"
#include "models/stage_times.hpp"
#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "report/report_io.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }
constexpr double kGiB = 1024.0 * 1024 * 1024;

}  // namespace

namespace {

// The Report's memory rows and verdict, of the stages' memory.
void attach_stage_memory(const std::vector<StageMemory>& stages, report::Report& r) {
  r.memory.clear();
  r.memory.reserve(stages.size());
  r.fits = true;
  for (const auto& sm : stages) {
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

}  // namespace

void attach_memory(const plan::Plan& p, report::Report& r) { attach_stage_memory(stage_memory(p), r); }

void attach_power(const plan::Plan& p, report::Report& r) { attach_power(p, hardware_profile(p.cluster.gpu), r); }

void attach_power(const plan::Plan& p, const HardwareProfile& hw, report::Report& r) {
  // Power: a GPU draws between idle and TDP in proportion to its busy time; the host's parts
  // at load; the power supplies' losses on top.
  const report::Breakdown& b = r.breakdown;
  const double busy = r.step_time_s > 0 ? std::clamp((b.compute_s + b.recompute_s) / r.step_time_s, 0.0, 1.0) : 0.0;
  const double tdp = p.cluster.gpu.tdp_watts;
  r.power.gpu_watts = tdp * (hw.gpu_idle_fraction + (1 - hw.gpu_idle_fraction) * busy);
  // The host figure is for an 8-GPU node (DGX/HGX); other node sizes scale it per GPU.
  const double host = hw.host_watts_per_node * d(p.cluster.gpus_per_node) / 8;
  r.power.node_watts = (d(p.cluster.gpus_per_node) * r.power.gpu_watts + host) / hw.psu_efficiency;
  r.power.cluster_megawatts = r.power.node_watts * d(p.cluster.num_nodes()) / 1e6;
  r.power.joules_per_token = r.tokens_per_s > 0 ? r.power.cluster_megawatts * 1e6 / r.tokens_per_s : 0;
}

report::Report estimate(const plan::Plan& p, const EstimateOptions& options) {
  report::Report r;
  r.method = report::Method::estimated;
  r.plan_name = p.name;
  r.num_gpus = p.cluster.num_gpus;
  r.parameters = parameter_summary(p.model);
  r.shape = {p.training.global_batch_size,
             p.training.micro_batch_size,
             p.model.seq_length,
             p.parallelism.tensor_model_parallel_size,
             p.parallelism.pipeline_model_parallel_size,
             p.parallelism.data_parallel_size,
             p.parallelism.context_parallel_size,
             p.parallelism.expert_model_parallel_size};

  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  const double peak = plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12;
  const std::int64_t step_micro_batches = plan::micro_batches_per_step(p);
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const double e = activation_bytes(p.training.precision);
  const double t = d(par.tensor_model_parallel_size);
  const double tokens_mb = d(p.training.micro_batch_size) * d(m.seq_length) / d(par.context_parallel_size);
  const double micro_batches = d(step_micro_batches);

  const ComputeTimer timer(p);
  const auto layout = plan::RankLayout::from_plan(par);
  const GroupNetwork tp_net = group_network(p, hw, layout, plan::GroupKind::tp);
  const GroupNetwork cp_net = group_network(p, hw, layout, plan::GroupKind::cp);
  const GroupNetwork ep_net = group_network(p, hw, layout, plan::GroupKind::ep);
  const GroupNetwork pp_net = group_network(p, hw, layout, plan::GroupKind::pp);
  // Data parallelism where ZeRO shards (all of DP x CP and expert-DP, or one distributed-
  // optimizer instance of each) and, with several instances, across them (models::dp_groups).
  const DpGroups dense_groups = dp_groups(p, false), expert_groups = dp_groups(p, true);
  const GroupNetwork dp_net = group_network(p, hw, layout, dense_groups.shard);
  const GroupNetwork edp_net = group_network(p, hw, layout, expert_groups.shard);
  const GroupNetwork dp_replica_net = dense_groups.replicas > 1 ? group_network(p, hw, layout, dense_groups.replica) : GroupNetwork{};
  const GroupNetwork edp_replica_net = expert_groups.replicas > 1 ? group_network(p, hw, layout, expert_groups.replica) : GroupNetwork{};

  CollectivePrices collective_time;
  // Op tables of the two layer kinds, timed once.
  // The collectives the Program issues around each op of `ops` (models/layer_comm), timed by the
  // same models/comm functions the simulator puts on the links: TP's f/g (reduce-scatter and
  // all-gather with SP), EP's dispatch and combine, CP's ring; a recomputation repeats the
  // forward's. One pass in the Program's order: the forward (or recompute) ops in order, the
  // backward's input-gradient ops in reverse (and the embedding's gather before its
  // weight-gradient part, its only backward). Adds the exposed seconds to `s` and to `raw_f` or
  // `raw_b` by direction.
  const bool split_tp = tp_comm_overlapped(p);
  // What TP's split collectives take from their GEMMs' SMs (models/sm_share.hpp).
  const double rs_sms = sm_fraction(hw, Stream::tp, Collective::reduce_scatter, split_tp);
  const double ag_sms = sm_fraction(hw, Stream::tp, Collective::all_gather, split_tp);
  // The SMs CP's ring (NCCL send/receive kernels) takes from the attention, as in the simulator.
  const double cp_sms = sm_fraction(hw, Stream::cp, Collective::ring_exchange, false);
  std::vector<LayerComm> comms;  // an op's, reused by every pass
  // `seconds`: each op's, as the timer gives it (timed once by the caller).
  auto comm_pass = [&](const std::vector<Op>& ops, const std::vector<double>& seconds, bool moe, OpPhase phase, StageTimes& s, double& raw_f,
                       double& raw_b) {
    const bool fwd = phase != OpPhase::backward_input;
    double pending_gather = 0, last_gemm = 0;  // tp_comm: an all-gather awaiting its GEMM; the previous GEMM
    double pending_ring = 0;  // CP's p2p ring awaiting the attention it is split with
    auto charge = [&](const Op& op, bool before) {
      comms.clear();
      comm_around(p, op.name, moe, fwd, before, comms);
      for (const LayerComm& c : comms) {
        const GroupNetwork& net = c.stream == Stream::tp ? tp_net : c.stream == Stream::ep ? ep_net : cp_net;
        double dt = collective_time(net, c.collective, c.bytes);
        if (c.split_with_next) {
          pending_ring += dt;
          continue;
        }
        if (split_tp && c.stream == Stream::tp) {
          if (c.collective == Collective::all_gather) {
            pending_gather += dt;
            continue;
          }
          dt = tp_exposed_s(dt, last_gemm, rs_sms);
        }
        (c.stream == Stream::tp ? s.tp_s : c.stream == Stream::ep ? s.ep_s : s.cp_s) += dt;
        (fwd && phase == OpPhase::forward ? raw_f : raw_b) += dt;
      }
    };
    auto visit = [&](const Op& op, double op_s) {
      if (op.phase == OpPhase::backward_weight && phase == OpPhase::backward_input && op.kind == OpKind::embedding) {
        charge(op, true);
        return;
      }
      if (op.phase != phase) return;
      charge(op, true);
      if (pending_ring > 0) {
        // The exposed part of the ring under this attention (Instr::tail_after in the Program).
        const double dt = split_exposed_s(pending_ring, op_s, d(par.context_parallel_size), cp_sms);
        s.cp_s += dt;
        (phase == OpPhase::forward ? raw_f : raw_b) += dt;
        pending_ring = 0;
      }
      if (op.kind == OpKind::gemm) {
        const double g = op_s;
        if (pending_gather > 0) {
          const double dt = tp_exposed_s(pending_gather, g, ag_sms);
          s.tp_s += dt;
          (phase == OpPhase::forward ? raw_f : raw_b) += dt;
          pending_gather = 0;
        }
        last_gemm = g;
      }
      charge(op, false);
    };
    if (fwd) {
      for (std::size_t i = 0; i < ops.size(); ++i) visit(ops[i], seconds[i]);
    } else {
      for (std::size_t i = ops.size(); i-- > 0;) visit(ops[i], seconds[i]);
    }
    s.tp_s += pending_gather;
    (phase == OpPhase::forward ? raw_f : raw_b) += pending_gather;
  };
  auto time_layer = [&](bool moe, bool recomputed) {
    StageTimes s;
    const auto ops = layer_ops(p, moe, recomputed);
    std::vector<double> seconds;
    seconds.reserve(ops.size());
    for (const auto& op : ops) {
      const double dt = seconds.emplace_back(timer(op));
      s.kinds.add(op.kind, dt);
      if (op.phase == OpPhase::forward) s.forward_s += dt;
      else if (op.phase == OpPhase::recompute) s.recompute_s += dt;
      else s.backward_s += dt;
      if (op.phase == OpPhase::backward_weight) s.weight_s += dt;
      if (op.kind == OpKind::gemm && op.phase != OpPhase::recompute) s.gemm_s += dt;
      if (op.kind == OpKind::attention && op.phase == OpPhase::forward) s.attention_s += dt;
    }
    double raw_f = 0, raw_b = 0;
    comm_pass(ops, seconds, moe, OpPhase::forward, s, raw_f, raw_b);
    comm_pass(ops, seconds, moe, OpPhase::recompute, s, raw_f, raw_b);
    comm_pass(ops, seconds, moe, OpPhase::backward_input, s, raw_f, raw_b);
    // CP's p2p ring is split with the attention above (the Program's tail_after); the
    // gradients' return, and all_gather's exchange, hold the compute whole.
    const double raw = raw_f + raw_b, exposed = s.tp_s + s.cp_s + s.ep_s;
    s.comm_f_s = raw > 0 ? exposed * raw_f / raw : 0;
    s.comm_b_s = raw > 0 ? exposed * raw_b / raw : 0;
    return s;
  };
  // [moe][recomputed]: the layer kinds, each with and without full recomputation (which
  // recompute_method: block applies to some layers of a chunk only), each timed when a layer
  // of its kind is first met below (issue 18: uniform recomputation has no layer without it,
  // an MoE model with no dense layer none of those). The DP replay reads the slowest stage's,
  // timed by then.
  StageTimes layer_times[2][2];
  bool layer_timed[2][2] = {};
  auto layer_kind = [&](bool moe, bool recomputed) -> const StageTimes& {
    StageTimes& l = layer_times[moe ? 1 : 0][recomputed ? 1 : 0];
    bool& timed = layer_timed[moe ? 1 : 0][recomputed ? 1 : 0];
    if (!timed) l = time_layer(moe, recomputed), timed = true;
    return l;
  };
  // The ops outside the layers with the TP collectives around them (the embedding's reduction,
  // the gather before the LM head): their exposed time is in comm_f_s, comm_b_s and tp_s.
  auto time_ops = [&](const std::vector<Op>& ops, StageTimes& s) {
    std::vector<double> seconds;
    seconds.reserve(ops.size());
    for (const auto& op : ops) {
      const double dt = seconds.emplace_back(timer(op));
      s.kinds.add(op.kind, dt);
      if (op.phase == OpPhase::forward) s.forward_s += dt;
      else s.backward_s += dt;
    }
    StageTimes comm;
    double raw_f = 0, raw_b = 0;
    comm_pass(ops, seconds, false, OpPhase::forward, comm, raw_f, raw_b);
    s.comm_f_s += comm.tp_s;
    const double forward_tp = comm.tp_s;
    comm_pass(ops, seconds, false, OpPhase::backward_input, comm, raw_f, raw_b);
    s.comm_b_s += comm.tp_s - forward_tp;
    s.tp_s += comm.tp_s;
  };

  // Per stage, per micro-batch.
  const ParamCounts counts = count_params(m);
  const auto chunks = plan::layers_per_chunk(p);
  std::vector<StageTimes> stages;
  stages.reserve(chunks.size());
  const auto firsts = plan::chunk_first_layers(chunks);
  // Each schedule item's seconds, per stage and chunk, with the TP, CP and EP time exposed
  // inside it (`pipe`) and without (`pipe_compute`): the pipeline replays below.
  const std::int64_t vchunks = chunks.empty() ? 1 : static_cast<std::int64_t>(chunks.front().size());
  PipelineSpec pipe;
  pipe.schedule = par.pipeline_schedule;
  pipe.stages = par.pipeline_model_parallel_size;
  pipe.microbatches = step_micro_batches;
  pipe.chunks = vchunks;
  pipe.preposted = par.overlap.p2p;
  const auto pipe_slots = static_cast<std::size_t>(pipe.stages * vchunks);
  pipe.forward_s.assign(pipe_slots, 0);
  pipe.backward_s.assign(pipe_slots, 0);
  pipe.weight_s.assign(pipe_slots, 0);
  PipelineSpec pipe_compute = pipe;
  StageTimes first_ops, last_ops;
  time_ops(first_stage_ops(p), first_ops);
  time_ops(last_stage_ops(p), last_ops);
  const GpuParams kind_params[2] = {layer_params_per_gpu(p, counts, false), m.is_moe() ? layer_params_per_gpu(p, counts, true) : GpuParams{}};
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    StageTimes s;
    for (std::size_t c = 0; c < chunks[i].size(); ++c) {
      const std::int64_t first = firsts[i][c];
      const std::size_t at = i * static_cast<std::size_t>(vchunks) + c;
      if (i == 0 && c == 0) {
        pipe.forward_s[at] += first_ops.forward_s;
        pipe.backward_s[at] += first_ops.backward_s;
      }
      if (i + 1 == chunks.size() && c + 1 == chunks[i].size()) {
        pipe.forward_s[at] += last_ops.forward_s;
        pipe.backward_s[at] += last_ops.backward_s;
      }
      pipe_compute.forward_s[at] = pipe.forward_s[at];
      pipe_compute.backward_s[at] = pipe.backward_s[at];
      if (i == 0 && c == 0) {
        pipe.forward_s[at] += first_ops.comm_f_s;
        pipe.backward_s[at] += first_ops.comm_b_s;
      }
      if (i + 1 == chunks.size() && c + 1 == chunks[i].size()) {
        pipe.forward_s[at] += last_ops.comm_f_s;
        pipe.backward_s[at] += last_ops.comm_b_s;
      }
      // The chunk's layers, run by run of one kind (an MoE model's dense layers first, block
      // recomputation's first layers of a chunk): a run's times are its count times a layer's.
      double cf = pipe_compute.forward_s[at], cb = pipe_compute.backward_s[at], cw = pipe_compute.weight_s[at];
      double pf = pipe.forward_s[at], pb = pipe.backward_s[at], pw = pipe.weight_s[at];
      for (std::int64_t k = 0; k < chunks[i][c];) {
        const bool moe = is_moe_layer(m, first + k), rec = recomputes_layer(p.training, k);
        std::int64_t end = k + 1;
        while (end < chunks[i][c] && is_moe_layer(m, first + end) == moe && recomputes_layer(p.training, end) == rec) ++end;
        const double n = d(end - k);
        k = end;
        const StageTimes& l = layer_kind(moe, rec);
        cf += n * l.forward_s;
        cb += n * (l.recompute_s + l.backward_s);
        cw += n * l.weight_s;
        pf += n * (l.forward_s + l.comm_f_s);
        pb += n * (l.recompute_s + l.backward_s + l.comm_b_s);
        pw += n * l.weight_s;
        s.forward_s += n * l.forward_s;
        s.backward_s += n * l.backward_s;
        s.recompute_s += n * l.recompute_s;
        s.kinds.add(l.kinds, n);
        s.tp_s += n * l.tp_s;
        s.cp_s += n * l.cp_s;
        s.ep_s += n * l.ep_s;
        s.params += n * kind_params[moe ? 1 : 0].dense;
        s.expert_params += n * kind_params[moe ? 1 : 0].expert;
      }
      pipe_compute.forward_s[at] = cf;
      pipe_compute.backward_s[at] = cb;
      pipe_compute.weight_s[at] = cw;
      pipe.forward_s[at] = pf;
      pipe.backward_s[at] = pb;
      pipe.weight_s[at] = pw;
    }
    const GpuParams ends = end_params_per_gpu(p, counts, i == 0, i + 1 == chunks.size());
    // The embedding's and the head's ops, timed once above (time_ops).
    auto add_ops = [&s](const StageTimes& ops) {
      s.kinds.add(ops.kinds);
      s.forward_s += ops.forward_s;
      s.backward_s += ops.backward_s;
      s.comm_f_s += ops.comm_f_s;
      s.comm_b_s += ops.comm_b_s;
      s.tp_s += ops.tp_s;
    };
    if (i == 0) add_ops(first_ops);
    if (i + 1 == chunks.size()) add_ops(last_ops);
    s.params += ends.dense;
    stages.push_back(s);
  }
  // The stage whose breakdown is reported: the one that computes longest, as the simulator
  // picks its critical rank (sim/engine.cpp); the pipeline replay gives every stage the same
  // makespan, so the choice only decides how it is split.
  auto per_mb = [](const StageTimes& s) { return s.forward_s + s.backward_s + s.recompute_s; };
  const auto slow_it = std::max_element(stages.begin(), stages.end(),
                                        [&](const StageTimes& a, const StageTimes& b) { return per_mb(a) < per_mb(b); });
  const StageTimes& slow = *slow_it;
  const auto slow_stage = static_cast<std::int64_t>(slow_it - stages.begin());

  report::Breakdown& b = r.breakdown;
  b.compute_s = micro_batches * (slow.forward_s + slow.backward_s);
  b.recompute_s = micro_batches * slow.recompute_s;
  b.tp_s = micro_batches * slow.tp_s;
  b.cp_s = micro_batches * slow.cp_s;
  b.ep_s = micro_batches * slow.ep_s;
  // Once a step, outside the micro-batches: the gradient buffer zeroed (the Program's
  // zero_grad_buffer, models/program.cpp), compute of the stage like its layers'.
  const double zero_grads_s = timer(OpKind::elementwise, 0, gradient_buffer_bytes(p, slow.params, slow.expert_params));
  b.compute_s += zero_grads_s;
  // The same compute by op kind: per step, as compute_s and recompute_s count it.
  r.op_times.reserve(kNumOpKinds);
  for (const OpKind k : kOpKinds) {
    const auto i = static_cast<std::size_t>(k);
    const bool zeroing = k == OpKind::elementwise;
    if (slow.kinds.count[i] <= 0 && !zeroing) continue;
    r.op_times.push_back({std::string(to_string(k)), micro_batches * slow.kinds.seconds[i] + (zeroing ? zero_grads_s : 0),
                          std::llround(micro_batches * slow.kinds.count[i]) + (zeroing ? 1 : 0)});
  }

  // DP by the Program's rules, replayed on the slowest stage's schedule (models/dp_replay),
  // every collective at its group's share (the worst stage's, for a DP group counted stage by
  // stage: topology::staggered_by_stage); its collectives after its last item are timed again
  // below, beside every other stage's, as the step's end runs them (models/end_of_step).
  const auto slow_index = static_cast<std::size_t>(slow_stage);
  // The pipeline's transfers through stage k's NICs, which its DP stream's collectives share
  // during its items (DpStage::transfers_on_nic): each of its items receives an activation or a
  // gradient from one neighbour and sends one to the other (none before the first virtual stage
  // or after the last), over its boundaries, as many each way; their seconds alone
  // (models::p2p_s) over the stage's items' seconds, at a transfer's own rate (the next
  // boundary's where both cross nodes: boundary_link).
  const double transfer_bytes = tokens_mb * d(m.hidden_size) * e / t;  // scattered over TP (NAR21 §4.1)
  auto transfers_on_nic = [&](std::size_t k) {
    NicSharing out;
    const std::int64_t pp = par.pipeline_model_parallel_size;
    if (pp <= 1 || !pp_net.crosses_nodes) return out;
    const auto stage = static_cast<std::int64_t>(k);
    const std::int64_t after = stage, before = (stage + pp - 1) % pp;  // the boundaries to the next stage and from the one before
    const BoundaryLink to_next = boundary_link(pp_net, after), from_before = boundary_link(pp_net, before);
    const double next_s = to_next.inside_node ? 0 : p2p_s(pp_net, transfer_bytes, after), before_s = from_before.inside_node ? 0 : p2p_s(pp_net, transfer_bytes, before);
    double sends_s = 0, items_s = 0;
    const std::int64_t virtual_stages = pp * vchunks;
    for (std::int64_t c = 0; c < vchunks; ++c) {
      const std::int64_t v = c * pp + stage;  // its virtual stage
      const auto at = static_cast<std::size_t>(stage * vchunks + c);
      items_s += pipe.forward_s[at] + pipe.backward_s[at];
      if (v + 1 < virtual_stages) sends_s += next_s;  // the forward's output out, the backward's input in
      if (v > 0) sends_s += before_s;                 // the backward's output out, the forward's input in
    }
    if (items_s <= 0) return out;
    out.busy_fraction = std::min(1.0, sends_s / items_s);
    out.flow_bytes_per_s = to_next.inside_node ? from_before.bytes_per_s : to_next.bytes_per_s;
    return out;
  };
  const DpNetworks dp_nets{dp_net, edp_net, dp_replica_net, edp_replica_net, dense_groups.replicas, expert_groups.replicas};
  const DpReplay dp = replay_dp(p, hw, counts, dp_nets,
                                {slow_stage, step_micro_batches, chunks[slow_index], firsts[slow_index], layer_times, first_ops,
                                 last_ops, slow.params, slow.expert_params, zero_grads_s, transfers_on_nic(slow_index)},
                                collective_time);
  b.dp_s = dp.dp_s;

  // Bubble and exposed pipeline communication: the schedule replayed item by item on every
  // stage (models/pipeline), as the simulator plays the Program. One bubble in both tiers
  // (issue 18): what the slowest stage waits with communication free, for its neighbours'
  // compute; the rest of its wait (the transfers, the TP, CP and EP time inside its
  // neighbours' items, and what their own DP holds them for) is exposed pipeline
  // communication.
  if (par.pipeline_model_parallel_size > 1) {
    // A transfer between nodes shares its GPU's NIC with the DP collectives the stage runs
    // under its compute, when those cross nodes too (models::p2p_s with NicSharing: max-min
    // sharing while both run), for the share of the stage's span its DP stream is busy: the
    // steady state of what the simulator plays flow by flow.
    NicSharing dp_on_nic;
    if (dp.under_compute_s > 0 && dp.span_s > 0) {
      dp_on_nic.busy_fraction = std::min(1.0, dp.under_compute_s / dp.span_s);
      // A DP ring member's flow through its own NIC (models::collective_s: a ring between nodes),
      // of the first of the stream's groups that crosses nodes.
      for (const GroupNetwork* g : {&dp_net, &edp_net, &dp_replica_net, &edp_replica_net}) {
        if (!g->crosses_nodes) continue;
        dp_on_nic.flow_bytes_per_s = ring_member_bytes_per_s(*g);
        break;
      }
    }
    pipe.transfer_s = p2p_s(pp_net, transfer_bytes, -1, dp_on_nic);
    for (std::size_t boundary = 0; boundary < std::max(pp_net.edge_fractions.size(), pp_net.edge_crosses_nodes.size()); ++boundary) {
      pipe.boundary_transfer_s.push_back(p2p_s(pp_net, transfer_bytes, static_cast<std::int64_t>(boundary), dp_on_nic));
    }
    // Each stage's own DP, replayed on its own order and buckets as the reported stage's above,
    // where DP holds a stage's items (collectives under them taking SMs, a blocking reduction,
    // a ZeRO-3 gather, the gathers dispatched with the step) or runs past its last item: where
    // one is held, its neighbours wait for it, and the step ends when the last stage's DP does
    // (issue 18: the simulator's stages are each late for their own DP; the first stage's first
    // chunk waits for the embedding's gather).
    const bool holds = !dp.item_delays.empty() || !dp.chunk_ready_s.empty() || dp.before_end_s > 0 ||
                       (dp.after_last_item.empty() && dp.dp_s > dp.before_end_s);
    std::vector<DpReplay> own;  // per stage, where `holds`
    if (holds) {
      own.reserve(stages.size());
      for (std::size_t k = 0; k < stages.size(); ++k) {
        if (k == slow_index) {
          own.push_back(dp);
          continue;
        }
        const StageTimes& sk = stages[k];
        own.push_back(replay_dp(p, hw, counts, dp_nets,
                                {static_cast<std::int64_t>(k), step_micro_batches, chunks[k], firsts[k], layer_times, first_ops, last_ops,
                                 sk.params, sk.expert_params, timer(OpKind::elementwise, 0, gradient_buffer_bytes(p, sk.params, sk.expert_params)),
                                 transfers_on_nic(k)},
                                collective_time));
      }
    }
    // Where the stages' DP streams only take SMs from their items (DpReplay::streamed: overlapped
    // reductions, gathers dispatched with the step), each stage's stream is played beside its
    // items where the schedule places them, as the simulator plays it (PipelineSpec::dp_streams):
    // a reduction issued before an idle wait slows less of the compute than the stage's own
    // replay, whose neighbours are never late, measured (on NeMo's Nemotron-340B the cool-down
    // then ran 4 ms a chunk slower than the simulator's). Otherwise each stage's items are held
    // for what its own replay measured (DpReplay::item_delays), an approximation: its items'
    // delays are matched by chunk, pass and micro-batch.
    const bool streamed = !own.empty() && dp.streamed && dp.sm_fraction > 0;
    for (std::size_t k = 0; k < own.size(); ++k) {
      const DpReplay& its = own[k];
      const auto stage = static_cast<std::int32_t>(k);
      if (streamed) {
        pipe.dp_streams.resize(own.size());
        pipe.dp_streams[k] = {its.sm_fraction, its.gathers_end_s};
        for (const DpReplay::Issued& c : its.issued) pipe.issues.push_back({stage, c.item.chunk, c.item.pass, c.item.microbatch, c.after_s, c.seconds});
      } else {
        // The gathers' SMs before the first backward stay the reported stage's own replay's
        // (unplayed_s below): its item delays hold the rest of their share already.
        for (const DpReplay::ItemDelay& d : its.item_delays) pipe.delays.push_back({stage, d.item.chunk, d.item.pass, d.item.microbatch, d.seconds});
      }
      // The parameter gathers dispatched with the step hold each stage's chunks' first forwards
      // until they end.
      for (std::size_t c = 0; c < its.chunk_ready_s.size(); ++c) {
        if (its.chunk_ready_s[c] > 0) pipe.not_before.push_back({stage, static_cast<std::int32_t>(c), Pass::forward, 0, its.chunk_ready_s[c]});
      }
    }
    // Played so, the streams' collectives share a transfer's NIC where they run beside it (the
    // NIC's half while both run: models::p2p_s), rather than for the share of the step the
    // stream is busy.
    if (streamed && dp_on_nic.flow_bytes_per_s > 0) {
      NicSharing beside = dp_on_nic;
      beside.busy_fraction = 1;
      pipe.transfer_s = p2p_s(pp_net, transfer_bytes, -1, NicSharing{});
      pipe.shared_transfer_s = p2p_s(pp_net, transfer_bytes, -1, beside);
      for (std::size_t boundary = 0; boundary < pipe.boundary_transfer_s.size(); ++boundary) {
        pipe.boundary_transfer_s[boundary] = p2p_s(pp_net, transfer_bytes, static_cast<std::int64_t>(boundary), NicSharing{});
        pipe.boundary_shared_transfer_s.push_back(p2p_s(pp_net, transfer_bytes, static_cast<std::int64_t>(boundary), beside));
      }
    }
    double played_s = 0;  // of the delays, the reported stage's own: DP
    if (!streamed) {
      for (const DpReplay::ItemDelay& d : dp.item_delays) played_s += d.seconds;
    }
    // Named, not bound: a lambda below reads them (clang refuses to capture a structured binding
    // before C++20's P1091 is implemented, and the fuzz preset builds with clang).
    const std::pair<PipelineTimes, PipelineTimes> replayed = pipeline_times(pipe, pipe_compute);
    const PipelineTimes &with_comm = replayed.first, &compute_only = replayed.second;
    const auto st = static_cast<std::size_t>(slow_stage);
    // Of the reported stage's DP before its last item's end, what the replay now plays
    // (`replaced_s`: its first forwards' waits for the gathers, and where its stream is played
    // the SMs it takes from its items) and what it played instead (`replayed_s`, DP as the
    // simulator counts it); the rest (the gradient buffer's zeroing slowed beside the gathers,
    // and where the stream is not played their SMs before the first backward) is not played
    // (`unplayed_s`, added to the step).
    const double zeroing_slowed_s = std::max(0.0, dp.origin_s - zero_grads_s);
    const double replaced_s = streamed                           ? std::max(0.0, dp.before_end_s - zeroing_slowed_s)
                              : with_comm.held_back_s.empty() ? 0.0
                                                                 : dp.start_wait_s;
    const double replayed_s = (with_comm.held_back_s.empty() ? 0.0 : with_comm.held_back_s[st]) +
                              (with_comm.slowed_s.empty() ? 0.0 : with_comm.slowed_s[st]);
    const double unplayed_s = std::max(0.0, dp.before_end_s - played_s - replaced_s);
    b.bubble_s = compute_only.idle_s[st];
    // What each stage's DP stream still runs after its last item: as played above, or as its
    // own replay ran it.
    auto tail_s = [&](std::size_t k) {
      if (streamed) return std::max(0.0, with_comm.dp_end_s[k] - with_comm.end_s[k]);
      return own.empty() ? dp.tail_s : own[k].tail_s;
    };
    // The step's end: each stage's collectives after its last item (the deferred gradient
    // reduction, the closing gather) start when its items end, after what its DP stream still
    // runs, and run beside the other stages' still running (models/end_of_step); each stage's
    // are the reported stage's in proportion to its parameters. Without them, each stage's DP
    // still running after its last item (the last buckets' reductions under
    // overlap.grad_reduce) ends its step. The reported stage's DP is its own; from its end to
    // the last stage's it waits, and that wait is the pipeline's, as the simulator counts a
    // rank done early (issue 18: its drain).
    std::vector<double> ends_s;
    if (!dp.after_last_item.empty()) {
      const double reported_params = slow.params + slow.expert_params;
      auto scale_of = [&](std::size_t k) { return reported_params > 0 ? (stages[k].params + stages[k].expert_params) / reported_params : 1.0; };
      std::vector<double> start_s, scale;
      start_s.reserve(stages.size());
      scale.reserve(stages.size());
      for (std::size_t k = 0; k < stages.size(); ++k) {
        start_s.push_back(with_comm.end_s[k] + tail_s(k));
        scale.push_back(scale_of(k));
      }
      ends_s = dp_end_of_step(p, dp_nets, dp.after_last_item, collective_time, start_s, scale);
    } else {
      ends_s = with_comm.end_s;
      for (std::size_t k = 0; k < own.size(); ++k) ends_s[k] += streamed ? tail_s(k) : std::max(0.0, own[k].dp_s - own[k].before_end_s);
    }
    const double last = *std::max_element(ends_s.begin(), ends_s.end());
    b.dp_s = std::max(0.0, dp.before_end_s - replaced_s + replayed_s + (ends_s[st] - with_comm.end_s[st]));
    const double busy = with_comm.makespan_s - with_comm.idle_s[st];
    // The rest of the step, up to the last stage's end, is the pipeline's. The bubble (the
    // replay without communication) counts the reported stage's idle that its own DP (its
    // delays, its collectives after its items) may now fill: then the rest is negative, and the
    // bubble is what is left of that idle, so that the terms still add up to the step's end
    // (pp 0).
    const double rest = last + unplayed_s - busy - b.bubble_s - b.dp_s;
    b.pp_s = std::max(0.0, rest);
    if (rest < 0) b.bubble_s = std::max(0.0, b.bubble_s + rest);
  }
  const double slow_compute = slow.forward_s + slow.backward_s + slow.recompute_s;
  r.bubble_fraction = micro_batches > 0 && slow_compute > 0 ? b.bubble_s / (micro_batches * slow_compute) : 0;

  // Optimizer: each GPU updates the parameters it owns (all of them without ZeRO).
  {
    const double owned_dense = par.zero_stage >= 1 ? slow.params / d(std::max<std::int64_t>(1, dense_groups.shard_size)) : slow.params;
    const double owned_expert = par.zero_stage >= 1 ? slow.expert_params / d(std::max<std::int64_t>(1, expert_groups.shard_size)) : slow.expert_params;
    // The Program's optimizer_step, and before it fp16's unscale and gradient clipping (its
    // unscale_grads and clip_grads).
    const double owned = owned_dense + owned_expert;
    b.optimizer_s = timer(OpKind::optimizer, 0, owned * optimizer_bytes_per_param(p)) +
                    (p.training.precision == plan::Precision::fp16 ? timer(OpKind::optimizer, 0, owned * unscale_grad_bytes_per_param(p)) : 0) +
                    (p.training.clip_grad > 0 ? timer(OpKind::optimizer, 0, owned * clip_grad_bytes_per_param(p)) : 0);
  }

  set_headline_figures(r, p, b.total(), step_flops(p, options.flops), peak);
  r.mfu_attention = options.flops.causal_attention || p.training.attention_flops == plan::AttentionFlops::causal ? "causal" : "full";

  attach_stage_memory(stage_memory(p, chunks, firsts, step_micro_batches), r);

  attach_power(p, hw, r);

  std::vector<std::string> regime = regime_notes(p);
  const bool outside = outside_regime(regime);
  for (auto& note : regime) r.notes.push_back(std::move(note));
  attach_interval(p, r, outside);
  r.provenance.meshwork_version = kVersion;
  r.provenance.meshwork_commit = kGitCommit;
  if (options.provenance) r.provenance.plan_hash = report::fnv1a_hex(plan::to_json(p).dump());
  r.provenance.hardware_profile = std::string(p.cluster.gpu.name) + " (" + std::string(hw.generation) + " calibration)";
  r.provenance.seed = p.run.seed;
  return r;
}

}  // namespace meshwork::models
