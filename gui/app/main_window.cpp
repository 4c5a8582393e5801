#include "gui/app/main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QScrollArea>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>

#include "gui/app/compare_view.hpp"
#include "gui/app/plan_editor.hpp"
#include "gui/app/results_view.hpp"
#include "gui/app/sweep_view.hpp"
#include "gui/app/timeline_view.hpp"
#include "gui/core/figures.hpp"
#include "models/estimate.hpp"

namespace meshwork::gui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), simulation_(new SimulationJob(this)), goodput_(new GoodputJob(this)), goodput_timer_(new QTimer(this)) {
  editor_ = new PlanEditor(&document_, this);
  results_ = new ResultsView(this);
  timeline_ = new TimelineView(this);
  sweep_ = new SweepView(&document_, this);
  compare_ = new CompareView(this);

  tabs_ = new QTabWidget(this);
  tabs_->addTab(editor_, tr("Plan"));
  tabs_->addTab(results_, tr("Results"));
  auto* timeline_scroll = new QScrollArea(this);
  timeline_scroll->setWidget(timeline_);
  timeline_scroll->setWidgetResizable(true);
  tabs_->addTab(timeline_scroll, tr("Timeline"));
  tabs_->addTab(sweep_, tr("Sweep"));
  tabs_->addTab(compare_, tr("Compare"));
  setCentralWidget(tabs_);

