#pragma once
// A job's checkpoints, across its ranks: where a resume starts, and what a save leaves
// behind. The checkpoint directory is shared by the ranks (rank 0 lists it and records
// `latest`, as in checkpoint.hpp); every rank checks its own shard.

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "exec/checkpoint.hpp"
#include "exec/group.hpp"

namespace meshwork::exec {

using Warn = std::function<void(const std::string&)>;

// An error every rank of the job reached together (they agreed on it over `world`): no rank
// is left inside a collective, so the job can end cleanly, with one message from rank 0.
class JobWideError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ResumePoint {
  std::int64_t step = 0;  // 0: no checkpoint in the directory; start from step 1
  RankState state;        // this rank's, when step > 0
};

// The newest checkpoint that every rank loads. Rank 0 lists the step directories newest
// first (`latest` is only a hint: a damaged one is set aside with a warning, and a step
// newer than it whose shards are all whole is complete); each rank loads its own shard of
// each until all ranks succeed. Every checkpoint skipped is renamed aside (STEP.damaged),
// with a warning naming the ranks and, from each of them, why. Throws JobWideError when
// checkpoints exist but none is valid (nothing is renamed or changed then), and when a shard
// is another run's (another plan or world size).
ResumePoint find_resume_point(Group& world, const std::string& dir, std::int64_t world_size, const std::string& plan_hash, const Warn& warn);

// Throws JobWideError when a run that does not resume would write into a directory that
// already holds checkpoints (they would be overwritten). Rank 0 decides for all.
void refuse_to_overwrite(Group& world, const std::string& dir);

// Every rank writes its shard of `state`; once all have, rank 0 records the step in `latest`
// and applies the retention policy (`keep_last` > 0: only the newest that many checkpoints
// stay). Collective over `world`.
void save_checkpoint(Group& world, const std::string& dir, const RankState& state, std::int64_t keep_last, const Warn& progress);

}  // namespace meshwork::exec
