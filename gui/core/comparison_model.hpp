#pragma once
// Plans side by side: the headline figures and the step's breakdown of two to four pinned
// reports, one column each; with a measured report (an executor's Report or a training log),
// report::compare's rows, predicted against measured, largest error contribution first.

#include <QAbstractTableModel>
#include <QString>
#include <vector>

#include "report/compare.hpp"
#include "report/report.hpp"

namespace meshwork::gui {

class PinnedPlansModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  static constexpr int kMaxPinned = 4;
  using QAbstractTableModel::QAbstractTableModel;

  // Adds a column; the oldest goes when there are already kMaxPinned.
  void pin(const QString& name, const report::Report& r);
  void clear();
  [[nodiscard]] int pinned() const { return static_cast<int>(pins_.size()); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<std::pair<QString, report::Report>> pins_;
};

class ComparisonModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { what_column, predicted_column, measured_column, error_column, contribution_column, column_count };
  using QAbstractTableModel::QAbstractTableModel;

  void set_comparison(report::Comparison c);
  [[nodiscard]] const report::Comparison& comparison() const { return c_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  report::Comparison c_;
};

}  // namespace meshwork::gui
