#pragma once
// The fields of one plan section as an editable table (field, value, unit, meaning), built from
// the schema's catalogue. A value the plan file writes shows as written; one it leaves to a
// preset or a default shows the resolved value in grey. A field with a diagnostic is marked
// (red for errors, amber for warnings) with the message as its tooltip.

#include <QAbstractTableModel>
#include <vector>

#include "gui/core/plan_document.hpp"
#include "plan/field_catalogue.hpp"

namespace meshwork::gui {

class FieldTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { field_column, value_column, unit_column, doc_column, column_count };
  enum Role { path_role = Qt::UserRole + 1, diagnostic_role, written_role };

  explicit FieldTableModel(PlanDocument* document, QObject* parent = nullptr);

  // Shows the fields of `section` ("" for the plan's own, "cluster.gpu", ...).
  void set_section(const QString& section);
  [[nodiscard]] QString section() const { return section_; }
  // The row of a field (canonical path) in this section, or -1.
  [[nodiscard]] int row_of(const QString& path) const;
  // Re-reads every value and mark after the document changed elsewhere.
  void refresh();

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Value column: the text as the plan file would spell it; empty unsets the field.
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  // The document changed through this model (the window re-estimates and refreshes the rest).
  void edited(const QString& path);
  // A value could not be set (a path the schema does not know).
  void rejected(const QString& message);

 private:
  PlanDocument* document_;
  QString section_;
  std::vector<const plan::FieldEntry*> rows_;
};

}  // namespace meshwork::gui
