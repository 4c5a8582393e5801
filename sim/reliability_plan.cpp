// The reliability model's inputs from a plan (reliability.hpp): component counts, rates,
// the checkpoint's size and costs, slowdowns and the smaller meshes; and its Report section.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "models/estimate.hpp"
#include "models/memory.hpp"
#include "models/params.hpp"
#include "plan/validate.hpp"
#include "sim/reliability.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"
#include "topology/faults.hpp"

namespace meshwork::reliability {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kHour = 3600, kDay = 86400;
// The Llama 3 405B fleet (docs/reference/published-runs.md B1; Llama Team 2024, Table 5): 419 unexpected
// interruptions in 54 days on 16,384 H100 in 2,048 nodes. The table's percentages (not its
// counts, which do not add up to them) give the shares, rescaled from their 94.9% total to
// the 419: per class, interruptions = share / 94.9% x 419; the MTBF of one component is
// then components x 54 x 24 h / interruptions.
//   GPU: faulty GPU 30.1 + SRAM 4.5 + system processor 4.1 + thermal interface 1.4 = 40.1%
//     -> 177.0 over 16,384 GPUs: 119,900 h
//   HBM3: 17.2% -> 75.9 over 16,384: 279,600 h
//   silent data corruption: 1.4% -> 6.18 over 16,384 GPUs x 1,296 h: 2.91e-7 per GPU-hour
//   software: bug 12.9 + dependency 0.5 + NCCL watchdog timeouts 1.7 = 15.1% -> 66.7 over
//     2,048 nodes: 39,800 h
//   network switch or cable: 8.4% -> 37.1 over 35,120 cables (meshwork's model of that
//     fabric: 3 tiers, radix 64, pods of 3,072): 1,227,000 h; switches take no separate share
//   host: maintenance 7.6 + SSD 0.7 + power supply 0.7 + chassis 0.5 + IO board 0.5 + CPU 0.5
//     + system memory 0.5 = 11.0% -> 48.6 over 2,048 nodes: 54,650 h
//   NIC: 1.7% -> 7.51 over 16,384 NICs: 2,827,000 h
// The 47 planned interruptions (automated maintenance) are not rates: plans list them as
// events.
struct Fleet {
  double gpu_h, hbm_h, nic_h, link_h, node_h, software_h, sdc_per_gpu_hour;
};
Fleet llama3_fleet() {
  const double hours = 54 * 24, per_share = 419 / 94.9;
  auto mtbf = [&](double components, double share_pct) { return components * hours / (share_pct * per_share); };
  return {mtbf(16384, 40.1), mtbf(16384, 17.2), mtbf(16384, 1.7), mtbf(35120, 8.4), mtbf(2048, 11.0), mtbf(2048, 15.1),
          1.4 * per_share / (16384 * hours)};
}

// A link, switch or NIC event whose loss the fabric routes around: every group of the plan
// keeps a path without it (topology::fault_impact). Its cost is the stall until the fabric
// reroutes (cluster.topology.reroute_s), not a restart. Anything else (no target, an unknown
// one, a group cut off) interrupts the job as before.
std::optional<double> reroute_stall(const plan::Plan& p, const plan::FailureEvent& e) {
  using K = plan::FailureEventKind;
  if ((e.kind != K::link_down && e.kind != K::switch_down && e.kind != K::nic_down) || e.target.empty()) return std::nullopt;
  auto built = topology::build(p.cluster);
  if (!built.topology) return std::nullopt;
  topology::Topology after = *built.topology;
  // A link either end first, as `simulate --fail` takes it.
  const auto dash = e.target.find('-');
  if (topology::apply_fault(after, {topology::FaultKind::down, e.target, 0}) &&
      (dash == std::string::npos || topology::apply_fault(after, {topology::FaultKind::down, e.target.substr(dash + 1) + "-" + e.target.substr(0, dash), 0}))) {
    return std::nullopt;
  }
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  for (const auto& impact : topology::fault_impact(*built.topology, after, layout)) {
    if (impact.disconnected) return std::nullopt;
  }
  return p.cluster.topology.effective_reroute_s();
}

}  // namespace

double checkpoint_bytes_per_param(const plan::TrainingConfig& training) {
  return (training.precision == plan::Precision::fp32 ? 4 : 2) + models::optimizer_state_bytes_per_param(training);
}

