// The long-horizon reliability model (reliability.hpp): Monte Carlo over whole runs.
#include "sim/reliability.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>


namespace meshwork::reliability {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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


double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
// Half-width of the 95% interval of the mean (normal approximation; trials are many).
double ci95(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  // Trials that all agree (no failures) have no spread; the mean of equal values is not always
  // exactly one of them, which once gave a spread of 1e-10.
  if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); })) return 0;
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
  static constexpr std::array<std::string_view, kLosses> names = {"lost_work", "restart", "checkpoint", "slowdown", "shrink", "requeue", "reroute"};
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
  // The in-memory snapshot on its way to the neighbour's host (memory_copy_s).
  Snap memory_inflight;
  bool memory_inflight_active = false;
  double memory_inflight_done = kInf;
  double since_persist = 0, since_memory = 0;  // running time since the last checkpoint
  std::vector<std::int64_t> failed_since_memory;
  auto keep_in_memory = [&](const Snap& snap) {
    memory = snap;
    if (snap.taken_at < corrupted_at) clean_memory = snap;
    memory_valid = true;
    failed_since_memory.clear();
  };
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
    if (memory_inflight_active && memory_inflight_done <= until) {
      keep_in_memory(memory_inflight);
      memory_inflight_active = false;
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
      memory_inflight_active = false;  // and a copy to the neighbour cut short
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

  std::size_t reroute = 0;  // the next of in.reroutes
  while (true) {
    if (target > 0 ? work >= target : t >= in.horizon_s) break;
    if (t >= stop_wall) break;
    // A fabric fault while the job was down was routed around before it came back.
    while (reroute < in.reroutes.size() && in.reroutes[reroute].first < t) ++reroute;
    const double t_reroute = reroute < in.reroutes.size() ? in.reroutes[reroute].first : kInf;
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
    if (in.memory_tier) t_memory = std::max({t, t + (in.memory_interval_s - since_memory), memory_inflight_active ? memory_inflight_done : 0.0});
    double t_background = std::min({next_straggler, next_degradation, next_sdc, inflight_active ? inflight_done : kInf,
                                    memory_inflight_active ? memory_inflight_done : kInf});
    for (double e : stragglers) t_background = std::min(t_background, e);
    for (double e : degradations) t_background = std::min(t_background, e);
    for (double r : repairs) t_background = std::min(t_background, r);
    const double t_other = std::min({t_next, t_check, t_background, t_reroute});  // what a run of checkpoints cannot pass
    t_next = std::min({t_next, t_check, t_persist, t_memory, t_background, t_reroute});
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
    } else if (t == t_reroute) {
      // Flows on the dead link stall until the fabric moves them; a failure meanwhile
      // interrupts as any other.
      Cause c2 = Cause::gpu;
      const double stall = in.reroutes[reroute++].second;
      if (stand(stall, Loss::reroute, c2)) interrupt(c2);
    } else if (t == t_memory) {
      const Snap snap{work, t};
      Cause c2 = Cause::gpu;
      if (stand(in.snapshot_s, Loss::checkpoint, c2)) {
        interrupt(c2);
      } else {
        if (in.memory_copy_s > 0) {
          memory_inflight = snap;
          memory_inflight_active = true;
          memory_inflight_done = t + in.memory_copy_s;
        } else {
          keep_in_memory(snap);
        }
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

}  // namespace meshwork::reliability
