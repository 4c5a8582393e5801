#pragma once
// The executor's training data: synthetic tokens with structure to learn, the same on every
// backend, so that the CPU and CUDA runs of a plan (and --verify's single-rank reference) see
// exactly the same samples. Each next token follows from the last by a fixed rule, with a
// random one in eight (so the loss falls from ln V towards its entropy floor); each sample is
// keyed by the run's seed and its index in the whole run, so any mesh draws the same ones.

#include <cstdint>

#include "exec/gpt.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// Micro-batch `microbatch` (0-based, of `microbatches_per_step` per data-parallel rank) of
// data-parallel rank `dp_index` at `step` (1-based): plan.training.micro_batch_size samples
// of the model's seq_length, taken from the step's global batch in (DP rank, micro-batch)
// order. With context parallelism, member `cp_rank` of the CP group gets its share of each
// sample: the positions kernels::context_parallel_positions gives it (2 x CP chunks, Megatron's
// causal load balancing, unless parallelism.context_parallel_load_balance is off), with their
// ids and targets.
[[nodiscard]] Batch synthetic_batch(const plan::Plan& plan, std::int64_t microbatches_per_step, std::int64_t dp_index, std::int64_t step,
                                    std::int64_t microbatch, std::int64_t cp_rank = 0);

}  // namespace meshwork::exec