Derived inputs_for(const plan::Plan& p, double step_s, const StateStepTime& step_with) {
  Derived d;
  Inputs& in = d.inputs;
  const auto& f = p.failures;
  const auto& c = p.cluster;
  in.step_s = step_s;
  const double gpus = static_cast<double>(c.num_gpus);
  const double nodes = std::ceil(gpus / static_cast<double>(std::max<std::int64_t>(c.gpus_per_node, 1)));
  in.nodes = static_cast<std::int64_t>(nodes);
  // Components in the job's footprint.
  double cables = 0, switches = 0;
  if (auto built = topology::build(c); built.topology) {
    const auto bom = topology::bill_of_materials(*built.topology);
    cables = static_cast<double>(bom.cables);
    for (const auto& [kind, n] : bom.switches) {
      if (kind != "nvswitch") switches += static_cast<double>(n);
    }
  }
  // Rates: the preset's, then every MTBF the plan gives.
  plan::MtbfHours m = f.mtbf_hours;
  double sdc_per_gpu_hour = f.sdc_per_gpu_hour;
  if (f.preset == plan::FailurePreset::llama3) {
    const Fleet fleet = llama3_fleet();
    auto fill = [](double& field, double value) {
      if (field <= 0) field = value;
    };
    fill(m.gpu, fleet.gpu_h);
    fill(m.hbm, fleet.hbm_h);
    fill(m.nic, fleet.nic_h);
    fill(m.link, fleet.link_h);
    fill(m.node, fleet.node_h);
    fill(m.software, fleet.software_h);
    fill(sdc_per_gpu_hour, fleet.sdc_per_gpu_hour);
  }
  auto rate = [](double components, double mtbf_h) { return mtbf_h > 0 ? components / (mtbf_h * kHour) : 0.0; };
  auto at = [&](Cause cause) -> double& { return in.rate_per_s[static_cast<std::size_t>(cause)]; };
  at(Cause::gpu) = rate(gpus, m.gpu);
  at(Cause::hbm) = rate(gpus, m.hbm);
  at(Cause::nic) = rate(nodes * static_cast<double>(c.nics_per_node), m.nic);
  at(Cause::link) = rate(cables, m.link);
  at(Cause::network_switch) = rate(switches, m.network_switch);
  at(Cause::node) = rate(nodes, m.node);
  at(Cause::software) = rate(nodes, m.software);
  // Per 1,000 node-days: the job's nodes x r / 1000 per day.
  const auto& nd = f.per_1000_node_days;
  const double per_node_day = nodes / 1000 / kDay;
  at(Cause::gpu) += nd.gpu * per_node_day;
  at(Cause::hbm) += nd.hbm * per_node_day;
  at(Cause::nic) += nd.nic * per_node_day;
  at(Cause::link) += nd.link * per_node_day;
  at(Cause::network_switch) += nd.network_switch * per_node_day;
  at(Cause::node) += nd.node * per_node_day;
  at(Cause::software) += nd.software * per_node_day;
  in.weibull = f.distribution == plan::FailureDistribution::weibull;
  in.weibull_shape = f.weibull_shape;
  in.sdc_per_s = sdc_per_gpu_hour * gpus / kHour;
  in.sdc_check_s = f.sdc_check_s;
  for (const auto& e : f.events) {
    if (const auto stall = reroute_stall(p, e)) {
      in.reroutes.emplace_back(e.at_s, *stall);
      continue;
    }
    Cause cause = Cause::scheduled;
    switch (e.kind) {
      case plan::FailureEventKind::gpu_down: cause = Cause::gpu; break;
      case plan::FailureEventKind::node_down: cause = Cause::node; break;
      case plan::FailureEventKind::nic_down: cause = Cause::nic; break;
      case plan::FailureEventKind::link_down: cause = Cause::link; break;
      case plan::FailureEventKind::switch_down: cause = Cause::network_switch; break;
      case plan::FailureEventKind::maintenance: cause = Cause::scheduled; break;
    }
    in.scheduled.emplace_back(e.at_s, cause);
  }
  std::sort(in.scheduled.begin(), in.scheduled.end());
  std::sort(in.reroutes.begin(), in.reroutes.end());
  double total = in.sdc_per_s;
  for (double r : in.rate_per_s) total += r;
  d.mtti_s = total > 0 ? 1 / total : kInf;

  // Checkpoints: the model's weights and Adam state; each GPU snapshots its own share (the
  // whole state over the GPUs of one replica, or over all of them when ZeRO shards it).
  const auto& par = p.parallelism;
  d.checkpoint_bytes = models::count_params(p.model).total * checkpoint_bytes_per_param(p.training);
  const double replica_gpus = gpus / static_cast<double>(std::max<std::int64_t>(par.data_parallel_size, 1));
  // With distributed-optimizer instances each instance holds the whole state (its GPUs a
  // 1/instance share each), so one instance's GPUs write it.
  const double sharded_gpus = gpus / static_cast<double>(std::max<std::int64_t>(par.num_distributed_optimizer_instances, 1));
  const double per_gpu_bytes = d.checkpoint_bytes / (par.zero_stage >= 1 ? sharded_gpus : replica_gpus);
  const auto& k = p.checkpoint;
  in.load_persistent_s = d.checkpoint_bytes / (k.read_gbytes_per_s * 1e9);
  in.snapshot_s = per_gpu_bytes / (k.snapshot_gbytes_per_s * 1e9);
  // The persist stage. Every writer's share leaves its node through the node's link to the
  // storage, and all of them share the storage's write bandwidth: a checkpoint is on disk
  // when the slowest of the three stages has passed it (the write streams from the host copy,
  // so the stages overlap rather than add). Without ZeRO one replica writes (its GPUs hold
  // the whole state; the others' is the same); with it every GPU writes its shard.
  const double gpus_per_node = static_cast<double>(std::max<std::int64_t>(c.gpus_per_node, 1));
  const double writers = par.zero_stage >= 1 ? sharded_gpus : replica_gpus;
  const double node_nics_gbps = c.nic_bandwidth_gbps * static_cast<double>(c.nics_per_node);
  const double storage_link_gbps = k.storage_link_gbps_per_node > 0 ? k.storage_link_gbps_per_node : node_nics_gbps;
  d.storage_s = d.checkpoint_bytes / (k.write_gbytes_per_s * 1e9);
  d.host_link_s = storage_link_gbps > 0 ? per_gpu_bytes * std::min(gpus_per_node, writers) / (storage_link_gbps / 8 * 1e9) : 0;
  in.write_s = std::max({d.storage_s, d.host_link_s, in.snapshot_s});
  // From the neighbour's host memory over this GPU's share of the node's NICs, then to the
  // GPU; the in-memory tier's copy goes the other way, a node's snapshots over its NICs.
  const double nic_bytes_per_s = node_nics_gbps / 8 * 1e9 / gpus_per_node;
  const bool has_neighbour = nodes > 1 && nic_bytes_per_s > 0;
  in.load_memory_s = (has_neighbour ? per_gpu_bytes / nic_bytes_per_s : 0) + in.snapshot_s;
  in.memory_copy_s = has_neighbour ? per_gpu_bytes / nic_bytes_per_s : 0;
  in.async = k.mode == plan::CheckpointMode::async;
  in.memory_tier = std::find(k.tiers.begin(), k.tiers.end(), plan::CheckpointTier::memory) != k.tiers.end();
  in.persistent_tier = std::find(k.tiers.begin(), k.tiers.end(), plan::CheckpointTier::persistent) != k.tiers.end();
  // Checkpoints are taken between steps; an asynchronous write runs under the next interval
  // and must end before the next checkpoint begins (a synchronous one stalls the job for its
  // whole length, so it cannot overlap the next).
  d.min_interval_s = std::max(step_s, in.persistent_tier && in.async ? in.write_s : 0.0);
  const double stall = in.async ? in.snapshot_s : in.write_s;
  // The run's length: to the token target when the plan sets one, else the horizon. With nothing
  // to fail, an automatic interval checkpoints once, at the end.
  const double tokens_per_step_run = static_cast<double>(p.training.global_batch_size) * static_cast<double>(p.model.seq_length);
  const double run_s = p.training.tokens > 0 && tokens_per_step_run > 0 ? p.training.tokens / tokens_per_step_run * step_s : p.run.horizon_s;
  if (k.interval.automatic) {
    in.interval_s = std::isfinite(d.mtti_s) ? daly_interval_s(stall, d.mtti_s) : run_s;
    in.interval_s = std::max(in.interval_s, d.min_interval_s);
  } else {
    in.interval_s = k.interval.seconds;
    if (in.persistent_tier && in.interval_s < d.min_interval_s) {
      const bool step_bound = step_s >= in.write_s;
      char write_rate[32];
      std::snprintf(write_rate, sizeof write_rate, "%g", k.write_gbytes_per_s);
      d.error = "checkpoint.interval: " + format_duration(in.interval_s) + " is shorter than " +
                (step_bound ? "one step (" + format_duration(step_s) + "): checkpoints are taken between steps"
                            : "one persistent write (" + format_duration(in.write_s) + ": " + format_duration(d.storage_s) + " through the storage's " +
                                  write_rate + " GB/s, " + format_duration(d.host_link_s) +
                                  " through each node's link to it): the next asynchronous checkpoint would start before this one is on disk") +
                "; use at least " + format_duration(d.min_interval_s) + " or automatic";
    }
  }
  // The memory tier: Daly's optimum for its snapshot, at least one step and one copy.
  in.memory_interval_s = std::isfinite(d.mtti_s) ? daly_interval_s(in.snapshot_s, d.mtti_s) : run_s;
  in.memory_interval_s = std::max({in.memory_interval_s, step_s, in.memory_copy_s});
  in.detection_s = f.detection_s;
  in.restart_s = f.restart_s;
  in.repair_s = f.repair_s;
  in.requeue_s = f.requeue_s;
  in.spares = k.spares;
  in.shrink = k.on_failure == plan::FailureResponse::shrink_dp;
  in.replicas = std::max<std::int64_t>(par.data_parallel_size, 1);
  if (in.shrink) {
    // The smaller mesh keeps the global batch where it divides (more micro-batches per
    // replica), else the largest that does (the interleaved schedule's micro-batches a
    // multiple of PP, plan::validate); its step and tokens re-derived by the estimate.
    const report::Report healthy = models::estimate(p);
    in.shrunk_throughput.push_back(1.0);
    for (std::int64_t lost = 1; lost < std::min<std::int64_t>(in.replicas, 9); ++lost) {
      plan::Plan smaller = p;
      const std::int64_t dp = in.replicas - lost;
      smaller.parallelism.data_parallel_size = dp;
      smaller.cluster.num_gpus = p.cluster.num_gpus / in.replicas * dp;
      const bool interleaved = par.pipeline_schedule == plan::PipelineSchedule::interleaved && par.pipeline_model_parallel_size > 1;
      const std::int64_t unit = std::max<std::int64_t>(p.training.micro_batch_size, 1) * dp * (interleaved ? par.pipeline_model_parallel_size : 1);
      smaller.training.global_batch_size = std::max(unit, p.training.global_batch_size / unit * unit);
      double factor = static_cast<double>(dp) / static_cast<double>(in.replicas);
      if (!plan::validate(smaller).has_errors() && healthy.tokens_per_s > 0) {
        const report::Report r = models::estimate(smaller);
        if (r.tokens_per_s > 0) factor = r.tokens_per_s / healthy.tokens_per_s;
      }
      in.shrunk_throughput.push_back(std::min(1.0, factor));
    }
  }

  // Slowdowns and the step time of those cluster states.
  in.straggler_per_s = f.straggler_per_gpu_day * gpus / kDay;
  in.straggler_s = f.straggler_s;
  in.degradation_per_s = f.degradation_per_link_day * cables / kDay;
  in.degradation_s = f.degradation_s;
  if (step_with) {
    if (in.straggler_per_s > 0) in.straggler_factor = step_with(1, 0) / step_s;
    if (in.degradation_per_s > 0) in.degradation_factor = step_with(0, 1) / step_s;
  } else {
    // A straggler holds its TP group, its pipeline, and at the gradient reduction everyone.
    in.straggler_factor = f.straggler_slowdown;
    if (in.degradation_per_s > 0) {
      // Destination-mod-k puts some ring on every link: the slowest ring paces the step, as if
      // the whole scale-out fabric ran at the degraded rate (an upper bound).
      plan::Plan slow = p;
      slow.cluster.nic_bandwidth_gbps *= f.degraded_bandwidth_factor;
      const double healthy = models::estimate(p).step_time_s;
      in.degradation_factor = healthy > 0 ? std::max(1.0, models::estimate(slow).step_time_s / healthy) : 1.0;
    }
  }
  in.horizon_s = p.run.horizon_s;
  const double tokens_per_step = static_cast<double>(p.training.global_batch_size) * static_cast<double>(p.model.seq_length);
  if (p.training.tokens > 0 && tokens_per_step > 0) in.target_work_s = p.training.tokens / tokens_per_step * step_s;
  return d;
}

