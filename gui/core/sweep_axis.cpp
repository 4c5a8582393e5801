#include "gui/core/sweep_axis.hpp"

#include <cmath>
#include <cstdlib>

#include "gui/core/plan_document.hpp"
#include "plan/field_paths.hpp"

namespace meshwork::gui {
namespace {

bool number(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && std::isfinite(out);
}

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

nlohmann::json as_value(double v) {
  if (v == std::floor(v) && std::abs(v) < 9e15) return static_cast<std::int64_t>(v);
  return v;
}

}  // namespace

std::vector<nlohmann::json> parse_axis_values(std::string_view text, std::string& error) {
  std::vector<nlohmann::json> values;
  const std::string t = trim(text);
  const auto dots = t.find("..");
  if (dots != std::string::npos) {
    // lo..hi *f or lo..hi +d
    const std::string lo_text = trim(std::string_view(t).substr(0, dots));
    std::string rest = trim(std::string_view(t).substr(dots + 2));
    const auto op = rest.find_first_of("*+");
    if (op == std::string::npos) {
      error = "a range needs a step: 'lo..hi *factor' or 'lo..hi +step'";
      return {};
    }
    const std::string hi_text = trim(std::string_view(rest).substr(0, op));
    const std::string step_text = trim(std::string_view(rest).substr(op + 1));
    double lo = 0, hi = 0, step = 0;
    if (!number(lo_text, lo) || !number(hi_text, hi) || !number(step_text, step)) {
      error = "range '" + t + "': lo, hi and the step must be numbers";
      return {};
    }
    const bool geometric = rest[op] == '*';
    if (hi < lo || (geometric ? !(step > 1) || lo <= 0 : !(step > 0))) {
      error = "range '" + t + "': needs lo <= hi and a step that grows (factor > 1 from lo > 0, or step > 0)";
      return {};
    }
    for (double v = lo; v <= hi * (1 + 1e-12); v = geometric ? v * step : v + step) {
      if (values.size() == kMaxAxisValues) {
        error = "range '" + t + "' has more than " + std::to_string(kMaxAxisValues) + " values";
        return {};
      }
      values.push_back(as_value(v));
    }
    return values;
  }
  std::string_view rest = t;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string item = trim(rest.substr(0, comma));
    if (item.empty()) {
      error = "empty value in '" + t + "'";
      return {};
    }
    values.push_back(value_from_text(item));
    if (values.size() > kMaxAxisValues) {
      error = "more than " + std::to_string(kMaxAxisValues) + " values";
      return {};
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (values.empty()) error = "no values";
  return values;
}

bool make_axis(std::string_view path, std::string_view values, plan::SweepAxis& axis, std::string& error) {
  const auto field = plan::resolve_field_path(path);
  if (!field) {
    error = std::string(path) + ": no such plan field";
    return false;
  }
  auto v = parse_axis_values(values, error);
  if (v.empty()) {
    error = field->canonical + ": " + error;
    return false;
  }
  axis = plan::SweepAxis{field->canonical, field->keys, field->parent, std::move(v), std::string(path)};
  return true;
}

}  // namespace meshwork::gui
