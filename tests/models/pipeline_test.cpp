// models/pipeline, the estimate's replay of the schedule item by item: its extrapolation over
// the steady state against the whole replay, and transfers on the critical path by hand. (Its
// agreement with the Program's replay is in program_test.cpp, which lowers the plans.)
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "models/pipeline.hpp"

namespace meshwork::models {
namespace {

// The replay extrapolated over its steady state gives what replaying every micro-batch gives:
// 1F1B, ZB-H1 and the interleaved schedule, stages of different speeds (the slowest first, in
// the middle or last), per-boundary transfers, receives posted ahead or not, and micro-batch
// counts from just past the short step to many periods beyond it.
TEST(Pipeline, ExtrapolatedSteadyStateMatchesTheWholeReplay) {
  std::uint64_t seed = 12345;
  auto uniform = [&seed] {  // a fixed LCG: the same cases every run
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(seed >> 11) / static_cast<double>(1ULL << 53);
  };
  for (const auto schedule : {plan::PipelineSchedule::one_f_one_b, plan::PipelineSchedule::zero_bubble, plan::PipelineSchedule::interleaved}) {
    int extrapolated = 0;
    for (const std::int64_t p : {2, 3, 4, 8}) {
      for (int trial = 0; trial < 8; ++trial) {
        const bool interleaved = schedule == plan::PipelineSchedule::interleaved;
        PipelineSpec spec;
        spec.schedule = schedule;
        spec.stages = p;
        spec.chunks = interleaved ? 2 + trial % 2 : 1;
        spec.microbatches = interleaved ? p * (4 + 3 * trial) : 3 * p + 7 * trial + 1;
        spec.preposted = trial % 4 != 1;
        spec.transfer_s = 0.3 * uniform();
        for (std::int64_t b = 0; b < p; ++b) spec.boundary_transfer_s.push_back(trial / 2 % 2 ? 0.5 * uniform() : spec.transfer_s);
        for (std::int64_t i = 0; i < p * spec.chunks; ++i) {
          // Trials 4 and 5: one stage in the middle twice as slow as the rest.
          const bool slow = trial / 2 == 2 && i / spec.chunks == p / 2;
          const double f = (0.5 + uniform()) * (slow ? 2 : 1);
          spec.forward_s.push_back(f);
          spec.backward_s.push_back(f * (1.5 + uniform()));
          spec.weight_s.push_back(trial == 7 ? 0 : f * 0.7 * uniform());  // trial 7: W items of no time
        }
        PipelineSpec whole = spec, compute = spec, compute_whole = spec;
        whole.extrapolate = false;
        compute.transfer_s = 0;
        compute.boundary_transfer_s.clear();
        compute_whole = compute;
        compute_whole.extrapolate = false;
        const PipelineTimes a = pipeline_times(spec), b = pipeline_times(whole);
        // The two-lane replay (the estimate's, with communication and without) alike.
        const auto [lane_a, lane_b] = pipeline_times(spec, compute);
        const PipelineTimes c = pipeline_times(compute_whole);
        const std::string what = std::string(plan::to_string(schedule)) + " p " + std::to_string(p) + " trial " + std::to_string(trial);
        EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-9 * b.makespan_s) << what;
        EXPECT_NEAR(lane_a.makespan_s, b.makespan_s, 1e-9 * b.makespan_s) << what;
        EXPECT_NEAR(lane_b.makespan_s, c.makespan_s, 1e-9 * c.makespan_s) << what;
        for (std::size_t s = 0; s < b.idle_s.size(); ++s) {
          EXPECT_NEAR(a.busy_s[s], b.busy_s[s], 1e-9 * b.makespan_s) << what << " stage " << s;
          EXPECT_NEAR(a.idle_s[s], b.idle_s[s], 1e-9 * b.makespan_s) << what << " stage " << s;
          EXPECT_NEAR(a.end_s[s], b.end_s[s], 1e-9 * b.makespan_s) << what << " stage " << s;
          EXPECT_NEAR(lane_b.idle_s[s], c.idle_s[s], 1e-9 * c.makespan_s) << what << " stage " << s;
        }
        EXPECT_EQ(b.replayed_microbatches, spec.microbatches);
        extrapolated += a.replayed_microbatches < spec.microbatches;
      }
    }
    // Most cases of each schedule take the short step; a check that always fell back would
    // pass the comparisons above without this.
    EXPECT_GT(extrapolated, 16) << plan::to_string(schedule);
  }
}

// Where the steady state has not settled by the first short step (no room for a transient),
// the replay tries a step with p micro-batches more before it replays them all: on two
// interleaved stages of 48 micro-batches the short steps are 6 and 8 micro-batches. Random
// uneven stages and transfers; each lands on one of the three, and the answers are the whole
// replay's.
TEST(Pipeline, ASecondShortStepWhereTheFirstHasNotSettled) {
  std::uint64_t seed = 777;
  auto uniform = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(seed >> 11) / static_cast<double>(1ULL << 53);
  };
  int by_steps[3] = {0, 0, 0};  // replayed 6, 8, 48 micro-batches
  for (int trial = 0; trial < 200; ++trial) {
    PipelineSpec spec;
    spec.schedule = plan::PipelineSchedule::interleaved;
    spec.stages = 2;
    spec.chunks = 2;
    spec.microbatches = 48;
    spec.preposted = trial % 2 == 0;
    for (int b = 0; b < 2; ++b) spec.boundary_transfer_s.push_back(2 * uniform());
    for (int i = 0; i < 4; ++i) {
      const double f = 0.2 + 3 * uniform();
      spec.forward_s.push_back(f);
      spec.backward_s.push_back(f * (1 + 2 * uniform()));
    }
    PipelineSpec whole = spec;
    whole.extrapolate = false;
    const PipelineTimes a = pipeline_times(spec), b = pipeline_times(whole);
    const std::string what = "trial " + std::to_string(trial);
    EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-9 * b.makespan_s) << what;
    for (std::size_t s = 0; s < 2; ++s) EXPECT_NEAR(a.idle_s[s], b.idle_s[s], 1e-9 * b.makespan_s) << what;
    for (std::size_t s = 0; s < 2; ++s) EXPECT_NEAR(a.end_s[s], b.end_s[s], 1e-9 * b.makespan_s) << what;
    by_steps[a.replayed_microbatches == 6 ? 0 : a.replayed_microbatches == 8 ? 1 : 2] += 1;
    if (a.replayed_microbatches != 6 && a.replayed_microbatches != 8) {
      EXPECT_EQ(a.replayed_microbatches, 48) << what;
    }
  }
  // 16, 169 and 15 of the 200 when written: every path is taken.
  EXPECT_GT(by_steps[0], 0);
  EXPECT_GT(by_steps[1], 0);
  EXPECT_GT(by_steps[2], 0);
}

