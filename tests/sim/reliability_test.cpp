// The reliability model against the textbook cases: Poisson interruptions, Daly's optimum
// checkpoint interval, Kokolis et al.'s ETTR, and the orderings the issue asks for.
#include "sim/reliability.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "models/estimate.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::reliability {
namespace {

constexpr double kMin = 60, kHour = 3600, kDay = 86400;

// One cause at `mtbf_s`, nothing else: the job runs, checkpoints, fails, restarts.
Inputs one_cause(double mtbf_s) {
  Inputs in;
  in.rate_per_s[static_cast<std::size_t>(Cause::software)] = 1 / mtbf_s;
  in.detection_s = 0;
  in.restart_s = 0;
  in.interval_s = 3600;
  return in;
}

TEST(Reliability, TheMeanTimeToInterruptionIsOneOverTheSummedRates) {
  // Three causes, exponential, checkpoints free: interruptions are a Poisson process of the
  // summed rate, so the mean time between them is 1 / sum.
  Inputs in;
  in.rate_per_s[static_cast<std::size_t>(Cause::gpu)] = 1 / (10 * kHour);
  in.rate_per_s[static_cast<std::size_t>(Cause::link)] = 1 / (20 * kHour);
  in.rate_per_s[static_cast<std::size_t>(Cause::software)] = 1 / (40 * kHour);
  in.detection_s = in.restart_s = 0;
  in.write_s = 0;
  in.horizon_s = 2000 * kHour;
  const double expected = 1 / (1 / 10.0 + 1 / 20.0 + 1 / 40.0) * kHour;
  const Summary s = run(in, 400, 7);
  EXPECT_NEAR(s.mtti_s, expected, std::max(s.mtti_ci95, 1e-9)) << "ci " << s.mtti_ci95;
  EXPECT_LT(s.mtti_ci95, 0.02 * expected);  // a tight interval: the test can fail
  // Each cause in proportion to its rate.
  EXPECT_NEAR(s.interruptions_by_cause[static_cast<std::size_t>(Cause::gpu)] / s.interruptions, 4.0 / 7, 0.01);
}

TEST(Reliability, DalysFormulaGivesHisPublishedOptima) {
  // Daly (2006), restart 10 min, checkpoint 5 min (docs/reference/published-runs.md D9).
  EXPECT_NEAR(daly_interval_s(5 * kMin, 24 * kHour) / kMin, 117, 1);
  EXPECT_NEAR(daly_interval_s(5 * kMin, 6 * kHour) / kMin, 57, 1);
  EXPECT_NEAR(daly_interval_s(5 * kMin, 15 * kMin) / kMin, 9.1, 0.1);
  EXPECT_NEAR(young_interval_s(5 * kMin, 24 * kHour) / kMin, std::sqrt(2 * 5 * 24 * 60.0), 1e-9);
  EXPECT_DOUBLE_EQ(daly_interval_s(100, 40), 40);  // checkpoints costlier than 2M: M
}

// Daly's assumptions: exponential failures (also during checkpoints and restarts), a
// synchronous checkpoint of 5 min, a restart of 10 min.
Inputs daly_case(double mtbf_s) {
  Inputs in = one_cause(mtbf_s);
  in.restart_s = 10 * kMin;
  in.write_s = 5 * kMin;
  in.horizon_s = 400 * mtbf_s;
  return in;
}

TEST(Reliability, TheMonteCarloSweepFindsDalysOptimum) {
  for (const auto& [mtbf, optimum] : {std::pair{24 * kHour, 117 * kMin}, std::pair{6 * kHour, 57 * kMin}, std::pair{15 * kMin, 9.1 * kMin}}) {
    SCOPED_TRACE(mtbf);
    const auto sweep = sweep_interval(daly_case(mtbf), optimum / 4, optimum * 4, 17, 60, 11);
    const Best b = best_interval(sweep);
    // Daly's optimum lies among the intervals whose goodput the best's 95% interval cannot
    // tell apart, and that range is not the whole sweep.
    EXPECT_LE(b.lo_s, optimum * 1.0001);
    EXPECT_GE(b.hi_s, optimum * 0.9999);
    EXPECT_GT(b.lo_s, optimum / 4);
    EXPECT_LT(b.hi_s, optimum * 4);
  }
}

TEST(Reliability, TheEttrMatchesKokolisClosedFormWhereItsAssumptionsHold) {
  // Failures rare against the interval (MTTI 2 days, interval 1 h), restart u0 = 10 min, a
  // 1-min synchronous checkpoint: E[ETTR] ~ (1 - (u0 + interval/2) / MTTI) / (1 + w / interval).
  Inputs in = one_cause(48 * kHour);
  in.restart_s = 10 * kMin;
  in.write_s = 1 * kMin;
  in.interval_s = 1 * kHour;
  in.horizon_s = 90 * 24 * kHour;
  const Summary s = run(in, 300, 3);
  const double closed = ettr_closed_form(1 / (48 * kHour), 10 * kMin, 1 * kHour, 1 * kMin);
  EXPECT_NEAR(s.goodput, closed, 0.01) << "closed form " << closed;
}

TEST(Reliability, AsynchronousCheckpointsBeatSynchronousOnesWhenWritesAreLong) {
  Inputs in = one_cause(6 * kHour);
  in.restart_s = 5 * kMin;
  in.write_s = 10 * kMin;  // long writes
  in.snapshot_s = 5;       // the device-to-host copy
  in.interval_s = 1 * kHour;
  in.horizon_s = 60 * 24 * kHour;
  const Summary sync = run(in, 100, 5);
  in.async = true;
  const Summary async = run(in, 100, 5);
  EXPECT_GT(async.goodput - async.goodput_ci95, sync.goodput + sync.goodput_ci95);
  EXPECT_LT(async.loss_s[static_cast<std::size_t>(Loss::checkpoint)], sync.loss_s[static_cast<std::size_t>(Loss::checkpoint)] / 10);
}

TEST(Reliability, TheInMemoryTierBeatsThePersistentOne) {
  // Node failures (a neighbour keeps each node's copy) with a slow persistent store.
  Inputs in;
  in.rate_per_s[static_cast<std::size_t>(Cause::node)] = 1 / (4 * kHour);
  in.nodes = 256;
  in.spares = 1000;
  in.restart_s = 5 * kMin;
  in.write_s = 10 * kMin;
  in.load_persistent_s = 10 * kMin;
  in.snapshot_s = 5;
  in.load_memory_s = 10;
  in.interval_s = 2 * kHour;
  in.memory_interval_s = 10 * kMin;
  in.horizon_s = 60 * 24 * kHour;
  const Summary persistent = run(in, 100, 9);
  in.memory_tier = true;
  const Summary tiered = run(in, 100, 9);
  EXPECT_GT(tiered.goodput - tiered.goodput_ci95, persistent.goodput + persistent.goodput_ci95);
  EXPECT_LT(tiered.loss_s[static_cast<std::size_t>(Loss::lost_work)], persistent.loss_s[static_cast<std::size_t>(Loss::lost_work)] / 3);
}

TEST(Reliability, ASeedReproducesARunExactlyAndAnotherSeedDoesNot) {
  Inputs in = daly_case(6 * kHour);
  in.sdc_per_s = 1 / (48 * kHour);
  in.straggler_per_s = 1 / (12 * kHour);
  in.straggler_s = 2 * kHour;
  in.straggler_factor = 1.2;
  const Trial a = run_trial(in, 42), b = run_trial(in, 42), c = run_trial(in, 43);
  EXPECT_EQ(a.wall_s, b.wall_s);
  EXPECT_EQ(a.useful_s, b.useful_s);
  EXPECT_EQ(a.interruptions, b.interruptions);
  EXPECT_EQ(a.loss_s, b.loss_s);
  EXPECT_NE(a.useful_s, c.useful_s);
}

TEST(Reliability, EverySecondIsTrainingOrALossWithACause) {
  Inputs in = daly_case(3 * kHour);
  in.sdc_per_s = 1 / (24 * kHour);
  in.straggler_per_s = 1 / (12 * kHour);
  in.straggler_s = 2 * kHour;
  in.straggler_factor = 1.25;
  in.rate_per_s[static_cast<std::size_t>(Cause::node)] = 1 / (10 * kHour);
  in.nodes = 64;
  in.shrink = true;
  in.replicas = 8;
  in.repair_s = 6 * kHour;
  in.async = true;
  in.snapshot_s = 10;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const Trial t = run_trial(in, seed);
    double sum = t.useful_s;
    for (double l : t.loss_s) sum += l;
    EXPECT_NEAR(sum, t.wall_s, 1e-6 * t.wall_s) << seed;
    for (double l : t.loss_s) EXPECT_GE(l, -1e-9);
  }
}

