#include "gui/app/results_view.hpp"

#include "report/report_io.hpp"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QHorizontalStackedBarSeries>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QStackedBarSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>

#include "gui/app/chart_reset.hpp"

#include "gui/core/figures.hpp"

namespace meshwork::gui {
namespace {

QChartView* view_of(QChart* chart, QWidget* parent) {
  auto* v = new QChartView(chart, parent);
  v->setRenderHint(QPainter::Antialiasing);
  v->setMinimumHeight(260);
  return v;
}

}  // namespace

ResultsView::ResultsView(QWidget* parent)
    : QWidget(parent), waterfall_(new QChart), memory_(new QChart), goodput_(new QChart) {
  auto* layout = new QVBoxLayout(this);
  how_ = new QLabel(this);
  how_->setObjectName("result_source");
  layout->addWidget(how_);
  verdict_ = new QLabel(this);
  verdict_->setObjectName("memory_verdict");
  verdict_->setWordWrap(true);
  layout->addWidget(verdict_);

  auto* grid = new QGridLayout;
  const char* names[] = {"step time", "MFU", "tokens/s", "time to train", "power", "energy", "GPU-hours", "cost"};
  int i = 0;
  for (const char* n : names) {
    auto* title = new QLabel(QString(n) + ":", this);
    auto* value = new QLabel("-", this);
    value->setObjectName(QString("headline ") + n);
    QFont f = value->font();
    f.setPointSizeF(f.pointSizeF() * 1.4);
    f.setBold(true);
    value->setFont(f);
    grid->addWidget(title, (i / 4) * 2, i % 4);
    grid->addWidget(value, (i / 4) * 2 + 1, i % 4);
    headline_.emplace_back(n, value);
    ++i;
  }
  auto* price_row = new QHBoxLayout;
  price_ = new QDoubleSpinBox(this);
  price_->setObjectName("price");
  price_->setRange(0, 1000);
  price_->setDecimals(2);
  price_->setPrefix("$");
  price_->setSuffix(tr(" per GPU-hour"));
  price_->setToolTip(tr("0: no cost. Cost = GPUs x time to train x price."));
  price_row->addWidget(new QLabel(tr("Price:"), this));
  price_row->addWidget(price_);
  price_row->addStretch();
  layout->addLayout(grid);
  interval_ = new QLabel(this);
  interval_->setObjectName("interval");
  interval_->setWordWrap(true);
  layout->addWidget(interval_);
  layout->addLayout(price_row);
  connect(price_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    fill_headline();
    emit price_changed(v);
  });

  auto* charts = new QGridLayout;
  waterfall_->setTitle(tr("Step time waterfall"));
  memory_->setTitle(tr("Memory per pipeline stage"));
  goodput_->setTitle(tr("Goodput against the checkpoint interval"));
  charts->addWidget(view_of(waterfall_, this), 0, 0);
  charts->addWidget(view_of(memory_, this), 0, 1);
  charts->addWidget(view_of(goodput_, this), 1, 0, 1, 2);
  layout->addLayout(charts, 1);
  clear(tr("open a plan"));
}

double ResultsView::usd_per_gpu_hour() const { return price_->value(); }

QString ResultsView::headline_text(const QString& name) const {
  for (const auto& [n, label] : headline_) {
    if (n == name) return label->text();
  }
  return {};
}

void ResultsView::show_report(const report::Report& r, const QString& how) {
  report_ = r;
  how_->setText(QString("%1: %2").arg(QString::fromStdString(r.plan_name), how));
  how_->setStyleSheet({});
  fill_headline();
  fill_waterfall();
  fill_memory();
  if (r.interval) {
    interval_->setText(QString::fromStdString(report::interval_line(r)));
  } else {
    // The Report's regime note says why (a generation no published run checks).
    QString why = tr("no range: nothing published checks this prediction");
    for (const auto& n : r.notes) {
      if (n.rfind("uncalibrated", 0) == 0) why = tr("no range: ") + QString::fromStdString(n);
    }
    interval_->setText(r.method == report::Method::measured ? QString() : why);
  }
  verdict_->setText(QString::fromStdString(report::memory_verdict_line(r)));
  switch (r.memory_verdict()) {
    case report::MemoryVerdict::fits: verdict_->setStyleSheet({}); break;
    case report::MemoryVerdict::tight: verdict_->setStyleSheet("color: #a05a00"); break;
    case report::MemoryVerdict::does_not_fit: verdict_->setStyleSheet("color: #b00000; font-weight: bold"); break;
  }
}

