// A generation's fused attention kernels are priced from their published microbenchmarks
// (docs/reference/attention): the code fits each kernel's pace against the sequence length on
// the raw table, the fit holds on lengths held back from it, the hardware profiles carry the
// fits, and the estimate prices an attention op at the kernel the plan names.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/attention_kernels.hpp"
#include "models/compute_time.hpp"
#include "models/hardware.hpp"
#include "plan/presets.hpp"
#include "plan/validate.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::models {
namespace {

constexpr double kA100BestGemm = 271.2e12;  // docs/reference/published-runs.md C3
constexpr double kH100BestGemm = 794.5e12;
const char* const kHopperKernels[] = {"flash2", "cudnn", "flash3"};

std::vector<AttentionMeasurement> table() {
  std::string error;
  auto t = read_attention_table(std::filesystem::path(MESHWORK_SOURCE_DIR) / "docs/reference/attention/attention_kernels.csv", error);
  EXPECT_TRUE(error.empty()) << error;
  return t;
}

HardwareProfile profile(const char* gpu) { return hardware_profile(plan::find_gpu_preset(gpu)->spec); }

void expect_pace(const AttentionPace& pace, const AttentionPace& fit) {
  EXPECT_NEAR(pace.max_over_gemm, fit.max_over_gemm, 1e-9 * fit.max_over_gemm);
  EXPECT_NEAR(pace.half_seq_length, fit.half_seq_length, 1e-9 * fit.half_seq_length);
}

// Nothing lost in transcription: the H100 panels' six lengths, both passes, for each kernel;
// A100's FlashAttention-2 as its two stated maxima.
TEST(AttentionKernels, TheTableHoldsEveryPanel) {
  const auto t = table();
  EXPECT_EQ(t.size(), 38u);
  std::string error;
  for (const char* kernel : kHopperKernels) {
    for (const bool backward : {false, true}) {
      SCOPED_TRACE(std::string(kernel) + (backward ? " backward" : " forward"));
      const auto points = attention_pass_points(t, "h100-sxm", kernel, 128, backward, error);
      EXPECT_TRUE(error.empty()) << error;
      ASSERT_EQ(points.size(), 6u);
      EXPECT_EQ(points.front().first, 512);
      EXPECT_EQ(points.back().first, 16384);
    }
  }
  const auto a100 = attention_pass_points(t, "a100-sxm-80gb", "flash2", 128, false, error);
  ASSERT_EQ(a100.size(), 1u);
  EXPECT_NEAR(a100.front().second, 0.73 * 312e12, 1e3);  // 73% of 312 TFLOP/s
}

TEST(AttentionKernels, TheProfilesCarryTheFitsOfTheirTables) {
  const auto t = table();
  const HardwareProfile hopper = profile("h100-sxm");
  const std::pair<const char*, const AttentionKernelPaces*> kernels[] = {{"flash2", &hopper.flash2}, {"cudnn", &hopper.cudnn}, {"flash3", &hopper.flash3}};
  for (const auto& [kernel, paces] : kernels) {
    SCOPED_TRACE(kernel);
    expect_pace(paces->forward, fit_attention_pace(t, "h100-sxm", kernel, 128, false, kH100BestGemm));
    expect_pace(paces->backward, fit_attention_pace(t, "h100-sxm", kernel, 128, true, kH100BestGemm));
  }
  EXPECT_EQ(hopper.auto_attention_kernel, plan::AttentionKernel::cudnn);  // Transformer Engine's preference on Hopper+
  EXPECT_EQ(profile("h200-sxm").cudnn.forward.max_over_gemm, hopper.cudnn.forward.max_over_gemm);

  // A100: the stated maxima, with FlashAttention-2's half lengths on H100; cuDNN unmeasured.
  const HardwareProfile ampere = profile("a100-sxm-80gb");
  for (const bool backward : {false, true}) {
    const AttentionPace stated = fit_attention_pace(t, "a100-sxm-80gb", "flash2", 128, backward, kA100BestGemm);
    const AttentionPace& pace = backward ? ampere.flash2.backward : ampere.flash2.forward;
    EXPECT_EQ(stated.half_seq_length, 0);
    EXPECT_NEAR(pace.max_over_gemm, stated.max_over_gemm, 1e-12);
    EXPECT_EQ(pace.half_seq_length, (backward ? hopper.flash2.backward : hopper.flash2.forward).half_seq_length);
  }
  EXPECT_EQ(ampere.cudnn.forward.max_over_gemm, ampere.flash2.forward.max_over_gemm);
  EXPECT_EQ(ampere.flash3.forward.max_over_gemm, 0);  // FlashAttention-3 is Hopper's alone
  EXPECT_EQ(ampere.auto_attention_kernel, plan::AttentionKernel::flash2);

  // Blackwell: unmeasured, Hopper's paces; no FlashAttention-3.
  const HardwareProfile blackwell = profile("b200");
  EXPECT_EQ(blackwell.cudnn.backward.max_over_gemm, hopper.cudnn.backward.max_over_gemm);
  EXPECT_EQ(blackwell.flash3.forward.max_over_gemm, 0);
  EXPECT_EQ(blackwell.auto_attention_kernel, plan::AttentionKernel::cudnn);
  // A GPU's name in any case: "H100 SXM" is Hopper.
  plan::GpuSpec upper = plan::find_gpu_preset("h100-sxm")->spec;
  upper.name = "H100 SXM";
  EXPECT_EQ(hardware_profile(upper).generation, "hopper");
}

// Each pass's fitted curve passes within 5% of every measured length, and refitted without one
// length (1K to 16K) predicts it within 6%. 512 is left out of the held-back check: predicted from
// the longer lengths alone it is an extrapolation.
TEST(AttentionKernels, LengthsHeldBackFromTheFitStayOnItsCurve) {
  const auto t = table();
  std::string error;
  for (const char* kernel : kHopperKernels) {
    for (const bool backward : {false, true}) {
      SCOPED_TRACE(std::string(kernel) + (backward ? " backward" : " forward"));
      const auto points = attention_pass_points(t, "h100-sxm", kernel, 128, backward, error);
      const AttentionPace whole = fit_attention_pace(t, "h100-sxm", kernel, 128, backward, kH100BestGemm);
      for (const auto& [length, flops_per_s] : points) EXPECT_NEAR(whole.at(length) * kH100BestGemm / flops_per_s, 1, 0.05) << length;
      for (std::size_t held = 1; held < points.size(); ++held) {
        std::vector<AttentionMeasurement> rest;
        for (const auto& m : t) {
          if (m.seq_length != static_cast<std::int64_t>(points[held].first)) rest.push_back(m);
        }
        const AttentionPace fit = fit_attention_pace(rest, "h100-sxm", kernel, 128, backward, kH100BestGemm);
        EXPECT_NEAR(fit.at(points[held].first) * kH100BestGemm / points[held].second, 1, 0.06) << points[held].first;
      }
    }
  }
}

TEST(AttentionKernels, ATableThatCannotBeReadSaysWhereAndWhy) {
  std::string error = "left from before";
  EXPECT_TRUE(read_attention_table("/nonexistent/attention.csv", error).empty());
  EXPECT_NE(error.find("cannot be read"), std::string::npos) << error;
  const auto file = std::filesystem::temp_directory_path() /
                    ("meshwork-attention-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".csv");
  auto write = [&](const std::string& text) {
    std::ofstream out(file, std::ios::binary);
    out << "gpu,kernel,pass,seq_length,head_dim,tflops_per_s\n" << text;
  };
  write("h100-sxm,flash3,forward,512,128,467\nh100-sxm,flash3,sideways,512,128,1\nh100-sxm,flash3,forward,5x,128,1\n"
        "h100-sxm,flash3,forward,512,128\nh100-sxm,flash3,backward,512,128,-3\nh100-sxm,flash4,forward,512,128,1\n");
  EXPECT_TRUE(read_attention_table(file, error).empty());
  EXPECT_NE(error.find(":3: field pass is 'sideways', expected forward or backward"), std::string::npos) << error;
  EXPECT_NE(error.find(":4: field seq_length is not a whole number: '5x'"), std::string::npos) << error;
  EXPECT_NE(error.find(":5: 5 fields, expected 6"), std::string::npos) << error;
  EXPECT_NE(error.find(":6: a size or throughput that is not positive and finite"), std::string::npos) << error;
  EXPECT_NE(error.find(":7: field kernel is 'flash4', expected flash2, flash3 or cudnn"), std::string::npos) << error;
  // A length given twice is named, not one of them silently kept.
  write("h100-sxm,flash3,forward,512,128,467\nh100-sxm,flash3,forward,512,128,470\n");
  const auto twice = read_attention_table(file, error);
  ASSERT_EQ(twice.size(), 2u) << error;
  EXPECT_TRUE(attention_pass_points(twice, "h100-sxm", "flash3", 128, false, error).empty());
  EXPECT_NE(error.find("h100-sxm flash3 forward at 512 tokens is given twice"), std::string::npos) << error;
  std::filesystem::remove(file);
}

// An attention op costs, by hand: the kernel's executed FLOPs (half the full matrix, causal;
// the backward 2.5/2 of the op's MFU FLOPs) over the attention peak times the GEMM curve's
// in-training maximum and size factor times the pass's measured pace at the plan's length. The
// kernels' times stand as the inverse of their paces; auto is cuDNN on Hopper; with p2p context
// parallelism a call runs over s / CP keys.
TEST(AttentionKernels, TheEstimatePricesEachPassOfTheKernelThePlanNames) {
  plan::Plan p = plan::testing::base_plan();  // h100-sxm, 2,048 tokens
  ASSERT_TRUE(p.training.flash_attention);
  const double flops = 1e13;
  auto attention_s = [&](plan::AttentionKernel k, OpPhase phase, std::int64_t cp = 1) {
    plan::Plan q = p;
    q.training.attention_kernel = k;
    q.parallelism.context_parallel_size = cp;
    q.parallelism.context_parallel_comm_type = plan::CpCommType::p2p;
    return ComputeTimer(q)(OpKind::attention, flops, 0, 0, phase, false);
  };
  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  const double s = static_cast<double>(p.model.seq_length);
  const double size = hw.gemm_max_efficiency * (flops / 2) / (flops / 2 + hw.gemm_half_macs);
  using plan::AttentionKernel;
  // cuDNN at 2,048 tokens, from the table's rows: forward 617, backward 465 TFLOP/s, each within
  // its curve's 5%.
  EXPECT_NEAR(attention_s(AttentionKernel::cudnn, OpPhase::forward), 0.5 * flops / (989e12 * size * hw.cudnn.forward.at(s)), 1e-12);
  EXPECT_NEAR(hw.cudnn.forward.at(s) * kH100BestGemm / 617e12, 1, 0.05);
  EXPECT_NEAR(attention_s(AttentionKernel::cudnn, OpPhase::backward_input), 1.25 * 0.5 * flops / (989e12 * size * hw.cudnn.backward.at(s)), 1e-12);
  EXPECT_NEAR(hw.cudnn.backward.at(s) * kH100BestGemm / 465e12, 1, 0.05);
  // A recomputed forward is a forward.
  EXPECT_EQ(attention_s(AttentionKernel::cudnn, OpPhase::recompute), attention_s(AttentionKernel::cudnn, OpPhase::forward));
  EXPECT_NEAR(attention_s(AttentionKernel::flash3, OpPhase::forward) / attention_s(AttentionKernel::cudnn, OpPhase::forward),
              hw.cudnn.forward.at(s) / hw.flash3.forward.at(s), 1e-12);
  EXPECT_NEAR(attention_s(AttentionKernel::flash2, OpPhase::backward_input) / attention_s(AttentionKernel::cudnn, OpPhase::backward_input),
              hw.cudnn.backward.at(s) / hw.flash2.backward.at(s), 1e-12);
  EXPECT_EQ(attention_s(AttentionKernel::automatic, OpPhase::forward), attention_s(AttentionKernel::cudnn, OpPhase::forward));
  EXPECT_NEAR(attention_s(AttentionKernel::cudnn, OpPhase::forward, 4) / attention_s(AttentionKernel::cudnn, OpPhase::forward),
              hw.cudnn.forward.at(s) / hw.cudnn.forward.at(s / 4), 1e-12);
  EXPECT_GT(attention_s(AttentionKernel::cudnn, OpPhase::forward, 4), attention_s(AttentionKernel::cudnn, OpPhase::forward));
}

// Off Hopper: an A100 plan's flash attention is FlashAttention-2 at its stated pace on its length
// curve; a CPU host, whose executor runs its own kernel that no table measures, keeps the flat
// pace every plan had before (0.8 of a GEMM of its size, both passes alike in MFU's FLOPs).
TEST(AttentionKernels, AmpereAndCpuHostsPriceTheirOwnKernels) {
  auto timer_of = [](const std::string& yaml) {
    auto r = plan::load_plan_text(yaml, plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return std::make_pair(ComputeTimer(r.plan), r.plan);
  };
  const double flops = 1e12;
  {
    const auto [timer, p] = timer_of("model: {preset: gpt3-175b}\ntraining: {global_batch_size: 8}\ncluster: {gpu: a100-sxm-80gb, num_gpus: 8}\n");
    const HardwareProfile& hw = timer.hardware();
    const double size = hw.gemm_max_efficiency * (flops / 2) / (flops / 2 + hw.gemm_half_macs);
    const double s = static_cast<double>(p.model.seq_length);
    EXPECT_NEAR(timer(OpKind::attention, flops, 0, 0, OpPhase::forward, false), 0.5 * flops / (312e12 * size * 0.73 * 312 / 271.2 * s / (s + hw.flash2.forward.half_seq_length)),
                1e-12);
  }
  {
    const auto [timer, p] = timer_of("model: {preset: tiny}\ntraining: {global_batch_size: 8, precision: fp32}\n"
                                     "cluster: {gpu: cpu-host, num_gpus: 1, gpus_per_node: 1, nics_per_node: 0, topology: {kind: single_node}}\n");
    const HardwareProfile& hw = timer.hardware();
    const double size = hw.gemm_max_efficiency * (flops / 2) / (flops / 2 + hw.gemm_half_macs);
    const double peak = plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12;
    for (const OpPhase phase : {OpPhase::forward, OpPhase::backward_input, OpPhase::recompute}) {
      EXPECT_NEAR(timer(OpKind::attention, flops, 0, 0, phase, false) - hw.kernel_overhead_s, 0.5 * flops / (peak * size * 0.8), 1e-12);
    }
  }
}

}  // namespace
}  // namespace meshwork::models
