// Every Report says where its plan stands against the published runs that check the model.
#include "models/regime.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

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

// Hopper's FP8 set (NeMo 24.07, dense, 8-512 H100 SXM, ZeRO-1, CP <= 2): a plan like it gets the
// set's note alone; each way out of it is named, and the interval says it may not hold.
TEST(Regime, HopperFp8OutsideItsSetSaysHowAndTheIntervalMayNotHold) {
  const plan::Plan base = load("scenarios/published/nemo2407-llama3-70b-64.yaml");
  ASSERT_EQ(base.training.precision, plan::Precision::fp8);
  const auto inside = regime_notes(base);
  ASSERT_EQ(inside.size(), 1U);
  EXPECT_TRUE(any_note(inside, "checked and found fast: NeMo 24.07's 12 FP8 runs"));
  ASSERT_TRUE(estimate(base).interval.has_value());
  EXPECT_EQ(estimate(base).interval->basis.find("may not hold"), std::string::npos);
  const auto outside = [&](const std::function<void(plan::Plan&)>& change, const std::string& text) {
    plan::Plan p = base;
    change(p);
    EXPECT_TRUE(any_note(regime_notes(p), "outside the calibrated regime (Hopper's FP8 set")) << text;
    EXPECT_TRUE(any_note(regime_notes(p), text)) << text;
    const auto r = estimate(p);
    ASSERT_TRUE(r.interval.has_value()) << text;
    EXPECT_NE(r.interval->basis.find("may not hold"), std::string::npos) << text;
  };
  outside([](plan::Plan& p) { p.cluster.gpu = plan::find_gpu_preset("h200-sxm")->spec; }, "h200-sxm, not the set's h100-sxm");
  outside([](plan::Plan& p) { p.model.moe.num_moe_experts = 8; }, "experts (MoE)");
  outside([](plan::Plan& p) { p.parallelism.context_parallel_size = 4; }, "context parallelism 4");
  outside([](plan::Plan& p) { p.parallelism.zero_stage = 3; }, "ZeRO-3");
  outside([](plan::Plan& p) { p.cluster.num_gpus = 1024; }, "1024 GPUs, more than the largest checked run");
  outside([](plan::Plan& p) { p.training.fp8_attention = true; }, "fp8_attention: the set's runs ran the attention in BF16");
}

// A profile with only its fabric measured (calibrate --nccl-tests) keeps its generation's
// compute, its notes and its interval; compute measured on the machine drops both.
TEST(Regime, AFabricOnlyCalibrationKeepsTheInterval) {
  plan::Plan p = load("scenarios/gpt3-175b-a100-1024.yaml");
  p.cluster.gpu.calibration.nic_efficiency = 0.81;
  p.cluster.gpu.calibration.intra_node_efficiency = 0.8;
  EXPECT_TRUE(estimate(p).interval.has_value());
  p.cluster.gpu.calibration.gemm_max_efficiency = 0.6;
  EXPECT_FALSE(estimate(p).interval.has_value());
}

}  // namespace
}  // namespace meshwork::models
