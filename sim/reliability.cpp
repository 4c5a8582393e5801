// The long-horizon reliability model (reliability.hpp): Monte Carlo over whole runs.
#include "sim/reliability.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "models/estimate.hpp"
#include "models/params.hpp"
#include "plan/validate.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"

namespace meshwork::reliability {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kHour = 3600, kDay = 86400;

// splitmix64 (Steele, Lea, Flood, OOPSLA 2014) seeds each trial's own stream; the numbers
// come from our own transforms, not <random>'s distributions, whose algorithms differ between
// standard libraries: a seed gives the same run everywhere.
std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna 2018).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& w : s_) w = splitmix(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform on (0, 1].
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }
  double exponential(double rate) { return rate > 0 ? -std::log(uniform()) / rate : kInf; }
  // Weibull of the given mean and shape: scale (-ln U)^(1/k), scale = mean / Gamma(1 + 1/k).
  double weibull(double mean, double shape) {
    const double scale = mean / std::tgamma(1 + 1 / shape);
    return scale * std::pow(-std::log(uniform()), 1 / shape);
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(uniform() * static_cast<double>(n)) % std::max<std::int64_t>(n, 1); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<std::uint64_t, 4> s_{};
};

bool takes_a_node(Cause c) { return c == Cause::gpu || c == Cause::hbm || c == Cause::nic || c == Cause::node; }

// The Llama 3 405B fleet (published-runs.md B1; Llama Team 2024, Table 5): 419 unexpected
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

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
// Half-width of the 95% interval of the mean (normal approximation; trials are many).
double ci95(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return 1.96 * std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
}

}  // namespace

std::string_view to_string(Cause c) {
  static constexpr std::array<std::string_view, kCauses> names = {"gpu", "hbm", "nic", "link", "switch", "node", "software", "sdc", "scheduled"};
  return names[static_cast<std::size_t>(c)];
}
std::string_view to_string(Loss l) {
  static constexpr std::array<std::string_view, kLosses> names = {"lost_work", "restart", "checkpoint", "slowdown", "shrink", "requeue"};
  return names[static_cast<std::size_t>(l)];
}

double young_interval_s(double checkpoint_s, double mtbf_s) { return std::sqrt(2 * checkpoint_s * mtbf_s); }

