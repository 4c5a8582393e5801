#pragma once
// Every diagnostic of the plan being edited: severity, field path, line, message.

#include <QAbstractTableModel>
#include <vector>

#include "plan/diagnostics.hpp"

namespace meshwork::gui {

class DiagnosticsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { severity_column, path_column, message_column, column_count };
  using QAbstractTableModel::QAbstractTableModel;

  void set_diagnostics(const plan::Diagnostics& d);
  [[nodiscard]] const plan::Diagnostic& at(int row) const { return items_[static_cast<std::size_t>(row)]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<plan::Diagnostic> items_;
};

}  // namespace meshwork::gui
