#pragma once
// A sweep's points as a table: the swept values, then the figures of each point's report
// (or why it has none). Qt::UserRole holds the raw number of each cell, so a
// QSortFilterProxyModel with sortRole UserRole sorts numerically.

#include <QAbstractTableModel>
#include <QStringList>
#include <vector>

#include "models/sweep.hpp"

namespace meshwork::gui {

class SweepTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Figure { status_figure, gpus_figure, step_figure, mfu_figure, tokens_figure, train_figure, cost_figure, memory_figure, figure_count };

  using QAbstractTableModel::QAbstractTableModel;

  // `axes`: the swept fields' paths, one column each before the figures.
  void set_rows(QStringList axes, std::vector<models::SweepRow> rows, double usd_per_gpu_hour);
  void set_price(double usd_per_gpu_hour);
  [[nodiscard]] const std::vector<models::SweepRow>& rows() const { return rows_; }
  [[nodiscard]] int figure_column(Figure f) const { return static_cast<int>(axes_.size()) + f; }
  // GPU-hours to train x price; 0 without a price or a token target.
  [[nodiscard]] double cost_of(const models::SweepRow& row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QStringList axes_;
  std::vector<models::SweepRow> rows_;
  double usd_per_gpu_hour_ = 0;
};

}  // namespace meshwork::gui