double daly_interval_s(double checkpoint_s, double mtbf_s) {
  if (checkpoint_s >= 2 * mtbf_s) return mtbf_s;
  const double x = checkpoint_s / (2 * mtbf_s);
  return std::sqrt(2 * checkpoint_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - checkpoint_s;
}

double ettr_closed_form(double failures_per_s, double restart_s, double interval_s, double stall_s) {
  return (1 - failures_per_s * (restart_s + interval_s / 2)) / (1 + stall_s / interval_s);
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
  double total = in.sdc_per_s;
  for (double r : in.rate_per_s) total += r;
  d.mtti_s = total > 0 ? 1 / total : kInf;

  // Checkpoints: the model's weights and Adam state; each GPU snapshots its own share (the
  // whole state over the GPUs of one replica, or over all of them when ZeRO shards it).
  const auto& par = p.parallelism;
  d.checkpoint_bytes = models::count_params(p.model).total * kCheckpointBytesPerParam;
  const double replica_gpus = gpus / static_cast<double>(std::max<std::int64_t>(par.data_parallel_size, 1));
  const double per_gpu_bytes = d.checkpoint_bytes / (par.zero_stage >= 1 ? gpus : replica_gpus);
  const auto& k = p.checkpoint;
  in.write_s = d.checkpoint_bytes / (k.write_gbytes_per_s * 1e9);
  in.load_persistent_s = d.checkpoint_bytes / (k.read_gbytes_per_s * 1e9);
  in.snapshot_s = per_gpu_bytes / (k.snapshot_gbytes_per_s * 1e9);
  // From the neighbour's host memory over this GPU's share of the node's NICs, then to the GPU.
  const double nic_bytes_per_s = c.nic_bandwidth_gbps / 8 * 1e9 * static_cast<double>(std::max<std::int64_t>(c.nics_per_node, 1)) /
                                 static_cast<double>(std::max<std::int64_t>(c.gpus_per_node, 1));
  in.load_memory_s = per_gpu_bytes / nic_bytes_per_s + in.snapshot_s;
  in.async = k.mode == plan::CheckpointMode::async;
  in.memory_tier = std::find(k.tiers.begin(), k.tiers.end(), plan::CheckpointTier::memory) != k.tiers.end();
  in.persistent_tier = std::find(k.tiers.begin(), k.tiers.end(), plan::CheckpointTier::persistent) != k.tiers.end();
  const double stall = in.async ? in.snapshot_s : in.write_s;
  if (k.interval.automatic) {
    in.interval_s = std::isfinite(d.mtti_s) ? daly_interval_s(stall, d.mtti_s) : p.run.horizon_s;
    if (in.async) in.interval_s = std::max(in.interval_s, in.write_s);  // one write at a time
  } else {
    in.interval_s = k.interval.seconds;
  }
  in.memory_interval_s = std::isfinite(d.mtti_s) ? daly_interval_s(in.snapshot_s, d.mtti_s) : p.run.horizon_s;
  // Checkpoints are taken between steps: at most one per step.
  in.interval_s = std::max(in.interval_s, step_s);
  in.memory_interval_s = std::max(in.memory_interval_s, step_s);
  in.detection_s = f.detection_s;
  in.restart_s = f.restart_s;
  in.repair_s = f.repair_s;
  in.requeue_s = f.requeue_s;
  in.spares = k.spares;
  in.shrink = k.on_failure == plan::FailureResponse::shrink_dp;
  in.replicas = std::max<std::int64_t>(par.data_parallel_size, 1);
  if (in.shrink) {
    // The smaller mesh keeps the global batch where it divides (more micro-batches per
    // replica), else the largest that does; its step and tokens re-derived by the estimate.
    const report::Report healthy = models::estimate(p);
    in.shrunk_throughput.push_back(1.0);
    for (std::int64_t lost = 1; lost < std::min<std::int64_t>(in.replicas, 9); ++lost) {
      plan::Plan smaller = p;
      const std::int64_t dp = in.replicas - lost;
      smaller.parallelism.data_parallel_size = dp;
      smaller.cluster.num_gpus = p.cluster.num_gpus / in.replicas * dp;
      const std::int64_t unit = std::max<std::int64_t>(p.training.micro_batch_size, 1) * dp;
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

Trial run_trial(const Inputs& in, std::uint64_t seed) {
  Rng rng(seed);
  Trial tr;
  auto draw = [&](Cause c) {
    const double r = in.rate_per_s[static_cast<std::size_t>(c)];
    if (r <= 0) return kInf;
    return in.weibull ? rng.weibull(1 / r, in.weibull_shape) : rng.exponential(r);
  };
  double t = 0, work = 0;
  std::array<double, kCauses> next_fail{};
  for (std::size_t c = 0; c < kCauses; ++c) next_fail[c] = draw(static_cast<Cause>(c));
  std::size_t scheduled = 0;
  double next_sdc = rng.exponential(in.sdc_per_s);
  double corrupted_at = kInf;  // the earliest corruption not yet caught
  double next_straggler = rng.exponential(in.straggler_per_s), next_degradation = rng.exponential(in.degradation_per_s);
  std::vector<double> stragglers, degradations;  // when each active one ends
  struct Snap {
    double work = 0, taken_at = 0;
  };
  Snap persisted, inflight, memory;
  // The newest of each taken before the corruption not yet caught (older checkpoints are
  // kept for that): what a caught corruption rolls back to.
  Snap clean_persisted, clean_memory;
  auto persist = [&](const Snap& s) {
    persisted = s;
    if (s.taken_at < corrupted_at) clean_persisted = s;
  };
  bool inflight_active = false, memory_valid = false;
  double inflight_done = kInf;
  double since_persist = 0, since_memory = 0;  // running time since the last checkpoint
  std::vector<std::int64_t> failed_since_memory;
  std::int64_t spares = in.spares, lost_replicas = 0;
  std::vector<double> repairs;  // when failed nodes come back
  const double target = in.target_work_s;
  const double stop_wall = target > 0 ? std::max(in.horizon_s, 1.0) * 1000 : in.horizon_s;

  auto loss = [&](Loss l, double s) { tr.loss_s[static_cast<std::size_t>(l)] += s; };
  auto slow_factor = [&] {
    double f = 1;
    if (!stragglers.empty()) f = std::max(f, in.straggler_factor);
    if (!degradations.empty()) f = std::max(f, in.degradation_factor);
    return 1 / f;
  };
  auto shrink_factor = [&] {
    const auto k = static_cast<std::size_t>(lost_replicas);
    if (k < in.shrunk_throughput.size()) return in.shrunk_throughput[k];
    return static_cast<double>(in.replicas - lost_replicas) / static_cast<double>(in.replicas);
  };
  auto next_failure = [&](Cause& cause) {
    double when = kInf;
    for (std::size_t c = 0; c < kCauses; ++c) {
      if (next_fail[c] < when) {
        when = next_fail[c];
        cause = static_cast<Cause>(c);
      }
    }
    if (scheduled < in.scheduled.size() && in.scheduled[scheduled].first < when) {
      when = in.scheduled[scheduled].first;
      cause = in.scheduled[scheduled].second;
    }
    return when;
  };
  auto consume_failure = [&](Cause cause, double when) {
    if (scheduled < in.scheduled.size() && in.scheduled[scheduled].first == when && in.scheduled[scheduled].second == cause) {
      ++scheduled;
    } else {
      next_fail[static_cast<std::size_t>(cause)] = when + draw(cause);
    }
  };
  // Events that do not stop the job, up to `until`: slowdowns come and go, corruptions
  // happen, a persistent write completes, repaired nodes come back.
  auto background = [&](double until) {
    while (next_straggler <= until) {
      stragglers.push_back(next_straggler + in.straggler_s);
      next_straggler += rng.exponential(in.straggler_per_s);
    }
    while (next_degradation <= until) {
      degradations.push_back(next_degradation + in.degradation_s);
      next_degradation += rng.exponential(in.degradation_per_s);
    }
    std::erase_if(stragglers, [&](double end) { return end <= until; });
    std::erase_if(degradations, [&](double end) { return end <= until; });
    while (next_sdc <= until) {
      corrupted_at = std::min(corrupted_at, next_sdc);
      next_sdc += rng.exponential(in.sdc_per_s);
    }
    if (inflight_active && inflight_done <= until) {
      persist(inflight);
      inflight_active = false;
    }
    for (auto& r : repairs) {
      if (r <= until) {
        r = kInf;
        ++spares;
      }
    }
    std::erase_if(repairs, [](double r) { return !std::isfinite(r); });
  };
  // The job stands still for `d` seconds charged to `l`; a failure may cut it short, and is
  // then returned (else nullopt).
  auto stand = [&](double d, Loss l, Cause& cause) {
    const double when = next_failure(cause);
    if (when < t + d) {
      background(when);
      loss(l, when - t);
      t = when;
      consume_failure(cause, when);
      return true;
    }
    background(t + d);
    loss(l, d);
    t += d;
    return false;
  };

  // An interruption at time t: count, pick what to restore, recover (possibly interrupted
  // again, which is another interruption).
  auto interrupt = [&](Cause cause) {
    while (true) {
      ++tr.interruptions[static_cast<std::size_t>(cause)];
      std::int64_t node = -1;
      if (takes_a_node(cause)) node = rng.below(in.nodes);
      // The in-memory copy is gone when the node and its partner (pairs 2i, 2i+1) both failed
      // since it was taken.
      bool memory_ok = in.memory_tier && memory_valid;
      if (node >= 0) {
        const std::int64_t partner = node ^ 1;
        if (std::find(failed_since_memory.begin(), failed_since_memory.end(), partner) != failed_since_memory.end()) memory_ok = false;
        failed_since_memory.push_back(node);
      }
      inflight_active = false;  // a write cut short: the previous checkpoint stands
      // A caught corruption goes back to before it; anything else to the newest copy.
      const bool sdc = cause == Cause::sdc;
      Snap restore = in.persistent_tier ? (sdc ? clean_persisted : persisted) : Snap{};
      bool from_memory = false;
      const Snap& mem = sdc ? clean_memory : memory;
      if (memory_ok && mem.work >= restore.work) {
        restore = mem;
        from_memory = true;
      }
      // Rolled back to before the corruption: it is gone (an SDC always restores a clean state),
      // and the copies kept are clean again.
      if (restore.taken_at < corrupted_at) {
        corrupted_at = kInf;
        if (sdc) {
          persisted = clean_persisted;
          memory = clean_memory;
        }
        clean_persisted = persisted;
        clean_memory = memory;
      }
      loss(Loss::lost_work, work - restore.work);
      work = restore.work;
      since_persist = since_memory = 0;
      // A node to replace: a hot spare takes over; else the job requeues onto healthy nodes
      // (`requeue_s`), or shrinks data parallelism and goes on without the lost replica.
      double requeue = 0;
      if (node >= 0) {
        repairs.push_back(t + in.repair_s);
        if (spares > 0) {
          --spares;
        } else if (in.shrink && lost_replicas + 1 < in.replicas) {
          ++lost_replicas;
        } else {
          requeue = in.requeue_s;
        }
      }
      // Repaired nodes let a shrunk job grow back at its restart.
      while (lost_replicas > 0 && spares > 0) {
        --lost_replicas;
        --spares;
      }
      if (requeue > 0) {
        Cause again = cause;
        if (stand(requeue, Loss::requeue, again)) {
          cause = again;
          continue;
        }
      }
      const double recovery = in.detection_s + in.restart_s + (from_memory ? in.load_memory_s : in.load_persistent_s);
      Cause again = cause;
      if (!stand(recovery, Loss::restart, again)) return;
      cause = again;
    }
  };

  // From a due persistent checkpoint at t, k whole cycles (the stall, then `interval` of
  // running) that end before `until`: their account at once. False when fewer than two fit.
  auto bulk_checkpoints = [&](double until, double fs, double fk) {
    const double stall = in.async ? in.snapshot_s : in.write_s;
    const double cycle = stall + in.interval_s;
    const double phi = fs * fk;
    double k = std::floor((until - t) / cycle);
    if (t + k * cycle >= until) k -= 1;  // stop short of `until`: its event is still to come
    if (target > 0) k = std::min(k, std::floor((target - work) / (phi * in.interval_s)));
    if (!(k >= 2)) return false;
    const double last_at = t + (k - 1) * cycle;  // the last snapshot of the run
    const Snap last{work + (k - 1) * phi * in.interval_s, last_at};
    if (in.async) {
      persist(Snap{work + (k - 2) * phi * in.interval_s, last_at - cycle});
      inflight = last;
      inflight_active = true;
      inflight_done = last_at + stall + in.write_s;
    } else {
      persist(last);
    }
    loss(Loss::checkpoint, k * stall);
    loss(Loss::slowdown, k * (1 - fs) * in.interval_s);
    loss(Loss::shrink, k * fs * (1 - fk) * in.interval_s);
    work += k * phi * in.interval_s;
    t += k * cycle;
    since_persist = in.interval_s;
    since_memory += k * in.interval_s;
    background(t);
    return true;
  };

  while (true) {
    if (target > 0 ? work >= target : t >= in.horizon_s) break;
    if (t >= stop_wall) break;
    const double fs = slow_factor(), fk = shrink_factor(), phi = fs * fk;
    Cause cause = Cause::gpu;
    const double t_fail = next_failure(cause);
    double t_next = std::min(t_fail, target > 0 ? t + (target - work) / phi : in.horizon_s);
    t_next = std::min(t_next, stop_wall);
    // Checks happen on the step boundary every sdc_check_s of wall time.
    double t_check = kInf;
    if (corrupted_at < kInf) {
      t_check = std::ceil(std::max(t, corrupted_at) / in.sdc_check_s) * in.sdc_check_s;
      if (t_check <= corrupted_at) t_check += in.sdc_check_s;
    }
    double t_persist = kInf, t_memory = kInf;
    if (in.persistent_tier) t_persist = std::max({t, t + (in.interval_s - since_persist), inflight_active ? inflight_done : 0.0});
    if (in.memory_tier) t_memory = std::max(t, t + (in.memory_interval_s - since_memory));
    double t_background = std::min({next_straggler, next_degradation, next_sdc, inflight_active ? inflight_done : kInf});
    for (double e : stragglers) t_background = std::min(t_background, e);
    for (double e : degradations) t_background = std::min(t_background, e);
    for (double r : repairs) t_background = std::min(t_background, r);
    const double t_other = std::min({t_next, t_check, t_background});  // what a run of checkpoints cannot pass
    t_next = std::min({t_next, t_check, t_persist, t_memory, t_background});
    // Run until then.
    const double dt = std::max(0.0, t_next - t);
    work += phi * dt;
    loss(Loss::slowdown, (1 - fs) * dt);
    loss(Loss::shrink, fs * (1 - fk) * dt);
    since_persist += dt;
    since_memory += dt;
    t = t_next;
    background(t);
    if (t == t_fail && t_fail < kInf) {
      consume_failure(cause, t);
      interrupt(cause);
    } else if (t == t_check) {
      interrupt(Cause::sdc);
    } else if (t == t_memory) {
      const Snap snap{work, t};
      Cause c2 = Cause::gpu;
      if (stand(in.snapshot_s, Loss::checkpoint, c2)) {
        interrupt(c2);
      } else {
        memory = snap;
        if (snap.taken_at < corrupted_at) clean_memory = snap;
        memory_valid = true;
        failed_since_memory.clear();
        since_memory = 0;
      }
    } else if (t == t_persist && !in.memory_tier && (!in.async || in.write_s <= in.interval_s) &&
               bulk_checkpoints(t_other, fs, fk)) {
      // Many checkpoints before anything else happens: taken in one go.
    } else if (t == t_persist) {
      const Snap snap{work, t};
      Cause c2 = Cause::gpu;
      if (stand(in.async ? in.snapshot_s : in.write_s, Loss::checkpoint, c2)) {
        interrupt(c2);
      } else {
        if (in.async) {
          inflight = snap;
          inflight_active = true;
          inflight_done = t + in.write_s;
        } else {
          persist(snap);
        }
        since_persist = 0;
      }
    }
  }
  tr.wall_s = t;
  tr.useful_s = work;
  tr.reached_target = target > 0 && work >= target;
  return tr;
}

Summary run(const Inputs& in, std::int64_t trials, std::uint64_t seed, const std::function<void(double)>& progress) {
  Summary s;
  s.trials = trials;
  std::vector<double> goodput, wall, mtti;
  std::int64_t reported = 0;
  for (std::int64_t i = 0; i < trials; ++i) {
    std::uint64_t x = seed + static_cast<std::uint64_t>(i) * 0x632be59bd9b4e019ULL;
    const Trial tr = run_trial(in, splitmix(x));
    goodput.push_back(tr.wall_s > 0 ? tr.useful_s / tr.wall_s : 0);
    wall.push_back(tr.wall_s);
    std::int64_t n = 0;
    for (std::size_t c = 0; c < kCauses; ++c) {
      s.interruptions_by_cause[c] += static_cast<double>(tr.interruptions[c]);
      n += tr.interruptions[c];
    }
    if (n > 0) mtti.push_back(tr.wall_s / static_cast<double>(n));
    for (std::size_t l = 0; l < kLosses; ++l) s.loss_s[l] += tr.loss_s[l];
    if (tr.reached_target) ++s.reached_target;
    if (progress && (i + 1) * 100 / trials > reported) {
      reported = (i + 1) * 100 / trials;
      progress(static_cast<double>(i + 1) / static_cast<double>(trials));
    }
  }
  const auto n = static_cast<double>(std::max<std::int64_t>(trials, 1));
  for (auto& v : s.interruptions_by_cause) {
    v /= n;
    s.interruptions += v;
  }
  for (auto& v : s.loss_s) v /= n;
  s.goodput = mean(goodput);
  s.goodput_ci95 = ci95(goodput);
  s.wall_s = mean(wall);
  s.wall_ci95 = ci95(wall);
  s.mtti_s = mean(mtti);
  s.mtti_ci95 = ci95(mtti);
  return s;
}

std::vector<SweepPoint> sweep_interval(const Inputs& in, double lo_s, double hi_s, int points, std::int64_t trials, std::uint64_t seed,
                                       const std::function<void(double)>& progress) {
  std::vector<SweepPoint> out;
  for (int i = 0; i < points; ++i) {
    Inputs x = in;
    x.interval_s = points > 1 ? lo_s * std::pow(hi_s / lo_s, static_cast<double>(i) / (points - 1)) : lo_s;
    out.push_back({x.interval_s, run(x, trials, seed)});
    if (progress) progress(static_cast<double>(i + 1) / points);
  }
  return out;
}

Best best_interval(const std::vector<SweepPoint>& sweep) {
  Best b;
  for (std::size_t i = 0; i < sweep.size(); ++i) {
    if (sweep[i].summary.goodput > sweep[b.index].summary.goodput) b.index = i;
  }
  const double floor = sweep.empty() ? 0 : sweep[b.index].summary.goodput - sweep[b.index].summary.goodput_ci95;
  b.lo_s = b.hi_s = sweep.empty() ? 0 : sweep[b.index].interval_s;
  for (const auto& p : sweep) {
    if (p.summary.goodput + p.summary.goodput_ci95 >= floor) {
      b.lo_s = std::min(b.lo_s, p.interval_s);
      b.hi_s = std::max(b.hi_s, p.interval_s);
    }
  }
  return b;
}

std::string sweep_csv(const std::vector<SweepPoint>& sweep) {
  std::ostringstream s;
  s << "interval_s,goodput,goodput_ci95,interruptions,wall_s";
  for (std::size_t l = 0; l < kLosses; ++l) s << ',' << to_string(static_cast<Loss>(l)) << "_s";
  s << '\n';
  s.precision(8);
  for (const auto& p : sweep) {
    s << p.interval_s << ',' << p.summary.goodput << ',' << p.summary.goodput_ci95 << ',' << p.summary.interruptions << ',' << p.summary.wall_s;
    for (double v : p.summary.loss_s) s << ',' << v;
    s << '\n';
  }
  return s.str();
}

// Goodput against the interval on a log axis, the 95% band shaded, Daly's optimum marked.
std::string sweep_svg(const std::vector<SweepPoint>& sweep, const std::string& title, double daly_s) {
  const double w = 720, h = 420, left = 70, right = 20, top = 40, bottom = 60;
  std::ostringstream s;
  s.precision(6);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string safe = title;
  for (auto& ch : safe) {
    if (ch == '<' || ch == '>' || ch == '&') ch = ' ';
  }
  s << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" << safe << "</text>\n";
  if (sweep.empty()) return s.str() + "</svg>\n";
  double lo = sweep.front().interval_s, hi = sweep.back().interval_s, gmin = 1, gmax = 0;
  for (const auto& p : sweep) {
    gmin = std::min(gmin, p.summary.goodput - p.summary.goodput_ci95);
    gmax = std::max(gmax, p.summary.goodput + p.summary.goodput_ci95);
  }
  if (hi <= lo) hi = lo * 2;
  const double pad = std::max(0.01, (gmax - gmin) * 0.1);
  gmin = std::max(0.0, gmin - pad);
  gmax = std::min(1.0, gmax + pad);
  if (gmax <= gmin) gmax = gmin + 0.01;
  auto x = [&](double v) { return left + (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) * (w - left - right); };
  auto y = [&](double g) { return top + (gmax - g) / (gmax - gmin) * (h - top - bottom); };
  // Axes and ticks.
  s << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\"" << h - bottom << "\" stroke=\"black\"/>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double g = gmin + (gmax - gmin) * i / 4;
    s << "<text x=\"" << left - 6 << "\" y=\"" << y(g) + 4 << "\" text-anchor=\"end\">" << std::round(g * 1000) / 10 << "%</text>\n";
    s << "<line x1=\"" << left << "\" y1=\"" << y(g) << "\" x2=\"" << w - right << "\" y2=\"" << y(g) << "\" stroke=\"#ddd\"/>\n";
  }
  for (int i = 0; i <= 4; ++i) {
    const double v = lo * std::pow(hi / lo, i / 4.0);
    char label[32];
    if (v >= 3600) std::snprintf(label, sizeof label, "%.1f h", v / 3600);
    else std::snprintf(label, sizeof label, "%.0f min", v / 60);
    s << "<text x=\"" << x(v) << "\" y=\"" << h - bottom + 18 << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  s << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 14 << "\" text-anchor=\"middle\">checkpoint interval (log scale)</text>\n";
  s << "<text x=\"16\" y=\"" << (top + h - bottom) / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << (top + h - bottom) / 2 << ")\">goodput (ETTR)</text>\n";
  // The 95% band, the mean, Daly's optimum.
  s << "<polygon fill=\"#cfe3f7\" points=\"";
  for (const auto& p : sweep) s << x(p.interval_s) << ',' << y(p.summary.goodput + p.summary.goodput_ci95) << ' ';
  for (auto it = sweep.rbegin(); it != sweep.rend(); ++it) s << x(it->interval_s) << ',' << y(it->summary.goodput - it->summary.goodput_ci95) << ' ';
  s << "\"/>\n<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"2\" points=\"";
  for (const auto& p : sweep) s << x(p.interval_s) << ',' << y(p.summary.goodput) << ' ';
  s << "\"/>\n";
  for (const auto& p : sweep) s << "<circle cx=\"" << x(p.interval_s) << "\" cy=\"" << y(p.summary.goodput) << "\" r=\"3\" fill=\"#1f5fa8\"/>\n";
  if (daly_s >= lo && daly_s <= hi) {
    s << "<line x1=\"" << x(daly_s) << "\" y1=\"" << top << "\" x2=\"" << x(daly_s) << "\" y2=\"" << h - bottom << "\" stroke=\"#c0392b\" stroke-dasharray=\"5,4\"/>\n";
    s << "<text x=\"" << x(daly_s) + 4 << "\" y=\"" << top + 12 << "\" fill=\"#c0392b\">Daly</text>\n";
  }
  const Best b = best_interval(sweep);
  s << "<circle cx=\"" << x(sweep[b.index].interval_s) << "\" cy=\"" << y(sweep[b.index].summary.goodput) << "\" r=\"6\" fill=\"none\" stroke=\"#27ae60\" stroke-width=\"2\"/>\n";
  s << "</svg>\n";
  return s.str();
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
  for (std::size_t c = 0; c < kCauses; ++c) r.interruptions_by_cause.emplace_back(std::string(to_string(static_cast<Cause>(c))), s.interruptions_by_cause[c]);
  for (std::size_t l = 0; l < kLosses; ++l) r.losses_s.emplace_back(std::string(to_string(static_cast<Loss>(l))), s.loss_s[l]);
  return r;
}

}  // namespace meshwork::reliability
