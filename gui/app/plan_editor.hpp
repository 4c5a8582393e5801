#pragma once
// The plan as forms: the schema's sections on the left, the selected section's fields as an
// editable table (a choice field offers its names), the diagnostics below (a click selects the
// field), and the source as JSON for what forms do not cover (lists of events, stragglers).

#include <QWidget>

#include "gui/core/diagnostics_model.hpp"
#include "gui/core/field_table_model.hpp"
#include "gui/core/plan_document.hpp"

class QComboBox;
class QListWidget;
class QPlainTextEdit;
class QTableView;
class QLabel;

namespace meshwork::gui {

class PlanEditor : public QWidget {
  Q_OBJECT
 public:
  explicit PlanEditor(PlanDocument* document, QWidget* parent = nullptr);

  // Re-reads the document (after open, reset or an edit made elsewhere).
  void refresh();
  // Shows the section holding this field (canonical path) and selects its row.
  void show_field(const QString& path);
  void select_section(const QString& section);

  // Starts the model from a Hugging Face config.json, or from a preset ("model" or
  // "cluster.gpu" and its name): the section is replaced, the rest of the plan kept.
  void import_hf_config(const QString& file);
  void apply_preset(const QString& section, const QString& name);

  [[nodiscard]] FieldTableModel* field_model() { return fields_; }
  [[nodiscard]] DiagnosticsModel* diagnostics_model() { return diagnostics_; }
  [[nodiscard]] QTableView* field_view() { return field_view_; }

 signals:
  void edited();

 private:
  void apply_source();

  PlanDocument* document_;
  FieldTableModel* fields_;
  DiagnosticsModel* diagnostics_;
  QListWidget* sections_;
  QTableView* field_view_;
  QTableView* diagnostics_view_;
  QPlainTextEdit* source_;
  QLabel* status_;
  QComboBox* model_preset_;
  QComboBox* gpu_preset_;
  QComboBox* backend_;
};

}  // namespace meshwork::gui