// Two stages, two micro-batches, t_F = 1, t_B = 2, a transfer 0.5 (by hand, F/B per stage):
// free:      stage 1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; stage 0 B0 [4,6] B1 [7,9]: 9.
// preposted: stage 1 F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] (sent at 2) B1 [5.5,7.5];
//            stage 0 B0 [5,7] B1 [8,10]: 10, the steady state's two transfers on the path.
// rendezvous: stage 1's F1 transfer leaves only when it gets there (4.5): F1 [5,6] B1 [6,8];
//            stage 0 B1 [8.5,10.5]: 10.5.
// Two stages of t_F = 1, t_B = 2 (the weight gradients' part `weight` of it).
PipelineSpec two_stages(plan::PipelineSchedule schedule, std::int64_t microbatches, double weight) {
  PipelineSpec spec;
  spec.schedule = schedule;
  spec.stages = 2;
  spec.microbatches = microbatches;
  spec.forward_s = {1, 1};
  spec.backward_s = {2, 2};
  spec.weight_s = {weight, weight};
  return spec;
}

TEST(Pipeline, TransfersOnTheCriticalPathByHand) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::one_f_one_b, 2, 0);
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 9);
  spec.transfer_s = 0.5;
  const PipelineTimes posted = pipeline_times(spec);
  EXPECT_DOUBLE_EQ(posted.makespan_s, 10);
  EXPECT_DOUBLE_EQ(posted.idle_s[0], 4);
  EXPECT_DOUBLE_EQ(posted.idle_s[1], 4);
  // Each stage's last item: stage 0's B1 at 10, stage 1's B1 at 7.5.
  ASSERT_EQ(posted.end_s.size(), 2u);
  EXPECT_DOUBLE_EQ(posted.end_s[0], 10);
  EXPECT_DOUBLE_EQ(posted.end_s[1], 7.5);
  spec.preposted = false;
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 10.5);
}