TEST(Reliability, ACaughtCorruptionRollsBackToBeforeIt) {
  // Only corruptions, caught at hourly checks, with checkpoints every 10 min: each costs the
  // work since the checkpoint before it (up to an hour and 10 min), never the whole run.
  Inputs in;
  in.sdc_per_s = 1 / (24 * kHour);
  in.sdc_check_s = kHour;
  in.interval_s = 10 * kMin;
  in.detection_s = in.restart_s = 0;
  in.horizon_s = 30 * 24 * kHour;
  const Summary s = run(in, 200, 1);
  const double per = s.loss_s[static_cast<std::size_t>(Loss::lost_work)] / s.interruptions;
  EXPECT_GT(per, 10 * kMin);
  EXPECT_LT(per, kHour + 10 * kMin);
}

TEST(Reliability, ThePlanGivesTheJobsRatesAndItsCheckpoint) {
  auto loaded = plan::load_plan_text(
      "model: gpt3-175b\ntraining: {global_batch_size: 1536, tokens: 300e9}\nparallelism: {tp: 8, pp: 8, dp: 16}\n"
      "cluster: {gpu: a100-sxm-80gb, num_gpus: 1024, gpus_per_node: 8, nics_per_node: 8, nic_bandwidth_gbps: 200}\n"
      "failures: {mtbf_hours: {gpu: 50000, node: 20000}, per_1000_node_days: {software: 5}}\n"
      "checkpoint: {write_gbytes_per_s: 273, mode: sync, on_failure: shrink_dp}\n",
      plan::Format::yaml);
  ASSERT_TRUE(loaded.ok());
  const Derived d = inputs_for(loaded.plan, 30.0);
  EXPECT_NEAR(d.inputs.rate_per_s[static_cast<std::size_t>(Cause::gpu)], 1024 / (50000 * kHour), 1e-15);
  EXPECT_NEAR(d.inputs.rate_per_s[static_cast<std::size_t>(Cause::node)], 128 / (20000 * kHour), 1e-15);
  EXPECT_NEAR(d.inputs.rate_per_s[static_cast<std::size_t>(Cause::software)], 128 * 5 / 1000.0 / (24 * kHour), 1e-15);
  EXPECT_NEAR(d.mtti_s, 1 / (1024 / (50000 * kHour) + 128 / (20000 * kHour) + 128 * 5 / 1000.0 / (24 * kHour)), 1e-6);
  // One replica of 16 lost: the estimate of the 15-replica mesh, the global batch kept where
  // it divides (1536 does not by 15: 1530), a little under 15/16 of the throughput.
  ASSERT_GE(d.inputs.shrunk_throughput.size(), 2u);
  EXPECT_GT(d.inputs.shrunk_throughput[1], 0.85);
  EXPECT_LT(d.inputs.shrunk_throughput[1], 1.0);
  // 175 B parameters x 14 B: 2.45 TB, written at 273 GB/s.
  EXPECT_NEAR(d.checkpoint_bytes / 1e12, 2.45, 0.05);
  EXPECT_NEAR(d.inputs.write_s, d.checkpoint_bytes / 273e9, 1e-9);
  EXPECT_NEAR(d.inputs.interval_s, daly_interval_s(d.inputs.write_s, d.mtti_s), 1e-9);
  // The token target: 300e9 / (1536 x 2048) steps of 30 s.
  EXPECT_NEAR(d.inputs.target_work_s, 300e9 / (1536.0 * 2048) * 30, 1e-6);
  // The checkpoint holds the optimizer's states as it keeps them: 2 + 12 in mixed precision, 4 + 8
  // in fp32, 2 + 4 with Adam in bf16 and no master copy (Nemotron-340B's recipe), 2 + 10 with
  // remainders.
  plan::TrainingConfig t;
  EXPECT_EQ(checkpoint_bytes_per_param(t), 14);
  t.optimizer_states = {plan::Precision::bf16, plan::Precision::bf16, plan::MasterWeights::none};
  EXPECT_EQ(checkpoint_bytes_per_param(t), 6);
  t.optimizer_states = {plan::Precision::fp32, plan::Precision::fp32, plan::MasterWeights::remainders};
  EXPECT_EQ(checkpoint_bytes_per_param(t), 12);
  t.optimizer_states = {};
  t.precision = plan::Precision::fp32;
  EXPECT_EQ(checkpoint_bytes_per_param(t), 12);
  plan::Plan bf16_states = loaded.plan;
  bf16_states.training.optimizer_states = {plan::Precision::bf16, plan::Precision::bf16, plan::MasterWeights::none};
  EXPECT_NEAR(inputs_for(bf16_states, 30.0).checkpoint_bytes, d.checkpoint_bytes * 6 / 14, 1e-6 * d.checkpoint_bytes);
}

