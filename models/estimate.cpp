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
  const DpNetworks dp_nets{dp_net, edp_net, dp_replica_net, edp_replica_net, dense_groups.replicas, expert_groups.replicas};
  const DpReplay dp = replay_dp(p, hw, counts, dp_nets,
                                {slow_stage, step_micro_batches, chunks[slow_index], firsts[slow_index], layer_times, first_ops,
                                 last_ops, slow.params, slow.expert_params, zero_grads_s},
                                collective_time);
  b.dp_s = dp.dp_s;

  // Bubble and exposed pipeline communication: the schedule replayed item by item on every
  // stage (models/pipeline), as the simulator plays the Program. One bubble in both tiers
  // (issue 18): what the slowest stage waits with communication free, for its neighbours'
  // compute; the rest of its wait (the transfers, the TP, CP and EP time inside its
  // neighbours' items, and what their own DP holds them for) is exposed pipeline
  // communication.
  if (par.pipeline_model_parallel_size > 1) {
    const double transfer_bytes = tokens_mb * d(m.hidden_size) * e / t;  // scattered over TP (NAR21 §4.1)
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
    // Each stage's items that its DP holds (collectives under them taking SMs, a blocking
    // reduction), as the reported stage's replay holds them (models/dp_replay), each stage's in
    // proportion to its parameters: where one is held, its neighbours wait for it (issue 18: the
    // simulator's stages are each late for their own DP). An approximation: the replay's stage
    // ran with its neighbours never late, and another stage's items are matched by chunk, pass
    // and micro-batch.
    const double reported_params = slow.params + slow.expert_params;
    auto scale_of = [&](std::size_t k) { return reported_params > 0 ? (stages[k].params + stages[k].expert_params) / reported_params : 1.0; };
    pipe.delays.reserve(dp.item_delays.size() * stages.size());
    for (std::size_t k = 0; k < stages.size(); ++k) {
      const double scale = scale_of(k);
      for (const DpReplay::ItemDelay& d : dp.item_delays) {
        pipe.delays.push_back({static_cast<std::int32_t>(k), d.item.chunk, d.item.pass, d.item.microbatch, d.seconds * scale});
      }
      // The parameter gathers dispatched with the step hold each stage's chunks' first
      // forwards until they end; the reported stage's own wait for them is then the replay's
      // (PipelineTimes::held_back_s), not what its DP replay counted (dp.start_wait_s).
      for (std::size_t c = 0; c < dp.chunk_ready_s.size(); ++c) {
        if (dp.chunk_ready_s[c] > 0) {
          pipe.not_before.push_back({static_cast<std::int32_t>(k), static_cast<std::int32_t>(c), Pass::forward, 0, dp.chunk_ready_s[c] * scale});
        }
      }
    }
    double played_s = 0;  // of the delays, the reported stage's own: DP
    for (const DpReplay::ItemDelay& d : dp.item_delays) played_s += d.seconds;
    const auto [with_comm, compute_only] = pipeline_times(pipe, pipe_compute);
    const auto st = static_cast<std::size_t>(slow_stage);
    const bool starts_played = !with_comm.held_back_s.empty();
    const double start_wait_s = starts_played ? dp.start_wait_s : 0.0, held_back_s = starts_played ? with_comm.held_back_s[st] : 0.0;
    // Of DP before the stage's last item's end, what the replay above does not play (the
    // gathers' SMs at the step's start), added to its step.
    const double unplayed_s = std::max(0.0, dp.before_end_s - played_s - start_wait_s);
    b.dp_s = std::max(0.0, dp.dp_s - start_wait_s + held_back_s);
    b.bubble_s = compute_only.idle_s[st];
    // The rest of the reported stage's idle is the pipeline's. The bubble (the replay without
    // communication) may hold idle that its own DP delays now fill: then the rest is negative,
    // and the bubble is what is left, so that the terms still add up to the replay's end.
    {
      const double rest = with_comm.idle_s[st] - played_s - held_back_s - b.bubble_s;
      b.pp_s = std::max(0.0, rest);
      if (rest < 0) b.bubble_s = std::max(0.0, b.bubble_s + rest);
    }
    // The step's end: each stage's collectives after its last item (the deferred gradient
    // reduction, the closing gather) start when its items end, after what its DP stream still
    // runs (as the reported stage's, dp.tail_s), and run beside the other stages' still
    // running (models/end_of_step); each stage's are the reported stage's in proportion to its
    // parameters. The reported stage's DP is its own; from their end to the last stage's it
    // waits, and that wait is the pipeline's, as the simulator counts a rank done early
    // (issue 18: its drain).
    if (!dp.after_last_item.empty()) {
      b.bubble_s = compute_only.idle_s[st];
      std::vector<double> start_s, scale;
      start_s.reserve(stages.size());
      scale.reserve(stages.size());
      for (std::size_t k = 0; k < stages.size(); ++k) {
        start_s.push_back(with_comm.end_s[k] + dp.tail_s);
        scale.push_back(scale_of(k));
      }
      const std::vector<double> ends = dp_end_of_step(p, dp_nets, dp.after_last_item, collective_time, start_s, scale);
      const double last = *std::max_element(ends.begin(), ends.end());
      b.dp_s = std::max(0.0, dp.before_end_s - start_wait_s + held_back_s + (ends[st] - with_comm.end_s[st]));
      const double busy = with_comm.makespan_s - with_comm.idle_s[st];
      // The rest of the step, up to the last stage's end, is the pipeline's. The bubble (the
      // replay without communication) counts the reported stage's idle after its items too,
      // which its own collectives now fill where they end after every other stage's: then the
      // rest is negative, and the bubble is what is left of that idle, so that the terms still
      // add up to the step's end (pp 0).
      const double rest = last + unplayed_s - busy - b.bubble_s - b.dp_s;
      b.pp_s = std::max(0.0, rest);
      if (rest < 0) b.bubble_s = std::max(0.0, b.bubble_s + rest);
    }
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
