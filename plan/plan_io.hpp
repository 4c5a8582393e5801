#pragma once
// Loading and saving plans. load_plan reads YAML or JSON, applies presets and HF configs,
// resolves derived fields and validates, returning the plan with every diagnostic (with the
// source line where known). save_plan writes JSON atomically; load(save(p)) == p.

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"
#include "plan/document.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

struct LoadResult {
  Plan plan;
  Diagnostics diagnostics;
  [[nodiscard]] bool ok() const { return !diagnostics.has_errors(); }
};

LoadResult load_plan(const std::filesystem::path& path);
// `base_dir` anchors relative hf_config paths.
LoadResult load_plan_text(std::string_view text, Format format = Format::detect,
                          const std::filesystem::path& base_dir = {});
// A parsed document (JSON tree) to a resolved, validated plan.
LoadResult load_plan_json(const nlohmann::json& root, const std::filesystem::path& base_dir = {});

nlohmann::json to_json(const Plan& plan);
std::string to_json_string(const Plan& plan);  // indented, with a final newline

// Writes to a temporary file beside `path`, then renames it over `path`: a reader never sees a
// half-written file and a failed write leaves the old file as it was.
bool write_file_atomically(const std::filesystem::path& path, std::string_view content, std::string& error);
bool save_plan(const Plan& plan, const std::filesystem::path& path, std::string& error);

}  // namespace meshwork::plan
