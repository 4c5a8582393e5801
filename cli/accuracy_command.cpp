// `meshwork accuracy`: the estimate against the published runs of Ampere's calibration set
// (models/calibration_set.hpp), the leave-one-out refits behind every Report's interval, and
// the published runs kept out of the set.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "models/calibration_set.hpp"
#include "models/estimate.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::cli {
namespace {

const char* unit(models::PublishedFigure f) {
  switch (f) {
    case models::PublishedFigure::mfu_percent: return "MFU %";
    case models::PublishedFigure::tokens_per_s_per_gpu: return "tokens/s";
    case models::PublishedFigure::hardware_tflops_per_gpu: break;
  }
  return "TFLOP/s";
}

}  // namespace

void add_accuracy_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("accuracy", "The estimate against the published runs that check it, and the intervals Reports carry");
  auto dir = std::make_shared<std::string>("scenarios/published");
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--scenarios", *dir, "The published plans' folder (default: scenarios/published, from the repository's root)");
  cmd->add_flag("--json", *json, "Print the table as JSON");
  cmd->footer(
      "Ampere's set: NAR21 Tables 1-2 (PTD-P) and KOR22, 21 plans. Each case is predicted with the shipped in-training GEMM fraction, and again "
      "with the fraction refitted on the other cases (leave-one-out); the extremes of those errors give every Ampere Report its interval. "
      "Takes about 22 x 20 estimates of the set: seconds.");
  cmd->callback([=, &io] {
    const auto cases = models::ampere_set();
    const auto outside = models::ampere_outside_set();
    const auto hopper = models::hopper_fp8_set();
    std::vector<plan::Plan> plans, outside_plans, hopper_plans;
    const auto load = [&](const models::CalibrationCase& c, std::vector<plan::Plan>& into) {
      const std::filesystem::path file = std::filesystem::path(*dir) / (std::string(c.scenario) + ".yaml");
      if (!std::filesystem::exists(file)) {
        io.err << "error: --scenarios: " << file.string() << " not found (run from the repository's root, or name the folder of the published plans)\n";
        io.exit_code = 1;
        return false;
      }
      const auto p = load_plan_for(io, file.string(), "accuracy");
      if (!p) return false;
      into.push_back(*p);
      return true;
    };
    for (const auto& c : cases)
      if (!load(c, plans)) return;
    for (const auto& c : outside)
      if (!load(c, outside_plans)) return;
    for (const auto& c : hopper)
      if (!load(c, hopper_plans)) return;
    // A set checked at the shipped factor: each case's prediction and error.
    struct Checked {
      double predicted = 0, error = 0;
    };
    const auto check = [](std::span<const models::CalibrationCase> set, const std::vector<plan::Plan>& loaded) {
      std::vector<Checked> out;
      for (std::size_t i = 0; i < set.size(); ++i) {
        const double got = models::figure_of(models::estimate(loaded[i]), set[i].figure);
        out.push_back({got, got / set[i].published - 1});
      }
      return out;
    };
    const auto outside_checked = check(outside, outside_plans);
    const auto hopper_checked = check(hopper, hopper_plans);
    // Hopper's interval and its leave-one-out check, from the estimate's log-ratios on the set.
    std::vector<double> hopper_residuals;
    for (const auto& c : hopper_checked) hopper_residuals.push_back(std::log1p(c.error));
    std::optional<models::PredictionInterval> hopper_interval;
    double hopper_coverage = 0;
    if (hopper_residuals.size() >= 4) {
      hopper_interval = models::prediction_interval(hopper_residuals);
      hopper_coverage = models::leave_one_out_coverage(hopper_residuals);
    }
    plan::GpuSpec datasheet = plans.front().cluster.gpu;
    datasheet.calibration = {};
    const double shipped = models::hardware_profile(datasheet).gemm_max_efficiency;
    const auto loo = models::leave_one_out(cases, plans, shipped, [&](int done, int total) {
      io.err << "\rrefits " << done << " of " << total << std::flush;
      if (done == total) io.err << '\n';
    });
    const double lo = std::exp(-loo.log_ratio_max) - 1, hi = std::exp(-loo.log_ratio_min) - 1;
    if (*json) {
      nlohmann::json j;
      j["set"] = "ampere";
      j["shipped_gemm_max_efficiency"] = loo.shipped;
      j["refitted_gemm_max_efficiency"] = loo.full_fit;
      j["log_ratio_min"] = loo.log_ratio_min;
      j["log_ratio_max"] = loo.log_ratio_max;
      j["coverage"] = loo.coverage;
      j["largest_move"] = loo.largest_move;
      j["mean_abs_error"] = loo.mean_abs_error;
      j["max_abs_error"] = loo.max_abs_error;
      j["cases"] = nlohmann::json::array();
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& r = loo.cases[i];
        j["cases"].push_back({{"scenario", cases[i].scenario}, {"source", cases[i].source}, {"figure", unit(cases[i].figure)},
                              {"published", r.published}, {"predicted", r.predicted}, {"error", r.error()},
                              {"loo_predicted", r.loo_predicted}, {"loo_gemm_max_efficiency", r.loo_fit}, {"others_moved", r.others_moved},
                              {"full_fit_predicted", r.full_predicted}, {"residual", r.residual()}});
      }
      const auto checked_json = [&](std::span<const models::CalibrationCase> set, const std::vector<Checked>& got) {
        nlohmann::json a = nlohmann::json::array();
        for (std::size_t i = 0; i < set.size(); ++i) {
          a.push_back({{"scenario", set[i].scenario}, {"source", set[i].source}, {"figure", unit(set[i].figure)},
                       {"published", set[i].published}, {"predicted", got[i].predicted}, {"error", got[i].error}});
        }
        return a;
      };
      j["outside"] = checked_json(outside, outside_checked);
      j["hopper_fp8"] = checked_json(hopper, hopper_checked);
      if (hopper_interval) {
        j["hopper_fp8_interval"] = {{"log_lo", hopper_interval->log_lo}, {"log_hi", hopper_interval->log_hi}, {"level", hopper_interval->level},
                                    {"coverage", hopper_coverage}};
      }
      io.out << j.dump(2) << '\n';
      return;
    }
    io.out << "Ampere's calibration set (" << cases.size() << " published runs), the estimate:\n";
    io.out << "  scenario                   source                       figure     published  predicted   error  left out: predicted   error  others moved\n";
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& r = loo.cases[i];
      char buf[256];
      std::snprintf(buf, sizeof buf, "  %-26s %-28s %-8s %11.1f %10.1f %+6.1f%% %19.1f %+6.1f%% %12.2f%%\n", std::string(cases[i].scenario).c_str(),
                    std::string(cases[i].source).c_str(), unit(cases[i].figure), r.published, r.predicted, 100 * r.error(), r.loo_predicted,
                    100 * (r.loo_predicted / r.published - 1), 100 * r.others_moved);
      io.out << buf;
    }
    io.out << "  mean |error| " << fmt("%.1f%%", 100 * loo.mean_abs_error) << ", largest " << fmt("%.1f%%", 100 * loo.max_abs_error) << '\n';
    io.out << "  largest-GEMM efficiency: shipped " << fmt("%.4f", loo.shipped) << ", refitted on the whole set " << fmt("%.4f", loo.full_fit)
           << " (the in-training fraction, docs/efficiency-constants.md)\n";
    io.out << "  residuals, ln(predicted / published) + ln(left-out fit's / whole fit's prediction): " << fmt("%+.4f", loo.log_ratio_min) << " to " << fmt("%+.4f", loo.log_ratio_max)
           << ": a Report's throughput " << fmt("%+.1f%%", 100 * lo) << " to " << fmt("%+.1f%%", 100 * hi) << " of its prediction, "
           << fmt("%.0f%%", 100 * (1 - 2.0 / (static_cast<double>(cases.size()) + 1))) << " nominal\n";
    io.out << "  each case against the range of the others' residuals: " << fmt("%.1f%%", 100 * loo.coverage)
           << " inside ((n - 2) / n by construction: no evidence; the held-out runs are, bench/RESULTS.md)\n";
    io.out << "  refitting without one case moves another's prediction by at most " << fmt("%.2f%%", 100 * loo.largest_move) << '\n';
    const auto print_checked = [&](std::span<const models::CalibrationCase> set, const std::vector<Checked>& got) {
      double mean = 0, largest = 0;
      for (std::size_t i = 0; i < set.size(); ++i) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "  %-26s %-28s %-8s %11.1f %10.1f %+6.1f%%\n", std::string(set[i].scenario).c_str(),
                      std::string(set[i].source).c_str(), unit(set[i].figure), set[i].published, got[i].predicted, 100 * got[i].error);
        io.out << buf;
        mean += std::fabs(got[i].error) / static_cast<double>(set.size());
        largest = std::max(largest, std::fabs(got[i].error));
      }
      io.out << "  mean |error| " << fmt("%.1f%%", 100 * mean) << ", largest " << fmt("%.1f%%", 100 * largest) << '\n';
    };
    io.out << "Kept out of the set (outside the calibrated regime):\n";
    print_checked(outside, outside_checked);
    io.out << "Hopper's FP8 set (NeMo 24.07 on DGX-H100, docs/reference/published-runs.md A3): checked at the shipped factor, nothing fitted:\n";
    print_checked(hopper, hopper_checked);
    if (hopper_interval) {
      io.out << "  interval for an FP8 plan on Hopper, ln(predicted / published) " << fmt("%+.4f", hopper_interval->log_lo) << " to "
             << fmt("%+.4f", hopper_interval->log_hi) << ": a Report's throughput " << fmt("%+.1f%%", 100 * (std::exp(-hopper_interval->log_hi) - 1))
             << " to " << fmt("%+.1f%%", 100 * (std::exp(-hopper_interval->log_lo) - 1)) << " of its prediction, "
             << fmt("%.0f%%", 100 * hopper_interval->level) << (hopper_interval->range ? " nominal (the set's range)" : " (a normal prediction interval: too few runs for a range of 90%)")
             << "\n  each case against the interval of the others: " << fmt("%.1f%%", 100 * hopper_coverage) << " inside\n";
    }
    if (std::fabs(loo.log_ratio_min - models::kAmpereEstimateResiduals.log_lo) > 1e-4 ||
        std::fabs(loo.log_ratio_max - models::kAmpereEstimateResiduals.log_hi) > 1e-4) {
      io.out << "note: these residuals differ from the ones this build's Reports use (models/calibration_set.hpp, kAmpereEstimateResiduals "
             << fmt("%+.4f", models::kAmpereEstimateResiduals.log_lo) << " to " << fmt("%+.4f", models::kAmpereEstimateResiduals.log_hi) << ")\n";
    }
    if (hopper_interval && (std::fabs(hopper_interval->log_lo - models::kHopperFp8EstimateResiduals.log_lo) > 1e-4 ||
                            std::fabs(hopper_interval->log_hi - models::kHopperFp8EstimateResiduals.log_hi) > 1e-4)) {
      io.out << "note: Hopper FP8's interval, " << fmt("%+.4f", hopper_interval->log_lo) << " to " << fmt("%+.4f", hopper_interval->log_hi)
             << ", differs from the one this build's Reports use (models/calibration_set.hpp, kHopperFp8EstimateResiduals "
             << fmt("%+.4f", models::kHopperFp8EstimateResiduals.log_lo) << " to " << fmt("%+.4f", models::kHopperFp8EstimateResiduals.log_hi) << ")\n";
    }
  });
}

}  // namespace meshwork::cli
