#pragma once
// A whole run with failures, checkpoints and restarts, by Monte Carlo over seeds: how much of
// the wall-clock time turns into training (goodput, or ETTR: effective training time ratio).
//
// The job model. An interruption (a component failure, a software fault, a scheduled event,
// or a silent data corruption once a check catches it) stops the job; it is detected, the job
// is restarted (`restart_s`: relaunch and NCCL initialisation) with a hot spare in place of a
// failed node, or on nodes requeued from the scheduler (`requeue_s` more), or on a smaller
// data-parallel mesh until the node is repaired, loads the newest checkpoint it can trust (a neighbour's
// in-memory copy in seconds, unless both holders failed; else the persistent one at the
// storage's read rate) and recomputes the work since. Checkpoints are taken every `interval`
// of running time: synchronous ones stall for the whole write, asynchronous ones for the
// device-to-host snapshot only, and a failure while one persists falls back to the previous
// one. Stragglers and degraded links slow the job while they last, at the step time of that
// cluster state. Every second of a trial is either kept training (goodput) or a loss with a
// cause.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::reliability {

// What interrupts the job.
enum class Cause { gpu, hbm, nic, link, network_switch, node, software, sdc, scheduled };
inline constexpr std::size_t kCauses = 9;
std::string_view to_string(Cause c);

// Where a trial's seconds went besides training.
enum class Loss { lost_work, restart, checkpoint, slowdown, shrink, requeue, reroute };
inline constexpr std::size_t kLosses = 7;
std::string_view to_string(Loss l);

// Checkpoint bytes per parameter: the weights (2 in 16-bit training, 4 in fp32) and the
// optimizer's states as it keeps them (models::optimizer_state_bytes_per_param: fp32 master
// weights and Adam's two moments, 4 + 4 + 4, unless training.optimizer_states says otherwise),
// 14 in mixed precision. NAR21 §5.10: the 1T model's checkpoint is 13.8 TB. A checkpoint that
// rebuilds fp32 masters from remainders when it saves is not told apart.
double checkpoint_bytes_per_param(const plan::TrainingConfig& training);

// Everything a trial needs, in seconds and per second. Derived from a plan by `inputs_for`,
// or set directly (the tests check the textbook cases this way).
struct Inputs {
  double step_s = 1;  // a healthy step
  // Interruption rate of the whole job per cause (per second); the class's time between
  // interruptions is exponential, or Weibull of the same mean with `weibull_shape`.
  std::array<double, kCauses> rate_per_s{};
  bool weibull = false;
  double weibull_shape = 1;
  std::vector<std::pair<double, Cause>> scheduled;  // (time, cause), from the plan's events
  // (time, seconds): a link, switch or NIC of the plan's events whose loss leaves every group a
  // path. The job stands still until the fabric reroutes (cluster.topology.reroute_s), then
  // goes on; one that happens while the job already stands still (down, restarting, in a
  // checkpoint or another reroute's stall) costs nothing more. Each is judged against the
  // fabric without the others' faults. In time order.
  std::vector<std::pair<double, double>> reroutes;
  double sdc_per_s = 0;    // silent corruptions of the job, per second
  double sdc_check_s = 3600;
  // Recovery.
  double detection_s = 60, restart_s = 600;
  double load_persistent_s = 0, load_memory_s = 0;
  // Checkpoints.
  double interval_s = 3600;         // of running time between persistent checkpoints
  double memory_interval_s = 600;   // between in-memory snapshots (memory tier only)
  bool async = false;
  bool memory_tier = false;
  bool persistent_tier = true;
  double write_s = 0;     // a persistent write (the stall when synchronous): the persist stage
  double snapshot_s = 0;  // the device-to-host copy (the stall when asynchronous, or in memory)
  // The in-memory tier's copy to a neighbour's host over the network, after the snapshot
  // and under training: the snapshot is a copy to restore from once it ends.
  double memory_copy_s = 0;
  // Nodes and what follows a hardware failure.
  std::int64_t nodes = 1;
  std::int64_t spares = 0;           // hot spares: a failed node is replaced at once
  double repair_s = 86400;           // until a failed node is back as a spare
  double requeue_s = 0;              // getting other nodes from the scheduler, without a spare
  bool shrink = false;               // shrink data parallelism instead of requeueing
  std::int64_t replicas = 1;         // data-parallel replicas; a lost node takes its replica
  // Throughput with k replicas lost, over the healthy one (index k); beyond the table, or when
  // empty, (replicas - k) / replicas.
  std::vector<double> shrunk_throughput;
  // Slowdowns: arrivals per second, duration, the step time multiplier while one lasts.
  double straggler_per_s = 0, straggler_s = 0, straggler_factor = 1;
  double degradation_per_s = 0, degradation_s = 0, degradation_factor = 1;
  // The run: until `horizon_s`, or until `target_work_s` of healthy training is kept.
  double horizon_s = 30 * 86400.0;
  double target_work_s = 0;
};

