// The end of a step in the closed form (models/end_of_step): each stage's collectives after its
// last item, run beside the others still running, against hand calculations.
#include "models/end_of_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "models/hardware.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

// Seconds that double while any other stage runs (two stages whose rings share a link).
double halved_beside_others(std::size_t, const std::vector<char>& running) { return std::count(running.begin(), running.end(), 1) > 1 ? 2.0 : 1.0; }

TEST(EndOfStep, AStageAloneRunsItsSecondsFromItsStart) {
  const auto ends = end_of_step({3.0}, [](std::size_t, const std::vector<char>&) { return 0.5; });
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_DOUBLE_EQ(ends[0], 3.5);
  // Stages that never run at once each take their own seconds.
  const auto apart = end_of_step({0.0, 5.0}, halved_beside_others);
  EXPECT_DOUBLE_EQ(apart[0], 1.0);
  EXPECT_DOUBLE_EQ(apart[1], 6.0);
}

TEST(EndOfStep, StagesRunningAtOnceShareTheirLinkEventByEvent) {
  // Stage 1 starts at 0 (its items end first, as the last stage's do), stage 0 at 0.5. Stage 1
  // alone does half its work by 0.5; beside stage 0 both run at half pace, so stage 1's other
  // half takes 1.0 (ends 1.5) while stage 0 does half of its; then stage 0 alone does the rest
  // in 0.5 (ends 2.0).
  const auto ends = end_of_step({0.5, 0.0}, halved_beside_others);
  EXPECT_DOUBLE_EQ(ends[1], 1.5);
  EXPECT_DOUBLE_EQ(ends[0], 2.0);
  // Starting together, they end together at twice the seconds.
  const auto together = end_of_step({1.0, 1.0, 1.0}, halved_beside_others);
  for (const double e : together) EXPECT_DOUBLE_EQ(e, 3.0);
}

TEST(EndOfStep, OnlyTheStagesThatMeetSlowEachOther) {
  // Stages 0 and 1 meet on a link, stage 2 meets nobody: it keeps its pace alone.
  auto meets = [](std::size_t k, const std::vector<char>& running) { return k != 2 && running[0] && running[1] ? 2.0 : 1.0; };
  const auto ends = end_of_step({0.0, 0.0, 0.0}, meets);
  EXPECT_DOUBLE_EQ(ends[0], 2.0);
  EXPECT_DOUBLE_EQ(ends[1], 2.0);
  EXPECT_DOUBLE_EQ(ends[2], 1.0);
  // Told whom each stage meets (0 and 1 each other, 2 nobody), the same ends.
  EXPECT_EQ(end_of_step({0.0, 0.0, 0.0}, meets, StagesMet{{0, 1, 2, 2}, {1, 0}}), ends);
  EXPECT_EQ(end_of_step({0.0, 0.5, 0.2}, meets, StagesMet{{0, 1, 2, 2}, {1, 0}}), end_of_step({0.0, 0.5, 0.2}, meets));
}

TEST(EndOfStep, NothingToRunEndsAtTheStart) {
  const auto ends = end_of_step({2.0, 1.0}, [](std::size_t k, const std::vector<char>&) { return k == 0 ? 0.0 : 4.0; });
  EXPECT_DOUBLE_EQ(ends[0], 2.0);
  EXPECT_DOUBLE_EQ(ends[1], 5.0);
  EXPECT_TRUE(end_of_step({}, halved_beside_others).empty());
}

TEST(EndOfStep, NegativeOrNonFiniteTimesAreRefused) {
  EXPECT_THROW(end_of_step({0.0, 0.0}, halved_beside_others, StagesMet{{0, 1, 1}, {5}}), std::invalid_argument);  // no stage 5
  EXPECT_THROW(end_of_step({0.0, 0.0}, halved_beside_others, StagesMet{{0, 1}, {1}}), std::invalid_argument);     // one stage listed
  EXPECT_THROW(end_of_step({-1.0}, halved_beside_others), std::invalid_argument);
  EXPECT_THROW(end_of_step({std::numeric_limits<double>::quiet_NaN()}, halved_beside_others), std::invalid_argument);
  EXPECT_THROW(end_of_step({0.0}, [](std::size_t, const std::vector<char>&) { return -1.0; }), std::invalid_argument);
  EXPECT_THROW(end_of_step({0.0}, [](std::size_t, const std::vector<char>&) { return std::numeric_limits<double>::infinity(); }),
               std::invalid_argument);
}

// The estimate's DP step's end on a fabric that gives no stage its own figures (the default
// scenario's DP group without them): each stage runs its own work, the replayed stage's times
// its parameters' ratio, at the group's share from its own start, whoever runs beside it.
TEST(EndOfStep, WithoutPerStageFiguresEachStageRunsItsWorkAtTheGroupsShare) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/gpt3-175b-a100-1024.yaml");
  ASSERT_TRUE(loaded.ok());
  const plan::Plan& p = loaded.plan;
  GroupNetwork dense = group_network(p, hardware_profile(p.cluster.gpu), plan::GroupKind::dp_cp);
  dense.stage_fabric_fractions.clear();
  dense.stage_pair_fractions.clear();
  const GroupNetwork single;  // size 1: nothing to reduce over
  const DpNetworks nets{dense, single, single, single};
  AfterLastItem work;
  work.reductions = {{GpuParams{2.5e8, 0}, 4}, {GpuParams{1e8, 0}, 1}};
  CollectivePrices price;
  const double whole = after_last_item_s(p, nets, work, price, {dense.nic_bytes_per_s, single.nic_bytes_per_s, single.nic_bytes_per_s, single.nic_bytes_per_s});
  ASSERT_GT(whole, 0);
  const auto ends = dp_end_of_step(p, nets, work, price, {0.0, 0.1, 0.2}, {1.0, 0.5, 2.0});
  ASSERT_EQ(ends.size(), 3u);
  EXPECT_NEAR(ends[0], whole, 1e-12);
  EXPECT_NEAR(ends[1], 0.1 + 0.5 * whole, 1e-12);
  EXPECT_NEAR(ends[2], 0.2 + 2.0 * whole, 1e-12);
  EXPECT_THROW(dp_end_of_step(p, nets, work, price, {0.0, 0.1}, {1.0}), std::invalid_argument);

  // With the scenario's own figures: stages 5 and 6 meet (a third of the NIC each beside the
  // other, FabricShare tests), so starting together they end later than alone; stage 6 started
  // long after every other stage's end runs at its own share alone.
  const GroupNetwork real = group_network(p, hardware_profile(p.cluster.gpu), plan::GroupKind::dp_cp);
  const DpNetworks with{real, single, single, single};
  auto alone = [&](std::int64_t k) {
    return after_last_item_s(p, with, work, price, {stage_nic_bytes_per_s(real, k), single.nic_bytes_per_s, single.nic_bytes_per_s, single.nic_bytes_per_s});
  };
  std::vector<double> start(8, 0.0);
  const std::vector<double> scale(8, 1.0);
  const auto together = dp_end_of_step(p, with, work, price, start, scale);
  EXPECT_GT(together[6], 1.2 * alone(6));
  EXPECT_GT(together[5], 1.2 * alone(5));
  start[6] = 100.0;
  const auto later = dp_end_of_step(p, with, work, price, start, scale);
  EXPECT_NEAR(later[6], 100.0 + alone(6), 1e-9);
}

}  // namespace
}  // namespace meshwork::models
