#include "models/gemm_fit.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "models/csv_table.hpp"

namespace meshwork::models {

namespace {

// A point the fits can use: a positive, finite size and efficiency (a measured time of 0 reads
// as an infinite efficiency, which would weigh infinitely).
bool usable(double macs, double eff) { return std::isfinite(macs) && std::isfinite(eff) && macs > 0 && eff > 0; }

}  // namespace

GemmCurve fit_gemm_curve(const std::vector<std::pair<double, double>>& points) {
  // y = a + b x with x = 1/macs, y = 1/eff, weights eff^2 (= 1/y^2): max = 1/a, half = b/a.
  // Centred sums: with one size (or one point) the spread of x is 0 exactly, not noise.
  double sw = 0, sx = 0, sy = 0;
  for (const auto& [macs, eff] : points) {
    if (!usable(macs, eff)) continue;
    const double w = eff * eff;
    sw += w;
    sx += w / macs;
    sy += w / eff;
  }
  if (!(sw > 0)) return {};  // nothing measured: nothing calibrated
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (const auto& [macs, eff] : points) {
    if (!usable(macs, eff)) continue;
    const double w = eff * eff, dx = 1 / macs - mx;
    sxx += w * dx * dx;
    sxy += w * dx * (1 / eff - my);
  }
  const double b = sxx > 1e-12 * sw * mx * mx ? sxy / sxx : 0;
  const double a = my - b * mx;
  // No size dependence (one size, or the efficiencies falling with size): flat at the mean
  // efficiency weighted by efficiency, sum(e^2) / sum(e).
  if (!(a > 0) || !(b > 0)) return {1 / my, 1};
  return {1 / a, std::max(1.0, b / a)};
}

double fit_gemm_half_macs(const std::vector<std::pair<double, double>>& points, double max_efficiency) {
  // 1/eff - 1/max = (half/max) x with x = 1/macs, weights eff^2: one slope through the origin.
  if (!(max_efficiency > 0) || !std::isfinite(max_efficiency)) return 1;
  double num = 0, den = 0;
  for (const auto& [macs, eff] : points) {
    if (!usable(macs, eff)) continue;
    const double w = eff * eff, x = 1 / macs / max_efficiency, r = 1 / eff - 1 / max_efficiency;
    num += w * x * r;
    den += w * x * x;
  }
  return den > 0 ? std::max(1.0, num / den) : 1;
}

std::vector<GemmMeasurement> read_gemm_table(const std::filesystem::path& file, std::string& error) {
  std::vector<GemmMeasurement> out;
  const auto problems = read_csv_rows(file, "m,", [&](const std::vector<std::string_view>& fields) -> std::optional<std::string> {
    if (fields.size() != 4) return std::to_string(fields.size()) + " fields, expected 4 (m,n,k,flops_per_s)";
    GemmMeasurement g;
    std::int64_t* dims[] = {&g.m, &g.n, &g.k};
    const char* names[] = {"m", "n", "k"};
    for (std::size_t i = 0; i < 3; ++i) {
      if (!parse_csv_number(fields[i], *dims[i])) return std::string("field ") + names[i] + " is not a number: '" + std::string(fields[i]) + "'";
    }
    if (!parse_csv_number(fields[3], g.flops_per_s)) return "field flops_per_s is not a number: '" + std::string(fields[3]) + "'";
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || !(g.flops_per_s > 0) || !std::isfinite(g.flops_per_s)) {
      return "a shape or throughput that is not positive and finite";
    }
    out.push_back(g);
    return std::nullopt;
  });
  error = join_problems(problems);
  if (!problems.empty()) return {};
  return out;
}

std::vector<std::pair<double, double>> gemm_efficiencies(const std::vector<GemmMeasurement>& table, double peak_flops_per_s) {
  std::vector<std::pair<double, double>> points;
  points.reserve(table.size());
  for (const GemmMeasurement& g : table) points.emplace_back(g.macs(), g.flops_per_s / peak_flops_per_s);
  return points;
}

}  // namespace meshwork::models
