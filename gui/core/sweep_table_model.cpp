#include "gui/core/sweep_table_model.hpp"

#include <QBrush>
#include <QColor>
#include <limits>

#include "gui/core/figures.hpp"

namespace meshwork::gui {

void SweepTableModel::set_rows(QStringList axes, std::vector<models::SweepRow> rows, double usd_per_gpu_hour) {
  beginResetModel();
  axes_ = std::move(axes);
  rows_ = std::move(rows);
  usd_per_gpu_hour_ = usd_per_gpu_hour;
  endResetModel();
}

void SweepTableModel::set_price(double usd_per_gpu_hour) {
  usd_per_gpu_hour_ = usd_per_gpu_hour;
  if (!rows_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1));
}

double SweepTableModel::cost_of(const models::SweepRow& row) const {
  return headline(row.report, usd_per_gpu_hour_).cost_usd;
}

int SweepTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int SweepTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(axes_.size()) + figure_count;
}

QVariant SweepTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const models::SweepRow& row = rows_[static_cast<std::size_t>(index.row())];
  const int axes = static_cast<int>(axes_.size());
  if (index.column() < axes) {
    const auto& v = row.values[static_cast<std::size_t>(index.column())];
    if (role == Qt::DisplayRole) return QString::fromStdString(v);
    if (role == Qt::UserRole) {
      bool ok = false;
      const double d = QString::fromStdString(v).toDouble(&ok);
      return ok ? QVariant(d) : QVariant(QString::fromStdString(v));
    }
    return {};
  }
  const auto f = static_cast<Figure>(index.column() - axes);
  const bool ok = row.status == models::PointStatus::ok;
  const report::Report& r = row.report;
  if (f == status_figure) {
    if (role == Qt::DisplayRole || role == Qt::UserRole) return QString::fromUtf8(models::to_string(row.status).data());
    if (role == Qt::ToolTipRole) return QString::fromStdString(row.reason);
    if (role == Qt::ForegroundRole && !ok) return QBrush(QColor(190, 0, 0));
    return {};
  }
  // Figures of invalid points are empty (and sort below every number); out-of-memory points
  // still show their estimate.
  if (row.status == models::PointStatus::invalid) {
    return role == Qt::UserRole ? QVariant(-std::numeric_limits<double>::infinity()) : QVariant();
  }
  double raw = 0;
  QString text;
  switch (f) {
    case gpus_figure: raw = static_cast<double>(r.num_gpus); text = QString::number(r.num_gpus); break;
    case step_figure: raw = r.step_time_s; text = QString::fromStdString(human_duration(raw)); break;
    case mfu_figure: raw = r.mfu; text = QString::number(100 * raw, 'f', 1) + " %"; break;
    case tokens_figure: raw = r.tokens_per_s; text = QString::number(raw, 'g', 4); break;
    case train_figure: raw = r.time_to_train_s; text = QString::fromStdString(human_duration(raw)); break;
    case cost_figure: raw = cost_of(row); text = raw > 0 ? "$" + QString::number(raw, 'g', 4) : QString("-"); break;
    case memory_figure: raw = r.max_memory_gib(); text = QString::number(raw, 'f', 1); break;
    default: return {};
  }
  if (role == Qt::DisplayRole) return text;
  if (role == Qt::UserRole) return raw;
  if (role == Qt::ForegroundRole && f == memory_figure && !r.fits) return QBrush(QColor(190, 0, 0));
  return {};
}

QVariant SweepTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  const int axes = static_cast<int>(axes_.size());
  if (section < axes) return axes_[section];
  static const char* const names[] = {"Status", "GPUs", "Step time", "MFU", "Tokens/s", "Time to train", "Cost", "Memory (GiB)"};
  const int f = section - axes;
  return f < figure_count ? tr(names[f]) : QVariant();
}

}  // namespace meshwork::gui