// A stage's item held longer than its seconds (its own DP collectives taking SMs:
// PipelineSpec::delays) makes its neighbours wait for it. The two stages above without
// transfers: stage 1's B0 held 0.5 s runs [2, 4.5], so its F1 [4.5, 5.5] and B1 [5.5, 7.5], and
// stage 0's B0 [4.5, 6.5] and B1 [7.5, 9.5]: 9.5 instead of 9. Stage 1's idle (9.5 less its 6 s
// of items) holds its own 0.5 s; stage 0's 3.5 s is all waiting. An item that cannot start
// before a time (PipelineSpec::not_before: stage 0's F0 at 1) moves all that follows it.
TEST(Pipeline, AStageHeldMakesItsNeighboursWaitByHand) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::one_f_one_b, 2, 0);
  spec.delays.push_back({1, 0, Pass::backward, 0, 0.5});
  const PipelineTimes held = pipeline_times(spec);
  EXPECT_DOUBLE_EQ(held.makespan_s, 9.5);
  EXPECT_DOUBLE_EQ(held.end_s[0], 9.5);
  EXPECT_DOUBLE_EQ(held.end_s[1], 7.5);
  EXPECT_DOUBLE_EQ(held.busy_s[1], 6);
  EXPECT_DOUBLE_EQ(held.idle_s[0], 3.5);
  EXPECT_DOUBLE_EQ(held.idle_s[1], 3.5);
  // Held on one lane of two: the other replays as without.
  const auto [with, without] = pipeline_times(spec, two_stages(plan::PipelineSchedule::one_f_one_b, 2, 0));
  EXPECT_DOUBLE_EQ(with.makespan_s, 9.5);
  EXPECT_DOUBLE_EQ(without.makespan_s, 9);
  EXPECT_TRUE(with.held_back_s.empty());
  spec.delays.clear();
  spec.not_before.push_back({0, 0, Pass::forward, 0, 1.0});
  const PipelineTimes late = pipeline_times(spec);
  EXPECT_DOUBLE_EQ(late.makespan_s, 10);
  // Stage 0 waited 1 s for its earliest start; stage 1 waits for stage 0's F0, not for one.
  ASSERT_EQ(late.held_back_s.size(), 2u);
  EXPECT_DOUBLE_EQ(late.held_back_s[0], 1);
  EXPECT_DOUBLE_EQ(late.held_back_s[1], 0);
  // A later start than the item would take anyway changes nothing (stage 0's F1 is free at 1,
  // and at 3 still ahead of what waits for it).
  spec.not_before = {{0, 0, Pass::forward, 1, 3.0}};
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 9);
  // Held plans are replayed whole, and agree with the extrapolation where the delays repeat
  // every period: interleaved, every stage's every backward held alike.
  PipelineSpec interleaved;
  interleaved.schedule = plan::PipelineSchedule::interleaved;
  interleaved.stages = 4;
  interleaved.chunks = 2;
  interleaved.microbatches = 32;
  interleaved.forward_s.assign(8, 1.0);
  interleaved.backward_s.assign(8, 2.0);
  interleaved.transfer_s = 0.1;
  PipelineSpec slower = interleaved;
  slower.backward_s.assign(8, 2.25);
  for (std::int32_t s = 0; s < 4; ++s) {
    for (std::int32_t c = 0; c < 2; ++c) {
      for (std::int32_t mb = 0; mb < 32; ++mb) interleaved.delays.push_back({s, c, Pass::backward, mb, 0.25});
    }
  }
  const PipelineTimes a = pipeline_times(interleaved), b = pipeline_times(slower);
  EXPECT_EQ(a.replayed_microbatches, 32);
  EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-9 * b.makespan_s);
  EXPECT_NEAR(a.busy_s[0] + 32 * 2 * 0.25, b.busy_s[0], 1e-9);
}