// Shrinking an interleaved mesh keeps its micro-batches a multiple of PP (issue 18: validate
// refuses the rest, as Megatron-core does, and the shrunk plan fell back to dp'/dp): one replica
// of 16 lost, 1,536 does not divide by 15 x 8, so the global batch is 1,440 (96 micro-batches),
// and the throughput is the estimate's of that mesh.
TEST(Reliability, ShrinkingAnInterleavedMeshKeepsWholeGroupsOfMicroBatches) {
  const std::string cluster = "cluster: {gpu: a100-sxm-80gb, gpus_per_node: 8, nics_per_node: 8, nic_bandwidth_gbps: 200";
  const std::string parallel = "parallelism: {tp: 8, pp: 8, vpp: 2, pipeline_schedule: interleaved, ";
  auto loaded = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 1536, tokens: 300e9}\n" + parallel + "dp: 16}\n" + cluster +
                                         ", num_gpus: 1024}\nfailures: {mtbf_hours: {gpu: 50000}}\n"
                                         "checkpoint: {write_gbytes_per_s: 273, mode: sync, on_failure: shrink_dp}\n",
                                     plan::Format::yaml);
  ASSERT_TRUE(loaded.ok());
  auto shrunk = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 1440, tokens: 300e9}\n" + parallel + "dp: 15}\n" + cluster +
                                         ", num_gpus: 960}\n",
                                     plan::Format::yaml);
  ASSERT_TRUE(shrunk.ok());
  const double factor = models::estimate(shrunk.plan).tokens_per_s / models::estimate(loaded.plan).tokens_per_s;
  const Derived d = inputs_for(loaded.plan, 30.0);
  ASSERT_GE(d.inputs.shrunk_throughput.size(), 2u);
  EXPECT_DOUBLE_EQ(d.inputs.shrunk_throughput[1], std::min(1.0, factor));
  EXPECT_NE(d.inputs.shrunk_throughput[1], 15.0 / 16);
}

