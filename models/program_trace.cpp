#include "models/program_trace.hpp"

#include <algorithm>
#include <limits>

namespace meshwork::models {

std::vector<std::string> trace_threads() {
  std::vector<std::string> out;
  for (auto s : {Stream::compute, Stream::tp, Stream::cp, Stream::ep, Stream::dp, Stream::pp}) out.emplace_back(to_string(s));
  return out;
}

void append_rank_trace(const Program& program, const StageProgram& sp, std::int64_t rank, const std::vector<InstrTiming>& events, bool nest_ops,
                       report::Trace& trace) {
  if (trace.threads.empty()) trace.threads = trace_threads();
  trace.processes.push_back({rank, "rank " + std::to_string(rank) + " (stage " + std::to_string(sp.stage) + ")"});
  // Each step's events in turn (a step's are contiguous).
  std::size_t begin = 0;
  while (begin < events.size()) {
    std::size_t end = begin + 1;
    while (end < events.size() && events[end].step == events[begin].step) ++end;
    // Per item: the span of its compute.
    std::vector<std::pair<double, double>> span(sp.schedule.size(), {std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest()});
    for (std::size_t e = begin; e < end; ++e) {
      const Instr& in = sp.instrs.at(static_cast<std::size_t>(events[e].index));
      if (in.kind != InstrKind::compute || in.item < 0) continue;
      auto& s = span[static_cast<std::size_t>(in.item)];
      s.first = std::min(s.first, events[e].start_us);
      s.second = std::max(s.second, events[e].end_us);
    }
    std::vector<bool> placed(sp.schedule.size(), false);
    for (std::size_t e = begin; e < end; ++e) {
      const InstrTiming& t = events[e];
      const Instr& in = sp.instrs.at(static_cast<std::size_t>(t.index));
      report::TraceSlice slice;
      slice.rank = rank;
      slice.thread = static_cast<std::int32_t>(in.stream);
      slice.name = program.name(in);
      slice.start_us = t.start_us;
      slice.duration_us = t.end_us - t.start_us;
      slice.step = t.step;
      if (in.item >= 0) {
        const ScheduleItem& item = sp.schedule[static_cast<std::size_t>(in.item)];
        slice.microbatch = item.microbatch;
        slice.pass = std::string(pass_name(item.pass));
        if (in.kind == InstrKind::compute && !placed[static_cast<std::size_t>(in.item)]) {
          placed[static_cast<std::size_t>(in.item)] = true;
          const auto& s = span[static_cast<std::size_t>(in.item)];
          report::TraceSlice block = slice;
          block.name = program.block_name(sp.stage, item);
          block.start_us = s.first;
          block.duration_us = s.second - s.first;
          block.block = true;
          trace.slices.push_back(std::move(block));
        }
      }
      if (in.kind == InstrKind::compute && !nest_ops && in.item >= 0) continue;
      trace.slices.push_back(std::move(slice));
    }
    begin = end;
  }
}

}  // namespace meshwork::models
