#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace meshwork::report {

std::string_view to_string(RowKind k) {
  switch (k) {
    case RowKind::figure:
      return "figure";
    case RowKind::breakdown:
      return "breakdown";
    case RowKind::op_time:
      return "op_time";
  }
  return "?";
}

namespace {

struct Named {
  const char* name;
  double value;
};

std::vector<Named> figures(const Report& r) {
  return {{"step_time_s", r.step_time_s},
          {"mfu", r.mfu},
          {"hfu", r.hfu},
          {"tflops_per_gpu.model", r.model_tflops_per_gpu},
          {"tflops_per_gpu.hardware", r.hardware_tflops_per_gpu},
          {"tokens_per_s", r.tokens_per_s}};
}

std::vector<Named> parts(const Breakdown& b) {
  return {{"breakdown.compute_s", b.compute_s},
          {"breakdown.recompute_s", b.recompute_s},
          {"breakdown.tp_s", b.tp_s},
          {"breakdown.cp_s", b.cp_s},
          {"breakdown.ep_s", b.ep_s},
          {"breakdown.dp_s", b.dp_s},
          {"breakdown.pp_s", b.pp_s},
          {"breakdown.bubble_s", b.bubble_s},
          {"breakdown.optimizer_s", b.optimizer_s},
          {"breakdown.stalls_s", b.stalls_s}};
}

// What a Report lacks: the names given, and what it shows it has not got.
std::vector<std::string> lacking(const Report& r, std::vector<std::string> given) {
  auto add = [&](const std::string& name) {
    if (std::find(given.begin(), given.end(), name) == given.end()) given.push_back(name);
  };
  if (r.breakdown.total() == 0) add("breakdown");
  if (r.op_times.empty()) add("op_times");
  return given;
}

// A row's name is lacking when it, or its group (the part before the first '.'), is listed.
bool lacks(const std::vector<std::string>& list, const std::string& what) {
  const std::string group = what.substr(0, what.find('.'));
  return std::find(list.begin(), list.end(), what) != list.end() ||
         std::find(list.begin(), list.end(), group) != list.end();
}

ComparisonRow row(const std::string& what, RowKind kind, std::optional<double> p,
                  std::optional<double> m) {
  ComparisonRow r{what, kind, p, m, {}, {}, {}};
  if (!p || !m) return r;
  r.abs_error = std::abs(*p - *m);
  if (*m != 0) r.rel_error = *r.abs_error / std::abs(*m);
  if (kind != RowKind::figure) r.contribution_s = *m - *p;
  return r;
}

}  // namespace

std::vector<std::string> shape_mismatches(const Report& predicted, const Report& measured) {
  std::vector<std::string> out;
  auto check = [&](std::int64_t p, std::int64_t m, const char* what) {
    if (p > 0 && m > 0 && p != m) {
      out.push_back("the measured run's " + std::string(what) + " is " + std::to_string(m) + ", the predicted run's " +
                    std::to_string(p));
    }
  };
  const RunShape &p = predicted.shape, &m = measured.shape;
  check(predicted.num_gpus, measured.num_gpus, "world size");
  check(p.global_batch_size, m.global_batch_size, "global batch size");
  check(p.seq_length, m.seq_length, "sequence length");
  check(p.micro_batch_size, m.micro_batch_size, "micro-batch size");
  check(p.tensor, m.tensor, "tensor-parallel size");
  check(p.pipeline, m.pipeline, "pipeline-parallel size");
  check(p.data, m.data, "data-parallel size");
  check(p.context, m.context, "context-parallel size");
  check(p.expert, m.expert, "expert-parallel size");
  return out;
}

