#include "exec/measured_report.hpp"

#include <algorithm>

#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/headline.hpp"

namespace meshwork::exec {

double steady_step_seconds(const std::vector<StepRecord>& steps) {
  std::vector<double> times;
  for (std::size_t i = steps.size() > 2 ? 1 : 0; i < steps.size(); ++i) times.push_back(steps[i].seconds);
  std::sort(times.begin(), times.end());
  return times.empty() ? 0 : times[times.size() / 2];
}

report::Report measured_report(const plan::Plan& plan, const std::vector<StepRecord>& steps, const MeasuredSeconds& measured, double peak_flops_per_gpu) {
  report::Report r = models::estimate(plan);
  r.method = report::Method::measured;
  const double step_s = steady_step_seconds(steps);
  const auto n = static_cast<double>(std::max<std::size_t>(1, measured.steps > 0 ? measured.steps : steps.size()));
  models::set_headline_figures(r, plan, step_s, models::step_flops(plan), peak_flops_per_gpu);
  const OpSeconds& ops = measured.ops;
  report::Breakdown b;
  double compute = 0;
  for (std::size_t i = 0; i < ops.seconds.size(); ++i) {
    if (static_cast<models::OpKind>(i) != models::OpKind::optimizer) compute += ops.seconds[i];
  }
  b.compute_s = compute / n;
  // Per op kind, as the estimate and the simulator name them (models/op_table).
  r.op_times.clear();
  for (std::size_t i = 0; i < ops.seconds.size(); ++i) {
    const auto kind = static_cast<models::OpKind>(i);
    if (kind == models::OpKind::optimizer || ops.seconds[i] <= 0) continue;
    r.op_times.push_back({std::string(models::to_string(kind)), ops.seconds[i] / n, 0});
  }
  b.optimizer_s = ops[models::OpKind::optimizer] / n;
  b.tp_s = measured.tp / n;
  b.dp_s = measured.dp / n;
  b.ep_s = measured.ep / n;
  b.cp_s = measured.cp / n;
  b.bubble_s = measured.pp_waits / n;
  b.pp_s = measured.pp / n;
  b.stalls_s = std::max(0.0, step_s - b.total());
  r.breakdown = b;
  r.bubble_fraction = 0;
  r.notes.clear();
  r.interval.reset();  // the estimate's range: a measurement has none
  return r;
}

}  // namespace meshwork::exec
