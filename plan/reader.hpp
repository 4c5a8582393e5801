#pragma once
// Reads a parsed plan document into a Plan, section by section as schema.hpp describes it:
// keys and aliases, types, units, enum names, presets, HF configs, unknown keys. Every
// problem becomes a diagnostic; nothing throws. Bounds are checked by validate().

#include <filesystem>
#include <map>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

struct ReadContext {
  std::filesystem::path base_dir;  // hf_config paths are relative to the plan file
  Diagnostics diagnostics;
  // Canonical path -> path as written (with aliases), to find a field's line in the source.
  std::map<std::string, std::string> written_paths;
  // Paths of required sections that were absent: their fields are not reported again.
  std::vector<std::string> missing_sections;
  // Sections whose preset or HF config failed to load: their "required" fields are not
  // reported again, the failed source is the problem.
  std::vector<std::string> unsourced_sections;
  // Values that could not be read (type, unit, bound): the plan holds defaults in their place,
  // so rules that tie fields together are not checked (they would report on the defaults).
  std::size_t value_errors = 0;
};

// Reads `root` (a JSON object) over `plan`, which holds the defaults.
void read_plan(const nlohmann::json& root, Plan& plan, ReadContext& ctx);

// Edit distance, for "did you mean" on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate nearest to `word` (a prefix of it counts as near), or "" when none is close
// enough to suggest: "did you mean ...?".
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace meshwork::plan
