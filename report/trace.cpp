#include "report/trace.hpp"

#include <nlohmann/json.hpp>

namespace meshwork::report {

std::string chrome_trace_json(const Trace& trace) {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceProcess& p : trace.processes) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", p.rank}, {"args", {{"name", p.label}}}});
    // Perfetto orders processes by this index, chrome://tracing by pid: both by rank.
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", p.rank}, {"args", {{"sort_index", p.rank}}}});
    for (std::size_t t = 0; t < trace.threads.size(); ++t) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", p.rank}, {"tid", t}, {"args", {{"name", trace.threads[t]}}}});
    }
  }
  for (const TraceSlice& s : trace.slices) {
    nlohmann::json e = {{"ph", "X"}, {"name", s.name}, {"pid", s.rank}, {"tid", s.thread}, {"ts", s.start_us}, {"dur", s.duration_us}};
    if (s.microbatch >= 0) e["args"]["microbatch"] = s.microbatch;
    if (!s.pass.empty()) e["args"]["pass"] = s.pass;
    if (s.block) e["cat"] = "block";
    events.push_back(std::move(e));
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace meshwork::report
