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
      ev.block = e.value("cat", "") == "block";
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

Rgb colour_of(const TimelineEvent& e) {
  const std::string& name = e.name;
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("send") || has("recv")) return {230, 150, 80};
  if (has("optimizer") || has("adam")) return {170, 120, 200};
  if (!e.block && (has("_all_reduce") || has("_reduce_scatter") || has("_all_gather") || has("_all_to_all") || has("_ring_exchange") || has("_broadcast"))) return {220, 100, 100};
  if (e.pass == "forward") return {120, 190, 120};
  if (e.pass == "backward" || e.pass == "backward_input") return {86, 141, 206};
  if (e.pass == "backward_weight") return {60, 100, 170};
  // Traces of other tools: by the usual words.
  if (has("backward") || has("bwd") || has("dgrad") || has("wgrad")) return {86, 141, 206};
  if (has("forward") || has("fwd")) return {120, 190, 120};
  if (has("recompute")) return {190, 190, 110};
  if (has("reduce") || has("gather") || has("all") || has("broadcast")) return {220, 100, 100};
  return {150, 150, 150};
}

std::string label_of(const TimelineEvent& e) {
  if (!e.block || e.pass.empty()) return e.name;
  std::string out = e.pass == "forward" ? "F" : e.pass == "backward_weight" ? "W" : "B";
  if (e.microbatch >= 0) out += std::to_string(e.microbatch);
  const auto space = e.name.find(' ');
  if (space != std::string::npos) out += e.name.substr(space);
  return out;
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
