#pragma once
// Plans side by side (two to four pinned results) and measured against predicted: an executor's
// Report or a Megatron-LM training log loaded from a file, compared with the current
// prediction row by row and part by part.

#include <QWidget>
#include <optional>

#include "gui/core/comparison_model.hpp"

class QChart;
class QLabel;

namespace meshwork::gui {

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  void pin(const QString& name, const report::Report& r) { pinned_->pin(name, r); }
  // Loads a measured Report (JSON) or a training log; false with the reason shown.
  bool load_measured(const QString& file);
  // The prediction the measured run is compared with (the current estimate or simulation).
  void set_predicted(const report::Report& r);

  [[nodiscard]] PinnedPlansModel* pinned_model() { return pinned_; }
  [[nodiscard]] ComparisonModel* comparison_model() { return comparison_; }
  [[nodiscard]] QChart* overlay_chart() const { return overlay_; }

 private:
  void update_comparison();

  PinnedPlansModel* pinned_;
  ComparisonModel* comparison_;
  QChart* overlay_;
  QLabel* status_;
  std::optional<report::Report> predicted_, measured_;
  std::vector<std::string> measured_lacks_;
};

}  // namespace meshwork::gui