// ZeRO shards the checkpoint over the GPUs that hold one copy of the state: all of them with
// one distributed-optimizer instance, one instance's with several (each holds the whole
// state), so each GPU snapshots twice as much with two.
TEST(Reliability, DistributedOptimizerInstancesHoldTheirOwnCopyOfTheState) {
  auto derive = [](int instances) {
    auto loaded = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 1536}\n"
                                       "parallelism: {tp: 8, pp: 8, dp: 16, zero_stage: 1, num_distributed_optimizer_instances: " +
                                           std::to_string(instances) + "}\n"
                                       "cluster: {gpu: a100-sxm-80gb, num_gpus: 1024, gpus_per_node: 8}\n"
                                       "checkpoint: {mode: async, snapshot_gbytes_per_s: 25}\n",
                                       plan::Format::yaml);
    EXPECT_TRUE(loaded.ok());
    return inputs_for(loaded.plan, 30.0);
  };
  const Derived one = derive(1), two = derive(2);
  EXPECT_NEAR(one.inputs.snapshot_s, one.checkpoint_bytes / 1024 / 25e9, 1e-9);
  EXPECT_NEAR(two.inputs.snapshot_s, 2 * one.inputs.snapshot_s, 1e-9);
}

// Issue 21: a link or switch event that every group can route around costs the stall until
// the fabric reroutes (reroute_s), not a restart; a NIC's only link cuts its GPUs off and
// stops the job as before.
TEST(Reliability, AFabricLinkEventIsRoutedAroundAndANicLinkStopsTheJob) {
  const std::string head =
      "model: gpt3-175b\ntraining: {global_batch_size: 1536}\nparallelism: {tp: 8, pp: 8, dp: 16}\n"
      "cluster: {gpu: a100-sxm-80gb, num_gpus: 1024, gpus_per_node: 8, nics_per_node: 8, nic_bandwidth_gbps: 200, topology: {reroute_s: 30}}\n"
      "checkpoint: {interval: 1h, write_gbytes_per_s: 1000}\nrun: {horizon: 3d}\n";
  auto load = [&](const std::string& target) {
    auto loaded = plan::load_plan_text(head + "failures: {events: [{at: 1d, kind: link_down, target: " + target + "}]}\n", plan::Format::yaml);
    EXPECT_TRUE(loaded.ok()) << target;
    return inputs_for(loaded.plan, 30.0);
  };
  const Derived fabric = load("leaf0-spine0"), access = load("nic0-leaf0");
  ASSERT_EQ(fabric.inputs.reroutes.size(), 1u);
  EXPECT_EQ(fabric.inputs.reroutes[0], (std::pair<double, double>{kDay, 30.0}));
  EXPECT_TRUE(fabric.inputs.scheduled.empty());
  EXPECT_TRUE(access.inputs.reroutes.empty());
  ASSERT_EQ(access.inputs.scheduled.size(), 1u);
  const Trial routed = run_trial(fabric.inputs, 1), stopped = run_trial(access.inputs, 1);
  EXPECT_DOUBLE_EQ(routed.loss_s[static_cast<std::size_t>(Loss::reroute)], 30.0);
  std::int64_t interruptions = 0;
  for (auto n : routed.interruptions) interruptions += n;
  EXPECT_EQ(interruptions, 0);
  EXPECT_EQ(stopped.interruptions[static_cast<std::size_t>(Cause::link)], 1);
  EXPECT_GT(stopped.wall_s - stopped.useful_s, routed.wall_s - routed.useful_s);
}

