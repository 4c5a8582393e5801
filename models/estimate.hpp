#pragma once
// The closed-form estimate of a plan's training step (docs/DESIGN.md, "Fidelity and speed"):
// per-stage compute from the op table on a roofline with achievable efficiencies, exposed
// communication by Megatron's overlap rules, the pipeline bubble of the schedule and the
// optimizer step; MFU, HFU, throughput, memory per stage, power. Microseconds per plan.

#include "models/flops.hpp"
#include "models/hardware.hpp"
#include "models/layer_comm.hpp"  // hottest_expert_load
#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::models {

struct EstimateOptions {
  FlopsOptions flops;
  bool provenance = true;  // hash the plan for the Report's provenance (sweeps skip it)
};

// The plan must be valid (plan::validate without errors).
report::Report estimate(const plan::Plan& plan, const EstimateOptions& options = {});

// Memory per stage (models/memory.hpp) into a report of any method: its memory rows, `fits`,
// and a note when the plan does not fit or fits with less than its headroom.
void attach_memory(const plan::Plan& plan, report::Report& report);

// Power for the report's step (its time and its breakdown's compute): the estimate's and the
// simulator's Reports each price their own step.
void attach_power(const plan::Plan& plan, report::Report& report);
// The same with the plan's GPU's profile (models::hardware_profile(plan.cluster.gpu)).
void attach_power(const plan::Plan& plan, const HardwareProfile& hw, report::Report& report);

}  // namespace meshwork::models
