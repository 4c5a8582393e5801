#pragma once
// The published runs that check a GPU generation's cost model, and what the estimate's errors on
// them say about a new plan (issue 20: "predictions with their uncertainty").
//
// Ampere's set is docs/reference/published-runs.md A1 (NAR21 Tables 1 and 2, PTD-P rows) and A2
// (KOR22 Tables 3-5): 21 dense GPT plans on 32 to 3,072 A100s, each written as its paper states
// it (scenarios/published). It fixes one named residual factor, the in-training GEMM fraction
// (models/hardware.cpp, docs/efficiency-constants.md). NAR21 Table 2's six ZeRO-3 rows are
// published runs too, but the estimate runs 34% to 307% ahead of them until the message-size
// model (issue 20): they stay out of the set, and a ZeRO-3 plan on Ampere is outside the
// calibrated regime (models/regime.hpp).
//
// The interval: leave one case out, refit the factor on the others, predict the case (the
// jackknife, Barber, Candes, Ramdas & Tibshirani 2021, "Predictive inference with the
// jackknife+", Ann. Statist. 49(1), eq. 2). Reports are made with the shipped factor, not the
// refit, so each case's residual is the shipped prediction's log-ratio to the published figure,
// r_i = ln(shipped_i / published_i), plus what leaving the case out of the fit does to its own
// prediction, ln(loo_i / full_i) (how far the fit leans towards the case). A new plan's
// throughput lies in [predicted e^-hi, predicted e^-lo] and its step in [step e^lo, step e^hi],
// where [lo, hi] is prediction_interval() of the residuals: their range when there are at least
// 19 (the extremes of n residuals leave 1/(n+1) in each tail, 91% for n = 21, as the rank
// argument of conformal prediction gives for exchangeable residuals; the plain jackknife carries
// no finite-sample guarantee, Barber et al. prove 1 - 2 alpha for the jackknife+, and the
// shifted residuals here are neither exactly), and a normal prediction interval at 90% below
// that, where no range reaches 90% (Hopper's FP8 set, 12 runs). Each case against the interval
// of the others (leave_one_out_coverage) checks it: 19 of 21 for Ampere's range, by
// construction; for a normal interval it is evidence. The published runs outside the set are
// the stronger check (bench/RESULTS.md: BLOOM 176B).

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::models {

// What a paper published for a run: hardware TFLOP/s per GPU (recomputation counted, NAR21),
// MFU in percent (KOR22) or tokens per second per GPU (NeMo, whose TFLOP/s count is its own).
enum class PublishedFigure : std::uint8_t { hardware_tflops_per_gpu, mfu_percent, tokens_per_s_per_gpu };

struct CalibrationCase {
  std::string_view scenario;  // file name under scenarios/published, without ".yaml"
  double published = 0;
  PublishedFigure figure = PublishedFigure::hardware_tflops_per_gpu;
  std::string_view source;    // paper and table
};

// Ampere's set (21 cases) and the published runs kept out of it (NAR21 Table 2's ZeRO-3 rows).
[[nodiscard]] std::span<const CalibrationCase> ampere_set();
[[nodiscard]] std::span<const CalibrationCase> ampere_outside_set();
// Hopper's FP8 set: docs/reference/published-runs.md A3, NeMo 24.07 on DGX-H100 in FP8, 12 runs
// of 8 to 512 GPUs (scenarios/published/nemo2407-*, each written from the page and the NeMo
// launcher's recipe of the time). It checks; no factor is fitted on it (Hopper takes Ampere's).
[[nodiscard]] std::span<const CalibrationCase> hopper_fp8_set();

// The figure of `r` that `figure` names, in the paper's units.
[[nodiscard]] double figure_of(const report::Report& r, PublishedFigure figure);

// The plan of `p` with the generation's residual factor replaced: its largest GEMMs' efficiency
// set to `gemm_max_efficiency` (the factor times the best isolated matmul).
[[nodiscard]] plan::Plan with_gemm_max_efficiency(const plan::Plan& p, double gemm_max_efficiency);

struct CaseResult {
  double published = 0;
  double predicted = 0;      // with the shipped factor
  double full_predicted = 0; // with the factor refitted on every case
  double loo_predicted = 0;  // with the factor refitted without this case
  double loo_fit = 0;        // that factor (largest GEMMs' efficiency)
  // max over the other cases of |their prediction with loo_fit / with the full fit - 1|
  double others_moved = 0;
  [[nodiscard]] double error() const { return predicted / published - 1; }
  [[nodiscard]] double loo_log_ratio() const;
  // r_i above: ln(predicted / published) + ln(loo_predicted / full_predicted).
  [[nodiscard]] double residual() const;
};

struct LeaveOneOut {
  double shipped = 0;   // the generation's largest-GEMM efficiency as shipped
  double full_fit = 0;  // refitted on every case
  std::vector<CaseResult> cases;  // in the set's order
  // The residuals' extremes (CaseResult::residual).
  double log_ratio_min = 0, log_ratio_max = 0;
  // leave_one_out_coverage of the residuals (with 19 cases or more the range, inside which
  // (n - 2) / n lie by construction when they differ); the largest move of another case's
  // prediction when one is left out.
  double coverage = 0;
  double largest_move = 0;
  double mean_abs_error = 0, max_abs_error = 0;  // of the shipped predictions
};

// `plans[i]` is the loaded plan of `cases[i]`. The factor (the largest GEMMs' efficiency)
// minimises the sum of squared log-ratios: Gauss-Newton to a step under 1e-8, from the shipped
// factor, then from the whole set's fit for each case left out (golden-section search on
// [0.3, 0.95] where that fails; std::runtime_error when the minimum is on that bound).
// Progress, when given, is called after each fit with (done, total).
[[nodiscard]] LeaveOneOut leave_one_out(std::span<const CalibrationCase> cases, std::span<const plan::Plan> plans, double shipped,
                                        const std::function<void(int, int)>& progress = {});

// A prediction interval for ln(predicted / published) of a plan outside a set, from the set's
// residuals r_1..r_n (at least 3):
// - n >= 19: their range, [min r, max r], at level (n - 1) / (n + 1) >= 0.9: a new case
//   exchangeable with the set's falls between two of n order statistics with that probability
//   (Wilks 1941, Ann. Math. Statist. 12(1); the rank argument of conformal prediction);
// - fewer: no range reaches 90%, so a normal prediction interval at 90%,
//   mean r +- t(0.95; n - 1) s sqrt(1 + 1/n), s the sample standard deviation (the interval for
//   one further observation of a normal sample: Hahn & Meeker, Statistical Intervals, Wiley
//   1991, ch. 4); it assumes normal residuals, which leave_one_out_coverage checks on the set.
struct PredictionInterval {
  double log_lo = 0, log_hi = 0;
  double level = 0;
  bool range = false;  // the set's range (n >= 19), or the normal interval
};
[[nodiscard]] PredictionInterval prediction_interval(std::span<const double> residuals);
// The share of the residuals that lie inside the interval the others make (each left out once),
// by the method prediction_interval takes for the whole set (its range from 19 residuals, where
// (n - 2) / n lie inside by construction and it is no evidence; the normal interval below). At
// least 4 residuals (std::invalid_argument otherwise).
[[nodiscard]] double leave_one_out_coverage(std::span<const double> residuals);
// t(0.95; df), the 95th percentile of Student's t with df >= 1 degrees of freedom (a two-sided
// 90% interval): NIST/SEMATECH e-Handbook of Statistical Methods, §1.3.6.7.2 (Critical values of
// the Student's t distribution), its column 0.05 for df 1-30, 40, 60, 100 and infinity (1.645),
// between them linear in 1/df.
[[nodiscard]] double student_t_95(int df);

// The interval a tier's Reports carry on a set's generation: log bounds and level, from
// prediction_interval of the tier's residuals on the set (tests recompute it for this build).
struct SetResiduals {
  double log_lo = 0, log_hi = 0;
  double level = 0;
  int cases = 0;
};

// Ampere's, as `meshwork accuracy` prints them for this build. The estimate's are the
// leave-one-out residuals above (Uncertainty.AmpereEstimateResidualsAreThisBuilds recomputes
// them); the simulator's are its predictions at the shipped factor (the simulate goldens of
// scenarios/published; Uncertainty.AmpereSimulateResidualsAreTheGoldens reads them), not
// refitted, since a refit would take 22 x 20 simulations of the set.
inline constexpr SetResiduals kAmpereEstimateResiduals{-0.062323, 0.048488, 1 - 2.0 / 22, 21};
inline constexpr SetResiduals kAmpereSimulateResiduals{-0.060281, 0.047254, 1 - 2.0 / 22, 21};
// Hopper FP8's, each tier's at the shipped factor (no refit: nothing is fitted on the set), on
// all 12 runs (a normal interval at 90% since 2026-12-07; the range, 85% nominal, before), with the FP8 GEMMs' operand casts priced (models/op_table.hpp) and the attention
// at cuDNN's measured paces, each pass its own (training.attention_kernel auto on Hopper, since
// 2026-12-06), the output layer and the router at the BF16 peak (Op::sixteen_bit) and the two
// recipes' bf16 gradients (training.grad_reduce_in_bf16), both since 2026-12-07, and, later that
// day, each plan's gradients and Apex's optimizer states as its recipe and FP8 example script set
// them (ten reduce in bf16; eleven keep the master weights as remainders, Nemotron-340B its
// states in bf16 with no master copy: training.optimizer_states). Nemotron-340B now fits; the
// simulator's residuals are taken as bench/accuracy.sh runs them
// (Uncertainty.HopperFp8ResidualsAreThisBuilds, SimUncertainty.HopperFp8ResidualsAreThisBuilds).
// Destination-mod-k's down-links spread over a leaf's parallel links (topology/router.cpp,
// issue 21) moved GPT3-175B on 512 GPUs from +10.4% to +12.3% (its pipeline transfers faster).
// Every stage's items held for its own DP in the estimate's pipeline replay (its neighbours wait
// for it there: models/pipeline, PipelineSpec::delays, the same day) moved the seven plans with a
// pipeline 0.1 to 2.3 points slower (Nemotron-340B most): {0.021272, 0.279391} to {0.006590, 0.286725}.
// Each stage's DP stream played beside its items in that replay, and the DP rings' NICs shared
// with the pipeline's transfers (models/pipeline, PipelineSpec::dp_streams; models::
// nic_bytes_per_s_beside; 2026-12-08), moved the same plans within 0.6 points of the simulator's
// steps: {0.006590, 0.286725} to {0.005614, 0.284224}.
inline constexpr SetResiduals kHopperFp8EstimateResiduals{0.005614, 0.284224, 0.90, 12};
inline constexpr SetResiduals kHopperFp8SimulateResiduals{0.006096, 0.284147, 0.90, 12};

// Sets r.interval from the tier's residuals on the set of the plan's generation and precision
// (r.method: estimated or simulated): Ampere's, or Hopper's FP8 set for an FP8 plan on Hopper.
// Leaves it empty otherwise: a generation or precision without a set (Hopper in BF16,
// Blackwell), compute measured on the machine, a CPU host.
void attach_interval(const plan::Plan& p, report::Report& r);
// The same where the caller has the plan's regime notes (models::regime_notes): whether one
// says the plan is outside the calibrated regime.
void attach_interval(const plan::Plan& p, report::Report& r, bool outside_regime);
// Whether a regime note (models::regime_notes) says the plan is outside the calibrated regime.
bool outside_regime(const std::vector<std::string>& regime_notes);

}  // namespace meshwork::models
