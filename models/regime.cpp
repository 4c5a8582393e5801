#include "models/regime.hpp"

#include <cmath>
#include <string>

#include "models/calibration_set.hpp"
#include "models/hardware.hpp"

namespace meshwork::models {

std::vector<std::string> regime_notes(const plan::Plan& p) {
  std::vector<std::string> notes;
  // Compute measured on the machine (`meshwork calibrate`) stands on its own; a profile with
  // only its fabric measured (`calibrate --nccl-tests`) is still its generation's otherwise.
  if (p.cluster.gpu.calibration.gemm_max_efficiency > 0) return notes;
  plan::GpuSpec datasheet = p.cluster.gpu;
  datasheet.calibration = {};
  const HardwareProfile hw = hardware_profile(datasheet);
  const std::string gpu = p.cluster.gpu.name;
  if (hw.generation == "cpu") return notes;
  if (!hw.calibrated) {
    notes.push_back("uncalibrated: no calibration covers " + gpu + ": generic efficiencies (Ampere's fractions of its datasheet figures)");
    return notes;
  }
  if (hw.generation == "hopper") {
    if (p.training.precision == plan::Precision::fp8) {
      // The note names no figure: each tier's interval carries its own errors on the set.
      notes.push_back("checked and found fast: NeMo 24.07's 12 FP8 runs on DGX-H100 (docs/reference/published-runs.md A3) train slower than "
                      "meshwork predicts for 11 of their plans (the interval gives this tier's range; meshwork accuracy lists them). Not "
                      "explained: the layers' linear GEMMs are priced at twice the BF16 rate with their operand casts, the head and the "
                      "router at the BF16 rate, and no measured FP8 training step says where the rest goes" +
                      std::string(p.training.fp8_attention ? "; this plan's attention is priced at the FP8 rate too (fp8_attention)" : " (the attention at the BF16 rate, as Transformer Engine runs it without fp8_dpa)"));
      const std::string outside = "outside the calibrated regime (Hopper's FP8 set: NeMo 24.07, dense GPT and Llama on 8 to " +
                                  std::to_string(kHopperFp8SetLargestGpus) + " H100 SXM, ZeRO-1, CP up to " + std::to_string(kHopperFp8SetLargestCp) + "): ";
      if (gpu != kHopperFp8SetGpu) notes.push_back(outside + gpu + ", not the set's " + std::string(kHopperFp8SetGpu));
      if (p.model.moe.num_moe_experts > 0) notes.push_back(outside + "experts (MoE): their dispatch, imbalance and kernels are not checked");
      if (p.parallelism.context_parallel_size > kHopperFp8SetLargestCp) {
        notes.push_back(outside + "context parallelism " + std::to_string(p.parallelism.context_parallel_size) + ": larger than the set's");
      }
      if (p.parallelism.zero_stage >= 2) {
        notes.push_back(outside + "ZeRO-" + std::to_string(p.parallelism.zero_stage) + ": the set's runs shard only the optimizer (ZeRO-1)");
      }
      if (p.cluster.num_gpus > kHopperFp8SetLargestGpus) {
        notes.push_back(outside + std::to_string(p.cluster.num_gpus) + " GPUs, more than the largest checked run");
      }
      if (p.training.fp8_attention) notes.push_back(outside + "fp8_attention: the set's runs ran the attention in BF16");
      return notes;
    }
    notes.push_back("uncalibrated: no published Hopper BF16 run checks the cost model (NeMo's DGX-H100 runs, docs/reference/published-runs.md A3, "
                    "are FP8); " + gpu + "'s efficiencies are datasheet and microbenchmark figures with Ampere's in-training GEMM fraction");
    return notes;
  }
  if (hw.generation == "blackwell") {
    notes.push_back("uncalibrated: no published Blackwell run checks the cost model; " + gpu +
                    "'s efficiencies are datasheet and microbenchmark figures with Ampere's in-training GEMM fraction");
    return notes;
  }
  // Ampere: the dense GPT runs of NAR21 and KOR22.
  const std::string outside = "outside the calibrated regime (Ampere's set: NAR21 and KOR22, dense GPT on 32 to " +
                              std::to_string(kAmpereSetLargestGpus) + " A100s): ";
  if (p.model.moe.num_moe_experts > 0) notes.push_back(outside + "experts (MoE): their dispatch, imbalance and kernels are not checked");
  if (p.parallelism.context_parallel_size > 1) notes.push_back(outside + "context parallelism: its ring attention and exchanges are not checked");
  if (p.parallelism.zero_stage >= 3) {
    notes.push_back(outside + "ZeRO-3: the published ZeRO-3 runs (NAR21 Table 2) are kept out of the set, since the estimate runs far ahead of "
                              "them (`meshwork accuracy` lists them)");
  }
  if (p.cluster.num_gpus > kAmpereSetLargestGpus) {
    notes.push_back(outside + std::to_string(p.cluster.num_gpus) + " GPUs, more than the largest checked run");
  }
  return notes;
}

}  // namespace meshwork::models
