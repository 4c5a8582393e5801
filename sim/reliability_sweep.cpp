// Goodput against the checkpoint interval (reliability.hpp): the sweep, its best point, CSV
// and an SVG plot.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/reliability.hpp"

namespace meshwork::reliability {

std::vector<SweepPoint> sweep_interval(const Inputs& in, double lo_s, double hi_s, int points, std::int64_t trials, std::uint64_t seed,
                                       const std::function<void(double)>& progress) {
  std::vector<SweepPoint> out;
  for (int i = 0; i < points; ++i) {
    Inputs x = in;
    x.interval_s = points > 1 ? lo_s * std::pow(hi_s / lo_s, static_cast<double>(i) / (points - 1)) : lo_s;
    out.push_back({x.interval_s, run(x, trials, seed)});
    if (progress) progress(static_cast<double>(i + 1) / points);
  }
  return out;
}

SweepRange sweep_range(const Derived& d, double daly_s) {
  const double centre = daly_s > 0 ? daly_s : d.inputs.interval_s;
  SweepRange r{centre / 8, centre * 8};
  r.lo_s = std::min(r.lo_s, d.inputs.interval_s);
  r.hi_s = std::max(r.hi_s, d.inputs.interval_s);
  r.lo_s = std::max(r.lo_s, d.min_interval_s);
  r.hi_s = std::max(r.hi_s, r.lo_s * 2);  // at least a range, when the bound is above it all
  return r;
}

std::string format_duration(double seconds) {
  char buf[32];
  const double v = std::abs(seconds);
  auto put = [&](double x, const char* unit) {
    // Two significant digits below 10 ("2.5 min"), whole numbers above ("45 min").
    std::snprintf(buf, sizeof buf, x < 9.95 ? "%.2g %s" : "%.0f %s", x, unit);
  };
  if (v < 1e-3) std::snprintf(buf, sizeof buf, "%.3g ms", seconds * 1e3);
  else if (v < 1) put(seconds * 1e3, "ms");
  else if (v < 120) put(seconds, "s");
  else if (v < 2 * 3600) put(seconds / 60, "min");
  else if (v < 2 * 86400) put(seconds / 3600, "h");
  else put(seconds / 86400, "d");
  return buf;
}

Best best_interval(const std::vector<SweepPoint>& sweep) {
  Best b;
  for (std::size_t i = 0; i < sweep.size(); ++i) {
    if (sweep[i].summary.goodput > sweep[b.index].summary.goodput) b.index = i;
  }
  const double floor = sweep.empty() ? 0 : sweep[b.index].summary.goodput - sweep[b.index].summary.goodput_ci95;
  b.lo_s = b.hi_s = sweep.empty() ? 0 : sweep[b.index].interval_s;
  for (const auto& p : sweep) {
    if (p.summary.goodput + p.summary.goodput_ci95 >= floor) {
      b.lo_s = std::min(b.lo_s, p.interval_s);
      b.hi_s = std::max(b.hi_s, p.interval_s);
    }
  }
  return b;
}

std::string sweep_csv(const std::vector<SweepPoint>& sweep) {
  std::ostringstream s;
  s << "interval_s,goodput,goodput_ci95,interruptions,wall_s";
  for (std::size_t l = 0; l < kLosses; ++l) s << ',' << to_string(static_cast<Loss>(l)) << "_s";
  s << '\n';
  s.precision(8);
  for (const auto& p : sweep) {
    s << p.interval_s << ',' << p.summary.goodput << ',' << p.summary.goodput_ci95 << ',' << p.summary.interruptions << ',' << p.summary.wall_s;
    for (double v : p.summary.loss_s) s << ',' << v;
    s << '\n';
  }
  return s.str();
}

// Goodput against the interval on a log axis, the 95% band shaded, Daly's optimum marked.
std::string sweep_svg(const std::vector<SweepPoint>& sweep, const std::string& title, double daly_s, double plan_s) {
  const double w = 720, h = 420, left = 70, right = 20, top = 40, bottom = 60;
  std::ostringstream s;
  s.precision(6);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string safe = title;
  for (auto& ch : safe) {
    if (ch == '<' || ch == '>' || ch == '&') ch = ' ';
  }
  s << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" << safe << "</text>\n";
  if (sweep.empty()) return s.str() + "</svg>\n";
  double lo = sweep.front().interval_s, hi = sweep.back().interval_s, gmin = 1, gmax = 0;
  for (const auto& p : sweep) {
    gmin = std::min(gmin, p.summary.goodput - p.summary.goodput_ci95);
    gmax = std::max(gmax, p.summary.goodput + p.summary.goodput_ci95);
  }
  if (hi <= lo) hi = lo * 2;
  const double pad = std::max(0.01, (gmax - gmin) * 0.1);
  gmin = std::max(0.0, gmin - pad);
  gmax = std::min(1.0, gmax + pad);
  if (gmax <= gmin) gmax = gmin + 0.01;
  auto x = [&](double v) { return left + (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) * (w - left - right); };
  auto y = [&](double g) { return top + (gmax - g) / (gmax - gmin) * (h - top - bottom); };
  // Axes and ticks.
  s << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\"" << h - bottom << "\" stroke=\"black\"/>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double g = gmin + (gmax - gmin) * i / 4;
    s << "<text x=\"" << left - 6 << "\" y=\"" << y(g) + 4 << "\" text-anchor=\"end\">" << std::round(g * 1000) / 10 << "%</text>\n";
    s << "<line x1=\"" << left << "\" y1=\"" << y(g) << "\" x2=\"" << w - right << "\" y2=\"" << y(g) << "\" stroke=\"#ddd\"/>\n";
  }
  for (int i = 0; i <= 4; ++i) {
    const double v = lo * std::pow(hi / lo, i / 4.0);
    s << "<text x=\"" << x(v) << "\" y=\"" << h - bottom + 18 << "\" text-anchor=\"middle\">" << format_duration(v) << "</text>\n";
  }
  s << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 14 << "\" text-anchor=\"middle\">checkpoint interval (log scale)</text>\n";
  s << "<text x=\"16\" y=\"" << (top + h - bottom) / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << (top + h - bottom) / 2 << ")\">goodput (ETTR)</text>\n";
  // The 95% band, the mean, Daly's optimum.
  s << "<polygon fill=\"#cfe3f7\" points=\"";
  for (const auto& p : sweep) s << x(p.interval_s) << ',' << y(p.summary.goodput + p.summary.goodput_ci95) << ' ';
  for (auto it = sweep.rbegin(); it != sweep.rend(); ++it) s << x(it->interval_s) << ',' << y(it->summary.goodput - it->summary.goodput_ci95) << ' ';
  s << "\"/>\n<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"2\" points=\"";
  for (const auto& p : sweep) s << x(p.interval_s) << ',' << y(p.summary.goodput) << ' ';
  s << "\"/>\n";
  for (const auto& p : sweep) s << "<circle cx=\"" << x(p.interval_s) << "\" cy=\"" << y(p.summary.goodput) << "\" r=\"3\" fill=\"#1f5fa8\"/>\n";
  if (daly_s >= lo && daly_s <= hi) {
    s << "<line x1=\"" << x(daly_s) << "\" y1=\"" << top << "\" x2=\"" << x(daly_s) << "\" y2=\"" << h - bottom << "\" stroke=\"#c0392b\" stroke-dasharray=\"5,4\"/>\n";
    s << "<text x=\"" << x(daly_s) + 4 << "\" y=\"" << top + 12 << "\" fill=\"#c0392b\">Daly</text>\n";
  }
  if (plan_s >= lo && plan_s <= hi) {
    s << "<line x1=\"" << x(plan_s) << "\" y1=\"" << top << "\" x2=\"" << x(plan_s) << "\" y2=\"" << h - bottom << "\" stroke=\"#555\" stroke-dasharray=\"2,3\"/>\n";
    s << "<text x=\"" << x(plan_s) + 4 << "\" y=\"" << top + 26 << "\" fill=\"#555\">plan " << format_duration(plan_s) << "</text>\n";
  }
  const Best b = best_interval(sweep);
  s << "<circle cx=\"" << x(sweep[b.index].interval_s) << "\" cy=\"" << y(sweep[b.index].summary.goodput) << "\" r=\"6\" fill=\"none\" stroke=\"#27ae60\" stroke-width=\"2\"/>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace meshwork::reliability
