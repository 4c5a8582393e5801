// The Program's pipeline transfers as an ordered channel carries them: between two stages,
// the sender lists its sends in the order the receiver lists its receives, under every
// schedule. NCCL matches point-to-point operations between two ranks by their order, not by a
// tag (NCCL user guide, "Point-to-point communication"), so the CUDA backend's pipeline group
// (exec/cuda/nccl_process_group.hpp) relies on it; MPI's tags would hide a mismatch.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/program.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

TEST(ProgramTransfers, EverySenderListsItsSendsInItsReceiversOrder) {
  const char* schedules[] = {"gpipe", "1f1b", "interleaved", "zero_bubble"};
  for (const char* schedule : schedules) {
    for (const int microbatches : {4, 8, 11}) {
      const bool interleaved = std::string(schedule) == "interleaved";
      const std::string text = "model: {preset: tiny, num_layers: 16}\ntraining: {global_batch_size: " + std::to_string(microbatches) +
                               ", micro_batch_size: 1, precision: bf16}\nparallelism: {pp: 4, vpp: " + (interleaved ? "2" : "1") +
                               ", pipeline_schedule: " + schedule + "}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n";
      auto r = plan::load_plan_text(text, plan::Format::yaml);
      if (interleaved && microbatches % 4 != 0) continue;  // Megatron's interleaving needs m divisible by p
      ASSERT_TRUE(r.ok()) << schedule << " m " << microbatches << ": " << r.diagnostics.items().front().message;
      const LowerResult lowered = lower(r.plan);
      ASSERT_TRUE(lowered.program) << lowered.error;
      // (from, to) -> tags in the order each side lists them.
      std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int32_t>> sent, received;
      std::size_t transfers = 0;
      for (const auto& sp : lowered.program->classes) {
        for (const auto& in : sp.instrs) {
          if (in.kind == InstrKind::send) {
            sent[{sp.stage, in.peer_stage}].push_back(in.tag);
            ++transfers;
          }
          if (in.kind == InstrKind::recv) received[{in.peer_stage, sp.stage}].push_back(in.tag);
        }
      }
      EXPECT_GT(transfers, 0u);
      EXPECT_EQ(sent, received) << schedule << " with " << microbatches << " micro-batches";
    }
  }
}

}  // namespace
}  // namespace meshwork::models
