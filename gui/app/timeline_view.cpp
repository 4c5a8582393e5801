#include "gui/app/timeline_view.hpp"

#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>
#include <cmath>

#include "gui/core/figures.hpp"

namespace meshwork::gui {
namespace {

QColor qcolour(const TimelineEvent& e) {
  const Rgb c = colour_of(e);
  return {c.r, c.g, c.b};
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(200);
  setMouseTracking(false);
}

void TimelineView::set_timeline(Timeline t) {
  timeline_ = std::move(t);
  scale_.total_s = timeline_.end_s > 0 ? timeline_.end_s : 1;
  scale_.width_px = std::max(1, width() - label_width_px);
  scale_.reset();
  updateGeometry();
  update();
}

QSize TimelineView::sizeHint() const {
  return {900, axis_height_px + row_height_px * std::max<int>(4, static_cast<int>(timeline_.rows.size())) + 4};
}

void TimelineView::resizeEvent(QResizeEvent*) { scale_.width_px = std::max(1, width() - label_width_px); }

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  if (timeline_.rows.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("Simulate the plan to see its pipeline timeline"));
    return;
  }
  // Time axis: about one tick per 100 px at a round step.
  const double raw = scale_.span_s() / std::max(1.0, scale_.width_px / 100);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  p.setPen(QColor(120, 120, 120));
  for (double t = std::ceil(scale_.start_s / step) * step; t <= scale_.end_s; t += step) {
    const double x = label_width_px + scale_.to_px(t);
    p.drawLine(QPointF(x, axis_height_px - 6), QPointF(x, height()));
    p.drawText(QPointF(x + 2, axis_height_px - 8), QString::fromStdString(human_duration(t)));
  }
  int y = axis_height_px;
  for (const auto& row : timeline_.rows) {
    p.setPen(Qt::black);
    p.drawText(QRect(4, y, label_width_px - 8, row_height_px), Qt::AlignVCenter | Qt::AlignLeft, QString::fromStdString(row.label));
    // Blocks (and every event of a trace without them) fill the row; the ops inside a block
    // are a thin strip along its bottom, so that both read at once.
    bool blocks = false;
    for (const auto& e : row.events) blocks = blocks || e.block;
    for (int layer = 0; layer < 2; ++layer) {
      for (const auto& e : row.events) {
        const bool inner = blocks && !e.block;
        if ((layer == 1) != inner) continue;
        if (e.end_s < scale_.start_s || e.start_s > scale_.end_s) continue;
        const double x0 = label_width_px + std::max(0.0, scale_.to_px(e.start_s));
        const double x1 = label_width_px + std::min(scale_.width_px, scale_.to_px(e.end_s));
        const QRectF box = inner ? QRectF(x0, y + row_height_px - 7, std::max(1.0, x1 - x0), 5) : QRectF(x0, y + 2, std::max(1.0, x1 - x0), row_height_px - 4);
        p.fillRect(box, inner ? qcolour(e).darker(130) : qcolour(e));
        if (!inner && box.width() > 40) {
          p.setPen(Qt::black);
          std::string text = label_of(e);
          if (!e.block && !e.pass.empty()) text = std::string(e.pass == "forward" ? "F" : e.pass == "backward_weight" ? "W" : "B") + (e.microbatch >= 0 ? std::to_string(e.microbatch) : "");
          p.drawText(box.adjusted(2, 0, -2, -6), Qt::AlignVCenter | Qt::AlignLeft,
                     p.fontMetrics().elidedText(QString::fromStdString(text), Qt::ElideRight, static_cast<int>(box.width()) - 4));
        }
      }
    }
    y += row_height_px;
  }
  // Legend, bottom left.
  const std::pair<const char*, QColor> legend[] = {{"F forward", {120, 190, 120}}, {"B backward", {86, 141, 206}}, {"W weight gradient", {60, 100, 170}},
                                                   {"pipeline send/recv", {230, 150, 80}}, {"collective", {220, 100, 100}}, {"optimizer", {170, 120, 200}}};
  int x = 6;
  const int ly = height() - 18;
  for (const auto& [text, colour] : legend) {
    p.fillRect(QRect(x, ly + 3, 12, 10), colour);
    p.setPen(Qt::black);
    p.drawText(QPoint(x + 16, ly + 12), text);
    x += 30 + p.fontMetrics().horizontalAdvance(text);
  }
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  const double factor = std::pow(1.0015, e->angleDelta().y());
  zoom(factor, e->position().x());
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) { drag_x_ = e->position().x(); }

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (drag_x_ < 0 || !(e->buttons() & Qt::LeftButton)) return;
  scale_.pan(drag_x_ - e->position().x());
  drag_x_ = e->position().x();
  update();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent*) {
  scale_.reset();
  update();
}

}  // namespace meshwork::gui
