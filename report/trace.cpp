#include "report/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

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
    if (s.step > 0) e["args"]["step"] = s.step;
    if (s.block) e["cat"] = "block";
    events.push_back(std::move(e));
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}


bool is_chrome_trace(std::string_view json_text) {
  try {
    const auto j = nlohmann::json::parse(json_text);
    return j.is_object() && j.contains("traceEvents");
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

Trace read_chrome_trace(std::string_view json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("trace: not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) throw std::invalid_argument("trace: no traceEvents array");
  Trace t;
  std::map<std::int64_t, std::size_t> process;
  for (const auto& e : j["traceEvents"]) {
    if (!e.is_object()) throw std::invalid_argument("trace: an event that is not an object");
    const std::string ph = e.value("ph", "");
    const std::int64_t pid = e.value("pid", std::int64_t{0});
    if (ph == "M") {
      const std::string what = e.value("name", "");
      const std::string name = e.contains("args") && e["args"].is_object() ? e["args"].value("name", "") : "";
      if (what == "process_name") {
        process[pid] = t.processes.size();
        t.processes.push_back({pid, name});
      } else if (what == "thread_name") {
        const auto tid = e.value("tid", std::size_t{0});
        if (tid > 64) throw std::invalid_argument("trace: thread id " + std::to_string(tid) + " past the 64 streams a trace may have");
        if (t.threads.size() <= tid) t.threads.resize(tid + 1);
        t.threads[tid] = name;
      }
      continue;
    }
    if (ph != "X") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) throw std::invalid_argument("trace: an X event without numeric ts and dur");
    TraceSlice s;
    s.rank = pid;
    s.thread = e.value("tid", 0);
    s.name = e.value("name", "");
    s.start_us = e["ts"].get<double>();
    s.duration_us = e["dur"].get<double>();
    s.block = e.value("cat", "") == "block";
    if (e.contains("args") && e["args"].is_object()) {
      s.microbatch = e["args"].value("microbatch", -1);
      s.pass = e["args"].value("pass", "");
      s.step = e["args"].value("step", 0);
    }
    t.slices.push_back(std::move(s));
  }
  return t;
}

namespace {

// Per (rank, thread), per step: the slices by start time.
using Steps = std::map<std::int32_t, std::vector<const TraceSlice*>>;
std::map<std::pair<std::int64_t, std::int32_t>, Steps> by_thread(const Trace& t) {
  std::map<std::pair<std::int64_t, std::int32_t>, Steps> out;
  for (const auto& s : t.slices) out[{s.rank, s.thread}][s.step].push_back(&s);
  for (auto& [key, steps] : out) {
    for (auto& [step, v] : steps) {
      std::stable_sort(v.begin(), v.end(), [](const TraceSlice* a, const TraceSlice* b) { return a->start_us < b->start_us; });
    }
  }
  return out;
}

// The steps whose durations count: all but the first when there are more than two (it pays for
// first touches, as the measured Report's step time leaves it out).
std::vector<const std::vector<const TraceSlice*>*> counted(const Steps& steps) {
  std::vector<const std::vector<const TraceSlice*>*> out;
  for (const auto& [step, v] : steps) out.push_back(&v);
  if (out.size() > 2) out.erase(out.begin());
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string thread_name(const Trace& t, std::int32_t tid) {
  return tid >= 0 && static_cast<std::size_t>(tid) < t.threads.size() && !t.threads[static_cast<std::size_t>(tid)].empty()
             ? t.threads[static_cast<std::size_t>(tid)]
             : "thread " + std::to_string(tid);
}

}  // namespace

TraceComparison compare_traces(const Trace& predicted, const Trace& measured) {
  TraceComparison c;
  const auto p = by_thread(predicted), m = by_thread(measured);
  for (const auto& [key, psteps] : p) {
    const std::string where = "rank " + std::to_string(key.first) + " " + thread_name(predicted, key.second);
    const auto& ps = *counted(psteps).back();  // a prediction is of one step
    const auto it = m.find(key);
    if (it == m.end()) {
      c.mismatches.push_back(where + ": only the prediction has it (" + std::to_string(ps.size()) + " slices)");
      continue;
    }
    const auto ms = counted(it->second);
    bool lined_up = true;
    for (const auto* steps : ms) {
      if (steps->size() != ps.size()) {
        c.mismatches.push_back(where + ": " + std::to_string(ps.size()) + " slices predicted, " + std::to_string(steps->size()) + " measured in step " +
                               std::to_string(steps->front()->step));
        lined_up = false;
        break;
      }
      for (std::size_t i = 0; i < ps.size(); ++i) {
        if (ps[i]->name != (*steps)[i]->name) {
          c.mismatches.push_back(where + ": slice " + std::to_string(i) + " is '" + ps[i]->name + "' predicted, '" + (*steps)[i]->name + "' measured");
          lined_up = false;
          break;
        }
      }
      if (!lined_up) break;
    }
    if (!lined_up) continue;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      std::vector<double> durations;
      for (const auto* steps : ms) durations.push_back((*steps)[i]->duration_us);
      c.rows.push_back({key.first, thread_name(predicted, key.second), i, ps[i]->name, ps[i]->pass, ps[i]->microbatch, ps[i]->block, ps[i]->duration_us,
                        median(durations)});
    }
  }
  for (const auto& [key, msteps] : m) {
    if (!p.count(key)) c.mismatches.push_back("rank " + std::to_string(key.first) + " " + thread_name(measured, key.second) + ": only the measurement has it");
  }
  return c;
}

std::string to_text(const TraceComparison& c, std::size_t top) {
  std::vector<const SliceComparison*> rows;
  for (const auto& r : c.rows) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) { return std::abs(a->error_us()) > std::abs(b->error_us()); });
  std::string out = "slice by slice: " + std::to_string(c.rows.size()) + " slices lined up; the " + std::to_string(std::min(top, rows.size())) +
                    " largest errors (measured - predicted)\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-6s %-8s %5s  %-28s %-16s %12s %12s %12s\n", "rank", "thread", "#", "slice", "pass mb", "predicted ms", "measured ms", "error ms");
  out += line;
  for (std::size_t i = 0; i < std::min(top, rows.size()); ++i) {
    const auto& r = *rows[i];
    const std::string item = r.pass.empty() ? "-" : r.pass + (r.microbatch >= 0 ? " " + std::to_string(r.microbatch) : "");
    std::snprintf(line, sizeof line, "  %-6lld %-8s %5zu  %-28s %-16s %12.3f %12.3f %+12.3f\n", static_cast<long long>(r.rank), r.thread.c_str(), r.ordinal,
                  r.name.c_str(), item.c_str(), r.predicted_us / 1e3, r.measured_us / 1e3, r.error_us() / 1e3);
    out += line;
  }
  if (!c.mismatches.empty()) {
    out += "the timelines do not line up:\n";
    for (const auto& m : c.mismatches) out += "  " + m + "\n";
  }
  return out;
}

nlohmann::json to_json(const TraceComparison& c) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : c.rows) {
    rows.push_back({{"rank", r.rank}, {"thread", r.thread}, {"ordinal", r.ordinal}, {"name", r.name}, {"pass", r.pass}, {"microbatch", r.microbatch},
                    {"block", r.block}, {"predicted_us", r.predicted_us}, {"measured_us", r.measured_us}, {"error_us", r.error_us()}});
  }
  return {{"slices", rows}, {"mismatches", c.mismatches}};
}

}  // namespace meshwork::report
