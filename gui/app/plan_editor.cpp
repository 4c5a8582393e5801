#include "gui/app/plan_editor.hpp"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include "plan/field_catalogue.hpp"
#include "plan/hf_import.hpp"
#include "plan/presets.hpp"

namespace meshwork::gui {
namespace {

// Choice fields get a combo box of the enum's names; other fields a line edit.
class ValueDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    const std::string path = index.data(FieldTableModel::path_role).toString().toStdString();
    for (const auto& f : plan::field_catalogue().fields) {
      if (f.path != path) continue;
      if (f.kind == plan::FieldKind::choice || f.kind == plan::FieldKind::boolean) {
        auto* box = new QComboBox(parent);
        if (f.kind == plan::FieldKind::boolean) box->addItems({"true", "false"});
        for (const auto& c : f.choices) box->addItem(QString::fromStdString(c));
        return box;
      }
    }
    return QStyledItemDelegate::createEditor(parent, option, index);
  }
  void setEditorData(QWidget* editor, const QModelIndex& index) const override {
    if (auto* box = qobject_cast<QComboBox*>(editor)) {
      box->setCurrentText(index.data(Qt::EditRole).toString());
      return;
    }
    QStyledItemDelegate::setEditorData(editor, index);
  }
  void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override {
    if (auto* box = qobject_cast<QComboBox*>(editor)) {
      model->setData(index, box->currentText(), Qt::EditRole);
      return;
    }
    QStyledItemDelegate::setModelData(editor, model, index);
  }
};

}  // namespace

PlanEditor::PlanEditor(PlanDocument* document, QWidget* parent)
    : QWidget(parent), document_(document), fields_(new FieldTableModel(document, this)), diagnostics_(new DiagnosticsModel(this)) {
  auto* layout = new QVBoxLayout(this);

  // Presets and import: the quickest way to a plan.
  auto* bar = new QHBoxLayout;
  model_preset_ = new QComboBox(this);
  model_preset_->setObjectName("model_preset");
  model_preset_->addItem(tr("model preset..."));
  for (const auto& p : plan::model_presets()) model_preset_->addItem(QString::fromUtf8(p.key.data(), static_cast<qsizetype>(p.key.size())));
  gpu_preset_ = new QComboBox(this);
  gpu_preset_->setObjectName("gpu_preset");
  gpu_preset_->addItem(tr("GPU preset..."));
  for (const auto& p : plan::gpu_presets()) gpu_preset_->addItem(QString::fromUtf8(p.key.data(), static_cast<qsizetype>(p.key.size())));
  auto* import = new QPushButton(tr("Import HF config..."), this);
  bar->addWidget(new QLabel(tr("Start from:"), this));
  bar->addWidget(model_preset_);
  bar->addWidget(gpu_preset_);
  bar->addWidget(import);
  bar->addStretch();
  // The execution backend the plan is checked for: what it cannot run shows as warnings.
  backend_ = new QComboBox(this);
  backend_->setObjectName("execution_backend");
  backend_->addItem(tr("no execution check"));
  backend_->addItem(tr("execute on CPU"), QStringLiteral("cpu"));
  backend_->addItem(tr("execute on CUDA"), QStringLiteral("cuda"));
  backend_->setToolTip(tr("Check that meshwork execute --backend runs the plan (the same check as meshwork validate --backend)"));
  bar->addWidget(backend_);
  layout->addLayout(bar);
  connect(model_preset_, &QComboBox::activated, this, [this](int i) {
    if (i > 0) apply_preset("model", model_preset_->itemText(i));
    model_preset_->setCurrentIndex(0);
  });
  connect(backend_, &QComboBox::currentIndexChanged, this, [this](int i) {
    document_->set_backend(plan::parse_backend(backend_->itemData(i).toString().toStdString()));
    refresh();
  });
  connect(gpu_preset_, &QComboBox::activated, this, [this](int i) {
    if (i > 0) apply_preset("cluster.gpu", gpu_preset_->itemText(i));
    gpu_preset_->setCurrentIndex(0);
  });
  connect(import, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Hugging Face config.json"), {}, tr("JSON (*.json)"));
    if (!file.isEmpty()) import_hf_config(file);
  });

  auto* split = new QSplitter(Qt::Horizontal, this);
  sections_ = new QListWidget(split);
  sections_->setObjectName("sections");
  for (const auto& s : plan::field_catalogue().sections) sections_->addItem(s.empty() ? tr("(plan)") : QString::fromStdString(s));
  sections_->setMaximumWidth(220);

  auto* tabs = new QTabWidget(split);
  field_view_ = new QTableView(tabs);
  field_view_->setObjectName("fields");
  field_view_->setModel(fields_);
  field_view_->setItemDelegateForColumn(FieldTableModel::value_column, new ValueDelegate(field_view_));
  field_view_->horizontalHeader()->setStretchLastSection(true);
  field_view_->verticalHeader()->hide();
  field_view_->setEditTriggers(QAbstractItemView::AllEditTriggers);
  field_view_->setColumnWidth(FieldTableModel::field_column, 230);
  field_view_->setColumnWidth(FieldTableModel::value_column, 160);
  field_view_->setColumnWidth(FieldTableModel::unit_column, 60);
  tabs->addTab(field_view_, tr("Fields"));

  auto* source_page = new QWidget(tabs);
  auto* source_layout = new QVBoxLayout(source_page);
  source_ = new QPlainTextEdit(source_page);
  source_->setObjectName("source");
  auto* apply = new QPushButton(tr("Apply source"), source_page);
  source_layout->addWidget(source_);
  source_layout->addWidget(apply);
  tabs->addTab(source_page, tr("Source (JSON)"));
  connect(apply, &QPushButton::clicked, this, &PlanEditor::apply_source);
  split->setStretchFactor(1, 1);

  auto* vsplit = new QSplitter(Qt::Vertical, this);
  vsplit->addWidget(split);
  auto* bottom = new QWidget(vsplit);
  auto* bottom_layout = new QVBoxLayout(bottom);
  bottom_layout->setContentsMargins(0, 0, 0, 0);
  status_ = new QLabel(bottom);
  status_->setObjectName("validation_status");
  status_->setWordWrap(true);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  diagnostics_view_ = new QTableView(bottom);
  diagnostics_view_->setObjectName("diagnostics");
  diagnostics_view_->setModel(diagnostics_);
  diagnostics_view_->horizontalHeader()->setStretchLastSection(true);
  diagnostics_view_->verticalHeader()->hide();
  diagnostics_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  diagnostics_view_->setColumnWidth(DiagnosticsModel::path_column, 320);
  bottom_layout->addWidget(status_);
  bottom_layout->addWidget(diagnostics_view_);
  vsplit->addWidget(bottom);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 1);
  layout->addWidget(vsplit);

  connect(sections_, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row < 0) return;
    fields_->set_section(QString::fromStdString(plan::field_catalogue().sections[static_cast<std::size_t>(row)]));
  });
  connect(fields_, &FieldTableModel::edited, this, [this] {
    refresh();
    emit edited();
  });
  connect(fields_, &FieldTableModel::rejected, this, [this](const QString& m) { status_->setText(m); });
  connect(diagnostics_view_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    show_field(diagnostics_->data(diagnostics_->index(i.row(), 0), Qt::UserRole).toString());
  });
  sections_->setCurrentRow(0);
  refresh();
}

