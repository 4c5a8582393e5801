// models/dp_replay: what a stage's DP holds its items for, as the estimate's pipeline replay
// holds every stage's items alike (issue 18). The parts it reports add up to the DP it counts
// before the stage's last item ends, whichever schedule and overlap the plan runs.
#include "models/dp_replay.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "models/layer_comm.hpp"
#include "models/op_table.hpp"
#include "models/params.hpp"
#include "models/stage_times.hpp"
#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

const std::filesystem::path kSource = MESHWORK_SOURCE_DIR;

struct Replayed {
  DpReplay dp;
  std::size_t chunks = 0;
  double gather_s = 0;  // one layer's parameters gathered over the DP group
};

// The last stage of a shipped plan replayed with layers of 1 ms forward and 2 ms backward (half
// of it weight gradients), and 0.1 ms of compute before the first item.
Replayed replay_last_stage(const std::string& scenario) {
  const auto loaded = plan::load_plan(kSource / "scenarios" / (scenario + ".yaml"));
  EXPECT_TRUE(loaded.ok()) << scenario;
  const plan::Plan& p = loaded.plan;
  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  const ParamCounts counts = count_params(p.model);
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  const DpGroups dense = dp_groups(p, false), expert = dp_groups(p, true);
  const GroupNetwork dp_net = group_network(p, hw, layout, dense.shard), edp_net = group_network(p, hw, layout, expert.shard);
  const GroupNetwork none{};
  const DpNetworks nets{dp_net, edp_net, dense.replicas > 1 ? group_network(p, hw, layout, dense.replica) : none,
                        expert.replicas > 1 ? group_network(p, hw, layout, expert.replica) : none, dense.replicas, expert.replicas};
  const auto chunks = plan::layers_per_chunk(p);
  const auto firsts = plan::chunk_first_layers(chunks);
  const std::size_t last = chunks.size() - 1;
  StageTimes layer;
  layer.forward_s = 1e-3;
  layer.backward_s = 2e-3;
  layer.weight_s = 1e-3;
  const StageTimes layers[2][2] = {{layer, layer}, {layer, layer}};
  const StageTimes ends{};
  double params = 0;
  for (const auto n : chunks[last]) params += static_cast<double>(n) * layer_params_per_gpu(p, counts, false).dense;
  CollectivePrices price;
  const DpStage stage{static_cast<std::int64_t>(last), plan::micro_batches_per_step(p), chunks[last], firsts[last], layers, ends, ends, params, 0,
                      1e-4, NicSharing{}};
  Replayed out{replay_dp(p, hw, counts, nets, stage, price), chunks[last].size()};
  out.gather_s = price(dp_net, Collective::all_gather, layer_params_per_gpu(p, counts, false).dense * activation_bytes(p.training.precision));
  return out;
}

double sum_of(const std::vector<DpReplay::ItemDelay>& delays) {
  double s = 0;
  for (const auto& d : delays) s += d.seconds;
  return s;
}

// NeMo's Nemotron-22B (interleaved, 10 chunks a stage, the distributed optimizer with
// overlap.grad_reduce and param_gather): its reductions slow the cool-down's items, its
// gathers its first forwards. What it reports of them adds up to the DP before its last item's
// end: item by item from its first backward, the step's start before it (of which the waits for
// the gathers), each chunk's earliest first forward at or after the start.
TEST(DpReplay, WhatItHoldsTheItemsForAddsUpToItsDpBeforeTheEnd) {
  const Replayed r = replay_last_stage("published/nemo2407-nemotron-22b-64");
  const DpReplay& dp = r.dp;
  ASSERT_FALSE(dp.item_delays.empty());
  EXPECT_GT(dp.before_end_s, 0);
  EXPECT_NEAR(sum_of(dp.item_delays) + dp.start_delay_s, dp.before_end_s, 1e-12 + 1e-9 * dp.before_end_s);
  EXPECT_GE(dp.start_wait_s, 0);
  EXPECT_LE(dp.start_wait_s, dp.start_delay_s + 1e-15);
  ASSERT_EQ(dp.chunk_ready_s.size(), r.chunks);
  for (const double ready : dp.chunk_ready_s) EXPECT_GE(ready, 0);
  // The gathers run one after the other: a later chunk's are ready no sooner.
  EXPECT_GT(dp.chunk_ready_s.back(), dp.chunk_ready_s.front());
  for (const auto& d : dp.item_delays) EXPECT_GT(d.seconds, 0);
}

// The same stage by hand: one layer a chunk, each chunk's bucket one layer's parameters (the
// last's with the head's, which its replay times at zero). The gathers dispatched with the step
// run one after the other from its start, the gradient buffer's zeroing (0.1 ms) slowed beside
// the first: each chunk's first forward can start when its chunk's gather ends, from where the
// stage's first item starts; the stream is busy until the last ends. Each chunk's gradients
// are reduced once, issued at the end of its last backward (2 ms of compute).
TEST(DpReplay, ReadyTimesAndIssuedReductionsByHand) {
  const Replayed r = replay_last_stage("published/nemo2407-nemotron-22b-64");
  const DpReplay& dp = r.dp;
  ASSERT_EQ(dp.chunk_ready_s.size(), 10u);
  ASSERT_GT(r.gather_s, 1e-4 / (1 - dp.sm_fraction));  // the zeroing ends inside the first gather
  EXPECT_NEAR(dp.origin_s, 1e-4 / (1 - dp.sm_fraction), 1e-15);
  for (std::size_t c = 0; c + 1 < dp.chunk_ready_s.size(); ++c) {
    EXPECT_NEAR(dp.chunk_ready_s[c], static_cast<double>(c + 1) * r.gather_s - dp.origin_s, 1e-12) << c;
  }
  EXPECT_DOUBLE_EQ(dp.gathers_end_s, dp.chunk_ready_s.back());
  EXPECT_TRUE(dp.streamed);
  ASSERT_EQ(dp.issued.size(), 10u);
  for (const DpReplay::Issued& c : dp.issued) {
    EXPECT_EQ(c.item.pass, Pass::backward);
    EXPECT_EQ(c.item.microbatch, 15);  // the chunk's last backward of 16 micro-batches
    EXPECT_DOUBLE_EQ(c.after_s, 2e-3);
    EXPECT_GT(c.seconds, 0);
  }
}

// GPT-3 175B as NAR21 ran it (no overlap, ZeRO 0): the reduction waits for the end of the
// backward, after the last item; nothing holds an item.
TEST(DpReplay, ReductionsAfterTheLastItemHoldNoItem) {
  const DpReplay dp = replay_last_stage("gpt3-175b-a100-1024").dp;
  EXPECT_TRUE(dp.item_delays.empty());
  EXPECT_TRUE(dp.chunk_ready_s.empty());
  EXPECT_EQ(dp.start_delay_s, 0);
  EXPECT_EQ(dp.before_end_s, 0);
  EXPECT_FALSE(dp.after_last_item.empty());
}

}  // namespace
}  // namespace meshwork::models
