#pragma once
// Plan search: the best valid plans for a model on a cluster, over the mesh (TP, PP, CP, EP,
// DP derived), schedule and virtual stages, micro-batch, recomputation, sequence parallelism
// and ZeRO stage, each candidate estimated in closed form (what Calculon's optimal-execution
// search does, Isaev et al. SC'23).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::models {

struct SearchResult {
  std::vector<std::pair<plan::Plan, report::Report>> best;  // fastest first
  std::uint64_t candidates = 0;
  std::uint64_t valid = 0;
  std::uint64_t out_of_memory = 0;
  std::map<std::string, std::uint64_t> invalid_reasons;  // first error (path), count
  double least_memory_gib = 0;   // of the out-of-memory plans: the smallest need
  double capacity_gib = 0;
};

// Dimensions the planner fixes (`search --tp 8 --pp 16`); the rest are searched.
struct SearchPins {
  std::int64_t tp = 0, pp = 0, cp = 0, ep = 0, vpp = 0, zero = -1;  // 0 (zero: -1): searched
};

// `base` is a plan tree (its parallelism section is replaced by each candidate's).
SearchResult search_plans(const nlohmann::json& base, std::size_t top,
                          const std::function<void(std::uint64_t, std::uint64_t)>& progress = {},
                          const SearchPins& pins = {});

}  // namespace meshwork::models
