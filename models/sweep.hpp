#pragma once
// Runs a sweep's grid through the closed-form estimate: every point becomes a row, with its
// report or with the reason it was dropped (invalid plan, out of memory). Progress goes to an
// observer; the engine does not print.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "plan/sweep_spec.hpp"
#include "report/report.hpp"

namespace meshwork::models {

enum class PointStatus { ok, invalid, out_of_memory };

struct SweepRow {
  std::uint64_t index = 0;
  std::vector<std::string> values;  // one per axis
  PointStatus status = PointStatus::ok;
  std::string reason;               // the first error, or the memory verdict
  report::Report report;            // when the plan is valid
};

struct SweepSlice {
  std::uint64_t rank = 0;  // this process takes indices i with i % size == rank
  std::uint64_t size = 1;
};

// How a point is evaluated: the estimate by default; the simulator plugs in here (a report, or
// the reason there is none).
struct Evaluation {
  bool ok = false;
  report::Report report;
  std::string error;
};
using Evaluator = std::function<Evaluation(const plan::Plan&)>;

// progress(done, total) is called now and then (after every point when `evaluate` is given).
std::vector<SweepRow> run_sweep(const plan::SweepSpec& spec, SweepSlice slice = {},
                                const std::function<void(std::uint64_t, std::uint64_t)>& progress = {},
                                const Evaluator& evaluate = {});

// Sorts rows best first by the spec's criterion; invalid and out-of-memory rows last, in order.
void rank_rows(std::vector<SweepRow>& rows, plan::RankBy by);

std::string_view to_string(PointStatus s);
std::string sweep_csv_header(const plan::SweepSpec& spec);
std::string sweep_csv_row(const SweepRow& row);

}  // namespace meshwork::models
