#pragma once
// The Report of a measured run, whichever backend measured it: the estimate's Report of the
// plan (memory, power, what was not measured) with the measured step time, throughput,
// utilisation, per-op times and breakdown in place of the modelled ones. Each backend adds its
// own notes (what it ran on, what it stood in for).

#include <vector>

#include "exec/execute.hpp"
#include "exec/gpt.hpp"
#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::exec {

// Seconds over the whole run (all steps), as one rank measured them.
struct MeasuredSeconds {
  OpSeconds ops;          // compute per op class, the optimizer's included
  double tp = 0;          // exposed communication per group kind
  double dp = 0;
  double ep = 0;
  double cp = 0;          // ring attention's exchanges
  double pp = 0;          // pipeline transfers
  double pp_waits = 0;    // pipeline receives waiting for the neighbour: the bubble
  // How many steps the sums above cover; 0: all of them. The CPU backend leaves out the first
  // step, as steady_step_seconds does: it pays for first touches and the collectives' setup.
  std::size_t steps = 0;
};

// The median step after the first (which pays for first touches of memory), as benchmarks
// report steady state; the first alone when there are at most two.
[[nodiscard]] double steady_step_seconds(const std::vector<StepRecord>& steps);

// method measured; mfu and hfu against peak_flops_per_gpu (the plan GPU's dense peak at the
// precision the backend ran); notes cleared for the backend's own.
[[nodiscard]] report::Report measured_report(const plan::Plan& plan, const std::vector<StepRecord>& steps, const MeasuredSeconds& measured,
                                             double peak_flops_per_gpu);

}  // namespace meshwork::exec