// 1,024 A100 in 128 nodes, one 100 Gbit/s NIC each, fast storage: the nodes' links to the
// storage bound the persist stage.
constexpr const char* kPersistPlan =
    "model: gpt3-175b\ntraining: {global_batch_size: 1536}\n"
    "cluster: {gpu: a100-sxm-80gb, num_gpus: 1024, gpus_per_node: 8, nics_per_node: 1, nic_bandwidth_gbps: 100}\n"
    "failures: {mtbf_hours: {gpu: 50000}}\n";

Derived derived(const std::string& extra, double step_s, int zero_stage = 1) {
  auto loaded = plan::load_plan_text(std::string(kPersistPlan) + "parallelism: {tp: 8, pp: 8, dp: 16, zero_stage: " + std::to_string(zero_stage) + "}\n" + extra,
                                     plan::Format::yaml);
  EXPECT_TRUE(loaded.ok()) << extra;
  return inputs_for(loaded.plan, step_s);
}

TEST(Reliability, ThePersistStageIsItsSlowestOfStorageHostLinksAndSnapshot) {
  // ZeRO-1: every GPU writes its 1/1024 of the state; a node's 8 shares cross its 100 Gbit/s.
  Derived d = derived("checkpoint: {write_gbytes_per_s: 10000}\n", 10);
  const double bytes = d.checkpoint_bytes;
  EXPECT_NEAR(d.storage_s, bytes / 10000e9, 1e-9);
  EXPECT_NEAR(d.host_link_s, bytes / 1024 * 8 / 12.5e9, 1e-9);  // 2.45 TB / 128 nodes / 12.5 GB/s = 1.5 s
  EXPECT_NEAR(d.inputs.snapshot_s, bytes / 1024 / 25e9, 1e-12);
  EXPECT_NEAR(d.inputs.write_s, d.host_link_s, 1e-12);
  EXPECT_GT(d.host_link_s, d.storage_s);
  // A storage network of its own, 800 Gbit/s a node: the storage bounds it again.
  d = derived("checkpoint: {write_gbytes_per_s: 1000, storage_link_gbps_per_node: 800}\n", 10);
  EXPECT_NEAR(d.host_link_s, bytes / 1024 * 8 / 100e9, 1e-9);
  EXPECT_NEAR(d.inputs.write_s, bytes / 1000e9, 1e-9);
  // Without ZeRO one replica (64 GPUs, 8 nodes) writes the whole state: 8x a node's share.
  d = derived("checkpoint: {write_gbytes_per_s: 10000}\n", 10, 0);
  EXPECT_NEAR(d.host_link_s, bytes / 64 * 8 / 12.5e9, 1e-9);
  // The in-memory tier's copy: a GPU's share over its eighth of the node's NIC.
  d = derived("checkpoint: {tiers: [memory, persistent]}\n", 10);
  EXPECT_NEAR(d.inputs.memory_copy_s, bytes / 1024 / (12.5e9 / 8), 1e-9);
  EXPECT_GE(d.inputs.memory_interval_s, d.inputs.memory_copy_s);
}