void ResultsView::clear(const QString& why) {
  report_.reset();
  how_->setText(why);
  how_->setStyleSheet("color: #b00000");
  for (auto& [n, label] : headline_) label->setText("-");
  verdict_->clear();
  interval_->clear();
  reset_chart(waterfall_);
  reset_chart(memory_);
}

void ResultsView::fill_headline() {
  if (!report_) return;
  const Headline h = headline(*report_, price_->value());
  auto set = [this](const QString& name, const QString& text) {
    for (auto& [n, label] : headline_) {
      if (n == name) label->setText(text);
    }
  };
  set("step time", QString::fromStdString(human_duration(h.step_time_s)));
  set("MFU", QString::number(100 * h.mfu, 'f', 1) + " %");
  set("tokens/s", QString::number(h.tokens_per_s, 'g', 4));
  set("time to train", QString::fromStdString(human_duration(h.time_to_train_s)));
  set("power", QString::number(h.cluster_megawatts, 'f', 2) + " MW");
  set("energy", h.energy_mwh > 0 ? QString::number(h.energy_mwh, 'g', 4) + " MWh" : QString("-"));
  set("GPU-hours", h.gpu_hours > 0 ? QString::number(h.gpu_hours, 'g', 4) : QString("-"));
  set("cost", h.cost_usd > 0 ? "$" + QString::number(h.cost_usd, 'g', 4) : QString("-"));
}

void ResultsView::fill_waterfall() {
  reset_chart(waterfall_);
  const auto bars = waterfall(report_->breakdown);
  // A waterfall as stacked horizontal bars: an invisible base, then the part itself.
  auto* base = new QBarSet("");
  auto* part = new QBarSet(tr("seconds"));
  base->setColor(Qt::transparent);
  base->setBorderColor(Qt::transparent);
  QStringList categories;
  for (auto it = bars.rbegin(); it != bars.rend(); ++it) {  // the first part at the top
    categories << QString("%1  %2").arg(QString::fromStdString(it->label), QString::fromStdString(human_duration(it->length_s)));
    *base << it->start_s;
    *part << it->length_s;
  }
  auto* series = new QHorizontalStackedBarSeries;
  series->append(base);
  series->append(part);
  waterfall_->addSeries(series);
  auto* y = new QBarCategoryAxis;
  y->append(categories);
  auto* x = new QValueAxis;
  x->setTitleText(tr("seconds into the step"));
  x->setRange(0, std::max(report_->breakdown.total(), 1e-9));
  waterfall_->addAxis(y, Qt::AlignLeft);
  waterfall_->addAxis(x, Qt::AlignBottom);
  series->attachAxis(y);
  series->attachAxis(x);
  waterfall_->legend()->hide();
}