TEST(Pipeline, DelaysOutsideTheScheduleAreRefused) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::one_f_one_b, 2, 0);
  for (const PipelineSpec::Delay bad : {PipelineSpec::Delay{2, 0, Pass::forward, 0, 0.1}, PipelineSpec::Delay{0, 1, Pass::forward, 0, 0.1},
                                        PipelineSpec::Delay{0, 0, Pass::forward, 2, 0.1}, PipelineSpec::Delay{0, 0, Pass::forward, 0, -0.1},
                                        PipelineSpec::Delay{0, 0, Pass::forward, 0, std::numeric_limits<double>::quiet_NaN()},
                                        PipelineSpec::Delay{0, 0, static_cast<Pass>(7), 0, 0.1}}) {
    spec.delays = {bad};
    EXPECT_THROW(pipeline_times(spec), std::invalid_argument);
    spec.delays.clear();
    spec.not_before = {bad};
    EXPECT_THROW(pipeline_times(spec), std::invalid_argument);
    spec.not_before.clear();
  }
}

// A stage's DP stream played beside its items where the schedule places them (issue 18), by
// hand: two stages, 1F1B, one micro-batch, forwards of 1 s and backwards of 2 s.
TEST(Pipeline, ADpStreamSlowsItsStagesItemsWhereTheyRunBesideItByHand) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::one_f_one_b, 1, 0);
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 6);
  // Both stages' streams take half the SMs: stage 0's gathers dispatched with the step until
  // 0.5 s, stage 1's reduction issued 1 s into its backward, for 2 s.
  spec.dp_streams = {{0.5, 0.5}, {0.5, 0}};
  spec.issues = {{1, 0, Pass::backward, 0, 1.0, 2.0}};
  const PipelineTimes t = pipeline_times(spec);
  // Stage 0's F0: 0.25 s of work in the first 0.5 s, the other 0.75 at full speed: 1.25. Stage
  // 1's F0 to 2.25, its B0's first second to 3.25, where it issues the reduction [3.25, 5.25):
  // its last second of work at half speed, to 5.25. Stage 0's B0 then to 7.25.
  EXPECT_DOUBLE_EQ(t.makespan_s, 7.25);
  EXPECT_DOUBLE_EQ(t.end_s[0], 7.25);
  EXPECT_DOUBLE_EQ(t.end_s[1], 5.25);
  ASSERT_EQ(t.slowed_s.size(), 2u);
  EXPECT_DOUBLE_EQ(t.slowed_s[0], 0.25);
  EXPECT_DOUBLE_EQ(t.slowed_s[1], 1);
  ASSERT_EQ(t.dp_end_s.size(), 2u);
  EXPECT_DOUBLE_EQ(t.dp_end_s[0], 0.5);
  EXPECT_DOUBLE_EQ(t.dp_end_s[1], 5.25);
  // The same stage's gathers reached late slow nothing: stage 1 starts at 1.25, after its 1 s.
  spec.dp_streams = {{0.5, 0.5}, {0.5, 1.0}};
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 7.25);
  // A collective issued when the stream is still busy waits for it: a second one issued with
  // the first runs after it, [5.25, 6.25), beside no compute left.
  spec.issues.push_back({1, 0, Pass::backward, 0, 1.0, 1.0});
  const PipelineTimes queued = pipeline_times(spec);
  EXPECT_DOUBLE_EQ(queued.makespan_s, 7.25);
  EXPECT_DOUBLE_EQ(queued.dp_end_s[1], 6.25);
  // An issue after its item's compute is refused; one on a pass the schedule does not run
  // holds nothing.
  spec.issues = {{1, 0, Pass::backward, 0, 2.5, 1.0}};
  EXPECT_THROW(pipeline_times(spec), std::invalid_argument);
  spec.issues = {{1, 0, Pass::backward_weight, 0, 0.5, 1.0}};
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 6.25);
  spec.dp_streams = {{1.0, 0}};  // a stream that would take every SM
  EXPECT_THROW(pipeline_times(spec), std::invalid_argument);
}

