#include "gui/core/plan_document.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "plan/document.hpp"
#include "plan/field_paths.hpp"

namespace meshwork::gui {

PlanDocument::PlanDocument() { reload(); }

bool PlanDocument::open(const std::filesystem::path& file, std::string& error) {
  plan::DocumentResult doc = plan::read_document(file);
  if (!doc.document) {
    error = doc.diagnostics.items().empty() ? "cannot read " + file.string() : plan::format(doc.diagnostics.items().front(), file.string());
    return false;
  }
  tree_ = std::move(doc.document->root);
  file_ = file;
  base_dir_ = file.parent_path();
  modified_ = false;
  reload();
  return true;
}

void PlanDocument::reset(nlohmann::json tree, std::filesystem::path base_dir) {
  tree_ = std::move(tree);
  if (!base_dir.empty()) base_dir_ = std::move(base_dir);
  modified_ = true;
  reload();
}

bool PlanDocument::set(std::string_view path, std::string_view text, std::string& error) {
  return set_json(path, value_from_text(text), error);
}

bool PlanDocument::set_json(std::string_view path, nlohmann::json value, std::string& error) {
  const auto field = plan::resolve_field_path(path);
  if (!field) {
    error = std::string(path) + ": no such plan field";
    return false;
  }
  plan::set_field(tree_, *field, std::move(value));
  modified_ = true;
  reload();
  return true;
}

void PlanDocument::unset(std::string_view path) {
  if (const auto field = plan::resolve_field_path(path)) {
    plan::erase_field(tree_, *field);
    modified_ = true;
    reload();
  }
}

nlohmann::json PlanDocument::written(std::string_view path) const {
  const auto field = plan::resolve_field_path(path);
  if (!field) return nullptr;
  const nlohmann::json* v = plan::find_field(tree_, *field);
  return v != nullptr ? *v : nlohmann::json();
}

nlohmann::json PlanDocument::resolved(std::string_view path) const {
  const auto field = plan::resolve_field_path(path);
  if (!field) return nullptr;
  const nlohmann::json* node = &resolved_;
  for (const auto& s : field->parent) {
    if (!node->is_object() || !node->contains(s)) return nullptr;
    node = &(*node)[s];
  }
  if (!node->is_object() || !node->contains(field->keys.front())) return nullptr;
  return (*node)[field->keys.front()];
}

const plan::Diagnostic* PlanDocument::diagnostic(std::string_view path) const {
  return diagnostics_.find(path);
}

void PlanDocument::set_backend(std::optional<plan::Backend> backend) {
  backend_ = backend;
  reload();
}

bool PlanDocument::save(const std::filesystem::path& file, std::string& error) {
  if (!plan::write_file_atomically(file, tree_.dump(2) + "\n", error)) return false;
  file_ = file;
  base_dir_ = file.parent_path();
  modified_ = false;
  return true;
}

void PlanDocument::reload() {
  const auto start = std::chrono::steady_clock::now();
  loaded_ = plan::load_plan_json(tree_, base_dir_);
  resolved_ = plan::to_json(loaded_.plan);
  diagnostics_ = loaded_.diagnostics;
  if (backend_ && loaded_.ok()) {
    const std::string prefix = "execute --backend " + std::string(plan::to_string(*backend_)) + ": ";
    const plan::Diagnostics limits = plan::backend_diagnostics(loaded_.plan, *backend_);
    for (const auto& d : limits.items()) diagnostics_.warning(d.path, prefix + d.message);
  }
  last_reload_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json value_from_text(std::string_view text) {
  std::string s(text);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.erase(s.begin());
  if (s == "true") return true;
  if (s == "false") return false;
  if (!s.empty()) {
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() + s.size()) return static_cast<std::int64_t>(i);
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(d)) return d;
  }
  return s;
}

std::string text_of(const nlohmann::json& value) {
  if (value.is_null()) return {};
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string out;
    for (const auto& v : value) out += (out.empty() ? "" : ", ") + text_of(v);
    return out;
  }
  if (value.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", value.get<double>());
    return buf;
  }
  return value.dump();
}

}  // namespace meshwork::gui
