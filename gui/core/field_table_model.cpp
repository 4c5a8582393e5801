#include "gui/core/field_table_model.hpp"

#include <QBrush>
#include <QColor>

namespace meshwork::gui {

FieldTableModel::FieldTableModel(PlanDocument* document, QObject* parent) : QAbstractTableModel(parent), document_(document) {
  set_section(QString());
}

void FieldTableModel::set_section(const QString& section) {
  beginResetModel();
  section_ = section;
  rows_.clear();
  const std::string s = section.toStdString();
  for (const auto& f : plan::field_catalogue().fields) {
    if (f.section == s) rows_.push_back(&f);
  }
  endResetModel();
}

int FieldTableModel::row_of(const QString& path) const {
  const std::string p = path.toStdString();
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i]->path == p) return static_cast<int>(i);
  }
  return -1;
}

void FieldTableModel::refresh() {
  if (!rows_.empty()) emit dataChanged(index(0, 0), index(static_cast<int>(rows_.size()) - 1, column_count - 1));
}

int FieldTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int FieldTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : column_count; }

QVariant FieldTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= static_cast<int>(rows_.size())) return {};
  const plan::FieldEntry& f = *rows_[static_cast<std::size_t>(index.row())];
  const plan::Diagnostic* d = document_->diagnostic(f.path);
  const nlohmann::json written = document_->written(f.path);
  switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
      switch (index.column()) {
        case field_column: return QString::fromStdString(f.key);
        case value_column: return QString::fromStdString(text_of(written.is_null() ? document_->resolved(f.path) : written));
        case unit_column: return QString::fromUtf8(plan::symbol(f.unit).data(), static_cast<qsizetype>(plan::symbol(f.unit).size()));
        case doc_column: return QString::fromStdString(f.doc);
        default: return {};
      }
    case Qt::ToolTipRole: {
      QString tip = QString::fromStdString(f.path);
      if (!f.aliases.empty()) tip += " (also " + QString::fromStdString(f.aliases) + ")";
      tip += "\n" + QString::fromStdString(f.doc);
      if (!f.choices.empty()) {
        QString choices;
        for (const auto& c : f.choices) choices += (choices.isEmpty() ? "" : " | ") + QString::fromStdString(c);
        tip += "\nchoices: " + choices;
      }
      if (d != nullptr) tip = QString::fromStdString(d->message) + "\n\n" + tip;
      return tip;
    }
    case Qt::ForegroundRole:
      if (index.column() == value_column && written.is_null()) return QBrush(QColor(128, 128, 128));
      return {};
    case Qt::BackgroundRole:
      if (d == nullptr) return {};
      return QBrush(d->severity == plan::Severity::error ? QColor(255, 205, 205) : QColor(255, 236, 190));
    case path_role: return QString::fromStdString(f.path);
    case diagnostic_role: return d != nullptr ? QString::fromStdString(d->message) : QString();
    case written_role: return !written.is_null();
    default: return {};
  }
}

QVariant FieldTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case field_column: return tr("Field");
    case value_column: return tr("Value");
    case unit_column: return tr("Unit");
    case doc_column: return tr("Meaning");
    default: return {};
  }
}

Qt::ItemFlags FieldTableModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == value_column) f |= Qt::ItemIsEditable;
  return f;
}

bool FieldTableModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || index.column() != value_column || role != Qt::EditRole) return false;
  const plan::FieldEntry& f = *rows_[static_cast<std::size_t>(index.row())];
  const QString text = value.toString().trimmed();
  if (text.isEmpty()) {
    document_->unset(f.path);
  } else {
    std::string error;
    if (!document_->set(f.path, text.toStdString(), error)) {
      emit rejected(QString::fromStdString(error));
      return false;
    }
  }
  refresh();  // a preset or a derived default may have changed other rows
  emit edited(QString::fromStdString(f.path));
  return true;
}

}  // namespace meshwork::gui
