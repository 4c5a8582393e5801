#pragma once
// The headline figures and the charts of one report: the step-time waterfall, memory per
// pipeline stage against the HBM line (red where a stage does not fit) and goodput against the
// checkpoint interval.

#include <QWidget>
#include <optional>

#include "gui/core/background_jobs.hpp"
#include "report/report.hpp"

class QChart;
class QChartView;
class QDoubleSpinBox;
class QLabel;

namespace meshwork::gui {

class ResultsView : public QWidget {
  Q_OBJECT
 public:
  explicit ResultsView(QWidget* parent = nullptr);

  // Shows a report; `how` says where it came from ("estimated in 3 ms", "simulated").
  void show_report(const report::Report& r, const QString& how);
  // No valid plan: the figures are cleared and `why` is shown.
  void clear(const QString& why);
  void show_goodput(const GoodputOutcome& g);

  [[nodiscard]] double usd_per_gpu_hour() const;
  [[nodiscard]] const std::optional<report::Report>& report() const { return report_; }
  [[nodiscard]] QChart* waterfall_chart() const { return waterfall_; }
  [[nodiscard]] QChart* memory_chart() const { return memory_; }
  [[nodiscard]] QChart* goodput_chart() const { return goodput_; }
  [[nodiscard]] QString headline_text(const QString& name) const;

 signals:
  void price_changed(double usd_per_gpu_hour);

 private:
  void fill_headline();
  void fill_waterfall();
  void fill_memory();

  std::optional<report::Report> report_;
  QLabel* how_;
  QLabel* verdict_;  // the memory verdict, as the CLI prints it
  QLabel* interval_;  // where step time and MFU lie (report::interval_line), or why no range is given
  std::vector<std::pair<QString, QLabel*>> headline_;
  QDoubleSpinBox* price_;
  QChart* waterfall_;
  QChart* memory_;
  QChart* goodput_;
};

}  // namespace meshwork::gui
