#include "models/gemm_fit.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <string_view>

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
  error.clear();
  std::ifstream in(file);
  if (!in) {
    error = file.string() + ": cannot be read";
    return {};
  }
  std::vector<GemmMeasurement> out;
  std::vector<std::string> problems;
  std::string line;
  int number = 0;
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
    return v;
  };
  while (std::getline(in, line)) {
    ++number;
    std::string_view text = line;
    if (number == 1 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte-order mark
    text = trim(text);
    if (text.empty() || text[0] == '#' || text.substr(0, 2) == "m,") continue;
    const std::string where = file.string() + ":" + std::to_string(number) + ": ";
    std::vector<std::string_view> fields;
    for (std::size_t from = 0;;) {
      const std::size_t comma = text.find(',', from);
      fields.push_back(trim(text.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from)));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    if (fields.size() != 4) {
      problems.push_back(where + std::to_string(fields.size()) + " fields, expected 4 (m,n,k,flops_per_s)");
      continue;
    }
    GemmMeasurement g;
    const char* names[] = {"m", "n", "k", "flops_per_s"};
    bool ok = true;
    for (std::size_t i = 0; i < 4 && ok; ++i) {
      const std::string_view f = fields[i];
      std::from_chars_result r{};
      if (i < 3) r = std::from_chars(f.data(), f.data() + f.size(), i == 0 ? g.m : i == 1 ? g.n : g.k);
      else r = std::from_chars(f.data(), f.data() + f.size(), g.flops_per_s);
      if (r.ec != std::errc() || r.ptr != f.data() + f.size()) {
        problems.push_back(where + "field " + names[i] + " is not a number: '" + std::string(f) + "'");
        ok = false;
      }
    }
    if (!ok) continue;
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || !(g.flops_per_s > 0) || !std::isfinite(g.flops_per_s)) {
      problems.push_back(where + "a shape or throughput that is not positive and finite");
      continue;
    }
    out.push_back(g);
  }
  if (out.empty() && problems.empty()) problems.push_back(file.string() + ": no measurements");
  if (!problems.empty()) {
    for (std::size_t i = 0; i < problems.size(); ++i) error += (i > 0 ? "\n" : "") + problems[i];
    return {};
  }
  return out;
}

std::vector<std::pair<double, double>> gemm_efficiencies(const std::vector<GemmMeasurement>& table, double peak_flops_per_s) {
  std::vector<std::pair<double, double>> points;
  points.reserve(table.size());
  for (const GemmMeasurement& g : table) points.emplace_back(g.macs(), g.flops_per_s / peak_flops_per_s);
  return points;
}

}  // namespace meshwork::models
