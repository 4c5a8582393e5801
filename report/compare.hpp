#pragma once
// Predicted against measured (`meshwork compare`): each figure both Reports give, its error
// with the measured figure as the truth, and for the parts of the step time the seconds each
// adds to the step time's error, largest first: where the prediction went wrong. The figures
// keep the Report's definitions (report_io.cpp: MFU over Korthikanti et al. 2022 eq. 7 model
// FLOPs, HFU with recomputation).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace meshwork::report {

enum class RowKind { figure, breakdown, op_time };
std::string_view to_string(RowKind k);

struct ComparisonRow {
  std::string
      what;  // "step_time_s", "mfu", "tflops_per_gpu.model", "breakdown.dp_s", "op_times.gemm"
  RowKind kind = RowKind::figure;
  std::optional<double> predicted, measured;  // absent: that Report does not give the figure
  // With both figures:
  std::optional<double> abs_error;  // |predicted - measured|, in the figure's unit
  std::optional<double>
      rel_error;  // |predicted - measured| / |measured|; absent when measured is 0
  // Breakdown and op-time rows: measured - predicted, the seconds this part adds to the step
  // time's error (negative: the prediction was too long).
  std::optional<double> contribution_s;
};

struct Comparison {
  std::string predicted_method, measured_method;
  std::string plan_name;
  std::optional<double> step_time_error_s;  // measured - predicted
  // Figures (step time, MFU, HFU, TFLOP/s, tokens/s) first, in that order; then the breakdown
  // and op-time rows by |contribution_s|, largest first (op kinds before the breakdown entry
  // that holds them on a tie); rows that one side lacks last.
  std::vector<ComparisonRow> rows;
  std::vector<std::string> predicted_lacks,
      measured_lacks;  // figure names, or "breakdown", "op_times"
  // Where the two Reports are of different runs ("the measured run's world size is 16, the
  // predicted run's 1024"): world size, batch, sequence and mesh, where both give them.
  std::vector<std::string> mismatches;
  std::vector<std::string> notes;
};

std::vector<std::string> shape_mismatches(const Report& predicted, const Report& measured);

// `measured_lacks` names what the measured Report does not give (a row's name, or its group:
// "breakdown", "op_times", "tflops_per_gpu"), e.g. a training log's (report/megatron_log.hpp).
// Either side also lacks its op_times when it has none, and its breakdown when the parts are
// all zero (a Report's parts add up to its step time). An op kind that one side with op_times
// does not list took 0 s there.
Comparison compare(const Report& predicted, const Report& measured,
                   const std::vector<std::string>& measured_lacks = {});

// A table for people, one row per line, then what each side lacks and the notes.
std::string to_text(const Comparison& c);
// The same rows, with the definitions they follow; absent figures are null.
nlohmann::json to_json(const Comparison& c);

}  // namespace meshwork::report
