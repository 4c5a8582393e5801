#pragma once
// Figures that follow from a resolved, valid plan without any cost model: what `meshwork show`
// prints beside the plan, and what lowering starts from.

#include <cstdint>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::plan {

struct DerivedFigures {
  std::int64_t data_parallel_size = 0;
  std::int64_t expert_data_parallel_size = 0;  // DP / EP
  std::int64_t num_nodes = 0;
  std::int64_t micro_batches_per_step = 0;  // per pipeline: GBS / (MBS * DP), the gradient-accumulation steps
  std::int64_t tokens_per_step = 0;          // GBS * seq_length
  std::vector<std::int64_t> layers_per_stage;
  double steps_to_train = 0;  // training.tokens / tokens_per_step; 0 when tokens is not given
};

DerivedFigures derive(const Plan& plan);
// derive's micro_batches_per_step alone (the estimate's; derive also splits the layers).
std::int64_t micro_batches_per_step(const Plan& plan);

}  // namespace meshwork::plan
