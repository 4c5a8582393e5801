#pragma once
// A rank's run of its Program as a report::Trace: what the simulator predicted and what the
// executor measured, in the same processes, threads and slice names, so that the two timelines
// can be laid over each other and compared instruction by instruction.

#include <cstdint>
#include <string>
#include <vector>

#include "models/program.hpp"
#include "report/trace.hpp"

namespace meshwork::models {

// One run of instruction `index` of a stage's list in step `step`, in microseconds.
struct InstrTiming {
  std::int32_t index = 0;
  std::int32_t step = 0;
  double start_us = 0, end_us = 0;
};

// The threads of every process: the Program's streams, in models::Stream's order.
[[nodiscard]] std::vector<std::string> trace_threads();

// Appends rank `rank` (of stage `sp`) to `trace`: its process ("rank 3 (stage 1)"), a slice per
// event named by the Program on its stream's thread, and per schedule item a block slice on the
// compute thread from its first compute's start to its last compute's end, named by
// Program::block_name and placed before the item's first compute, per step. Events are in the
// order they ran on each stream. `nest_ops` false
// (the simulator's merged blocks, each standing for many ops): compute instructions get no
// slice of their own, only their item's block.
void append_rank_trace(const Program& program, const StageProgram& sp, std::int64_t rank, const std::vector<InstrTiming>& events, bool nest_ops,
                       report::Trace& trace);

}  // namespace meshwork::models
