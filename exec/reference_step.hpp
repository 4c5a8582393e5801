#pragma once
// --verify's comparison of a distributed run with the single-rank reference, step by step: the
// same model and global batch on one rank of the CPU backend (every micro-batch in turn), its
// gradients compared tensor by tensor with the run's reduced shards, then given the run's
// parameters so that every step is compared from the same point. Collective over the run's
// world group, whatever carries it (MPI, NCCL, threads).

#include <cstdint>

#include "exec/execute.hpp"
#include "exec/group.hpp"
#include "exec/trainer.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// Every group of one: the single-rank reference's.
[[nodiscard]] Groups local_groups();
// The plan with no parallelism: one rank, every micro-batch in turn, 1F1B, no ZeRO or SP.
[[nodiscard]] plan::Plan single_rank(plan::Plan p);

// ||a - b|| / ||b|| per tensor between `run`'s reduced gradients of the step just taken (each
// rank its shard, counted once) and `ref`'s, summed over the world; the worst in `rec`, and the
// loss's or the gradient norm's when it is worse. Throws CollectiveError when a tensor was not compared whole.
void compare_with_reference(Trainer& run, Trainer& ref, const plan::Plan& plan, std::int64_t rank, StepRecord& rec);

// The reference takes the run's parameters (assembled from their shards, counted once).
void sync_reference(Trainer& run, Trainer& ref, const plan::Plan& plan, std::int64_t rank);

}  // namespace meshwork::exec
