#include "gui/app/compare_view.hpp"

#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QHorizontalBarSeries>
#include <QtCharts/QValueAxis>
#include <fstream>
#include <sstream>

#include "gui/app/chart_reset.hpp"
#include "report/megatron_log.hpp"
#include "report/report_io.hpp"

namespace meshwork::gui {

CompareView::CompareView(QWidget* parent)
    : QWidget(parent), pinned_(new PinnedPlansModel(this)), comparison_(new ComparisonModel(this)), overlay_(new QChart) {
  auto* layout = new QVBoxLayout(this);
  auto* split = new QSplitter(Qt::Vertical, this);

  auto* top = new QWidget(split);
  auto* top_layout = new QVBoxLayout(top);
  auto* pins_bar = new QHBoxLayout;
  auto* clear = new QPushButton(tr("Clear pinned"), top);
  pins_bar->addWidget(new QLabel(tr("Pinned plans (pin with the toolbar's Pin, up to four):"), top));
  pins_bar->addStretch();
  pins_bar->addWidget(clear);
  top_layout->addLayout(pins_bar);
  auto* pinned_view = new QTableView(top);
  pinned_view->setObjectName("pinned");
  pinned_view->setModel(pinned_);
  pinned_view->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  top_layout->addWidget(pinned_view);
  connect(clear, &QPushButton::clicked, pinned_, &PinnedPlansModel::clear);

  auto* bottom = new QWidget(split);
  auto* bottom_layout = new QVBoxLayout(bottom);
  auto* bar = new QHBoxLayout;
  auto* load = new QPushButton(tr("Load measured report or training log..."), bottom);
  status_ = new QLabel(tr("no measured run loaded"), bottom);
  status_->setObjectName("compare_status");
  status_->setWordWrap(true);  // a long parse error must not widen the window
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar->addWidget(load);
  bar->addWidget(status_, 1);
  bottom_layout->addLayout(bar);
  auto* row = new QHBoxLayout;
  auto* table = new QTableView(bottom);
  table->setObjectName("comparison");
  table->setModel(comparison_);
  table->horizontalHeader()->setStretchLastSection(true);
  table->verticalHeader()->hide();
  auto* chart = new QChartView(overlay_, bottom);
  chart->setRenderHint(QPainter::Antialiasing);
  chart->setMinimumHeight(260);
  overlay_->setTitle(tr("Step breakdown: predicted and measured"));
  row->addWidget(table, 1);
  row->addWidget(chart, 1);
  bottom_layout->addLayout(row);
  layout->addWidget(split);

  connect(load, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Measured run"), {}, tr("Reports and logs (*.json *.log *.txt);;All files (*)"));
    if (!file.isEmpty()) load_measured(file);
  });
}

bool CompareView::load_measured(const QString& file) {
  std::ifstream in(file.toStdString());
  if (!in) {
    status_->setText(tr("cannot read %1").arg(file));
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  try {
    const auto j = nlohmann::json::parse(s);
    measured_ = report::from_json(j);
    measured_lacks_.clear();
  } catch (const std::exception& json_error) {
    // Not a Report: perhaps a Megatron-LM log.
    const report::MegatronLog log = report::parse_megatron_log(s);
    if (!log.ok()) {
      status_->setText(tr("%1 is neither a meshwork Report (%2) nor a Megatron-LM log (%3)")
                           .arg(file, QString::fromUtf8(json_error.what()), QString::fromStdString(log.errors.empty() ? std::string() : log.errors.front())));
      return false;
    }
    measured_ = log.report;
    measured_lacks_ = log.lacks;
  }
  status_->setText(tr("measured: %1").arg(file));
  update_comparison();
  return true;
}

void CompareView::set_predicted(const report::Report& r) {
  predicted_ = r;
  update_comparison();
}

void CompareView::update_comparison() {
  reset_chart(overlay_);
  if (!predicted_ || !measured_) return;
  comparison_->set_comparison(report::compare(*predicted_, *measured_, measured_lacks_));
  const std::pair<const char*, double report::Breakdown::*> parts[] = {
      {"compute", &report::Breakdown::compute_s}, {"recompute", &report::Breakdown::recompute_s}, {"TP", &report::Breakdown::tp_s},
      {"CP", &report::Breakdown::cp_s},           {"EP", &report::Breakdown::ep_s},               {"DP", &report::Breakdown::dp_s},
      {"PP", &report::Breakdown::pp_s},           {"bubble", &report::Breakdown::bubble_s},     {"optimizer", &report::Breakdown::optimizer_s},
      {"stalls", &report::Breakdown::stalls_s}};
  auto* predicted = new QBarSet(tr("predicted (%1)").arg(QString::fromUtf8(report::to_string(predicted_->method).data())));
  auto* measured = new QBarSet(tr("measured"));
  QStringList categories;
  double top = 0;
  for (const auto& [name, member] : parts) {
    const double p = predicted_->breakdown.*member, m = measured_->breakdown.*member;
    if (p <= 0 && m <= 0) continue;
    categories << name;
    *predicted << p * 1e3;
    *measured << m * 1e3;
    top = std::max({top, p * 1e3, m * 1e3});
  }
  auto* series = new QHorizontalBarSeries;
  series->append(predicted);
  series->append(measured);
  overlay_->addSeries(series);
  auto* y = new QBarCategoryAxis;
  y->append(categories);
  auto* x = new QValueAxis;
  x->setTitleText("ms per step");
  x->setRange(0, std::max(top * 1.1, 1e-6));
  overlay_->addAxis(y, Qt::AlignLeft);
  overlay_->addAxis(x, Qt::AlignBottom);
  series->attachAxis(y);
  series->attachAxis(x);
}

}  // namespace meshwork::gui
