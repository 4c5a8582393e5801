#pragma once
// Sweeps of one or two plan fields over the plan being edited: a sortable table of every point
// and two charts, MFU against GPU count and time to train against cost with the Pareto front.

#include <QWidget>

#include "gui/core/background_jobs.hpp"
#include "gui/core/plan_document.hpp"
#include "gui/core/sweep_table_model.hpp"

class QChart;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace meshwork::gui {

class SweepView : public QWidget {
  Q_OBJECT
 public:
  SweepView(PlanDocument* document, QWidget* parent = nullptr);

  // Sets axis 0 or 1 (an empty path: unused) and starts the sweep; false with the reason
  // shown when an axis does not parse or the plan has no file yet.
  void set_axis(int i, const QString& path, const QString& values);
  bool run();
  void set_price(double usd_per_gpu_hour);

  [[nodiscard]] SweepTableModel* table_model() { return model_; }
  [[nodiscard]] QTableView* table_view() { return table_; }
  [[nodiscard]] QChart* mfu_chart() const { return mfu_chart_; }
  [[nodiscard]] QChart* cost_chart() const { return cost_chart_; }
  [[nodiscard]] bool running() const { return job_->running(); }

 signals:
  void finished();

 private:
  void show_outcome(const SweepOutcome& outcome);
  void fill_charts();

  PlanDocument* document_;
  SweepJob* job_;
  SweepTableModel* model_;
  QSortFilterProxyModel* proxy_;
  QComboBox* paths_[2];
  QLineEdit* values_[2];
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* status_;
  QTableView* table_;
  QChart* mfu_chart_;
  QChart* cost_chart_;
  double usd_per_gpu_hour_ = 0;
};

}  // namespace meshwork::gui
