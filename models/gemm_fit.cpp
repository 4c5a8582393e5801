#include "models/gemm_fit.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>

namespace meshwork::models {

GemmCurve fit_gemm_curve(const std::vector<std::pair<double, double>>& points) {
  // y = a + b x with x = 1/macs, y = 1/eff, weights 1/y^2: max = 1/a, half = b/a.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [macs, eff] : points) {
    if (!(macs > 0) || !(eff > 0)) continue;
    const double x = 1 / macs, y = 1 / eff, w = eff * eff;
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  if (!(sw > 0)) return {};
  const double denom = sw * sxx - sx * sx;
  const double b = denom != 0 ? (sw * sxy - sx * sy) / denom : 0;
  const double a = (sy - b * sx) / sw;
  if (!(a > 0)) return {sw / sy, 1};  // no asymptote: the weighted mean efficiency
  return {1 / a, std::max(1.0, b / a)};
}

std::vector<GemmMeasurement> read_gemm_table(const std::filesystem::path& file, std::string& error) {
  std::ifstream in(file);
  if (!in) {
    error = file.string() + ": cannot be read";
    return {};
  }
  std::vector<GemmMeasurement> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line.rfind("m,", 0) == 0) continue;
    GemmMeasurement g;
    const char* p = line.data();
    const char* end = p + line.size();
    const char* names[] = {"m", "n", "k", "flops_per_s"};
    for (int field = 0; field < 4; ++field) {
      std::from_chars_result r{};
      if (field < 3) r = std::from_chars(p, end, field == 0 ? g.m : field == 1 ? g.n : g.k);
      else r = std::from_chars(p, end, g.flops_per_s);
      const bool last = field == 3;
      if (r.ec != std::errc() || (last ? r.ptr != end : (r.ptr == end || *r.ptr != ','))) {
        error = file.string() + ":" + std::to_string(number) + ": field " + names[field] + " is not a number (expected m,n,k,flops_per_s)";
        return {};
      }
      p = r.ptr + (last ? 0 : 1);
    }
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || !(g.flops_per_s > 0)) {
      error = file.string() + ":" + std::to_string(number) + ": a shape or throughput that is not positive";
      return {};
    }
    out.push_back(g);
  }
  if (out.empty()) error = file.string() + ": no measurements";
  return out;
}

GemmCurve fit_gemm_table(const std::vector<GemmMeasurement>& table, double peak_flops_per_s) {
  std::vector<std::pair<double, double>> points;
  points.reserve(table.size());
  for (const GemmMeasurement& g : table) points.emplace_back(g.macs(), g.flops_per_s / peak_flops_per_s);
  return fit_gemm_curve(points);
}

}  // namespace meshwork::models
