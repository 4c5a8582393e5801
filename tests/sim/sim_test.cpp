// The simulator against the Program's replay, the straggler rule and the closed form.
#include <gtest/gtest.h>

#include <cmath>

#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"
#include "sim/simulate.hpp"

namespace meshwork::sim {
namespace {

plan::Plan load(const std::string& yaml) {
  auto r = plan::load_plan_text(yaml, plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

plan::Plan pipeline(const std::string& schedule, std::int64_t vpp) {
  return load("model: {preset: tiny, num_layers: 8}\ntraining: {global_batch_size: 8, micro_batch_size: 1, precision: bf16}\n"
              "parallelism: {pp: 4, vpp: " + std::to_string(vpp) + ", pipeline_schedule: " + schedule +
              "}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n");
}

TEST(Simulate, WithFreeCommunicationTheStepIsTheProgramsReplay) {
  for (const auto& [schedule, vpp] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2}, std::pair{"zero_bubble", 1}}) {
    SCOPED_TRACE(schedule);
    const plan::Plan p = pipeline(schedule, vpp);
    const auto program = *models::lower(p).program;
    const models::ComputeTimer timer(p);
    const auto replayed = models::replay(program, [&](const models::StageProgram&, const models::Instr& in) {
      return in.kind == models::InstrKind::compute ? timer(in.op, in.flops, in.bytes) : 0.0;
    });
    ASSERT_TRUE(replayed.error.empty()) << replayed.error;
    SimulateOptions free;
    free.free_communication = true;
    const SimulateResult r = simulate(p, free);
    ASSERT_TRUE(r.report) << r.error;
    EXPECT_NEAR(r.report->step_time_s, replayed.makespan_s, 1e-9 * replayed.makespan_s);
    EXPECT_EQ(r.report->method, report::Method::simulated);
  }
}

TEST(Simulate, OneRankTenPercentSlowerSlowsTheStepTenPercent) {
  const std::string base = "model: tiny\ntraining: {global_batch_size: 8, micro_batch_size: 1, precision: bf16}\n"
                           "parallelism: {tp: 2, dp: 2}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n";
  SimulateOptions free;
  free.free_communication = true;
  const SimulateResult even = simulate(load(base), free);
  const SimulateResult slow = simulate(load(base + "failures: {stragglers: [{rank: 3, slowdown: 1.10}]}\n"), free);
  ASSERT_TRUE(even.report && slow.report) << even.error << slow.error;
  EXPECT_NEAR(slow.report->step_time_s / even.report->step_time_s, 1.10, 0.005);
}

TEST(Simulate, AgreesWithTheEstimateOnASmallPlanWithoutContention) {
  // Llama 3 8B on one DGX H100: TP 4 x PP 2, no DP; NVLink only.
  const plan::Plan p = load("model: llama3-8b\ntraining: {global_batch_size: 8, micro_batch_size: 1, precision: bf16}\n"
                            "parallelism: {tp: 4, sp: true, pp: 2}\ncluster: {gpu: h100-sxm, num_gpus: 8, gpus_per_node: 8}\n");
  const SimulateResult r = simulate(p);
  ASSERT_TRUE(r.report) << r.error;
  const double estimated = models::estimate(p).step_time_s;
  EXPECT_NEAR(r.report->step_time_s / estimated, 1.0, 0.02);
  // The breakdown adds up to the step.
  EXPECT_NEAR(r.report->breakdown.total(), r.report->step_time_s, 1e-9 * r.report->step_time_s);
  EXPECT_GT(r.flows, 0);
  EXPECT_FALSE(r.hottest_links.empty());
}

TEST(Simulate, AnImpossibleFabricIsAnErrorNotACrash) {
  plan::Plan p = load("model: tiny\ntraining: {global_batch_size: 8, precision: bf16}\nparallelism: {tp: 2, pp: 2}\n"
                      "cluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n");
  p.failures.degraded_links.push_back({"no-such-link", 0.5});
  const SimulateResult r = simulate(p);
  EXPECT_FALSE(r.report);
  EXPECT_NE(r.error.find("failures.degraded_links"), std::string::npos) << r.error;
}

TEST(Simulate, ResultsSurviveTheTripThroughJson) {
  SimulateResult r;
  r.report = report::Report{};
  r.report->step_time_s = 1.5;
  r.hottest_links.push_back({"leaf0->spine1", 0.25, 1e9});
  r.flows = 7;
  const SimulateResult back = result_from_json(result_to_json(r));
  ASSERT_TRUE(back.report);
  EXPECT_DOUBLE_EQ(back.report->step_time_s, 1.5);
  EXPECT_EQ(back.hottest_links.front().name, "leaf0->spine1");
  EXPECT_EQ(back.flows, 7);
}

}  // namespace
}  // namespace meshwork::sim
