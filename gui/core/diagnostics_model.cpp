#include "gui/core/diagnostics_model.hpp"

#include <QBrush>
#include <QColor>

namespace meshwork::gui {

void DiagnosticsModel::set_diagnostics(const plan::Diagnostics& d) {
  beginResetModel();
  items_ = d.items();
  endResetModel();
}

int DiagnosticsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(items_.size()); }
int DiagnosticsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant DiagnosticsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= static_cast<int>(items_.size())) return {};
  const plan::Diagnostic& d = items_[static_cast<std::size_t>(index.row())];
  const bool error = d.severity == plan::Severity::error;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case severity_column: return error ? tr("error") : tr("warning");
      case path_column: return d.line > 0 ? QString("%1 (line %2)").arg(QString::fromStdString(d.path)).arg(d.line) : QString::fromStdString(d.path);
      case message_column: return QString::fromStdString(d.message);
      default: return {};
    }
  }
  if (role == Qt::ForegroundRole && index.column() == severity_column) return QBrush(error ? QColor(190, 0, 0) : QColor(160, 110, 0));
  if (role == Qt::UserRole) return QString::fromStdString(d.path);
  return {};
}

QVariant DiagnosticsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case severity_column: return tr("Severity");
    case path_column: return tr("Field");
    case message_column: return tr("Problem");
    default: return {};
  }
}

}  // namespace meshwork::gui
