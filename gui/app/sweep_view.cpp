#include "gui/app/sweep_view.hpp"

#include <QComboBox>
#include <QCompleter>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>

#include "gui/app/chart_reset.hpp"

#include "gui/core/pareto.hpp"
#include "gui/core/sweep_axis.hpp"
#include "plan/field_catalogue.hpp"

namespace meshwork::gui {
SweepView::SweepView(PlanDocument* document, QWidget* parent)
    : QWidget(parent), document_(document), job_(new SweepJob(this)), model_(new SweepTableModel(this)),
      proxy_(new QSortFilterProxyModel(this)), mfu_chart_(new QChart), cost_chart_(new QChart) {
  auto* layout = new QVBoxLayout(this);
  auto* axes = new QGridLayout;
  QStringList fields;
  for (const auto& f : plan::field_catalogue().fields) {
    if (f.kind == plan::FieldKind::integer || f.kind == plan::FieldKind::number || f.kind == plan::FieldKind::choice || f.kind == plan::FieldKind::boolean) {
      fields << QString::fromStdString(f.path);
    }
  }
  const char* examples[] = {"1, 2, 4, 8", "8..64 *2"};
  for (int i = 0; i < 2; ++i) {
    paths_[i] = new QComboBox(this);
    paths_[i]->setObjectName(QString("sweep_path_%1").arg(i));
    paths_[i]->setEditable(true);
    paths_[i]->addItem(i == 0 ? "" : "");
    paths_[i]->addItems(fields);
    paths_[i]->completer()->setFilterMode(Qt::MatchContains);
    values_[i] = new QLineEdit(this);
    values_[i]->setObjectName(QString("sweep_values_%1").arg(i));
    values_[i]->setPlaceholderText(tr("values: %1").arg(examples[i]));
    axes->addWidget(new QLabel(tr("Field %1:").arg(i + 1), this), i, 0);
    axes->addWidget(paths_[i], i, 1);
    axes->addWidget(values_[i], i, 2);
  }
  paths_[0]->setCurrentText("parallelism.tensor_model_parallel_size");
  values_[0]->setText("1, 2, 4, 8");
  axes->setColumnStretch(1, 1);
  axes->setColumnStretch(2, 1);
  layout->addLayout(axes);

  auto* bar = new QHBoxLayout;
  run_ = new QPushButton(tr("Run sweep"), this);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setEnabled(false);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  status_ = new QLabel(this);
  status_->setObjectName("sweep_status");
  status_->setWordWrap(true);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);

  auto* split = new QSplitter(Qt::Vertical, this);
  table_ = new QTableView(split);
  table_->setObjectName("sweep_table");
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  auto* charts = new QWidget(split);
  auto* charts_layout = new QHBoxLayout(charts);
  for (QChart* c : {mfu_chart_, cost_chart_}) {
    auto* v = new QChartView(c, charts);
    v->setRenderHint(QPainter::Antialiasing);
    v->setMinimumHeight(240);
    charts_layout->addWidget(v);
  }
  mfu_chart_->setTitle(tr("MFU against GPU count"));
  cost_chart_->setTitle(tr("Time to train against cost (Pareto front)"));
  layout->addWidget(split, 1);

  connect(run_, &QPushButton::clicked, this, [this] { run(); });
  connect(cancel_, &QPushButton::clicked, job_, &SweepJob::cancel);
  connect(job_, &SweepJob::progress, this, [this](double f) { progress_->setValue(static_cast<int>(1000 * f)); });
  connect(job_, &SweepJob::finished, this, &SweepView::show_outcome);
}

void SweepView::set_axis(int i, const QString& path, const QString& values) {
  paths_[i]->setCurrentText(path);
  values_[i]->setText(values);
}

bool SweepView::run() {
  if (job_->running()) return false;
  plan::SweepSpec spec;
  spec.base = document_->file().empty() ? std::filesystem::current_path() / "plan.json" : document_->file();
  spec.base_tree = document_->tree();
  spec.rank_by = plan::RankBy::mfu;
  QStringList names;
  for (int i = 0; i < 2; ++i) {
    const QString path = paths_[i]->currentText().trimmed();
    if (path.isEmpty()) continue;
    plan::SweepAxis axis;
    std::string error;
    if (!make_axis(path.toStdString(), values_[i]->text().toStdString(), axis, error)) {
      status_->setText(QString::fromStdString(error));
      return false;
    }
    names << QString::fromStdString(axis.written).section('.', -1);  // as typed: "tp", not its canonical name
    spec.axes.push_back(std::move(axis));
  }
  if (spec.axes.empty()) {
    status_->setText(tr("choose a field and its values"));
    return false;
  }
  model_->set_rows(names, {}, usd_per_gpu_hour_);
  status_->setText(tr("%1 points...").arg(spec.size()));
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  progress_->setValue(0);
  job_->start(std::move(spec));
  return true;
}

void SweepView::set_price(double usd_per_gpu_hour) {
  usd_per_gpu_hour_ = usd_per_gpu_hour;
  model_->set_price(usd_per_gpu_hour);
  if (!model_->rows().empty()) fill_charts();
}

