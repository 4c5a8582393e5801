// Every Ampere Report's interval comes from its tier's errors on the published runs of
// Ampere's set (models/calibration_set.hpp); the residuals the Reports use are this build's.
#include "models/calibration_set.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "models/estimate.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::models {
namespace {

const std::filesystem::path kSource = MESHWORK_SOURCE_DIR;

plan::Plan load(const std::filesystem::path& file) {
  const auto loaded = plan::load_plan(kSource / file);
  EXPECT_TRUE(loaded.ok()) << file;
  return loaded.plan;
}

std::vector<plan::Plan> set_plans(std::span<const CalibrationCase> cases) {
  std::vector<plan::Plan> plans;
  for (const auto& c : cases) plans.push_back(load(std::filesystem::path("scenarios/published") / (std::string(c.scenario) + ".yaml")));
  return plans;
}

double shipped_ampere() {
  plan::GpuSpec a100 = load("scenarios/published/nar21-1.7b.yaml").cluster.gpu;
  a100.calibration = {};
  return hardware_profile(a100).gemm_max_efficiency;
}

// The first `n` cases of Ampere's set with published figures made by the estimate itself at
// largest-GEMM efficiency `factor`, and their plans.
std::pair<std::vector<CalibrationCase>, std::vector<plan::Plan>> made_at(std::size_t n, double factor) {
  std::vector<CalibrationCase> cases(ampere_set().begin(), ampere_set().begin() + static_cast<std::ptrdiff_t>(n));
  auto plans = set_plans(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].published = figure_of(estimate(with_gemm_max_efficiency(plans[i], factor)), cases[i].figure);
  }
  return {cases, plans};
}

// Published figures made by the estimate itself at a known factor: the fit finds that factor,
// and every error, left out or not, is nil.
TEST(Uncertainty, TheFitRecoversTheFactorThatMadeTheFigures) {
  const auto [cases, plans] = made_at(4, 0.55);
  const LeaveOneOut loo = leave_one_out(cases, plans, shipped_ampere());
  EXPECT_NEAR(loo.full_fit, 0.55, 1e-5);
  for (const auto& c : loo.cases) {
    EXPECT_NEAR(c.loo_fit, 0.55, 1e-5);
    EXPECT_NEAR(c.loo_log_ratio(), 0.0, 1e-5);
    EXPECT_LT(c.others_moved, 1e-4);
  }
  // The shipped factor (0.68) is faster than 0.55: every shipped prediction runs ahead.
  for (const auto& c : loo.cases) EXPECT_GT(c.error(), 0.05);
}

// Figures made at a factor within 1e-4 of the search's upper bound (0.95): Gauss-Newton
// converges there, and the fit says the set does not fix the factor, as the golden-section
// fallback does on its bound.
TEST(Uncertainty, AFitAtItsBoundIsAnErrorWhicheverMethodFoundIt) {
  const auto [cases, plans] = made_at(3, 0.94995);
  EXPECT_THROW((void)leave_one_out(cases, plans, 0.9), std::runtime_error);
}

double sum_of_squares(std::span<const CalibrationCase> cases, const std::vector<plan::Plan>& plans, double gemm) {
  double s = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double r = std::log(figure_of(estimate(with_gemm_max_efficiency(plans[i], gemm)), cases[i].figure) / cases[i].published);
    s += r * r;
  }
  return s;
}

// What the Reports use is what the set gives this build; a change that moves a case moves
// these, and `meshwork accuracy` prints the new ones. Issue 20's bar: no refit without one case
// moves another case by over 2%. The fit is the least-squares minimum: a step either way costs
// more.
TEST(Uncertainty, AmpereEstimateResidualsAreThisBuilds) {
  const auto plans = set_plans(ampere_set());
  const LeaveOneOut loo = leave_one_out(ampere_set(), plans, shipped_ampere());
  const double at_fit = sum_of_squares(ampere_set(), plans, loo.full_fit);
  EXPECT_LT(at_fit, sum_of_squares(ampere_set(), plans, loo.full_fit + 1e-4));
  EXPECT_LT(at_fit, sum_of_squares(ampere_set(), plans, loo.full_fit - 1e-4));
  EXPECT_NEAR(loo.log_ratio_min, kAmpereEstimateResiduals.log_lo, 1e-4) << "update kAmpereEstimateResiduals (meshwork accuracy)";
  EXPECT_NEAR(loo.log_ratio_max, kAmpereEstimateResiduals.log_hi, 1e-4) << "update kAmpereEstimateResiduals (meshwork accuracy)";
  EXPECT_EQ(static_cast<int>(ampere_set().size()), kAmpereEstimateResiduals.cases);
  EXPECT_LE(loo.largest_move, 0.02);
  EXPECT_LT(loo.log_ratio_min, 0.0);
  EXPECT_GT(loo.log_ratio_max, 0.0);
}