TEST(Reliability, IntervalsAreBoundedByOneStepAndOnePersistentWrite) {
  // Automatic: Daly's optimum for the 93 ms snapshot stall (GPU MTTI 48.8 h: about 3 min)
  // lies under a 5 min step, so the step bounds it.
  Derived d = derived("checkpoint: {write_gbytes_per_s: 10000}\n", 300);
  EXPECT_NEAR(d.min_interval_s, 300, 1e-12);
  EXPECT_NEAR(d.inputs.interval_s, 300, 1e-12);
  EXPECT_TRUE(d.error.empty());
  // A 1 s step: the 1.5 s write bounds the interval from below.
  d = derived("checkpoint: {write_gbytes_per_s: 10000}\n", 1);
  EXPECT_NEAR(d.min_interval_s, d.inputs.write_s, 1e-12);
  EXPECT_GE(d.inputs.interval_s, d.inputs.write_s);
  // Written intervals below either bound are refused with the reason.
  d = derived("checkpoint: {write_gbytes_per_s: 10000, interval: 30}\n", 60);
  EXPECT_NE(d.error.find("checkpoint.interval: 30 s is shorter than one step (60 s)"), std::string::npos) << d.error;
  d = derived("checkpoint: {write_gbytes_per_s: 10000, interval: 1}\n", 0.5);
  EXPECT_NE(d.error.find("shorter than one persistent write (1.5 s"), std::string::npos) << d.error;
  // A synchronous write stalls the job, so it cannot overlap the next: only the step bounds it.
  d = derived("checkpoint: {write_gbytes_per_s: 10000, interval: 1, mode: sync}\n", 0.5);
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_NEAR(d.min_interval_s, 0.5, 1e-12);
  d = derived("checkpoint: {write_gbytes_per_s: 10000, interval: 1800}\n", 60);
  EXPECT_TRUE(d.error.empty()) << d.error;
}