// The plan's inputs; `step_s` is the healthy step time (estimated or simulated) and
// `step_with` the step time with one straggler and/or one degraded link (0/1 each), cached by
// the caller; when empty, the straggler scales the step by its slowdown and a degraded link
// is costed by the estimate at that bandwidth.
using StateStepTime = std::function<double(int stragglers, int degraded_links)>;
struct Derived {
  Inputs inputs;
  double checkpoint_bytes = 0;
  double mtti_s = 0;  // mean time to interruption, all causes (1 / the summed rates)
  // The persist stage (inputs.write_s is the longest of the three): the whole job's bytes
  // through the storage's write bandwidth; the writing nodes' bytes through each one's link
  // to storage; each GPU's share through its device-to-host copy, which the write streams from.
  double storage_s = 0, host_link_s = 0;
  // The shortest interval the plan can run: one step, and one persistent write (a checkpoint
  // is taken between steps, and a write must end before the next begins).
  double min_interval_s = 0;
  std::string error;  // an interval the plan cannot run, with the reason
};
Derived inputs_for(const plan::Plan& plan, double step_s, const StateStepTime& step_with = {});

// One trial's account.
struct Trial {
  double wall_s = 0;
  double useful_s = 0;  // training kept (healthy-step seconds)
  std::array<double, kLosses> loss_s{};
  std::array<std::int64_t, kCauses> interruptions{};
  bool reached_target = false;
};
Trial run_trial(const Inputs& in, std::uint64_t seed);

struct Summary {
  std::int64_t trials = 0;
  double goodput = 0, goodput_ci95 = 0;  // mean, half-width of the 95% interval
  double interruptions = 0;               // per trial
  double mtti_s = 0, mtti_ci95 = 0;       // observed mean time to interruption
  double wall_s = 0, wall_ci95 = 0;       // per trial (the time to train when there is a target)
  std::array<double, kCauses> interruptions_by_cause{};
  std::array<double, kLosses> loss_s{};   // per trial
  std::int64_t reached_target = 0;
};
// Trials seeded seed, seed+1, ... (each its own stream): the same seed, the same numbers.
// `progress` (optional) is called with the fraction done.
Summary run(const Inputs& in, std::int64_t trials, std::uint64_t seed, const std::function<void(double)>& progress = {});

// Young (CACM 17(9), 1974): sqrt(2 delta M). Daly (FGCS 22(3), 2006, eq. 37):
// sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for delta < 2M, else M.
double young_interval_s(double checkpoint_s, double mtbf_s);
double daly_interval_s(double checkpoint_s, double mtbf_s);
// Kokolis et al. (arXiv:2410.21680), docs/reference/published-runs.md D10: E[ETTR] ~ (1 - N r_f (u0 +
// interval/2)) / (1 + w / interval), N r_f the job's failure rate, u0 the restart overhead,
// w the checkpoint stall.
double ettr_closed_form(double failures_per_s, double restart_s, double interval_s, double stall_s);

// Goodput against the checkpoint interval: `points` intervals spaced geometrically from
// lo_s to hi_s, the same seeds for each (common random numbers).
struct SweepPoint {
  double interval_s = 0;
  Summary summary;
};
std::vector<SweepPoint> sweep_interval(const Inputs& in, double lo_s, double hi_s, int points, std::int64_t trials, std::uint64_t seed,
                                       const std::function<void(double)>& progress = {});
// The sweep's range for a plan: eight times either side of Daly's optimum (or of the plan's
// interval without failures), widened to hold the plan's own interval, and never below the
// shortest interval the plan can run.
struct SweepRange {
  double lo_s = 0, hi_s = 0;
};
SweepRange sweep_range(const Derived& d, double daly_s);
// "45 s", "2.5 min", "1.2 h", "3 d": a duration as an axis or a line of text shows it.
std::string format_duration(double seconds);
// The best point, and the interval range whose goodput is within the best's 95% interval.
struct Best {
  std::size_t index = 0;
  double lo_s = 0, hi_s = 0;
};
Best best_interval(const std::vector<SweepPoint>& sweep);
std::string sweep_csv(const std::vector<SweepPoint>& sweep);
// `plan_s` (the plan's interval) and `daly_s` are marked where they fall in the range.
std::string sweep_svg(const std::vector<SweepPoint>& sweep, const std::string& title, double daly_s, double plan_s = 0);

// The Report's reliability section from a run.
report::Reliability to_report(const Derived& d, const Summary& s, std::uint64_t seed);

}  // namespace meshwork::reliability
