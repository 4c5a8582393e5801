#include "models/sweep.hpp"

#include <algorithm>

#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::models {

std::string_view to_string(PointStatus s) {
  switch (s) {
    case PointStatus::ok: return "ok";
    case PointStatus::invalid: return "invalid";
    case PointStatus::out_of_memory: return "out_of_memory";
  }
  return "?";
}

std::vector<SweepRow> run_sweep(const plan::SweepSpec& spec, SweepSlice slice,
                                const std::function<void(std::uint64_t, std::uint64_t)>& progress, const Evaluator& evaluate) {
  std::vector<SweepRow> rows;
  const std::uint64_t total = spec.size();
  const std::uint64_t mine = total / slice.size + (slice.rank < total % slice.size ? 1 : 0);
  rows.reserve(static_cast<std::size_t>(mine));
  EstimateOptions options;
  options.provenance = false;  // a sweep's rows share the base's provenance
  const auto base_dir = spec.base.parent_path();
  std::uint64_t done = 0;
  for (std::uint64_t i = slice.rank; i < total; i += slice.size) {
    SweepRow row;
    row.index = i;
    row.values = spec.point_values(i);
    const auto loaded = plan::load_plan_json(spec.point(i), base_dir);
    if (!loaded.ok()) {
      row.status = PointStatus::invalid;
      for (const auto& d : loaded.diagnostics.items()) {
        if (d.severity == plan::Severity::error) {
          row.reason = d.path.empty() ? d.message : d.path + ": " + d.message;
          break;
        }
      }
    } else if (evaluate && estimate(loaded.plan, options).fits) {
      // Only plans that fit are worth simulating; the rest keep the estimate's verdict.
      Evaluation e = evaluate(loaded.plan);
      if (e.ok) {
        row.report = std::move(e.report);
        attach_memory(loaded.plan, row.report);
      } else {
        row.status = PointStatus::invalid;
        row.reason = e.error;
      }
    } else {
      row.report = estimate(loaded.plan, options);
      if (!row.report.fits) {
        row.status = PointStatus::out_of_memory;
        row.reason = row.report.notes.empty() ? "does not fit" : row.report.notes.front();
      }
    }
    rows.push_back(std::move(row));
    ++done;
    if (progress && (evaluate || done % 256 == 0 || done == mine)) progress(done, mine);
  }
  return rows;
}

void rank_rows(std::vector<SweepRow>& rows, plan::RankBy by) {
  auto key = [by](const SweepRow& r) {
    switch (by) {
      case plan::RankBy::mfu: return -r.report.mfu;
      case plan::RankBy::time_to_train: return r.report.time_to_train_s > 0 ? r.report.time_to_train_s : r.report.step_time_s;
      case plan::RankBy::step_time: return r.report.step_time_s;
    }
    return 0.0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const SweepRow& a, const SweepRow& b) {
    const bool a_ok = a.status == PointStatus::ok, b_ok = b.status == PointStatus::ok;
    if (a_ok != b_ok) return a_ok;
    if (!a_ok) return a.index < b.index;
    return key(a) < key(b);
  });
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string sweep_csv_header(const plan::SweepSpec& spec) {
  std::string h = "index";
  for (const auto& a : spec.axes) h += "," + csv_field(a.path);
  return h + ",status,reason," + report::csv_header();
}

std::string sweep_csv_row(const SweepRow& row) {
  std::string s = std::to_string(row.index);
  for (const auto& v : row.values) s += "," + csv_field(v);
  s += ",";
  s += to_string(row.status);
  s += "," + csv_field(row.reason) + ",";
  if (row.status == PointStatus::invalid) {
    // Empty report columns: the plan never got an estimate.
    const std::string header = report::csv_header();
    s += std::string(static_cast<std::size_t>(std::count(header.begin(), header.end(), ',')), ',');
  } else {
    s += report::csv_row(row.report);
  }
  return s;
}

}  // namespace meshwork::models
