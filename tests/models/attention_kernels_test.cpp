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

void expect_pace(const AttentionPace& pace, const GemmCurve& fit) {
  EXPECT_NEAR(pace.max_over_gemm, fit.max_efficiency, 1e-9 * fit.max_efficiency);
  EXPECT_NEAR(pace.half_seq_length, fit.half_macs, 1e-9 * fit.half_macs);
}

// Nothing lost in transcription: the H100 panels' six lengths, both passes, for each kernel;
// A100's FlashAttention-2 as its two stated maxima.
TEST(AttentionKernels, TheTableHoldsEveryPanel) {
  const auto t = table();
  EXPECT_EQ(t.size(), 38u);
  for (const char* kernel : kHopperKernels) {
    SCOPED_TRACE(kernel);
    const auto paces = attention_paces(t, "h100-sxm", kernel, 128);
    ASSERT_EQ(paces.size(), 6u);
    EXPECT_EQ(paces.front().first, 512);
    EXPECT_EQ(paces.back().first, 16384);
  }
  const auto a100 = attention_paces(t, "a100-sxm-80gb", "flash2", 128);
  ASSERT_EQ(a100.size(), 1u);
  // 73% forward, 63% backward of 312: 3 / (1/0.73 + 2.5/0.63) of it.
  EXPECT_NEAR(a100.front().second, 3 / (1 / 0.73 + 2.5 / 0.63) * 312e12, 1e3);
}

TEST(AttentionKernels, TheProfilesCarryTheFitsOfTheirTables) {
  const auto t = table();
  const HardwareProfile hopper = profile("h100-sxm");
  expect_pace(hopper.flash2, fit_attention_pace(t, "h100-sxm", "flash2", 128, kH100BestGemm));
  expect_pace(hopper.cudnn, fit_attention_pace(t, "h100-sxm", "cudnn", 128, kH100BestGemm));
  expect_pace(hopper.flash3, fit_attention_pace(t, "h100-sxm", "flash3", 128, kH100BestGemm));
  EXPECT_EQ(hopper.auto_attention_kernel, plan::AttentionKernel::cudnn);  // Transformer Engine's preference on Hopper+
  EXPECT_EQ(profile("h200-sxm").cudnn.max_over_gemm, hopper.cudnn.max_over_gemm);

  // A100: the stated maxima, flat, with FlashAttention-2's half length on H100; cuDNN unmeasured.
  const HardwareProfile ampere = profile("a100-sxm-80gb");
  const GemmCurve stated = fit_attention_pace(t, "a100-sxm-80gb", "flash2", 128, kA100BestGemm);
  EXPECT_EQ(stated.half_macs, 0);
  EXPECT_NEAR(ampere.flash2.max_over_gemm, stated.max_efficiency, 1e-12);
  EXPECT_EQ(ampere.flash2.half_seq_length, hopper.flash2.half_seq_length);
  EXPECT_EQ(ampere.cudnn.max_over_gemm, ampere.flash2.max_over_gemm);
  EXPECT_EQ(ampere.flash3.max_over_gemm, 0);  // FlashAttention-3 is Hopper's alone
  EXPECT_EQ(ampere.auto_attention_kernel, plan::AttentionKernel::flash2);

  // Blackwell: unmeasured, Hopper's paces; no FlashAttention-3.
  const HardwareProfile blackwell = profile("b200");
  EXPECT_EQ(blackwell.cudnn.max_over_gemm, hopper.cudnn.max_over_gemm);
  EXPECT_EQ(blackwell.flash3.max_over_gemm, 0);
  EXPECT_EQ(blackwell.auto_attention_kernel, plan::AttentionKernel::cudnn);
}

