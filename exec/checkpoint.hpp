#pragma once
// Checkpoints of the executor: each rank writes its own shard file (its parameters, its
// optimizer state and the step), to a temporary file that is checksummed and renamed into
// place; once every rank has written, rank 0 records the step in `latest`, also by rename. A
// run killed mid-write leaves the previous checkpoint whole; a shard whose checksum, rank,
// world or plan does not match is refused with a message naming the file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace meshwork::exec {

struct RankState {
  std::int64_t step = 0;  // steps completed
  std::int64_t rank = 0, world_size = 1;
  std::string plan_hash;
  std::vector<float> params, exp_avg, exp_avg_sq;
  // MoE experts (this EP rank's), apart from the dense parameters; empty for a dense model.
  std::vector<float> expert_params, expert_exp_avg, expert_exp_avg_sq;
};

std::filesystem::path shard_path(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank);
// Writes the shard atomically; throws std::runtime_error naming the file on I/O failure.
void save_shard(const std::filesystem::path& dir, const RankState& state);
// Records `step` as the newest complete checkpoint (rank 0, after every shard is written).
void mark_complete(const std::filesystem::path& dir, std::int64_t step);
// The newest complete step, if any.
std::optional<std::int64_t> latest_step(const std::filesystem::path& dir);
// Loads and checks a shard against what the resuming run expects.
RankState load_shard(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank, std::int64_t world_size, const std::string& plan_hash);

}  // namespace meshwork::exec
