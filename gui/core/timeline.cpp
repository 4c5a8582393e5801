#include "gui/core/timeline.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace meshwork::gui {

Timeline read_trace(std::string_view json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("trace: not JSON: ") + e.what());
  }
  const nlohmann::json* events = &j;
  if (j.is_object()) {
    if (!j.contains("traceEvents")) throw std::invalid_argument("trace: no traceEvents array");
    events = &j["traceEvents"];
  }
  if (!events->is_array()) throw std::invalid_argument("trace: traceEvents is not an array");

  std::map<long long, std::string> process_names;
  std::map<std::pair<long long, int>, std::string> thread_names;
  std::map<std::pair<long long, int>, TimelineRow> rows;
  Timeline t;
  for (const auto& e : *events) {
    if (!e.is_object() || !e.contains("ph")) continue;
    const std::string ph = e.value("ph", "");
    const long long pid = e.value("pid", 0LL);
    const int tid = e.value("tid", 0);
    if (ph == "M") {
      const std::string name = e.contains("args") ? e["args"].value("name", "") : "";
      if (e.value("name", "") == "process_name") process_names[pid] = name;
      if (e.value("name", "") == "thread_name") thread_names[{pid, tid}] = name;
    } else if (ph == "X") {
      if (!e.contains("ts") || !e["ts"].is_number()) throw std::invalid_argument("trace: an X event without a numeric ts");
      TimelineEvent ev;
      ev.name = e.value("name", "");
      ev.start_s = e["ts"].get<double>() * 1e-6;
      ev.end_s = ev.start_s + e.value("dur", 0.0) * 1e-6;
      if (e.contains("args") && e["args"].is_object()) {
        ev.microbatch = e["args"].value("microbatch", -1);
        ev.pass = e["args"].value("pass", "");
      }
      t.end_s = std::max(t.end_s, ev.end_s);
      auto& row = rows[{pid, tid}];
      row.pid = pid;
      row.tid = tid;
      row.events.push_back(std::move(ev));
    }
  }
  for (auto& [key, row] : rows) {
    const auto p = process_names.find(key.first);
    const auto th = thread_names.find(key);
    row.label = (p != process_names.end() ? p->second : "process " + std::to_string(key.first)) + " " +
                (th != thread_names.end() ? th->second : "thread " + std::to_string(key.second));
    std::sort(row.events.begin(), row.events.end(), [](const auto& a, const auto& b) { return a.start_s < b.start_s; });
    t.rows.push_back(std::move(row));
  }
  return t;
}

void TimelineScale::zoom(double factor, double px) {
  if (!(factor > 0)) return;
  const double at = to_s(px);
  double span = std::clamp(span_s() / factor, min_span_s, total_s);
  double start = at - px / width_px * span;
  start = std::clamp(start, 0.0, total_s - span);
  start_s = start;
  end_s = start + span;
}

void TimelineScale::pan(double px) {
  const double span = span_s();
  const double start = std::clamp(start_s + px / width_px * span, 0.0, total_s - span);
  start_s = start;
  end_s = start + span;
}

}  // namespace meshwork::gui