void SweepView::show_outcome(const SweepOutcome& outcome) {
  run_->setEnabled(true);
  cancel_->setEnabled(false);
  progress_->setValue(1000);
  QStringList names;
  for (int c = 0; c < model_->columnCount() - SweepTableModel::figure_count; ++c) names << model_->headerData(c, Qt::Horizontal).toString();
  model_->set_rows(names, outcome.rows, usd_per_gpu_hour_);
  if (!outcome.error.empty()) {
    status_->setText(QString::fromStdString(outcome.error));
  } else {
    const auto ok = std::count_if(outcome.rows.begin(), outcome.rows.end(), [](const auto& r) { return r.status == models::PointStatus::ok; });
    status_->setText(tr("%1 points, %2 valid and fitting; best first by MFU").arg(outcome.rows.size()).arg(ok));
  }
  fill_charts();
  emit finished();
}

void SweepView::fill_charts() {
  reset_chart(mfu_chart_);
  reset_chart(cost_chart_);
  auto* mfu = new QScatterSeries;
  mfu->setName(tr("fits"));
  auto* oom = new QScatterSeries;
  oom->setName(tr("out of memory"));
  oom->setColor(QColor(220, 0, 0));
  auto* cost = new QScatterSeries;
  cost->setName(tr("plans"));
  std::vector<CostPoint> points;
  std::vector<const models::SweepRow*> costed;
  double gpus_lo = 1e300, gpus_hi = 0, mfu_hi = 0;
  for (const auto& r : model_->rows()) {
    if (r.status == models::PointStatus::invalid) continue;
    const double g = static_cast<double>(r.report.num_gpus);
    (r.status == models::PointStatus::ok ? mfu : oom)->append(g, 100 * r.report.mfu);
    gpus_lo = std::min(gpus_lo, g);
    gpus_hi = std::max(gpus_hi, g);
    mfu_hi = std::max(mfu_hi, 100 * r.report.mfu);
    const double c = model_->cost_of(r);
    const double t = r.report.time_to_train_s;
    if (r.status == models::PointStatus::ok && t > 0) {
      // Without a price, GPU-hours stand for the cost.
      const double y = c > 0 ? c : static_cast<double>(r.report.num_gpus) * t / 3600;
      points.push_back({t / 86400, y});
      cost->append(t / 86400, y);
    }
  }
  if (gpus_hi > 0) {
    mfu_chart_->addSeries(mfu);
    mfu_chart_->addSeries(oom);
    auto* x = new QLogValueAxis;
    x->setBase(2);
    x->setLabelFormat("%g");
    x->setTitleText(tr("GPUs"));
    x->setRange(gpus_lo / 1.5, gpus_hi * 1.5);
    auto* y = new QValueAxis;
    y->setTitleText(tr("MFU %"));
    y->setLabelFormat("%.0f");
    y->setRange(0, std::max(1.0, mfu_hi * 1.15));
    mfu_chart_->addAxis(x, Qt::AlignBottom);
    mfu_chart_->addAxis(y, Qt::AlignLeft);
    for (auto* s : {mfu, oom}) {
      s->attachAxis(x);
      s->attachAxis(y);
    }
  } else {
    delete mfu;
    delete oom;
  }
  if (!points.empty()) {
    auto* front = new QLineSeries;
    front->setName(tr("Pareto front"));
    QPen pen(QColor(0, 120, 0));
    pen.setWidth(2);
    front->setPen(pen);
    front->setPointsVisible(true);
    double t_lo = 1e300, t_hi = 0, c_lo = 1e300, c_hi = 0;
    for (const auto& p : points) {
      t_lo = std::min(t_lo, p.time_s);
      t_hi = std::max(t_hi, p.time_s);
      c_lo = std::min(c_lo, p.cost);
      c_hi = std::max(c_hi, p.cost);
    }
    for (const std::size_t i : pareto_front(points)) front->append(points[i].time_s, points[i].cost);
    cost_chart_->addSeries(cost);
    cost_chart_->addSeries(front);
    auto* x = new QValueAxis;
    x->setTitleText(tr("time to train (days)"));
    x->setRange(t_lo * 0.9, t_hi * 1.1);
    auto* y = new QValueAxis;
    y->setTitleText(usd_per_gpu_hour_ > 0 ? tr("cost (USD)") : tr("GPU-hours (set a price for USD)"));
    y->setRange(c_lo * 0.9, c_hi * 1.1);
    y->setLabelFormat("%.3g");
    x->setLabelFormat("%.3g");
    cost_chart_->addAxis(x, Qt::AlignBottom);
    cost_chart_->addAxis(y, Qt::AlignLeft);
    for (auto* s : {static_cast<QXYSeries*>(cost), static_cast<QXYSeries*>(front)}) {
      s->attachAxis(x);
      s->attachAxis(y);
    }
  } else {
    delete cost;
  }
}

}  // namespace meshwork::gui
