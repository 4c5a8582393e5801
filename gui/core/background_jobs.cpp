#include "gui/core/background_jobs.hpp"

#include <QCoreApplication>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QtConcurrent/QtConcurrent>
#include <cmath>
#include <fstream>
#include <sstream>

#include "models/estimate.hpp"
#ifdef MESHWORK_HAVE_SIMGRID
#include "sim/simulate.hpp"
#endif

namespace meshwork::gui {
namespace {

struct Cancelled {};

// Deletes a watcher after its result was taken, and clears the job's pointer.
template <class W>
void finish(W*& watcher) {
  watcher->deleteLater();
  watcher = nullptr;
}

}  // namespace

bool simulator_available() {
#ifdef MESHWORK_HAVE_SIMGRID
  return true;
#else
  return false;
#endif
}

std::string simulation_worker() {
  if (qEnvironmentVariableIsSet("MESHWORK_CLI")) return qEnvironmentVariable("MESHWORK_CLI").toStdString();
  const QString here = QCoreApplication::applicationDirPath();
  for (const QString& candidate : {here + "/meshwork", here + "/../cli/meshwork"}) {
    if (QFileInfo(candidate).isExecutable()) return QFileInfo(candidate).canonicalFilePath().toStdString();
  }
  return "meshwork";
}

SimulationJob::~SimulationJob() {
  if (watcher_ != nullptr) {
    cancel();
    watcher_->waitForFinished();
  }
}

void SimulationJob::start(const plan::Plan& plan) {
  if (running()) return;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  watcher_ = new QFutureWatcher<SimulationOutcome>(this);
  connect(watcher_, &QFutureWatcher<SimulationOutcome>::finished, this, [this] {
    const SimulationOutcome outcome = watcher_->result();
    finish(watcher_);
    emit finished(outcome);
  });
  QPointer<SimulationJob> self(this);
  auto flag = cancel_;
  const std::string worker = simulation_worker();
  watcher_->setFuture(QtConcurrent::run([plan, flag, self, worker]() {
    SimulationOutcome out;
#ifdef MESHWORK_HAVE_SIMGRID
    QTemporaryDir dir;
    sim::SimulateOptions options;
    options.cancel = flag.get();
    options.worker = worker;
    if (dir.isValid()) options.trace_path = (dir.path() + "/trace.json").toStdString();
    options.progress = [self](double f) {
      if (self) QMetaObject::invokeMethod(self.data(), [self, f] { if (self) emit self->progress(f); }, Qt::QueuedConnection);
    };
    const sim::SimulateResult r = sim::simulate(plan, options);
    out.report = r.report;
    // The simulator times the step; memory is the one memory model's, as in `meshwork simulate`.
    if (out.report) models::attach_memory(plan, *out.report);
    out.error = r.error;
    if (r.interruption) out.error = "the step was interrupted by a failure of " + r.interruption->target;
    if (out.report && !options.trace_path.empty()) {
      std::ifstream in(options.trace_path);
      std::stringstream text;
      text << in.rdbuf();
      out.trace_json = text.str();
    }
#else
    (void)plan;
    (void)flag;
    (void)self;
    (void)worker;
    out.error = "this build has no simulator (SimGrid was not found)";
#endif
    return out;
  }));
}

void SimulationJob::cancel() {
  if (cancel_) cancel_->store(true);
}

SweepJob::~SweepJob() {
  if (watcher_ != nullptr) {
    cancel();
    watcher_->waitForFinished();
  }
}

void SweepJob::start(plan::SweepSpec spec) {
  if (running()) return;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  watcher_ = new QFutureWatcher<SweepOutcome>(this);
  connect(watcher_, &QFutureWatcher<SweepOutcome>::finished, this, [this] {
    const SweepOutcome outcome = watcher_->result();
    finish(watcher_);
    emit finished(outcome);
  });
  QPointer<SweepJob> self(this);
  auto flag = cancel_;
  watcher_->setFuture(QtConcurrent::run([spec = std::move(spec), flag, self]() {
    SweepOutcome out;
    models::Evaluator evaluate = [flag](const plan::Plan& p) {
      if (flag->load()) throw Cancelled{};
      models::Evaluation e;
      e.ok = true;
      e.report = models::estimate(p);
      return e;
    };
    auto progress = [self](std::uint64_t done, std::uint64_t total) {
      if (self && total > 0) {
        const double f = static_cast<double>(done) / static_cast<double>(total);
        QMetaObject::invokeMethod(self.data(), [self, f] { if (self) emit self->progress(f); }, Qt::QueuedConnection);
      }
    };
    try {
      out.rows = models::run_sweep(spec, {}, progress, evaluate);
      models::rank_rows(out.rows, spec.rank_by);
    } catch (const Cancelled&) {
      out.error = "cancelled";
      out.rows.clear();
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  }));
}

void SweepJob::cancel() {
  if (cancel_) cancel_->store(true);
}

GoodputJob::~GoodputJob() {
  if (watcher_ != nullptr) watcher_->waitForFinished();
}

void GoodputJob::start(const plan::Plan& plan, double step_s, int points, std::int64_t trials) {
  if (running()) return;
  watcher_ = new QFutureWatcher<GoodputOutcome>(this);
  connect(watcher_, &QFutureWatcher<GoodputOutcome>::finished, this, [this] {
    const GoodputOutcome outcome = watcher_->result();
    finish(watcher_);
    emit finished(outcome);
  });
  QPointer<GoodputJob> self(this);
  watcher_->setFuture(QtConcurrent::run([plan, step_s, points, trials, self]() {
    GoodputOutcome out;
    try {
      const reliability::Derived d = reliability::inputs_for(plan, step_s);
      if (!d.error.empty()) {
        out.error = d.error;
        return out;
      }
      // The stall a checkpoint costs: the snapshot when asynchronous, else the whole write
      // (as `meshwork reliability --sweep` centres its sweep).
      const double stall = d.inputs.async ? d.inputs.snapshot_s : d.inputs.write_s;
      if (!std::isfinite(d.mtti_s)) {
        out.error = "the plan gives no failure rates (failures.mtbf_hours, failures.per_1000_node_days): every interval keeps all the work";
        return out;
      }
      out.daly_s = std::isfinite(d.mtti_s) ? reliability::daly_interval_s(stall, d.mtti_s) : 0;
      out.current_s = d.inputs.interval_s;
      const double centre = out.daly_s > 0 ? out.daly_s : d.inputs.interval_s;
      if (!(centre > 0)) {
        out.error = "the plan has no failures, so every checkpoint interval keeps all the work";
        return out;
      }
      // The CLI's range: from the shortest interval the plan can run, holding its own.
      const reliability::SweepRange range = reliability::sweep_range(d, out.daly_s);
      auto progress = [self](double f) {
        if (self) QMetaObject::invokeMethod(self.data(), [self, f] { if (self) emit self->progress(f); }, Qt::QueuedConnection);
      };
      out.points = reliability::sweep_interval(d.inputs, range.lo_s, range.hi_s, points, trials,
                                               static_cast<std::uint64_t>(plan.run.seed), progress);
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  }));
}

}  // namespace meshwork::gui
