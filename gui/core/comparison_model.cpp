#include "gui/core/comparison_model.hpp"

#include <array>
#include <functional>

#include "gui/core/figures.hpp"

namespace meshwork::gui {
namespace {

struct Metric {
  const char* name;
  std::function<double(const report::Report&)> value;
  bool duration;
};

const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m = {
      {"method", nullptr, false},
      {"GPUs", [](const report::Report& r) { return static_cast<double>(r.num_gpus); }, false},
      {"step time", [](const report::Report& r) { return r.step_time_s; }, true},
      {"MFU %", [](const report::Report& r) { return 100 * r.mfu; }, false},
      {"tokens/s", [](const report::Report& r) { return r.tokens_per_s; }, false},
      {"time to train", [](const report::Report& r) { return r.time_to_train_s; }, true},
      {"memory GiB (fullest GPU)", [](const report::Report& r) { return r.max_memory_gib(); }, false},
      {"power MW", [](const report::Report& r) { return r.power.cluster_megawatts; }, false},
      {"compute", [](const report::Report& r) { return r.breakdown.compute_s; }, true},
      {"recompute", [](const report::Report& r) { return r.breakdown.recompute_s; }, true},
      {"TP comm", [](const report::Report& r) { return r.breakdown.tp_s; }, true},
      {"CP comm", [](const report::Report& r) { return r.breakdown.cp_s; }, true},
      {"EP all-to-all", [](const report::Report& r) { return r.breakdown.ep_s; }, true},
      {"DP comm", [](const report::Report& r) { return r.breakdown.dp_s; }, true},
      {"PP comm", [](const report::Report& r) { return r.breakdown.pp_s; }, true},
      {"bubble", [](const report::Report& r) { return r.breakdown.bubble_s; }, true},
      {"optimizer", [](const report::Report& r) { return r.breakdown.optimizer_s; }, true},
      {"stalls", [](const report::Report& r) { return r.breakdown.stalls_s; }, true},
  };
  return m;
}

}  // namespace

void PinnedPlansModel::pin(const QString& name, const report::Report& r) {
  beginResetModel();
  if (pins_.size() >= kMaxPinned) pins_.erase(pins_.begin());
  pins_.emplace_back(name, r);
  endResetModel();
}

void PinnedPlansModel::clear() {
  beginResetModel();
  pins_.clear();
  endResetModel();
}

int PinnedPlansModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(metrics().size()); }
int PinnedPlansModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(pins_.size()); }

QVariant PinnedPlansModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= columnCount()) return {};
  const Metric& m = metrics()[static_cast<std::size_t>(index.row())];
  const report::Report& r = pins_[static_cast<std::size_t>(index.column())].second;
  if (m.value == nullptr) {
    return role == Qt::DisplayRole ? QVariant(QString::fromUtf8(report::to_string(r.method).data())) : QVariant();
  }
  const double v = m.value(r);
  if (role == Qt::UserRole) return v;
  if (role != Qt::DisplayRole) return {};
  return m.duration ? QString::fromStdString(human_duration(v)) : QString::number(v, 'g', 4);
}

QVariant PinnedPlansModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section < rowCount() ? tr(metrics()[static_cast<std::size_t>(section)].name) : QVariant();
  return section < columnCount() ? pins_[static_cast<std::size_t>(section)].first : QVariant();
}

void ComparisonModel::set_comparison(report::Comparison c) {
  beginResetModel();
  c_ = std::move(c);
  endResetModel();
}

int ComparisonModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(c_.rows.size()); }
int ComparisonModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant ComparisonModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const report::ComparisonRow& row = c_.rows[static_cast<std::size_t>(index.row())];
  auto number = [](const std::optional<double>& v, double scale, const char* unit) -> QVariant {
    if (!v) return QString("-");
    return QString::number(*v * scale, 'g', 4) + unit;
  };
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case what_column: return QString::fromStdString(row.what);
      case predicted_column: return row.predicted ? QVariant(*row.predicted) : QVariant();
      case measured_column: return row.measured ? QVariant(*row.measured) : QVariant();
      case error_column: return row.rel_error ? QVariant(*row.rel_error) : QVariant();
      case contribution_column: return row.contribution_s ? QVariant(*row.contribution_s) : QVariant();
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case what_column: return QString::fromStdString(row.what);
    case predicted_column: return number(row.predicted, 1, "");
    case measured_column: return number(row.measured, 1, "");
    case error_column: return number(row.rel_error, 100, " %");
    case contribution_column: return row.contribution_s ? QString::fromStdString(human_duration(std::abs(*row.contribution_s))) : QString("-");
    default: return {};
  }
}

QVariant ComparisonModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[] = {"Figure", "Predicted", "Measured", "Error", "Adds to step error"};
  return section < column_count ? tr(names[section]) : QVariant();
}

}  // namespace meshwork::gui
