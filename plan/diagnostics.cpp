#include "plan/diagnostics.hpp"

#include <algorithm>
#include <set>
#include <tuple>

namespace meshwork::plan {

void Diagnostics::error(std::string path, std::string message) {
  items_.push_back({std::move(path), std::move(message), Severity::error, 0});
}

void Diagnostics::warning(std::string path, std::string message) {
  items_.push_back({std::move(path), std::move(message), Severity::warning, 0});
}

void Diagnostics::add(Diagnostic d) { items_.push_back(std::move(d)); }

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

bool Diagnostics::has_errors() const { return error_count() > 0; }

std::size_t Diagnostics::error_count() const {
  return static_cast<std::size_t>(std::count_if(
      items_.begin(), items_.end(), [](const Diagnostic& d) { return d.severity == Severity::error; }));
}

std::size_t Diagnostics::warning_count() const { return items_.size() - error_count(); }

const Diagnostic* Diagnostics::find(std::string_view path) const {
  auto it = std::find_if(items_.begin(), items_.end(),
                         [&](const Diagnostic& d) { return d.path == path; });
  return it == items_.end() ? nullptr : &*it;
}

void Diagnostics::deduplicate() {
  std::set<std::tuple<std::string, std::string, Severity>> seen;
  std::vector<Diagnostic> kept;
  for (auto& d : items_) {
    if (seen.emplace(d.path, d.message, d.severity).second) kept.push_back(std::move(d));
  }
  items_ = std::move(kept);
}

std::string format(const Diagnostic& d, std::string_view file) {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (d.line > 0) {
      out += ':';
      out += std::to_string(d.line);
    }
    out += ": ";
  }
  out += d.severity == Severity::error ? "error: " : "warning: ";
  if (!d.path.empty()) out += d.path + ": ";
  out += d.message;
  return out;
}

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string out(parent);
  out += '.';
  out += key;
  return out;
}

std::string index_path(std::string_view parent, std::size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

}  // namespace meshwork::plan
