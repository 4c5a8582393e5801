#pragma once
// What validation says about a plan: every problem at once, each with the path of the field
// it is about, so that the CLI can print them and the GUI can mark the field.

#include <string>
#include <string_view>
#include <vector>

namespace meshwork::plan {

enum class Severity { error, warning };

struct Diagnostic {
  std::string path;  // "parallelism.tensor_model_parallel_size", "failures.events[2].at", "" for the file
  std::string message;
  Severity severity = Severity::error;
  int line = 0;  // 1-based line in the source file when known, else 0

  bool operator==(const Diagnostic&) const = default;
};

class Diagnostics {
 public:
  void error(std::string path, std::string message);
  void warning(std::string path, std::string message);
  void add(Diagnostic d);
  void append(const Diagnostics& other);

  [[nodiscard]] bool has_errors() const;
  [[nodiscard]] std::size_t error_count() const;
  [[nodiscard]] std::size_t warning_count() const;
  [[nodiscard]] bool empty() const { return items_.empty(); }
  [[nodiscard]] const std::vector<Diagnostic>& items() const { return items_; }
  // The first diagnostic whose path is `path`, or nullptr.
  [[nodiscard]] const Diagnostic* find(std::string_view path) const;

  // Drops exact repeats (the same problem found by the reader and by validate()).
  void deduplicate();

 private:
  std::vector<Diagnostic> items_;
};

// "error: parallelism.tp: ..." with "FILE:LINE: " in front when known.
std::string format(const Diagnostic& d, std::string_view file = {});

// Joins a section path and a key: join_path("model", "moe") == "model.moe".
std::string join_path(std::string_view parent, std::string_view key);
std::string index_path(std::string_view parent, std::size_t index);

}  // namespace meshwork::plan
