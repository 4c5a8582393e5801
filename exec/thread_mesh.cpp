#include "exec/thread_mesh.hpp"

#include <mutex>
#include <thread>

#include "exec/rank_groups.hpp"
#include "exec/reference_step.hpp"
#include "exec/staged_group.hpp"
#include "exec/thread_group.hpp"
#include "exec/trainer.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::exec {

ThreadMeshResult run_mesh_in_threads(const plan::Plan& plan, std::int64_t steps, const std::function<std::unique_ptr<Backend>(std::int64_t rank)>& make_backend,
                                     bool staged, double timeout_s, bool hold_sends) {
  const std::int64_t world = plan::RankLayout::from_plan(plan.parallelism).world_size();
  ThreadWorld groups(timeout_s, hold_sends);
  ThreadMeshResult out;
  std::mutex m;
  auto rank_main = [&](std::int64_t rank) {
    try {
      std::unique_ptr<Backend> backend = make_backend(rank);
      Backend& b = *backend;
      const GroupMaker in_memory = groups.maker(rank);
      Groups g = rank_groups(plan, rank, staged ? GroupMaker([&](const char* name, const std::vector<std::int64_t>& members, int colour) -> std::unique_ptr<Group> {
        return std::make_unique<StagedGroup>(in_memory(name, members, colour), b);
      })
                                                : in_memory);
      Trainer run(plan, std::move(g), rank, nullptr, std::move(backend));
      run.keep_reduced = true;
      Trainer ref(single_rank(plan), local_groups(), 0, nullptr);
      ref.keep_reduced = true;  // its gradients before clipping, for compare_with_reference
      for (std::int64_t s = 1; s <= steps; ++s) {
        StepRecord rec;
        rec.step = s;
        rec.loss = run.step(s, ExecuteOptions{});
        rec.reference_loss = ref.step(s, ExecuteOptions{});
        compare_with_reference(run, ref, plan, rank, rec);
        sync_reference(run, ref, plan, rank);
        if (rank == 0) {
          std::lock_guard lock(m);
          out.steps.push_back(rec);
        }
      }
    } catch (const std::exception& e) {
      // Under one lock, so that the first error recorded is the one every other rank names.
      std::lock_guard lock(m);
      if (out.error.empty()) out.error = "rank " + std::to_string(rank) + ": " + e.what();
      out.rank_errors.push_back("rank " + std::to_string(rank) + ": " + e.what());
      groups.fail(rank, e.what());  // the others stop now rather than at their timeouts
    }
  };
  std::vector<std::thread> threads;
  for (std::int64_t r = 0; r < world; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace meshwork::exec
