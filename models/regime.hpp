#pragma once
// Where a plan stands against the published runs that check the cost model
// (docs/reference/published-runs.md A1-A3): the notes every Report carries, in the estimate and
// the simulator alike (issue 20: "a generation without a set says uncalibrated in every Report;
// a plan outside the calibrated regime says so").
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

// Ampere's set: NAR21 Tables 1-2 (PTD-P) and KOR22 Tables 3-5 on A100, the 21 plans of
// models/calibration_set.hpp, 32 to 3,072 GPUs (NAR21 Table 1's 1T model). NAR21 Table 2's
// ZeRO-3 runs are published too but kept out of it: a ZeRO-3 plan is outside the regime.
inline constexpr std::int64_t kAmpereSetLargestGpus = 3072;
// Hopper's FP8 set: NeMo 24.07's 12 runs (models/calibration_set.hpp, scenarios/published/nemo2407-*),
// dense models on 8 to 512 DGX-H100 GPUs with the distributed optimizer (ZeRO-1) and context
// parallelism up to 2 (Llama 3 8B and 70B at 8K tokens). Another Hopper part (H200, H800) runs
// other clocks, memory and NVLink: outside the set too.
inline constexpr std::int64_t kHopperFp8SetLargestGpus = 512;
inline constexpr std::int64_t kHopperFp8SetLargestCp = 2;
inline constexpr std::string_view kHopperFp8SetGpu = "h100-sxm";

// One note per way the plan leaves the checked regime: a generation no published run checks
// ("uncalibrated: ..."), or, against Ampere's set, experts (MoE), context parallelism, ZeRO-3 or
// more GPUs than its largest run; against Hopper's FP8 set (after its "checked and found fast"
// note), another GPU than the H100 SXM, experts, CP above 2, ZeRO-2 or 3, or more than 512 GPUs.
// Every such note starts "outside the calibrated regime". None when the plan's compute was measured on the machine
// (`meshwork calibrate`), or for the CPU host.
std::vector<std::string> regime_notes(const plan::Plan& p);

}  // namespace meshwork::models
