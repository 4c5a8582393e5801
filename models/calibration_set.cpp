#include "models/calibration_set.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/estimate.hpp"
#include "models/hardware.hpp"
#include "models/regime.hpp"

namespace meshwork::models {
namespace {

using F = PublishedFigure;

// docs/reference/published-runs.md A1 and A2 (the figures as the papers print them).
constexpr std::array kAmpereSet{
    CalibrationCase{"nar21-1.7b", 137, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-3.6b", 138, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-7.5b", 142, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-18.4b", 135, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-39.1b", 138, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-76.1b", 140, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-145.6b", 148, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-310.1b", 155, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-529.6b", 163, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-1t", 163, F::hardware_tflops_per_gpu, "NAR21 Table 1"},
    CalibrationCase{"nar21-t2-175b-ptdp-384", 153, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"nar21-t2-175b-ptdp-768", 149, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"nar21-t2-175b-ptdp-1536", 141, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"nar21-t2-530b-ptdp-560", 171, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"nar21-t2-530b-ptdp-1120", 167, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"nar21-t2-530b-ptdp-2240", 159, F::hardware_tflops_per_gpu, "NAR21 Table 2, PTD-P"},
    CalibrationCase{"kor22-22b", 41.5, F::mfu_percent, "KOR22 Table 5"},
    CalibrationCase{"kor22-175b", 51.4, F::mfu_percent, "KOR22 Table 5"},
    CalibrationCase{"kor22-530b", 56.0, F::mfu_percent, "KOR22 Table 5"},
    CalibrationCase{"kor22-1t", 56.3, F::mfu_percent, "KOR22 Table 5"},
    CalibrationCase{"kor22-530b-dp8", 54.2, F::mfu_percent, "KOR22 §6.3 (530B at DP 8)"},
};

constexpr std::array kAmpereOutside{
    CalibrationCase{"nar21-t2-175b-zero3-384", 144, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
    CalibrationCase{"nar21-t2-175b-zero3-768", 88, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
    CalibrationCase{"nar21-t2-175b-zero3-1536", 44, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
    CalibrationCase{"nar21-t2-530b-zero3-640", 138, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
    CalibrationCase{"nar21-t2-530b-zero3-1120", 98, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
    CalibrationCase{"nar21-t2-530b-zero3-2240", 48, F::hardware_tflops_per_gpu, "NAR21 Table 2, ZeRO-3"},
};

// docs/reference/published-runs.md A3 (tokens/s per GPU, as the page prints them).
constexpr std::array kHopperFp8Set{
    CalibrationCase{"nemo2407-gpt3-5b-64", 23406, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-gpt3-20b-64", 5851, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-gpt3-175b-128", 716, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-gpt3-175b-512", 825, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-llama2-7b-8", 16934, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-llama2-13b-16", 8715, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-llama2-70b-64", 1728, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-nemotron-8b-64", 12507, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-nemotron-22b-64", 4312, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-nemotron-340b-128", 326, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-llama3-8b-8", 12273, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
    CalibrationCase{"nemo2407-llama3-70b-64", 1524, F::tokens_per_s_per_gpu, "NeMo 24.07, DGX-H100 FP8"},
};

// The set's predictions at one factor, as log-ratios to the published figures.
std::vector<double> log_ratios(std::span<const CalibrationCase> cases, std::span<const plan::Plan> plans, double gemm) {
  std::vector<double> r(cases.size());
  EstimateOptions o;
  o.provenance = false;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    r[i] = std::log(figure_of(estimate(with_gemm_max_efficiency(plans[i], gemm), o), cases[i].figure) / cases[i].published);
  }
  return r;
}

// The sum of squared log-ratios of the cases other than `left_out` (none: -1) at `r`.
double squares(const std::vector<double>& r, std::ptrdiff_t left_out) {
  double s = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (static_cast<std::ptrdiff_t>(i) != left_out) s += r[i] * r[i];
  }
  return s;
}

// d r_i / d factor at `g`, by central differences.
std::vector<double> jacobian_at(std::span<const CalibrationCase> cases, std::span<const plan::Plan> plans, double g) {
  constexpr double h = 1e-4;
  const auto up = log_ratios(cases, plans, g + h), down = log_ratios(cases, plans, g - h);
  std::vector<double> j(up.size());
  for (std::size_t i = 0; i < j.size(); ++i) j[i] = (up[i] - down[i]) / (2 * h);
  return j;
}

// The factor minimising the sum of squared log-ratios of the cases other than `left_out`, by
// Gauss-Newton from `start`: each step takes the Jacobian (d r_i / d factor, central
// differences) where it stands, the first one `jacobian` (given: taken at `start`), and it stops
// when a step moves the factor by less than 1e-8: there the gradient sum J_i r_i is zero. Where
// it does not converge or leaves [0.3, 0.95], golden-section search (Kiefer 1953) on that
// range; a minimum on its bound is an error (the set does not fix the factor).
double fit(std::span<const CalibrationCase> cases, std::span<const plan::Plan> plans, std::ptrdiff_t left_out, double start,
           std::vector<double> jacobian) {
  constexpr double kLow = 0.3, kHigh = 0.95, kTolerance = 1e-8;
  // Within 1e-4 of a bound the set does not fix the factor, whichever method found it.
  const auto checked = [&](double found) {
    if (found - kLow < 1e-4 || kHigh - found < 1e-4) {
      throw std::runtime_error("leave_one_out: the fit of the largest GEMMs' efficiency reached " + std::to_string(found) +
                               ", the bound of its search: the set does not fix the factor");
    }
    return found;
  };
  double g = start;
  for (int step = 0; step < 20; ++step) {
    if (step > 0) jacobian = jacobian_at(cases, plans, g);
    const auto r = log_ratios(cases, plans, g);
    double jr = 0, jj = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (static_cast<std::ptrdiff_t>(i) == left_out) continue;
      jr += jacobian[i] * r[i];
      jj += jacobian[i] * jacobian[i];
    }
    if (!(jj > 0)) break;
    const double next = g - jr / jj;
    if (!(next > kLow && next < kHigh)) break;
    if (std::fabs(next - g) < kTolerance) return checked(next);
    g = next;
  }
  const auto cost = [&](double x) { return squares(log_ratios(cases, plans, x), left_out); };
  const double golden = (std::sqrt(5.0) - 1) / 2;
  double a = kLow, b = kHigh;
  double x1 = b - golden * (b - a), x2 = a + golden * (b - a);
  double f1 = cost(x1), f2 = cost(x2);
  while (b - a > 1e-7) {
    if (f1 < f2) {
      b = x2, x2 = x1, f2 = f1;
      x1 = b - golden * (b - a), f1 = cost(x1);
    } else {
      a = x1, x1 = x2, f1 = f2;
      x2 = a + golden * (b - a), f2 = cost(x2);
    }
  }
  return checked((a + b) / 2);
}

}  // namespace

std::span<const CalibrationCase> ampere_set() { return kAmpereSet; }
std::span<const CalibrationCase> ampere_outside_set() { return kAmpereOutside; }
std::span<const CalibrationCase> hopper_fp8_set() { return kHopperFp8Set; }

double figure_of(const report::Report& r, PublishedFigure figure) {
  switch (figure) {
    case PublishedFigure::hardware_tflops_per_gpu: return r.hardware_tflops_per_gpu;
    case PublishedFigure::mfu_percent: return 100 * r.mfu;
    case PublishedFigure::tokens_per_s_per_gpu: return r.num_gpus > 0 ? r.tokens_per_s / static_cast<double>(r.num_gpus) : 0;
  }
  return 0;
}

plan::Plan with_gemm_max_efficiency(const plan::Plan& p, double gemm_max_efficiency) {
  plan::Plan q = p;
  q.cluster.gpu.calibration.gemm_max_efficiency = gemm_max_efficiency;
  return q;
}

double CaseResult::loo_log_ratio() const { return std::log(loo_predicted / published); }
double CaseResult::residual() const { return std::log(predicted / published) + std::log(loo_predicted / full_predicted); }

LeaveOneOut leave_one_out(std::span<const CalibrationCase> cases, std::span<const plan::Plan> plans, double shipped,
                          const std::function<void(int, int)>& progress) {
  if (cases.size() != plans.size() || cases.size() < 3) throw std::invalid_argument("leave_one_out: needs a plan per case, and three cases or more");
  const int total = static_cast<int>(cases.size()) + 1;
  LeaveOneOut out;
  out.shipped = shipped;
  const auto shipped_jacobian = jacobian_at(cases, plans, shipped);
  out.full_fit = fit(cases, plans, -1, shipped, shipped_jacobian);
  if (progress) progress(1, total);
  // Every left-out fit starts from the whole set's, with the Jacobian there.
  const auto jacobian = jacobian_at(cases, plans, out.full_fit);
  const auto at_full = log_ratios(cases, plans, out.full_fit);
  const auto at_shipped = log_ratios(cases, plans, shipped);
  const auto n = cases.size();
  out.cases.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    CaseResult& c = out.cases[i];
    c.published = cases[i].published;
    c.predicted = c.published * std::exp(at_shipped[i]);
    c.full_predicted = c.published * std::exp(at_full[i]);
    c.loo_fit = fit(cases, plans, static_cast<std::ptrdiff_t>(i), out.full_fit, jacobian);
    const auto at_loo = log_ratios(cases, plans, c.loo_fit);
    c.loo_predicted = c.published * std::exp(at_loo[i]);
    for (std::size_t j = 0; j < n; ++j) {
      if (j != i) c.others_moved = std::max(c.others_moved, std::fabs(std::exp(at_loo[j] - at_full[j]) - 1));
    }
    out.largest_move = std::max(out.largest_move, c.others_moved);
    out.mean_abs_error += std::fabs(c.error()) / static_cast<double>(n);
    out.max_abs_error = std::max(out.max_abs_error, std::fabs(c.error()));
    if (progress) progress(static_cast<int>(i) + 2, total);
  }
  out.log_ratio_min = out.log_ratio_max = out.cases[0].residual();
  for (const auto& c : out.cases) {
    out.log_ratio_min = std::min(out.log_ratio_min, c.residual());
    out.log_ratio_max = std::max(out.log_ratio_max, c.residual());
  }
  std::vector<double> residuals;
  for (const auto& c : out.cases) residuals.push_back(c.residual());
  out.coverage = residuals.size() >= 4 ? leave_one_out_coverage(residuals) : NAN;
  return out;
}

double student_t_95(int df) {
  if (df < 1) throw std::invalid_argument("student_t_95: df must be at least 1, not " + std::to_string(df));
  // NIST/SEMATECH e-Handbook of Statistical Methods §1.3.6.7.2, upper critical values, column 0.05.
  static constexpr std::array<double, 30> kTo30{6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
                                               1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
                                               1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  if (df <= 30) return kTo30[static_cast<std::size_t>(df - 1)];
  static constexpr std::array<std::pair<double, double>, 4> kBeyond{{{30, 1.697}, {40, 1.684}, {60, 1.671}, {100, 1.660}}};
  const double x = 1.0 / df;
  for (std::size_t k = 0; k + 1 < kBeyond.size(); ++k) {
    const auto [d0, t0] = kBeyond[k];
    const auto [d1, t1] = kBeyond[k + 1];
    if (df <= d1) return t0 + (t1 - t0) * (x - 1 / d0) / (1 / d1 - 1 / d0);
  }
  constexpr double kNormal95 = 1.645;  // df -> infinity
  const auto [d0, t0] = kBeyond.back();
  return t0 + (kNormal95 - t0) * (x - 1 / d0) / (0 - 1 / d0);
}

namespace {

// The set's range (`range`) or the normal prediction interval at 90%.
PredictionInterval interval_by(std::span<const double> residuals, bool range) {
  const std::size_t n = residuals.size();
  if (n < 3) throw std::invalid_argument("prediction_interval: needs at least 3 residuals, not " + std::to_string(n));
  PredictionInterval out;
  const double count = static_cast<double>(n);
  if (range) {
    const auto [lo, hi] = std::minmax_element(residuals.begin(), residuals.end());
    out.log_lo = *lo;
    out.log_hi = *hi;
    out.level = 1 - 2 / (count + 1);
    out.range = true;
    return out;
  }
  double mean = 0;
  for (const double r : residuals) mean += r / count;
  double ss = 0;
  for (const double r : residuals) ss += (r - mean) * (r - mean);
  const double half = student_t_95(static_cast<int>(n) - 1) * std::sqrt(ss / (count - 1)) * std::sqrt(1 + 1 / count);
  out.log_lo = mean - half;
  out.log_hi = mean + half;
  out.level = 0.90;
  return out;
}

constexpr std::size_t kRangeFrom = 19;  // the fewest residuals whose range covers 90%: (n - 1) / (n + 1)

}  // namespace

PredictionInterval prediction_interval(std::span<const double> residuals) { return interval_by(residuals, residuals.size() >= kRangeFrom); }

double leave_one_out_coverage(std::span<const double> residuals) {
  const std::size_t n = residuals.size();
  if (n < 4) throw std::invalid_argument("leave_one_out_coverage: needs at least 4 residuals, not " + std::to_string(n));
  const bool range = n >= kRangeFrom;  // the method the whole set's interval takes
  int inside = 0;
  std::vector<double> others;
  for (std::size_t i = 0; i < n; ++i) {
    others.assign(residuals.begin(), residuals.end());
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    const PredictionInterval p = interval_by(others, range);
    if (residuals[i] >= p.log_lo && residuals[i] <= p.log_hi) ++inside;
  }
  return static_cast<double>(inside) / static_cast<double>(n);
}

bool outside_regime(const std::vector<std::string>& regime_notes) {
  return std::any_of(regime_notes.begin(), regime_notes.end(), [](const std::string& n) { return n.starts_with("outside the calibrated regime"); });
}

void attach_interval(const plan::Plan& p, report::Report& r) { attach_interval(p, r, outside_regime(regime_notes(p))); }

void attach_interval(const plan::Plan& p, report::Report& r, bool outside) {
  r.interval.reset();
  // Compute measured on the machine: the set does not speak for it. A profile with only its
  // fabric measured (calibrate --nccl-tests) keeps its generation's compute, and its interval,
  // as models/regime.cpp keeps its notes.
  if (p.cluster.gpu.calibration.gemm_max_efficiency > 0) return;
  plan::GpuSpec datasheet = p.cluster.gpu;
  datasheet.calibration = {};
  const std::string_view generation = hardware_profile(datasheet).generation;
  if (r.method == report::Method::measured) return;
  const bool simulated = r.method == report::Method::simulated;
  const SetResiduals* set = nullptr;
  std::string basis;
  if (generation == "ampere") {
    set = simulated ? &kAmpereSimulateResiduals : &kAmpereEstimateResiduals;
    basis = std::string(simulated ? "the simulator's errors at the shipped factor" : "the estimate's leave-one-out errors") + " on Ampere's " +
            std::to_string(set->cases) + " published runs, NAR21 and KOR22: see meshwork accuracy";
  } else if (generation == "hopper" && p.training.precision == plan::Precision::fp8) {
    set = simulated ? &kHopperFp8SimulateResiduals : &kHopperFp8EstimateResiduals;
    basis = std::string(simulated ? "the simulator's" : "the estimate's") + " errors on NeMo 24.07's " + std::to_string(set->cases) +
            " FP8 runs on DGX-H100, docs/reference/published-runs.md A3, which it overruns: see meshwork accuracy";
  }
  if (set == nullptr) return;
  const SetResiduals& s = *set;
  report::Interval i;
  i.level = s.level;
  i.step_time_lo_s = r.step_time_s * std::exp(s.log_lo);
  i.step_time_hi_s = r.step_time_s * std::exp(s.log_hi);
  i.mfu_lo = r.mfu * std::exp(-s.log_hi);
  i.mfu_hi = r.mfu * std::exp(-s.log_lo);
  i.basis = basis;
  if (outside) i.basis += "; the plan is outside their regime (see the notes), so it may not hold";
  r.interval = std::move(i);
}

}  // namespace meshwork::models