TEST(Reliability, TheIntervalSweepHoldsThePlansIntervalAndNothingItCannotRun) {
  // Daly's optimum is seconds; the plan checkpoints every 30 min: the sweep reaches both.
  Derived d = derived("checkpoint: {write_gbytes_per_s: 10000, interval: 30 min}\n", 2);
  const double daly = daly_interval_s(d.inputs.snapshot_s, d.mtti_s);
  ASSERT_LT(daly * 8, 1800);
  SweepRange r = sweep_range(d, daly);
  EXPECT_LE(r.lo_s, 1800);
  EXPECT_GE(r.hi_s, 1800);
  EXPECT_GE(r.lo_s, d.min_interval_s);
  EXPECT_NEAR(r.lo_s, std::max(daly / 8, d.min_interval_s), 1e-9);
  // A bound above Daly/8: the sweep starts at it.
  d = derived("checkpoint: {write_gbytes_per_s: 10000}\n", 60);
  r = sweep_range(d, daly_interval_s(d.inputs.snapshot_s, d.mtti_s));
  EXPECT_NEAR(r.lo_s, 60, 1e-9);
  EXPECT_GT(r.hi_s, r.lo_s);
}

TEST(Reliability, DurationsReadAsAPersonWritesThem) {
  EXPECT_EQ(format_duration(0.014), "14 ms");
  EXPECT_EQ(format_duration(7.3), "7.3 s");
  EXPECT_EQ(format_duration(45), "45 s");
  EXPECT_EQ(format_duration(150), "2.5 min");
  EXPECT_EQ(format_duration(1800), "30 min");
  EXPECT_EQ(format_duration(5 * kHour), "5 h");
  EXPECT_EQ(format_duration(30 * 86400.0), "30 d");
}

TEST(Reliability, ACopyToTheNeighbourCutShortLeavesTheOlderSnapshot) {
  // In-memory checkpoints only, every 10 min: while a snapshot is still on its way to the
  // neighbour a failure restores the one before, so a slow copy loses more work (the same
  // failures: common random numbers).
  Inputs in = one_cause(2 * kHour);
  in.persistent_tier = false;
  in.memory_tier = true;
  in.memory_interval_s = 10 * kMin;
  in.horizon_s = 500 * kHour;
  const Summary fast = run(in, 50, 3);
  in.memory_copy_s = 5 * kMin;
  const Summary slow = run(in, 50, 3);
  const auto lost = [](const Summary& s) { return s.loss_s[static_cast<std::size_t>(Loss::lost_work)] / s.interruptions; };
  // Lost per interruption: about half an interval, and with the copy a half of the failures
  // (those within 5 min of a snapshot) lose a whole interval more: about +2.5 min on average.
  EXPECT_NEAR(lost(fast), 5 * kMin, 0.5 * kMin);
  EXPECT_NEAR(lost(slow) - lost(fast), 5 * kMin, 1.0 * kMin);
}

TEST(Reliability, TheLlama3PresetReproducesItsFleetsInterruptions) {
  // The preset is derived from L3's 419 interruptions in 54 days on this fleet (not a
  // validation, a consistency check of the derivation and of the component counts).
  auto loaded = plan::load_plan(std::string(MESHWORK_SOURCE_DIR) + "/scenarios/heldout/llama3-405b-h100-16384.yaml");
  ASSERT_TRUE(loaded.ok());
  const Derived d = inputs_for(loaded.plan, 7.5);
  EXPECT_NEAR(54 * 24 * kHour / d.mtti_s, 419, 419 * 0.01);
}

}  // namespace
}  // namespace meshwork::reliability