  auto* file = menuBar()->addMenu(tr("&File"));
  auto* open = file->addAction(tr("&Open..."), QKeySequence::Open, this, [this] {
    if (!confirm_discard()) return;
    const QString f = QFileDialog::getOpenFileName(this, tr("Open plan"), {}, tr("Plans (*.yaml *.yml *.json)"));
    if (!f.isEmpty()) open_plan(f);
  });
  auto* save = file->addAction(tr("&Save"), QKeySequence::Save, this, [this] {
    if (document_.file().empty()) {
      const QString f = QFileDialog::getSaveFileName(this, tr("Save plan"), {}, tr("JSON plans (*.json)"));
      if (!f.isEmpty()) save_plan(f);
    } else {
      save_plan(QString::fromStdString(document_.file().string()));
    }
  });
  file->addAction(tr("Save &as..."), QKeySequence::SaveAs, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Save plan"), {}, tr("JSON plans (*.json)"));
    if (!f.isEmpty()) save_plan(f);
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  auto* tools = addToolBar(tr("Plan"));
  tools->addAction(open);
  tools->addAction(save);
  tools->addSeparator();
  simulate_action_ = tools->addAction(tr("Simulate"), this, &MainWindow::simulate);
  simulate_action_->setEnabled(simulator_available());
  simulate_action_->setToolTip(simulator_available() ? tr("Run the discrete-event simulation of one step")
                                                     : tr("This build has no simulator (SimGrid was not found)"));
  cancel_action_ = tools->addAction(tr("Cancel"), this, &MainWindow::cancel_simulation);
  cancel_action_->setEnabled(false);
  tools->addAction(tr("Pin"), this, &MainWindow::pin_current)->setToolTip(tr("Pin this result for the side-by-side comparison"));

  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(220);
  progress_->hide();
  status_ = new QLabel(this);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // long messages elide, not widen
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  goodput_progress_ = new QProgressBar(this);
  goodput_progress_->setRange(0, 1000);
  goodput_progress_->setMaximumWidth(220);
  goodput_progress_->setFormat(tr("goodput sweep %p%"));
  goodput_progress_->setToolTip(tr("Monte Carlo goodput against the checkpoint interval"));
  goodput_progress_->hide();
  statusBar()->addPermanentWidget(goodput_progress_);

  connect(editor_, &PlanEditor::edited, this, [this] {
    update_title();
    re_estimate();
  });
  connect(results_, &ResultsView::price_changed, sweep_, &SweepView::set_price);
  connect(simulation_, &SimulationJob::progress, this, [this](double f) { progress_->setValue(static_cast<int>(1000 * f)); });
  connect(simulation_, &SimulationJob::finished, this, [this](const SimulationOutcome& o) {
    progress_->hide();
    simulate_action_->setEnabled(true);
    cancel_action_->setEnabled(false);
    if (!o.report) {
      status_->setText(tr("simulation: %1").arg(QString::fromStdString(o.error)));
      emit simulated(false, QString::fromStdString(o.error));
      return;
    }
    results_->show_report(*o.report, tr("simulated"));
    compare_->set_predicted(*o.report);
    goodput_timer_->start();  // goodput again, at the simulated step time
    if (!o.trace_json.empty()) {
      try {
        timeline_->set_timeline(read_trace(o.trace_json));
      } catch (const std::exception& e) {
        status_->setText(tr("the simulation's trace could not be read: %1").arg(e.what()));
      }
    }
    status_->setText(tr("simulated: step %1, MFU %2 %").arg(QString::fromStdString(human_duration(o.report->step_time_s))).arg(100 * o.report->mfu, 0, 'f', 1));
    emit simulated(true, {});
  });
  goodput_timer_->setSingleShot(true);
  goodput_timer_->setInterval(400);  // after the edits stop: the Monte Carlo sweep takes a while
  connect(goodput_timer_, &QTimer::timeout, this, [this] {
    if (!results_->report() || !document_.valid()) return;
    if (goodput_->running()) {
      goodput_pending_ = true;
      return;
    }
    goodput_progress_->setValue(0);
    goodput_progress_->show();
    goodput_->start(document_.loaded().plan, results_->report()->step_time_s, goodput_points_, goodput_trials_);
  });
  connect(goodput_, &GoodputJob::progress, this, [this](double f) { goodput_progress_->setValue(static_cast<int>(1000 * f)); });
  connect(goodput_, &GoodputJob::finished, this, [this](const GoodputOutcome& g) {
    goodput_progress_->hide();
    results_->show_goodput(g);
    if (goodput_pending_) {
      goodput_pending_ = false;
      goodput_timer_->start();
    }
    emit goodput_ready();
  });

  resize(1400, 900);
  update_title();
  re_estimate();
}

MainWindow::~MainWindow() = default;

bool MainWindow::open_plan(const QString& file, QString* error) {
  std::string why;
  if (!document_.open(file.toStdString(), why)) {
    status_->setText(QString::fromStdString(why));
    if (error != nullptr) *error = QString::fromStdString(why);
    return false;
  }
  editor_->refresh();
  timeline_->set_timeline({});
  update_title();
  re_estimate();
  status_->setText(tr("opened %1").arg(file));
  return true;
}

bool MainWindow::save_plan(const QString& file, QString* error) {
  std::string why;
  if (!document_.save(file.toStdString(), why)) {
    status_->setText(QString::fromStdString(why));
    if (error != nullptr) *error = QString::fromStdString(why);
    return false;
  }
  update_title();
  status_->setText(tr("saved %1").arg(file));
  return true;
}

void MainWindow::re_estimate() {
  if (!document_.valid()) {
    const auto& items = document_.loaded().diagnostics.items();
    QString why = tr("the plan has errors");
    for (const auto& d : items) {
      if (d.severity == plan::Severity::error) {
        why = QString::fromStdString(plan::format(d));
        break;
      }
    }
    results_->clear(why);
    return;
  }
  QElapsedTimer t;
  t.start();
  const report::Report r = models::estimate(document_.loaded().plan);
  last_estimate_ms_ = static_cast<double>(t.nsecsElapsed()) / 1e6;
  results_->show_report(r, tr("validated and estimated in %1 ms").arg(last_edit_ms(), 0, 'f', 1));
  compare_->set_predicted(r);
  status_->setText(tr("estimate: step %1, MFU %2 % (%3 ms)")
                       .arg(QString::fromStdString(human_duration(r.step_time_s)))
                       .arg(100 * r.mfu, 0, 'f', 1)
                       .arg(last_edit_ms(), 0, 'f', 1));
  goodput_timer_->start();
  emit estimated();
}

void MainWindow::simulate() {
  if (simulation_->running()) return;
  if (!document_.valid()) {
    status_->setText(tr("fix the plan's errors before simulating"));
    emit simulated(false, tr("the plan has errors"));
    return;
  }
  simulate_action_->setEnabled(false);
  cancel_action_->setEnabled(true);
  progress_->setValue(0);
  progress_->show();
  status_->setText(tr("simulating..."));
  simulation_->start(document_.loaded().plan);
}

void MainWindow::cancel_simulation() { simulation_->cancel(); }

void MainWindow::pin_current() {
  if (!results_->report()) return;
  const QString name = QString::fromStdString(document_.file().filename().string());
  compare_->pin(QString("%1 (%2)").arg(name.isEmpty() ? tr("unsaved") : name, QString::fromUtf8(report::to_string(results_->report()->method).data())),
                *results_->report());
  status_->setText(tr("pinned"));
}

void MainWindow::update_title() {
  const QString name = document_.file().empty() ? tr("new plan") : QString::fromStdString(document_.file().filename().string());
  setWindowTitle(QString("meshwork - %1%2").arg(name, document_.modified() ? "*" : ""));
}

bool MainWindow::confirm_discard() {
  if (!document_.modified()) return true;
  return QMessageBox::question(this, tr("Discard changes?"), tr("The plan has unsaved changes. Discard them?")) == QMessageBox::Yes;
}

void MainWindow::closeEvent(QCloseEvent* e) {
  if (confirm_discard()) {
    simulation_->cancel();
    e->accept();
  } else {
    e->ignore();
  }
}

}  // namespace meshwork::gui