// A transfer shares its NIC with the DP stream of the stage sending or receiving it where the
// two run at once (PipelineSpec::shared_transfer_s), by hand.
TEST(Pipeline, ATransferBesideADpCollectiveTakesTheSharedRateByHand) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::one_f_one_b, 1, 0);
  spec.transfer_s = 1;
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 8);
  // Stage 1 issues a 10 s reduction at its B0's end (5 s): the gradient it sends then moves at
  // half the rate, 2 s, and stage 0's B0 runs from 7 to 9.
  spec.dp_streams = {{0.25, 0}, {0.25, 0}};
  spec.issues = {{1, 0, Pass::backward, 0, 2.0, 10.0}};
  EXPECT_DOUBLE_EQ(pipeline_times(spec).makespan_s, 8);  // no shared rate given
  spec.shared_transfer_s = 2;
  const PipelineTimes t = pipeline_times(spec);
  EXPECT_DOUBLE_EQ(t.makespan_s, 9);
  EXPECT_DOUBLE_EQ(t.dp_end_s[1], 15);
  // Issued at the backward's start instead, the reduction runs [3, 13) beside the backward
  // (slowed by a quarter: 2 s of work in 2.667 s) and the transfer: 5.667 + 2, then 2 s.
  spec.issues = {{1, 0, Pass::backward, 0, 0.0, 10.0}};
  EXPECT_NEAR(pipeline_times(spec).makespan_s, 3 + 2 / 0.75 + 2 + 2, 1e-12);
  // Beside a lane without streams, that lane replays as alone.
  const PipelineSpec plain = two_stages(plan::PipelineSchedule::one_f_one_b, 1, 0);
  const auto [with, without] = pipeline_times(spec, plain);
  EXPECT_NEAR(with.makespan_s, 3 + 2 / 0.75 + 2 + 2, 1e-12);
  EXPECT_DOUBLE_EQ(without.makespan_s, pipeline_times(plain).makespan_s);
  EXPECT_TRUE(without.slowed_s.empty());
  // Three stages: stage 2 issues a 10 s reduction at its B0's end (7 s). Its gradient to stage
  // 1 crosses boundary 1 (stages 1 and 2) at half the rate, 7 to 9; stage 1's to stage 0
  // crosses boundary 0 (stages 0 and 1, no collective) in 1 s: S1 B0 9-11, S0 B0 12-14.
  PipelineSpec three;
  three.schedule = plan::PipelineSchedule::one_f_one_b;
  three.stages = 3;
  three.microbatches = 1;
  three.forward_s = {1, 1, 1};
  three.backward_s = {2, 2, 2};
  three.transfer_s = 1;
  EXPECT_DOUBLE_EQ(pipeline_times(three).makespan_s, 13);
  three.shared_transfer_s = 2;
  three.dp_streams = {{0.25, 0}, {0.25, 0}, {0.25, 0}};
  three.issues = {{2, 0, Pass::backward, 0, 2.0, 10.0}};
  EXPECT_DOUBLE_EQ(pipeline_times(three).makespan_s, 14);
}

// An item or a transfer of negative seconds is refused, naming it: the replay's zero end stands
// for "nothing to wait for" (models/pipeline.cpp), so no item may end before the step starts.
TEST(Pipeline, NegativeSecondsAreRefused) {
  PipelineSpec spec = two_stages(plan::PipelineSchedule::zero_bubble, 4, 1);
  EXPECT_NO_THROW(pipeline_times(spec));
  spec.weight_s = {1, 3};  // stage 1's input gradient: 2 - 3 s
  try {
    pipeline_times(spec);
    ADD_FAILURE() << "a negative input gradient was replayed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1"), std::string::npos) << e.what();
  }
  spec.weight_s = {1, 1};
  spec.transfer_s = -0.5;
  EXPECT_THROW(pipeline_times(spec), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::models
