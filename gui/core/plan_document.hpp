#pragma once
// The plan being edited: the document tree as the user wrote it (presets and aliases kept, so
// saving does not expand them) and, after every change, the plan resolved and validated from
// it with every diagnostic. Plain C++: the item models and the window read it; tests drive it.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/backend_limits.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::gui {

class PlanDocument {
 public:
  PlanDocument();

  // Reads a plan file (YAML or JSON). On failure the document is unchanged and `error` says why.
  bool open(const std::filesystem::path& file, std::string& error);
  // Replaces the whole tree (the source editor, a new plan); relative paths resolve from base_dir.
  void reset(nlohmann::json tree, std::filesystem::path base_dir = {});

  // Sets a field by its dotted path (canonical or an alias, as `meshwork schema` lists them).
  // `text` is taken as a number or true/false when it reads as one, else as a string (units
  // such as "400 Gb/s" and enum names are the loader's to check). False when the path names no
  // field: `error` says so and nothing changes.
  bool set(std::string_view path, std::string_view text, std::string& error);
  bool set_json(std::string_view path, nlohmann::json value, std::string& error);
  // Removes the field from the tree: the preset's value or the default applies again.
  void unset(std::string_view path);

  // The value the tree gives the field, or null; and the value the resolved plan has.
  [[nodiscard]] nlohmann::json written(std::string_view path) const;
  [[nodiscard]] nlohmann::json resolved(std::string_view path) const;

  [[nodiscard]] const nlohmann::json& tree() const { return tree_; }
  [[nodiscard]] const plan::LoadResult& loaded() const { return loaded_; }
  [[nodiscard]] bool valid() const { return loaded_.ok(); }
  // The backend the plan is checked for (`execute --backend`), none by default: what it cannot
  // run of a valid plan becomes warnings in diagnostics() (plan/backend_limits, the function
  // `validate --backend` and `execute` use); they do not stop the estimate or the simulation.
  void set_backend(std::optional<plan::Backend> backend);
  [[nodiscard]] std::optional<plan::Backend> backend() const { return backend_; }
  // Every diagnostic the editor shows: the loader's and validation's, then the backend's.
  [[nodiscard]] const plan::Diagnostics& diagnostics() const { return diagnostics_; }
  // The diagnostic about this field (canonical path), or nullptr.
  [[nodiscard]] const plan::Diagnostic* diagnostic(std::string_view path) const;

  [[nodiscard]] const std::filesystem::path& file() const { return file_; }
  [[nodiscard]] bool modified() const { return modified_; }
  // Wall time of the last resolve and validate (after every change), milliseconds.
  [[nodiscard]] double last_reload_ms() const { return last_reload_ms_; }
  // Writes the tree as JSON (to a temporary file, then renamed over `file`).
  bool save(const std::filesystem::path& file, std::string& error);

 private:
  void reload();

  nlohmann::json tree_;
  std::filesystem::path file_, base_dir_;
  plan::LoadResult loaded_;
  std::optional<plan::Backend> backend_;
  plan::Diagnostics diagnostics_;
  nlohmann::json resolved_;
  bool modified_ = false;
  double last_reload_ms_ = 0;
};

// "8" -> 8, "0.5" -> 0.5, "true" -> true, anything else -> the string itself.
nlohmann::json value_from_text(std::string_view text);
// A JSON value as an editor shows it: strings without quotes, lists joined with ", ".
std::string text_of(const nlohmann::json& value);

}  // namespace meshwork::gui