void PlanEditor::refresh() {
  fields_->refresh();
  diagnostics_->set_diagnostics(document_->diagnostics());
  const auto& d = document_->diagnostics();
  status_->setText(d.has_errors() ? tr("%1 error(s), %2 warning(s): the plan cannot be estimated until the errors are fixed")
                                        .arg(d.error_count())
                                        .arg(d.warning_count())
                                  : tr("valid (%1 warning(s))").arg(d.warning_count()));
  if (!source_->hasFocus()) source_->setPlainText(QString::fromStdString(document_->tree().dump(2)));
}

void PlanEditor::select_section(const QString& section) {
  const auto& sections = plan::field_catalogue().sections;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (QString::fromStdString(sections[i]) == section) sections_->setCurrentRow(static_cast<int>(i));
  }
}

void PlanEditor::show_field(const QString& path) {
  // The deepest section that holds the field.
  QString section;
  const std::string p = path.toStdString();
  for (const auto& f : plan::field_catalogue().fields) {
    if (f.path == p) section = QString::fromStdString(f.section);
  }
  if (section.isEmpty() && !path.contains('.')) section = QString();
  else if (section.isEmpty()) section = path.left(path.lastIndexOf('.'));
  select_section(section);
  const int row = fields_->row_of(path);
  if (row >= 0) field_view_->setCurrentIndex(fields_->index(row, FieldTableModel::value_column));
}

void PlanEditor::apply_source() {
  try {
    document_->reset(nlohmann::json::parse(source_->toPlainText().toStdString()));
    status_->setText(tr("source applied"));
  } catch (const nlohmann::json::exception& e) {
    status_->setText(tr("the source is not valid JSON: %1").arg(e.what()));
    return;
  }
  source_->clearFocus();
  refresh();
  emit edited();
}

void PlanEditor::apply_preset(const QString& section, const QString& name) {
  // A preset starts the section afresh: `model: NAME` or `cluster.gpu: NAME`.
  nlohmann::json tree = document_->tree();
  if (!tree.is_object()) tree = nlohmann::json::object();
  if (section == "model") {
    tree["model"] = name.toStdString();
  } else {
    if (!tree.contains("cluster") || !tree["cluster"].is_object()) tree["cluster"] = nlohmann::json::object();
    tree["cluster"]["gpu"] = name.toStdString();
  }
  document_->reset(std::move(tree));
  refresh();
  emit edited();
}

void PlanEditor::import_hf_config(const QString& file) {
  nlohmann::json tree = document_->tree();
  if (!tree.is_object()) tree = nlohmann::json::object();
  // A config names no training length (max_position_embeddings is the longest context): the
  // plan keeps the sequence it trains on.
  const nlohmann::json seq_length = document_->resolved("model.seq_length");
  tree["model"] = nlohmann::json{{"hf_config", std::filesystem::absolute(file.toStdString()).string()}};
  if (seq_length.is_number_integer() && seq_length.get<std::int64_t>() > 0) tree["model"]["seq_length"] = seq_length;
  document_->reset(std::move(tree));
  refresh();
  emit edited();
}

}  // namespace meshwork::gui
