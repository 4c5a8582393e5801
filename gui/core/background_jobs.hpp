#pragma once
// Heavy work off the GUI thread (docs/STYLE.md, as hotspot does): each job runs on
// QtConcurrent's pool and hands plain data back by signal on the GUI thread. Progress arrives
// queued; cancel() asks the work to stop at its next check.

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "models/sweep.hpp"
#include "plan/plan.hpp"
#include "plan/sweep_spec.hpp"
#include "report/report.hpp"
#include "sim/reliability.hpp"

namespace meshwork::gui {

// Whether this build has the discrete-event simulator (SimGrid).
bool simulator_available();

// The meshwork CLI that runs simulations for the GUI in their own process (a fork of the
// multi-threaded GUI could inherit a lock another thread holds): $MESHWORK_CLI, else
// `meshwork` beside the GUI's executable or in ../cli/ (the build tree), else `meshwork` on PATH.
std::string simulation_worker();

struct SimulationOutcome {
  std::optional<report::Report> report;  // absent on error or cancel
  std::string error;
  std::string trace_json;                // the pipeline stages' first ranks, Chrome format
};

class SimulationJob : public QObject {
  Q_OBJECT
 public:
  using QObject::QObject;
  ~SimulationJob() override;
  // Starts simulating `plan` (ignored while one runs).
  void start(const plan::Plan& plan);
  void cancel();
  [[nodiscard]] bool running() const { return watcher_ != nullptr; }
 signals:
  void progress(double fraction);
  void finished(const meshwork::gui::SimulationOutcome& outcome);

 private:
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<SimulationOutcome>* watcher_ = nullptr;
};

struct SweepOutcome {
  std::vector<models::SweepRow> rows;
  std::string error;
};

class SweepJob : public QObject {
  Q_OBJECT
 public:
  using QObject::QObject;
  ~SweepJob() override;
  // Estimates every point of `spec` (the base tree with the axes' values), ranked by MFU.
  void start(plan::SweepSpec spec);
  void cancel();
  [[nodiscard]] bool running() const { return watcher_ != nullptr; }
 signals:
  void progress(double fraction);
  void finished(const meshwork::gui::SweepOutcome& outcome);

 private:
  std::shared_ptr<std::atomic<bool>> cancel_;
  QFutureWatcher<SweepOutcome>* watcher_ = nullptr;
};

struct GoodputOutcome {
  std::vector<reliability::SweepPoint> points;
  double daly_s = 0;       // Daly's optimum for the plan's checkpoint stall and MTTI (0: none)
  double current_s = 0;    // the interval the plan uses
  std::string error;
};

class GoodputJob : public QObject {
  Q_OBJECT
 public:
  using QObject::QObject;
  ~GoodputJob() override;
  // Goodput against the checkpoint interval for `plan` at healthy step time `step_s`:
  // `points` intervals around Daly's optimum (1/8 to 8 times), `trials` Monte Carlo runs each.
  void start(const plan::Plan& plan, double step_s, int points = 13, std::int64_t trials = 40);
  [[nodiscard]] bool running() const { return watcher_ != nullptr; }
 signals:
  // The fraction of the sweep's intervals done, from the worker, queued to this object's thread.
  void progress(double fraction);
  void finished(const meshwork::gui::GoodputOutcome& outcome);

 private:
  QFutureWatcher<GoodputOutcome>* watcher_ = nullptr;
};

}  // namespace meshwork::gui