// The check the set cannot give itself: a published run kept out of it. BLOOM 176B on 384
// A100s (Le Scao et al. 2022; scenarios/heldout) trained at about 150 TFLOP/s per GPU, 156 in
// its fastest configuration. The estimate (164.4) is about 10% ahead of the typical figure and
// 5% ahead of the fastest; its interval held the fastest figure until 2026-12-07, when the
// set's largest residual fell from +6.0% to +4.8% (the step's end played stage by stage,
// models/end_of_step, took NAR21 T2 175B on 1,536 GPUs from +5.9% to +4.7%) and its low end
// rose from 154.8 to 156.6 TFLOP/s: the interval now misses both. Pinned, so that a change that
// moves it is reported.
TEST(Uncertainty, HeldOutBloomAgainstItsInterval) {
  const report::Report r = estimate(load("scenarios/heldout/bloom-176b-a100-384.yaml"));
  ASSERT_TRUE(r.interval.has_value());
  const double lo = r.hardware_tflops_per_gpu * r.interval->mfu_lo / r.mfu, hi = r.hardware_tflops_per_gpu * r.interval->mfu_hi / r.mfu;
  EXPECT_GT(lo, 156.0) << "the fastest figure now lies inside: report it";
  EXPECT_LT(lo, 158.0);
  EXPECT_NEAR(hi, 174.9, 0.5);
}

TEST(Uncertainty, AmpereSimulateResidualsAreTheGoldens) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& c : ampere_set()) {
    std::ifstream in(kSource / "tests/golden/scenarios/published" / (std::string(c.scenario) + ".simulate.json"));
    ASSERT_TRUE(in) << c.scenario;
    std::string exit_line;
    std::getline(in, exit_line);  // the golden's first line is the command's exit status
    const auto j = nlohmann::json::parse(in);
    report::Report r;
    r.mfu = j.at("mfu").get<double>();
    r.hardware_tflops_per_gpu = j.at("tflops_per_gpu").at("hardware").get<double>();
    const double ratio = std::log(figure_of(r, c.figure) / c.published);
    lo = std::min(lo, ratio);
    hi = std::max(hi, ratio);
  }
  EXPECT_NEAR(lo, kAmpereSimulateResiduals.log_lo, 1e-4) << "update kAmpereSimulateResiduals";
  EXPECT_NEAR(hi, kAmpereSimulateResiduals.log_hi, 1e-4) << "update kAmpereSimulateResiduals";
}

// Hopper's FP8 set checks at the shipped factor: the interval FP8 Reports on Hopper carry is
// the normal prediction interval of the estimate's errors on it now (the simulator's:
// SimUncertainty, tests/sim/tiers_test.cpp), and each run lies inside the interval the other
// eleven make at least 90% of the time (issue 20's bar; the range, 85% nominal, left the two
// extremes out by construction).
TEST(Uncertainty, HopperFp8ResidualsAreThisBuilds) {
  std::vector<double> residuals;
  for (const auto& c : hopper_fp8_set()) {
    const plan::Plan p = load(std::filesystem::path("scenarios/published") / (std::string(c.scenario) + ".yaml"));
    EXPECT_EQ(p.training.precision, plan::Precision::fp8) << c.scenario;
    residuals.push_back(std::log(figure_of(estimate(p), c.figure) / c.published));
  }
  const PredictionInterval i = prediction_interval(residuals);
  EXPECT_FALSE(i.range);
  EXPECT_NEAR(i.log_lo, kHopperFp8EstimateResiduals.log_lo, 1e-4) << "update kHopperFp8EstimateResiduals (meshwork accuracy)";
  EXPECT_NEAR(i.log_hi, kHopperFp8EstimateResiduals.log_hi, 1e-4) << "update kHopperFp8EstimateResiduals (meshwork accuracy)";
  EXPECT_EQ(i.level, kHopperFp8EstimateResiduals.level);
  EXPECT_EQ(static_cast<int>(hopper_fp8_set().size()), kHopperFp8EstimateResiduals.cases);
  EXPECT_GE(leave_one_out_coverage(residuals), 0.9);
}

