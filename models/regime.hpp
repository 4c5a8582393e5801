#pragma once
// Where a plan stands against the published runs that check the cost model
// (docs/reference/published-runs.md A1-A3): the notes every Report carries, in the estimate and
// the simulator alike (issue 20: "a generation without a set says uncalibrated in every Report;
// a plan outside the calibrated regime says so").
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

// Ampere's set: NAR21 Tables 1-2 (PTD-P) and KOR22 Tables 3-5 on A100, the 21 plans of
// models/calibration_set.hpp, 32 to 3,072 GPUs (NAR21 Table 1's 1T model). NAR21 Table 2's
// ZeRO-3 runs are published too but kept out of it: a ZeRO-3 plan is outside the regime.
inline constexpr std::int64_t kAmpereSetLargestGpus = 3072;

// One note per way the plan leaves the checked regime: a generation no published run checks
// ("uncalibrated: ..."), or on Ampere experts (MoE), context parallelism or more GPUs than the
// set's largest run. None when the plan's compute was measured on the machine
// (`meshwork calibrate`), or for the CPU host.
std::vector<std::string> regime_notes(const plan::Plan& p);

}  // namespace meshwork::models
