#pragma once
// The timeline of a run, predicted (the simulator) or measured (the executor), in one shape so
// that the two can be laid over each other: one process per rank, one thread per stream of the
// Program (models::Stream's order: compute, tp, cp, ep, dp, pp), each schedule item a block
// slice named by its pass and layers ("backward L8-15") with its ops nested inside by op-table
// name. One writer turns it into the Chrome trace event format that Perfetto and chrome://tracing
// read (complete events, "X", in microseconds; names by metadata events).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::report {

struct TraceSlice {
  std::int64_t rank = 0;
  std::int32_t thread = 0;  // index into Trace::threads
  std::string name;
  double start_us = 0, duration_us = 0;
  std::int32_t microbatch = -1;  // -1 outside a schedule item
  std::string pass;              // the item's pass ("forward", "backward", ...); empty outside one
  bool block = false;            // a schedule item's block (its ops are the slices inside it)
  std::int32_t step = 0;         // the training step it belongs to (a measured run's; 0: the only one)
};

struct TraceProcess {
  std::int64_t rank = 0;
  std::string label;  // "rank 3 (stage 1)"
};

struct Trace {
  std::vector<std::string> threads;  // thread names by id, the same for every process
  std::vector<TraceProcess> processes;
  std::vector<TraceSlice> slices;    // per rank, in the order they ran on each thread
};

// The Chrome trace event format's JSON object ({"traceEvents": [...], "displayTimeUnit": "ms"}),
// a newline at the end. Slices keep their order; a block comes before the ops inside it.
[[nodiscard]] std::string chrome_trace_json(const Trace& trace);
// Reads what chrome_trace_json writes. Throws std::invalid_argument naming what is wrong.
[[nodiscard]] Trace read_chrome_trace(std::string_view json_text);
// Whether the text is a Chrome trace (a JSON object with "traceEvents").
[[nodiscard]] bool is_chrome_trace(std::string_view json_text);

// Predicted against measured, slice by slice (`meshwork compare PREDICTED.trace MEASURED.trace`):
// per rank and thread, the i-th slice of one against the i-th of the other, by start time,
// blocks and ops alike. A measured run of several steps gives each slice its median over the
// steps (all but the first when there are more than two), so that one late wake-up does not
// stand for the slice.
struct SliceComparison {
  std::int64_t rank = 0;
  std::string thread;
  std::size_t ordinal = 0;  // the slice's place on its thread
  std::string name, pass;
  std::int32_t microbatch = -1;
  bool block = false;
  double predicted_us = 0, measured_us = 0;
  [[nodiscard]] double error_us() const { return measured_us - predicted_us; }
};
struct TraceComparison {
  std::vector<SliceComparison> rows;  // by rank, thread, ordinal
  // Where the two timelines are not of one Program: a rank or thread only one has, a slice
  // named differently, a thread with more slices. Empty when they line up.
  std::vector<std::string> mismatches;
};
[[nodiscard]] TraceComparison compare_traces(const Trace& predicted, const Trace& measured);
// The `top` rows of largest |error|, then the mismatches; durations in milliseconds.
[[nodiscard]] std::string to_text(const TraceComparison& c, std::size_t top);
[[nodiscard]] nlohmann::json to_json(const TraceComparison& c);

}  // namespace meshwork::report
