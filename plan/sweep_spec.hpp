#pragma once
// A sweep file: a base plan and lists of values for any of its fields; the grid is their
// cartesian product. Read with the plan loader's rules: every problem at once, with a path.
//
//   base: ../scenarios/gpt3-175b-a100-1024.yaml    # relative to the sweep file
//   grid:
//     parallelism.tp: [4, 8]
//     parallelism.pp: [4, 8, 16]
//     training.recompute: [selective, full]
//   rank_by: mfu                                   # mfu | time_to_train | step_time
//   top: 20                                        # rows shown on the terminal

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"

namespace meshwork::plan {

enum class RankBy { mfu, time_to_train, step_time };

struct SweepAxis {
  std::string path;                  // canonical field path
  std::vector<std::string> keys;     // its spellings (to replace in the base tree)
  std::vector<std::string> parent;   // sections above it
  std::vector<nlohmann::json> values;
  std::string written;               // the path as the sweep file spells it
};

struct SweepSpec {
  std::filesystem::path base;        // the base plan file
  nlohmann::json base_tree;          // its parsed document
  std::vector<SweepAxis> axes;
  RankBy rank_by = RankBy::mfu;
  std::int64_t top = 20;

  [[nodiscard]] std::uint64_t size() const;  // points in the grid (saturates at UINT64_MAX)
  // The base tree with point `index`'s values set (index in 0 .. size()-1, last axis fastest).
  [[nodiscard]] nlohmann::json point(std::uint64_t index) const;
  // "tp=8 pp=16 recompute=full"
  [[nodiscard]] std::vector<std::string> point_values(std::uint64_t index) const;
};

inline constexpr std::uint64_t kMaxSweepPoints = 10'000'000;

struct SweepLoadResult {
  SweepSpec spec;
  Diagnostics diagnostics;
  [[nodiscard]] bool ok() const { return !diagnostics.has_errors(); }
};

SweepLoadResult load_sweep(const std::filesystem::path& file);
// The same from text already in memory; `file` is where it stands (a relative base is read
// beside it).
SweepLoadResult load_sweep_text(std::string_view text, const std::filesystem::path& file);

}  // namespace meshwork::plan
