#pragma once
// The pipeline timeline of a simulated (or executed) step: a Gantt row per rank and stream,
// events coloured by kind (forward, backward, communication, optimizer), a time axis; the
// wheel zooms around the cursor, dragging pans, a double click shows the whole step.

#include <QWidget>

#include "gui/core/timeline.hpp"

namespace meshwork::gui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);

  void set_timeline(Timeline t);
  [[nodiscard]] const Timeline& timeline() const { return timeline_; }
  [[nodiscard]] const TimelineScale& scale() const { return scale_; }
  void zoom(double factor, double px) {
    scale_.zoom(factor, px - label_width_px);
    update();
  }
  // The geometry: rows' labels on the left, the time axis on top, one row per rank and stream.
  static constexpr int label_width_px = 210;
  static constexpr int row_height_px = 22;
  static constexpr int axis_height_px = 24;

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseDoubleClickEvent(QMouseEvent*) override;
  QSize sizeHint() const override;

 private:
  Timeline timeline_;
  TimelineScale scale_;
  double drag_x_ = -1;
};

}  // namespace meshwork::gui