report::Reliability to_report(const Derived& d, const Summary& s, std::uint64_t seed) {
  report::Reliability r;
  r.horizon_s = d.inputs.target_work_s > 0 ? 0 : d.inputs.horizon_s;
  r.trials = s.trials;
  r.seed = static_cast<std::int64_t>(seed);
  r.goodput = s.goodput;
  r.goodput_ci95 = s.goodput_ci95;
  r.interruptions = s.interruptions;
  r.mtti_s = std::isfinite(d.mtti_s) ? d.mtti_s : 0;
  if (d.inputs.target_work_s > 0) {
    r.time_to_train_s = s.wall_s;
    r.time_to_train_ci95 = s.wall_ci95;
  }
  r.checkpoint_interval_s = d.inputs.interval_s;
  r.checkpoint_bytes = d.checkpoint_bytes;
  r.checkpoint_persist_s = d.inputs.write_s;
  r.checkpoint_snapshot_s = d.inputs.snapshot_s;
  r.checkpoint_min_interval_s = d.min_interval_s;
  for (std::size_t c = 0; c < kCauses; ++c) r.interruptions_by_cause.emplace_back(std::string(to_string(static_cast<Cause>(c))), s.interruptions_by_cause[c]);
  for (std::size_t l = 0; l < kLosses; ++l) r.losses_s.emplace_back(std::string(to_string(static_cast<Loss>(l))), s.loss_s[l]);
  return r;
}


}  // namespace meshwork::reliability