// The interval's two regimes: the range of 19 or more residuals at (n - 1) / (n + 1), a normal
// prediction interval at 90% below; Student's t from its table, between its rows in 1/df.
TEST(Uncertainty, PredictionIntervalsAreTheRangeOrTheNormalOnes) {
  EXPECT_EQ(student_t_95(1), 6.314);
  EXPECT_EQ(student_t_95(11), 1.796);
  EXPECT_EQ(student_t_95(30), 1.697);
  EXPECT_EQ(student_t_95(40), 1.684);
  EXPECT_NEAR(student_t_95(50), 1.684 + (1.671 - 1.684) * (1.0 / 50 - 1.0 / 40) / (1.0 / 60 - 1.0 / 40), 1e-12);
  EXPECT_GT(student_t_95(1000), 1.645);
  EXPECT_LT(student_t_95(1000), 1.660);
  EXPECT_THROW((void)student_t_95(0), std::invalid_argument);
  std::vector<double> r;
  for (int k = 0; k < 19; ++k) r.push_back(0.01 * k - 0.05);
  const PredictionInterval range = prediction_interval(r);
  EXPECT_TRUE(range.range);
  EXPECT_DOUBLE_EQ(range.log_lo, -0.05);
  EXPECT_DOUBLE_EQ(range.log_hi, 0.13);
  EXPECT_DOUBLE_EQ(range.level, 0.9);
  // Four values 0, 0.1, 0.2, 0.3: mean 0.15, s = sqrt(0.05 / 3), t(0.95; 3) = 2.353.
  const std::vector<double> four{0, 0.1, 0.2, 0.3};
  const PredictionInterval normal = prediction_interval(four);
  EXPECT_FALSE(normal.range);
  const double half = 2.353 * std::sqrt(0.05 / 3) * std::sqrt(1.25);
  EXPECT_NEAR(normal.log_lo, 0.15 - half, 1e-12);
  EXPECT_NEAR(normal.log_hi, 0.15 + half, 1e-12);
  EXPECT_EQ(normal.level, 0.9);
  EXPECT_THROW((void)prediction_interval(std::vector<double>{0, 1}), std::invalid_argument);
  // Coverage takes the whole set's method: 19 residuals are judged by the others' ranges (18 of
  // them, which would take the normal interval on their own), so the two extremes fall out.
  EXPECT_NEAR(leave_one_out_coverage(r), 17.0 / 19, 1e-12);
  EXPECT_THROW((void)leave_one_out_coverage(std::vector<double>{0, 1, 2}), std::invalid_argument);
  // One far case among alike ones falls outside the others' interval; they fall inside theirs.
  const std::vector<double> one_far{0.10, 0.11, 0.12, 0.13, 0.10, 0.11, 0.12, 0.13, 0.9};
  EXPECT_NEAR(leave_one_out_coverage(one_far), 8.0 / 9, 1e-12);
}

TEST(Uncertainty, AmpereReportsCarryTheirTiersIntervalAndOthersNone) {
  const plan::Plan p = load("scenarios/gpt3-175b-a100-1024.yaml");
  const report::Report r = estimate(p);
  ASSERT_TRUE(r.interval.has_value());
  const auto& i = *r.interval;
  EXPECT_NEAR(i.level, 1 - 2.0 / 22, 1e-12);
  EXPECT_NEAR(i.step_time_lo_s, r.step_time_s * std::exp(kAmpereEstimateResiduals.log_lo), 1e-12);
  EXPECT_NEAR(i.step_time_hi_s, r.step_time_s * std::exp(kAmpereEstimateResiduals.log_hi), 1e-12);
  EXPECT_LT(i.step_time_lo_s, r.step_time_s);
  EXPECT_GT(i.step_time_hi_s, r.step_time_s);
  EXPECT_LT(i.mfu_lo, r.mfu);
  EXPECT_GT(i.mfu_hi, r.mfu);
  EXPECT_EQ(i.basis.find("outside"), std::string::npos) << i.basis;
  // Through JSON and back.
  const report::Report back = report::from_json(report::to_json(r));
  ASSERT_TRUE(back.interval.has_value());
  EXPECT_DOUBLE_EQ(back.interval->mfu_hi, i.mfu_hi);
  EXPECT_EQ(back.interval->basis, i.basis);
  // Outside the set's regime: still the set's interval, saying it may not hold.
  plan::Plan zero3 = load("scenarios/published/nar21-t2-175b-zero3-384.yaml");
  const report::Report z = estimate(zero3);
  ASSERT_TRUE(z.interval.has_value());
  EXPECT_NE(z.interval->basis.find("outside their regime"), std::string::npos);
  // No set for Hopper in BF16; a profile measured on the machine is not the set's.
  plan::Plan llama = load("scenarios/heldout/llama3-405b-h100-8192.yaml");
  EXPECT_FALSE(estimate(llama).interval.has_value());
  // Hopper in FP8: NeMo's set, which says the step is longer than estimated (eleven of its
  // twelve runs trained slower than meshwork predicts): its 90% normal interval lies above.
  llama.training.precision = plan::Precision::fp8;
  const report::Report fp8 = estimate(llama);
  ASSERT_TRUE(fp8.interval.has_value());
  EXPECT_EQ(fp8.interval->level, 0.9);
  EXPECT_NEAR(fp8.interval->step_time_lo_s, fp8.step_time_s * std::exp(kHopperFp8EstimateResiduals.log_lo), 1e-12 * fp8.step_time_s);
  EXPECT_NEAR(fp8.interval->step_time_hi_s, fp8.step_time_s * std::exp(kHopperFp8EstimateResiduals.log_hi), 1e-12 * fp8.step_time_s);
  EXPECT_GT(fp8.interval->step_time_lo_s, fp8.step_time_s);
  EXPECT_NE(fp8.interval->basis.find("NeMo 24.07"), std::string::npos);
  EXPECT_FALSE(estimate(with_gemm_max_efficiency(p, 0.6)).interval.has_value());
}

}  // namespace
}  // namespace meshwork::models
