#include "plan/derived.hpp"

#include <cmath>

#include "plan/validate.hpp"

namespace meshwork::plan {

std::int64_t micro_batches_per_step(const Plan& plan) {
  const auto& p = plan.parallelism;
  const auto& t = plan.training;
  if (t.micro_batch_size <= 0 || p.data_parallel_size <= 0) return 0;
  return t.global_batch_size / (t.micro_batch_size * p.data_parallel_size);
}

DerivedFigures derive(const Plan& plan) {
  DerivedFigures d;
  const auto& p = plan.parallelism;
  const auto& t = plan.training;
  d.data_parallel_size = p.data_parallel_size;
  if (p.expert_model_parallel_size > 0) d.expert_data_parallel_size = p.data_parallel_size / p.expert_model_parallel_size;
  d.num_nodes = plan.cluster.num_nodes();
  d.micro_batches_per_step = micro_batches_per_step(plan);
  d.tokens_per_step = checked_mul(t.global_batch_size, plan.model.seq_length).value_or(0);
  d.layers_per_stage = layers_per_stage(plan).value_or(std::vector<std::int64_t>{});
  if (t.tokens > 0 && d.tokens_per_step > 0) {
    d.steps_to_train = std::ceil(t.tokens / static_cast<double>(d.tokens_per_step));
  }
  return d;
}

}  // namespace meshwork::plan