void ResultsView::fill_memory() {
  reset_chart(memory_);
  const auto stacks = memory_stacks(*report_);
  if (stacks.empty()) return;
  auto* series = new QStackedBarSeries;
  const char* parts[] = {"weights", "gradients", "optimizer", "activations", "buffers"};
  std::vector<QBarSet*> sets;
  for (const char* p : parts) sets.push_back(new QBarSet(p));
  QStringList categories;
  double top = 0, capacity = 0;
  bool all_fit = true;
  QList<int> too_full;
  for (const auto& s : stacks) {
    // Stage numbers only: 16 or 64 stages must fit under the bars; red bars mark the stages
    // that do not fit.
    categories << QString::fromStdString(s.label).section(' ', -1);
    if (!s.fits) too_full << static_cast<int>(categories.size() - 1);
    double total = 0;
    for (std::size_t k = 0; k < s.parts_gib.size(); ++k) {
      *sets[k] << s.parts_gib[k].second;
      total += s.parts_gib[k].second;
    }
    top = std::max(top, total);
    capacity = std::max(capacity, s.capacity_gib);
    all_fit = all_fit && s.fits;
  }
  for (QBarSet* s : sets) {
    s->setSelectedColor(QColor(220, 0, 0));
    s->selectBars(too_full);
    series->append(s);
  }
  memory_->addSeries(series);
  // The HBM capacity as a line across the stages; red when some stage does not fit.
  auto* hbm = new QLineSeries;
  hbm->setName(tr("HBM %1 GiB").arg(capacity, 0, 'f', 0));
  hbm->append(-0.5, capacity);
  hbm->append(static_cast<double>(stacks.size()) - 0.5, capacity);
  QPen pen(all_fit ? QColor(40, 40, 40) : QColor(220, 0, 0));
  pen.setWidth(3);
  pen.setStyle(Qt::DashLine);
  hbm->setPen(pen);
  memory_->addSeries(hbm);
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  x->setTitleText(tr("pipeline stage"));
  auto* y = new QValueAxis;
  y->setTitleText("GiB");
  y->setRange(0, std::max(top, capacity) * 1.1);
  memory_->addAxis(x, Qt::AlignBottom);
  memory_->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  // The line lives on its own hidden value axis spanning the categories' positions.
  auto* line_x = new QValueAxis;
  line_x->setRange(-0.5, static_cast<double>(stacks.size()) - 0.5);
  line_x->setVisible(false);
  memory_->addAxis(line_x, Qt::AlignBottom);
  hbm->attachAxis(line_x);
  hbm->attachAxis(y);
  memory_->setTitle(all_fit ? tr("Memory per pipeline stage") : tr("Memory per pipeline stage: %1 stage(s) do not fit (red)").arg(too_full.size()));
  memory_->setTitleBrush(all_fit ? QBrush(Qt::black) : QBrush(QColor(200, 0, 0)));
}

void ResultsView::show_goodput(const GoodputOutcome& g) {
  reset_chart(goodput_);
  if (!g.error.empty() || g.points.empty()) {
    goodput_->setTitle(tr("Goodput against the checkpoint interval: %1").arg(QString::fromStdString(g.error.empty() ? "no points" : g.error)));
    return;
  }
  goodput_->setTitle(tr("Goodput against the checkpoint interval (Daly's optimum %1)").arg(QString::fromStdString(human_duration(g.daly_s))));
  auto* line = new QLineSeries;
  line->setName(tr("goodput (Monte Carlo mean)"));
  // Seconds for intervals under an hour, else hours.
  const bool in_hours = g.points.back().interval_s >= 3600;
  const double unit_s = in_hours ? 3600 : 1;
  double lo = 1, hi = 0;
  for (const auto& p : g.points) {
    line->append(p.interval_s / unit_s, 100 * p.summary.goodput);
    lo = std::min(lo, p.summary.goodput - p.summary.goodput_ci95);
    hi = std::max(hi, p.summary.goodput + p.summary.goodput_ci95);
  }
  goodput_->addSeries(line);
  auto* marks = new QScatterSeries;
  marks->setName(tr("plan's interval"));
  marks->setMarkerSize(12);
  auto* x = new QLogValueAxis;
  x->setTitleText(in_hours ? tr("checkpoint interval (hours)") : tr("checkpoint interval (seconds)"));
  x->setBase(10);
  x->setLabelFormat("%.3g");
  auto* y = new QValueAxis;
  y->setTitleText(tr("goodput %"));
  y->setRange(std::max(0.0, 100 * lo - 1), std::min(100.0, 100 * hi + 1));
  goodput_->addAxis(x, Qt::AlignBottom);
  goodput_->addAxis(y, Qt::AlignLeft);
  line->attachAxis(x);
  line->attachAxis(y);
  if (g.current_s > 0 && g.current_s >= g.points.front().interval_s && g.current_s <= g.points.back().interval_s) {
    // The plan's own interval, on the curve by interpolation.
    for (std::size_t i = 1; i < g.points.size(); ++i) {
      if (g.points[i].interval_s >= g.current_s) {
        const auto& a = g.points[i - 1];
        const auto& b = g.points[i];
        const double t = (g.current_s - a.interval_s) / (b.interval_s - a.interval_s);
        marks->append(g.current_s / unit_s, 100 * (a.summary.goodput + t * (b.summary.goodput - a.summary.goodput)));
        break;
      }
    }
    goodput_->addSeries(marks);
    marks->attachAxis(x);
    marks->attachAxis(y);
  } else {
    delete marks;
  }
}

}  // namespace meshwork::gui
