#include "exec/resume.hpp"

#include <array>
#include <span>
#include <stdexcept>
#include <vector>

namespace meshwork::exec {

namespace {

// Rank 0's value, on every rank (the groups have no broadcast: a sum with zeros elsewhere).
double from_rank0(Group& world, double value) {
  std::array<double, 1> v{world.rank() == 0 ? value : 0.0};
  world.all_reduce_sum(std::span<double>(v));
  return v[0];
}

std::string list(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return s;
}

}  // namespace

ResumePoint find_resume_point(Group& world, const std::string& dir_name, std::int64_t world_size, const std::string& plan_hash, const Warn& warn) {
  const std::filesystem::path dir(dir_name);
  const bool root = world.rank() == 0;
  auto say = [&](const std::string& line) {
    if (warn) warn(line);
  };
  LatestRecord latest;
  std::vector<std::int64_t> steps;
  if (root) {
    latest = read_latest(dir);
    steps = checkpoint_steps(dir);
  }
  const auto n = static_cast<std::int64_t>(from_rank0(world, static_cast<double>(steps.size())));
  const bool latest_damaged = from_rank0(world, latest.problem.empty() ? 0 : 1) > 0;
  if (root && latest_damaged) say("warning: " + (dir / "latest").string() + " " + latest.problem + ": looking for the newest complete checkpoint by scanning " + dir_name);
  ResumePoint point;
  std::vector<std::int64_t> skipped;
  std::string foreign;
  for (std::int64_t i = 0; i < n && point.step == 0; ++i) {
    const auto step = static_cast<std::int64_t>(from_rank0(world, root ? static_cast<double>(steps[static_cast<std::size_t>(i)]) : 0.0));
    std::vector<double> bad(static_cast<std::size_t>(world.size()), 0.0);  // 1: damaged, 2: another run's
    RankState state;
    try {
      state = load_shard(dir, step, world.world_rank(world.rank()), world_size, plan_hash);
    } catch (const ForeignCheckpoint& e) {
      bad[static_cast<std::size_t>(world.rank())] = 2;
      foreign = e.what();
    } catch (const std::exception& e) {
      bad[static_cast<std::size_t>(world.rank())] = 1;
      say("warning: rank " + std::to_string(world.world_rank(world.rank())) + ": checkpoint of step " + std::to_string(step) + " skipped: " + e.what());
    }
    world.all_reduce_sum(std::span<double>(bad));
    std::vector<std::int64_t> damaged, other_run;
    for (std::size_t r = 0; r < bad.size(); ++r) {
      if (bad[r] == 1) damaged.push_back(world.world_rank(static_cast<int>(r)));
      if (bad[r] == 2) other_run.push_back(world.world_rank(static_cast<int>(r)));
    }
    if (!other_run.empty()) {
      throw JobWideError((foreign.empty() ? "the checkpoint of step " + std::to_string(step) + " in " + dir_name + " was written by another run (ranks " + list(other_run) + ")"
                                                : foreign) +
                               ": resume with the plan and rank count that wrote it, or choose another --checkpoint-dir; nothing in it was changed");
    }
    if (damaged.empty()) {
      point.step = step;
      point.state = std::move(state);
    } else {
      skipped.push_back(step);
      if (root) say("warning: the checkpoint of step " + std::to_string(step) + " is incomplete or damaged (the shard" + std::string(damaged.size() == 1 ? " of rank " : "s of ranks ") + list(damaged) + (i + 1 < n ? std::string("): falling back to an older one") : std::string("): no older one is left")));
    }
  }
  if (n > 0 && point.step == 0) {
    throw JobWideError(dir_name + " holds checkpoints (steps " + list(skipped) +
                             ") and none is valid (each rank's reason above): nothing was renamed or changed; move them away to start from step 1");
  }
  if (root) {
    // The newest good checkpoint is known: keep the damaged ones aside and `latest` naming it.
    for (std::int64_t step : skipped) {
      const auto to = set_aside(shard_path(dir, step, 0).parent_path());
      say("warning: set the checkpoint of step " + std::to_string(step) + " aside as " + to.string());
    }
    if (latest_damaged) say("warning: set the damaged tracker aside as " + set_aside(dir / "latest").string());
    if (point.step > 0 && latest.step != point.step) {
      if (latest.step && *latest.step > point.step) {
        say("warning: " + (dir / "latest").string() + " named step " + std::to_string(*latest.step) + "; resuming from step " + std::to_string(point.step));
      }
      mark_complete(dir, point.step);
    }
  }
  // No rank goes on (and may write) before the directory is settled.
  (void)from_rank0(world, 0);
  return point;
}

void refuse_to_overwrite(Group& world, const std::string& dir_name) {
  const std::filesystem::path dir(dir_name);
  std::int64_t newest = 0;
  bool tracker = false;
  if (world.rank() == 0) {
    const auto steps = checkpoint_steps(dir);
    std::error_code ec;
    newest = steps.empty() ? 0 : steps.front();
    tracker = std::filesystem::exists(dir / "latest", ec);
  }
  newest = static_cast<std::int64_t>(from_rank0(world, static_cast<double>(newest)));
  tracker = from_rank0(world, tracker ? 1 : 0) > 0;
  if (newest > 0 || tracker) {
    throw JobWideError(dir_name + " already holds checkpoints" + (newest > 0 ? " (newest step " + std::to_string(newest) + ")" : std::string()) +
                       ": pass --resume to continue from them, or choose another --checkpoint-dir (nothing is overwritten)");
  }
}

void save_checkpoint(Group& world, const std::string& dir_name, const RankState& state, std::int64_t keep_last, const Warn& progress) {
  const std::filesystem::path dir(dir_name);
  save_shard(dir, state);
  (void)from_rank0(world, 0);  // every shard is written
  if (world.rank() != 0) return;
  mark_complete(dir, state.step);
  try {
    const auto deleted = prune_checkpoints(dir, checkpoint_steps(dir), keep_last);
    if (!deleted.empty() && progress) progress("checkpoint retention (--keep-last " + std::to_string(keep_last) + "): deleted steps " + list(deleted));
  } catch (const std::exception& e) {
    // The new checkpoint is whole; an old one that stays is no reason to stop the job.
    if (progress) progress(std::string("warning: ") + e.what());
  }
}

}  // namespace meshwork::exec
