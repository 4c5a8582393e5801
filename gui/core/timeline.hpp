#pragma once
// The pipeline timeline: a simulator or executor Chrome trace read back as one row per rank and
// stream, and the time<->pixel maths of the zoomable view as a plain struct (as hotspot keeps its
// timeline delegate's maths testable apart from painting).

#include <string>
#include <string_view>
#include <vector>

namespace meshwork::gui {

struct TimelineEvent {
  std::string name;
  double start_s = 0, end_s = 0;
  int microbatch = -1;
  std::string pass;  // "forward", "backward", "backward_input", "backward_weight"; empty outside the schedule
  bool block = false;  // a schedule item's block ("forward L0-3", category "block"); its ops lie inside it
};

// What the view paints: the colour of an event by its pass (forward green, backward blue, weight
// gradient dark blue), transfers orange, collectives red, the optimizer purple, else grey; and a
// block's label, pass letter, micro-batch and layers ("F3 L0-3"), an op's its name.
struct Rgb {
  int r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
[[nodiscard]] Rgb colour_of(const TimelineEvent& e);
[[nodiscard]] std::string label_of(const TimelineEvent& e);

struct TimelineRow {
  std::string label;  // "rank 0 (stage 0) compute"
  long long pid = 0;
  int tid = 0;
  std::vector<TimelineEvent> events;  // by start
};

struct Timeline {
  std::vector<TimelineRow> rows;  // by pid, then tid; rows without events are dropped
  double end_s = 0;               // the last event's end
};

// Reads the Chrome trace event format (complete "X" events in microseconds; process_name and
// thread_name metadata). Throws std::invalid_argument naming what is wrong with the text.
Timeline read_trace(std::string_view json_text);

// Maps [start_s, end_s] of the step onto [0, width_px). Zooming keeps the time under the
// cursor where it is; the visible window never leaves [0, total_s] nor shrinks below min_span_s.
struct TimelineScale {
  double total_s = 1;   // the whole timeline
  double start_s = 0;   // visible window
  double end_s = 1;
  double width_px = 1;
  double min_span_s = 1e-7;

  [[nodiscard]] double span_s() const { return end_s - start_s; }
  [[nodiscard]] double to_px(double t_s) const { return (t_s - start_s) / span_s() * width_px; }
  [[nodiscard]] double to_s(double px) const { return start_s + px / width_px * span_s(); }
  // factor > 1 zooms in around pixel `px`.
  void zoom(double factor, double px);
  // Moves the window by `px` pixels (positive: later times come into view).
  void pan(double px);
  void reset() {
    start_s = 0;
    end_s = total_s;
  }
};

}  // namespace meshwork::gui
