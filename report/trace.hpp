#pragma once
// The timeline of a run, predicted (the simulator) or measured (the executor), in one shape so
// that the two can be laid over each other: one process per rank, one thread per stream of the
// Program (models::Stream's order: compute, tp, cp, ep, dp, pp), each schedule item a block
// slice named by its pass and layers ("backward L8-15") with its ops nested inside by op-table
// name. One writer turns it into the Chrome trace event format that Perfetto and chrome://tracing
// read (complete events, "X", in microseconds; names by metadata events).

#include <cstdint>
#include <string>
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

}  // namespace meshwork::report
