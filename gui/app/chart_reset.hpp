#pragma once
// Empties a chart for new data: its series and its axes (a chart owns both).

#include <QtCharts/QAbstractAxis>
#include <QtCharts/QChart>

namespace meshwork::gui {

inline void reset_chart(QChart* c) {
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
}

}  // namespace meshwork::gui
