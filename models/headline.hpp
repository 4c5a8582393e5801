#pragma once
// The headline figures of a step, from its time, its FLOPs and the GPU's peak: one function for
// the estimate, the simulator and the executor, so that the three tiers' MFU, TFLOP/s, tokens
// per second and time to train mean the same thing.

#include "models/flops.hpp"
#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::models {

// Sets r.step_time_s = step_s and, per GPU of plan.cluster.num_gpus, model and hardware TFLOP/s
// (flops over the step), MFU and HFU against `peak_flops_per_gpu` (Narayanan et al. 2021 §5.1:
// achieved model FLOP/s over peak), tokens per second (global batch x sequence over the step)
// and, with training.tokens, the time to train. A step of no time, or no peak, gives zeros.
void set_headline_figures(report::Report& r, const plan::Plan& plan, double step_s, const StepFlops& flops, double peak_flops_per_gpu);

}  // namespace meshwork::models
