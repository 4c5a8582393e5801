#pragma once
// Checkpoints of the executor: each rank writes its own shard file (its parameters, its
// optimizer state and the step), to a temporary file that is checksummed and renamed into
// place; once every rank has written, rank 0 records the step in `latest`, also by rename. A
// run killed mid-write leaves the previous checkpoint whole; a shard whose checksum, rank,
// world or plan does not match is refused with a message naming the file. `latest` is a hint:
// a resume scans the step directories for the newest one every rank can load (execute.cpp),
// so a damaged `latest` or a damaged newest checkpoint costs the work since the one before.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshwork::plan {
struct Plan;
}  // namespace meshwork::plan

namespace meshwork::exec {

struct RankState {
  std::int64_t step = 0;  // steps completed
  // AdamW's updates (its bias correction's count): fewer than `step` when fp16's loss scaler
  // skipped some. Shards before format 03 hold none: it equals their step there.
  std::int64_t adam_step = 0;
  std::int64_t rank = 0, world_size = 1;
  std::string plan_hash;
  std::vector<float> params, exp_avg, exp_avg_sq;
  // MoE experts (this EP rank's), apart from the dense parameters; empty for a dense model.
  std::vector<float> expert_params, expert_exp_avg, expert_exp_avg_sq;

  bool operator==(const RankState&) const = default;
};

std::filesystem::path shard_path(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank);
// A shard's bytes: magic (format 03: "MWCKPT03"; 01 and 02 are still read), checksum, then
// the state.
std::string serialize_shard(const RankState& state);
// Writes the shard atomically; throws std::runtime_error naming the file on I/O failure.
void save_shard(const std::filesystem::path& dir, const RankState& state);
// Records `step` as the newest complete checkpoint (rank 0, after every shard is written).
void mark_complete(const std::filesystem::path& dir, std::int64_t step);
// The newest complete step, if any.
std::optional<std::int64_t> latest_step(const std::filesystem::path& dir);
// What `latest` holds: absent (no step, no problem), a step, or why it cannot be read.
struct LatestRecord {
  std::optional<std::int64_t> step;
  std::string problem;  // non-empty: the file exists and is damaged
};
LatestRecord read_latest(const std::filesystem::path& dir);
// Parses `latest`'s bytes: one step number from 1, a newline, nothing else.
LatestRecord parse_latest(const std::string& text);

// The steps with a checkpoint directory (step-NNNNNNNN) in `dir`, newest first; directories
// set aside (step-NNNNNNNN.damaged...) and other names are not checkpoints.
std::vector<std::int64_t> checkpoint_steps(const std::filesystem::path& dir);
// Renames `path` aside to PATH.damaged (PATH.damaged-2, -3, ... when taken) and returns the
// new name: a damaged checkpoint is kept for inspection, never deleted or overwritten.
std::filesystem::path set_aside(const std::filesystem::path& path);
// The retention policy (`--keep-last N`): deletes the checkpoint directories of `steps`
// older than the newest `keep` of them; returns the steps deleted. Directories set aside
// (damaged ones) are not in checkpoint_steps and so never touched.
std::vector<std::int64_t> prune_checkpoints(const std::filesystem::path& dir, std::vector<std::int64_t> steps, std::int64_t keep);
// Parses a shard's bytes (the file's whole contents; `file` names it in errors): what
// load_shard reads, without the checks against the resuming run.
RankState parse_shard(const std::string& bytes, const std::string& file);
// A shard that is whole but belongs to another run (another world size or plan): resuming
// from it would be wrong, and skipping it would hide the mistake.
class ForeignCheckpoint : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Loads and checks a shard against what the resuming run expects: std::runtime_error naming
// the file for a missing, truncated or corrupt one, ForeignCheckpoint for another run's.
RankState load_shard(const std::filesystem::path& dir, std::int64_t step, std::int64_t rank, std::int64_t world_size, const std::string& plan_hash);

// What a checkpoint is written for (RankState::plan_hash): the plan's parts that decide the
// trained state and its shards (the model, the training settings but the token budget and
// the FLOP-counting convention, the parallelism but its overlap flags, the seed), hashed. A run
// may resume with another cluster description, calibration, failure or checkpoint policy, or
// with a new field at its default: none of those changes what a shard holds.
std::string checkpoint_plan_key(const plan::Plan& plan);

}  // namespace meshwork::exec
