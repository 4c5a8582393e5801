#pragma once
// meshwork-gui's window: the plan's forms, the results of its estimate (after every edit) or
// simulation, the pipeline timeline, sweeps and comparisons, on the same plan files as the CLI.

#include <QMainWindow>
#include <QString>

#include "gui/core/background_jobs.hpp"
#include "gui/core/plan_document.hpp"

class QLabel;
class QProgressBar;
class QTabWidget;
class QTimer;

namespace meshwork::gui {

class CompareView;
class PlanEditor;
class ResultsView;
class SweepView;
class TimelineView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Opens a plan file; on failure the current plan stays and the reason is shown (and returned).
  bool open_plan(const QString& file, QString* error = nullptr);
  bool save_plan(const QString& file, QString* error = nullptr);
  // Runs the discrete-event simulation off the GUI thread; `simulated` says when it is done.
  void simulate();
  void cancel_simulation();
  // Pins the current result for the side-by-side comparison.
  void pin_current();

  [[nodiscard]] PlanDocument& document() { return document_; }
  [[nodiscard]] PlanEditor* plan_editor() { return editor_; }
  [[nodiscard]] ResultsView* results() { return results_; }
  [[nodiscard]] TimelineView* timeline() { return timeline_; }
  [[nodiscard]] SweepView* sweep() { return sweep_; }
  [[nodiscard]] CompareView* compare() { return compare_; }
  [[nodiscard]] QTabWidget* tabs() { return tabs_; }
  // The last edit's cost: resolving and validating the plan, then estimating it (ms).
  [[nodiscard]] double last_estimate_ms() const { return last_estimate_ms_; }
  [[nodiscard]] double last_edit_ms() const { return document_.last_reload_ms() + last_estimate_ms_; }
  [[nodiscard]] bool goodput_running() const { return goodput_->running(); }
  // The status bar's goodput-sweep progress (shown while the Monte Carlo sweep runs).
  [[nodiscard]] QProgressBar* goodput_progress() const { return goodput_progress_; }
  // How much Monte Carlo the goodput chart spends: intervals swept and trials per interval.
  void set_goodput_effort(int points, std::int64_t trials) {
    goodput_points_ = points;
    goodput_trials_ = trials;
  }

 signals:
  void estimated();
  void simulated(bool ok, const QString& message);
  void goodput_ready();

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  void re_estimate();
  void update_title();
  bool confirm_discard();

  PlanDocument document_;
  PlanEditor* editor_;
  ResultsView* results_;
  TimelineView* timeline_;
  SweepView* sweep_;
  CompareView* compare_;
  QTabWidget* tabs_;
  SimulationJob* simulation_;
  GoodputJob* goodput_;
  QTimer* goodput_timer_;
  QProgressBar* progress_;
  QProgressBar* goodput_progress_;
  QLabel* status_;
  QAction* simulate_action_;
  QAction* cancel_action_;
  double last_estimate_ms_ = 0;
  bool goodput_pending_ = false;
  int goodput_points_ = 13;
  std::int64_t goodput_trials_ = 40;
};

}  // namespace meshwork::gui