Comparison compare(const Report& predicted, const Report& measured,
                   const std::vector<std::string>& measured_lacks) {
  Comparison c;
  c.predicted_method = std::string(to_string(predicted.method));
  c.measured_method = std::string(to_string(measured.method));
  c.plan_name = predicted.plan_name;
  c.predicted_lacks = lacking(predicted, {});
  c.measured_lacks = lacking(measured, measured_lacks);
  auto value = [](const std::vector<std::string>& lack, const std::string& what, double v) {
    return lacks(lack, what) ? std::nullopt : std::optional<double>(v);
  };

  const auto pf = figures(predicted), mf = figures(measured);
  for (std::size_t i = 0; i < pf.size(); ++i) {
    c.rows.push_back(row(pf[i].name, RowKind::figure,
                         value(c.predicted_lacks, pf[i].name, pf[i].value),
                         value(c.measured_lacks, mf[i].name, mf[i].value)));
  }
  if (c.rows[0].predicted && c.rows[0].measured)
    c.step_time_error_s = *c.rows[0].measured - *c.rows[0].predicted;

  const auto pb = parts(predicted.breakdown), mb = parts(measured.breakdown);
  for (std::size_t i = 0; i < pb.size(); ++i) {
    c.rows.push_back(row(pb[i].name, RowKind::breakdown,
                         value(c.predicted_lacks, pb[i].name, pb[i].value),
                         value(c.measured_lacks, mb[i].name, mb[i].value)));
  }

  // Op kinds of either side, the predicted side's order first.
  std::vector<std::string> kinds;
  for (const auto* r : {&predicted, &measured}) {
    for (const auto& o : r->op_times) {
      if (std::find(kinds.begin(), kinds.end(), o.kind) == kinds.end()) kinds.push_back(o.kind);
    }
  }
  auto seconds = [](const Report& r, const std::string& kind) {
    double s = 0;  // a kind a Report with op times does not list took no time there
    for (const auto& o : r.op_times) s += o.kind == kind ? o.seconds : 0;
    return s;
  };
  for (const auto& kind : kinds) {
    const std::string what = "op_times." + kind;
    c.rows.push_back(row(what, RowKind::op_time,
                         value(c.predicted_lacks, what, seconds(predicted, kind)),
                         value(c.measured_lacks, what, seconds(measured, kind))));
  }

  // Figures stay first in their order; then the largest contributions to the step time's error.
  auto rank = [](const ComparisonRow& r) {
    if (r.kind == RowKind::figure) return 0;
    return r.contribution_s ? 1 : 2;
  };
  std::stable_sort(
      c.rows.begin(), c.rows.end(), [&](const ComparisonRow& a, const ComparisonRow& b) {
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        if (rank(a) != 1) return false;
        const double ca = std::abs(*a.contribution_s), cb = std::abs(*b.contribution_s);
        if (ca != cb) return ca > cb;
        // An op kind names the cause more closely than the breakdown entry that holds it.
        return a.kind == RowKind::op_time && b.kind == RowKind::breakdown;
      });

  if (!predicted.provenance.plan_hash.empty() && !measured.provenance.plan_hash.empty() &&
      predicted.provenance.plan_hash != measured.provenance.plan_hash) {
    c.notes.push_back("the Reports are of different plans (plan hashes " +
                      predicted.provenance.plan_hash + " and " + measured.provenance.plan_hash +
                      ")");
  }
  c.mismatches = shape_mismatches(predicted, measured);
  if (!lacks(c.predicted_lacks, "op_times") || !lacks(c.measured_lacks, "op_times")) {
    c.notes.push_back(
        "op_times split breakdown.compute_s + recompute_s by op kind: the same seconds, not extra "
        "ones");
  }
  return c;
}

namespace {

std::string num(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

std::string to_text(const Comparison& c) {
  std::ostringstream os;
  os << "plan " << (c.plan_name.empty() ? "(unnamed)" : c.plan_name) << ": " << c.predicted_method
     << " against " << c.measured_method << '\n';
  if (c.step_time_error_s) {
    os << "  step time error " << num(c.step_time_error_s, "%+.4g")
       << " s (measured - predicted)\n";
  }
  std::size_t width = 24;
  for (const auto& r : c.rows) width = std::max(width, r.what.size());
  char buf[400];
  std::snprintf(buf, sizeof buf, "  %-*s %14s %14s %12s %10s %16s\n", static_cast<int>(width),
                "what", "predicted", "measured", "abs error", "rel error", "step error (s)");
  os << buf;
  for (const auto& r : c.rows) {
    const std::optional<double> pct =
        r.rel_error ? std::optional<double>(*r.rel_error * 100) : std::nullopt;
    std::snprintf(buf, sizeof buf, "  %-*s %14s %14s %12s %10s %16s\n", static_cast<int>(width),
                  r.what.c_str(), num(r.predicted, "%.6g").c_str(), num(r.measured, "%.6g").c_str(),
                  num(r.abs_error, "%.4g").c_str(),
                  (pct ? num(pct, "%.1f") + "%" : std::string("-")).c_str(),
                  num(r.contribution_s, "%+.4g").c_str());
    os << buf;
  }
  if (!c.predicted_lacks.empty()) os << "  predicted lacks: " << join(c.predicted_lacks) << '\n';
  if (!c.measured_lacks.empty()) os << "  measured lacks: " << join(c.measured_lacks) << '\n';
  for (const auto& m : c.mismatches) os << "  warning: not the predicted run: " << m << '\n';
  for (const auto& n : c.notes) os << "  note: " << n << '\n';
  return os.str();
}

nlohmann::json to_json(const Comparison& c) {
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json j;
  j["plan"] = c.plan_name;
  j["predicted_method"] = c.predicted_method;
  j["measured_method"] = c.measured_method;
  j["step_time_error_s"] = opt(c.step_time_error_s);
  j["rows"] = nlohmann::json::array();
  for (const auto& r : c.rows) {
    j["rows"].push_back({{"what", r.what},
                         {"kind", std::string(to_string(r.kind))},
                         {"predicted", opt(r.predicted)},
                         {"measured", opt(r.measured)},
                         {"abs_error", opt(r.abs_error)},
                         {"rel_error", opt(r.rel_error)},
                         {"contribution_s", opt(r.contribution_s)}});
  }
  j["predicted_lacks"] = c.predicted_lacks;
  j["measured_lacks"] = c.measured_lacks;
  j["mismatches"] = c.mismatches;
  j["notes"] = c.notes;
  j["definitions"] = {
      {"abs_error", "|predicted - measured|, in the figure's unit"},
      {"rel_error",
       "|predicted - measured| / |measured|: the measured figure is the truth; null when it is 0"},
      {"contribution_s",
       "measured - predicted seconds of a part of the step: the breakdown's add up to "
       "step_time_error_s, "
       "the op kinds' to that of breakdown compute_s + recompute_s"},
      {"step_time_error_s", "measured - predicted step time, seconds"},
      {"rows", "figures first; then breakdown and op-time rows by |contribution_s|, largest first"},
  };
  return j;
}

}  // namespace meshwork::report
