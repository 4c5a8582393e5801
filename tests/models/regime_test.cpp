// Every Report says where its plan stands against the published runs that check the model.
#include "models/regime.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"

namespace meshwork::models {
namespace {

plan::Plan load(const std::string& file) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / file);
  EXPECT_TRUE(loaded.ok()) << file;
  return loaded.plan;
}

bool any_note(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

TEST(Regime, AnAmperePlanLikeItsSetCarriesNoNote) {
  const plan::Plan p = load("scenarios/gpt3-175b-a100-1024.yaml");
  EXPECT_TRUE(regime_notes(p).empty());
  EXPECT_TRUE(estimate(p).notes.empty());
}

TEST(Regime, AmpereOutsideItsSetSaysHow) {
  plan::Plan p = load("scenarios/gpt3-175b-a100-1024.yaml");
  p.cluster.num_gpus = 4096;
  EXPECT_TRUE(any_note(regime_notes(p), "4096 GPUs, more than the largest checked run"));
  p = load("scenarios/gpt3-175b-a100-1024.yaml");
  p.parallelism.context_parallel_size = 2;
  EXPECT_TRUE(any_note(regime_notes(p), "context parallelism"));
  p = load("scenarios/gpt3-175b-a100-1024.yaml");
  p.model.moe.num_moe_experts = 8;
  EXPECT_TRUE(any_note(regime_notes(p), "experts (MoE)"));
  p = load("scenarios/gpt3-175b-a100-1024.yaml");
  p.parallelism.zero_stage = 3;
  EXPECT_TRUE(any_note(regime_notes(p), "ZeRO-3: the published ZeRO-3 runs (NAR21 Table 2) are kept out of the set"));
}

TEST(Regime, GenerationsWithoutASetAreUncalibratedInTheReport) {
  plan::Plan p = load("scenarios/heldout/llama3-405b-h100-8192.yaml");
  EXPECT_TRUE(any_note(estimate(p).notes, "uncalibrated: no published Hopper BF16 run"));
  p.cluster.gpu = plan::find_gpu_preset("b200")->spec;
  EXPECT_TRUE(any_note(regime_notes(p), "uncalibrated: no published Blackwell run"));
  p.cluster.gpu.name = "custom-accelerator";  // a spec no generation's calibration covers
  EXPECT_TRUE(any_note(regime_notes(p), "uncalibrated: no calibration covers custom-accelerator"));
  // The fabric alone measured (calibrate --nccl-tests) leaves the compute the generation's.
  p = load("scenarios/heldout/llama3-405b-h100-8192.yaml");
  p.cluster.gpu.calibration.nic_efficiency = 0.81;
  EXPECT_TRUE(any_note(regime_notes(p), "uncalibrated"));
  // Compute measured on the machine stands on its own.
  p.cluster.gpu.calibration.gemm_max_efficiency = 0.7;
  EXPECT_TRUE(regime_notes(p).empty());
}

}  // namespace
}  // namespace meshwork::models