// The fitted curve passes within 3% of every measured length, and refitted without one length
// (1K to 16K) predicts it within 5%. 512 is left out of the held-back check: predicted from the
// longer lengths alone it is an extrapolation, 7-10% fast for cuDNN and FlashAttention-3.
TEST(AttentionKernels, LengthsHeldBackFromTheFitStayOnItsCurve) {
  const auto t = table();
  for (const char* kernel : kHopperKernels) {
    SCOPED_TRACE(kernel);
    const auto paces = attention_paces(t, "h100-sxm", kernel, 128);
    const GemmCurve whole = fit_attention_pace(t, "h100-sxm", kernel, 128, kH100BestGemm);
    for (const auto& [length, pace] : paces) {
      EXPECT_NEAR(whole.efficiency(length) * kH100BestGemm / pace, 1, 0.03) << length;
    }
    for (std::size_t held = 1; held < paces.size(); ++held) {
      std::vector<AttentionMeasurement> rest;
      for (const auto& m : t) {
        if (m.seq_length != static_cast<std::int64_t>(paces[held].first)) rest.push_back(m);
      }
      const GemmCurve fit = fit_attention_pace(rest, "h100-sxm", kernel, 128, kH100BestGemm);
      EXPECT_NEAR(fit.efficiency(paces[held].first) * kH100BestGemm / paces[held].second, 1, 0.05) << paces[held].first;
    }
  }
}

TEST(AttentionKernels, ATableThatCannotBeReadSaysWhereAndWhy) {
  std::string error = "left from before";
  EXPECT_TRUE(read_attention_table("/nonexistent/attention.csv", error).empty());
  EXPECT_NE(error.find("cannot be read"), std::string::npos) << error;
  const auto file = std::filesystem::temp_directory_path() /
                    ("meshwork-attention-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".csv");
  {
    std::ofstream out(file, std::ios::binary);
    out << "gpu,kernel,pass,seq_length,head_dim,tflops_per_s\nh100-sxm,flash3,forward,512,128,467\n"
           "h100-sxm,flash3,sideways,512,128,1\nh100-sxm,flash3,forward,5x,128,1\nh100-sxm,flash3,forward,512,128\n"
           "h100-sxm,flash3,backward,512,128,-3\n";
  }
  EXPECT_TRUE(read_attention_table(file, error).empty());
  EXPECT_NE(error.find(":3: field pass is 'sideways', expected forward or backward"), std::string::npos) << error;
  EXPECT_NE(error.find(":4: field seq_length is not a whole number: '5x'"), std::string::npos) << error;
  EXPECT_NE(error.find(":5: 5 fields, expected 6"), std::string::npos) << error;
  EXPECT_NE(error.find(":6: a size or throughput that is not positive and finite"), std::string::npos) << error;
  std::filesystem::remove(file);
}

// An attention op costs its work over the kernel's pace at the plan's length: the kernels'
// times stand as the inverse of their paces, auto is cuDNN on Hopper, and with p2p context
// parallelism a call runs over s / CP keys.
TEST(AttentionKernels, TheEstimatePricesTheKernelThePlanNames) {
  plan::Plan p = plan::testing::base_plan();  // h100-sxm
  ASSERT_TRUE(p.training.flash_attention);
  const double flops = 1e13;
  auto attention_s = [&](plan::AttentionKernel k, std::int64_t cp = 1) {
    plan::Plan q = p;
    q.training.attention_kernel = k;
    q.parallelism.context_parallel_size = cp;
    q.parallelism.context_parallel_comm_type = plan::CpCommType::p2p;
    return ComputeTimer(q)(OpKind::attention, flops, 0);
  };
  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  const double s = static_cast<double>(p.model.seq_length);
  using plan::AttentionKernel;
  EXPECT_NEAR(attention_s(AttentionKernel::flash3) / attention_s(AttentionKernel::cudnn), hw.cudnn.at(s) / hw.flash3.at(s), 1e-12);
  EXPECT_NEAR(attention_s(AttentionKernel::flash2) / attention_s(AttentionKernel::cudnn), hw.cudnn.at(s) / hw.flash2.at(s), 1e-12);
  EXPECT_EQ(attention_s(AttentionKernel::automatic), attention_s(AttentionKernel::cudnn));
  EXPECT_NEAR(attention_s(AttentionKernel::cudnn, 4) / attention_s(AttentionKernel::cudnn), hw.cudnn.at(s) / hw.cudnn.at(s / 4), 1e-12);
  EXPECT_GT(attention_s(AttentionKernel::cudnn, 4), attention_s(AttentionKernel::cudnn));
}

}  // namespace
}  // namespace meshwork::models
