// nccl-tests outputs (docs/reference/nccl-tests, real H100 runs) read, fitted and turned into a
// plan's fabric calibration by the cost model itself.
#include "models/nccl_tests.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

const std::filesystem::path kDir = std::filesystem::path(MESHWORK_SOURCE_DIR) / "docs/reference/nccl-tests";

std::vector<NcclTestBlock> read(const std::string& file) {
  std::ifstream in(kDir / file);
  std::stringstream text;
  text << in.rdbuf();
  return parse_nccl_tests(text.str(), file);
}

plan::Plan llama_plan() {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/heldout/llama3-405b-h100-8192.yaml");
  EXPECT_TRUE(loaded.ok());
  return loaded.plan;
}

NcclTestBlock block(const char* collective, const char* where, std::int64_t ranks, std::vector<NcclTestPoint> points) {
  NcclTestBlock b;
  b.collective = collective;
  b.where = where;
  b.ranks = ranks;
  b.nodes = 1;
  b.points = std::move(points);
  return b;
}

// Latency and bandwidth fitted on every other size; the worst relative error on the sizes between.
double worst_held_back_error(const NcclTestBlock& b) {
  std::vector<NcclTestPoint> fitted, held;
  for (std::size_t i = 0; i < b.points.size(); ++i) (i % 2 == 0 ? fitted : held).push_back(b.points[i]);
  const auto fit = fit_latency_bandwidth(fitted);
  double worst = 0;
  for (const auto& p : held) worst = std::max(worst, std::abs(fit.time_s(p.bytes) - p.time_s) / p.time_s);
  return worst;
}

TEST(NcclTests, ReadsEveryBlockOfAFileWithItsRanksAndHosts) {
  const auto blocks = read("h100x8_1node_nvswitch_xxrjun-cluster01_cnode3-002.txt");
  ASSERT_EQ(blocks.size(), 5U);
  const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].collective, names[i]);
    EXPECT_EQ(blocks[i].ranks, 8);
    EXPECT_EQ(blocks[i].nodes, 1);
  }
  ASSERT_EQ(blocks[0].points.size(), 10U);
  EXPECT_DOUBLE_EQ(blocks[0].points[0].bytes, 33554432);
  EXPECT_DOUBLE_EQ(blocks[0].points[0].time_s, 182.87e-6);
  EXPECT_DOUBLE_EQ(blocks[0].points[0].busbw_bytes_per_s, 321.10e9);
  const auto multi = read("h100_10nodes_x8gpu_xxrjun-cluster01_N10_G8.txt");
  ASSERT_FALSE(multi.empty());
  EXPECT_EQ(multi[0].ranks, 80);
  EXPECT_EQ(multi[0].nodes, 10);
}

TEST(NcclTests, NamesTheCollectiveFromBusbwWhenTheStartingLineIsMissing) {
  // The A3-Mega output lost some leading '#' (inside a markdown fence) and has no "starting" line.
  const auto a3 = read("h100_2nodes_gcp-a3mega_tcpxo_allreduce.txt");
  ASSERT_EQ(a3.size(), 1U);
  EXPECT_EQ(a3[0].collective, "all_reduce");
  EXPECT_EQ(a3[0].ranks, 16);
  EXPECT_EQ(a3[0].nodes, 2);
  EXPECT_DOUBLE_EQ(a3[0].points.front().bytes, 8);
  EXPECT_DOUBLE_EQ(a3[0].points.back().time_s, 47535e-6);
  const auto dgx = read("h100x8_1node_dgx_nvidia-dgxc-benchmarking_allreduce.txt");
  ASSERT_EQ(dgx.size(), 1U);
  EXPECT_EQ(dgx[0].collective, "all_reduce");
  EXPECT_EQ(dgx[0].ranks, 8);
}

TEST(NcclTests, AReduceIsNotTakenForAnAllReduce) {
  // reduce_perf on 2 ranks: a sum with busbw = algbw, an all-reduce's ratio at n = 2; its root
  // column names rank 0. Without the starting line it stays unnamed, and sets nothing.
  const std::string text = "#  Rank  0 Group  0 Pid 1 on a device  0 [0] GPU\n"
                           "#  Rank  1 Group  0 Pid 2 on a device  1 [1] GPU\n"
                           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
                           "     1048576    262144     float     sum       0    20.00   52.43   52.43      0\n"
                           "    16777216   4194304     float     sum       0   120.00  139.81  139.81      0\n";
  const auto blocks = parse_nccl_tests(text, "reduce.txt");
  ASSERT_EQ(blocks.size(), 1U);
  EXPECT_EQ(blocks[0].collective, "");
  const auto cal = calibrate_from_nccl_tests(llama_plan(), blocks);
  EXPECT_TRUE(cal.blocks[0].field.empty());
  // The same rows with root -1 are an all-reduce's.
  std::string all_reduce = text;
  for (std::size_t at = all_reduce.find("sum       0"); at != std::string::npos; at = all_reduce.find("sum       0", at))
    all_reduce.replace(at, 11, "sum      -1");
  EXPECT_EQ(parse_nccl_tests(all_reduce, "all_reduce.txt")[0].collective, "all_reduce");
}

TEST(NcclTests, OneSizeRepeatedGivesNoFit) {
  const NcclTestBlock b = block("all_gather", "one-size.txt:3", 8, {{1e9, 3e-3, 3.3e11, 2.9e11}, {1e9, 3.1e-3, 3.2e11, 2.8e11}});
  EXPECT_THROW((void)fit_latency_bandwidth(b.points), std::invalid_argument);
  const auto cal = calibrate_from_nccl_tests(llama_plan(), {b});
  EXPECT_TRUE(cal.blocks[0].field.empty());
  EXPECT_NE(cal.blocks[0].why.find("two different sizes"), std::string::npos) << cal.blocks[0].why;
}

TEST(NcclTests, ABadRowOrNoTableIsAnErrorNamingTheLine) {
  const std::string header = "#  Rank  0 Group  0 Pid 1 on a device  0 [0] GPU\n"
                             "#       size         count      type   redop    root     time   algbw   busbw #wrong\n";
  try {
    (void)parse_nccl_tests(header + "     1024   256   float   sum   -1   12.x   0.08   0.15   0\n", "bad.txt");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("time"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)parse_nccl_tests(header + "     1024   256   float\n", "short.txt"), std::invalid_argument);
  EXPECT_THROW((void)parse_nccl_tests("# nothing measured\n", "empty.txt"), std::invalid_argument);
}

TEST(NcclTests, LatencyAndBandwidthPredictTheSizesHeldBack) {
  // Fit on every other size and check the sizes between them. Inside one node from 32 MiB up,
  // latency + size / bandwidth holds within 6% (measured: 2.5, 2.7, 4.5, 5.4%).
  for (const auto& b : read("h100x8_1node_nvswitch_xxrjun-cluster01_cnode3-002.txt")) {
    if (b.collective == "sendrecv") continue;  // the test's own pairing, not a collective
    EXPECT_LT(worst_held_back_error(b), 0.06) << b.collective;
    EXPECT_GT(fit_latency_bandwidth(b.points).latency_s, 0) << b.collective;
  }
  // From 8 B to 16 GiB it does not: NCCL changes protocol (LL, LL128, Simple) with size, and one
  // line misses the sizes between by a third (issue 20's message-size model is still to come).
  const auto dgx = read("h100x8_1node_dgx_nvidia-dgxc-benchmarking_allreduce.txt").front();
  EXPECT_GT(worst_held_back_error(dgx), 0.3);
  EXPECT_THROW((void)fit_latency_bandwidth({dgx.points.front()}), std::invalid_argument);
}

TEST(NcclTests, CalibrationMakesTheCostModelReproduceTheLargestMeasurement) {
  const plan::Plan p = llama_plan();
  auto blocks = read("h100x8_1node_nvswitch_xxrjun-cluster01_cnode3-002.txt");
  for (auto& b : read("h100_10nodes_x8gpu_xxrjun-cluster01_N10_G8.txt")) blocks.push_back(b);
  const auto cal = calibrate_from_nccl_tests(p, blocks);
  ASSERT_EQ(cal.blocks.size(), blocks.size());
  double intra = 10, nic = 10;
  for (const auto& r : cal.blocks) {
    const NcclTestBlock& b = *r.block;
    if (b.collective == "sendrecv") {
      EXPECT_TRUE(r.field.empty());
      EXPECT_FALSE(r.why.empty());
      continue;
    }
    if (b.collective == "all_reduce" && b.nodes == 1) {
      // On NVSwitch the model runs it with NVLink SHARP, whose rate is the generation's: the ring's
      // efficiency is not what it measures (solving for it gave 1.07, an efficiency above 1).
      EXPECT_TRUE(r.field.empty());
      EXPECT_NE(r.why.find("nvls"), std::string::npos) << r.why;
      continue;
    }
    ASSERT_FALSE(r.field.empty()) << b.where << ": " << r.why;
    EXPECT_EQ(r.field, b.nodes > 1 ? "nic_efficiency" : "intra_node_efficiency");
    (b.nodes > 1 ? nic : intra) = std::min(b.nodes > 1 ? nic : intra, r.efficiency);
    // The cost model, given the efficiency, on the block's group (its ranks per host on the
    // plan's nodes: DP members TP apart), gives the largest size's measured time.
    plan::Plan q = p;
    q.parallelism = {};
    q.parallelism.tensor_model_parallel_size = 8 / (b.ranks / b.nodes);
    q.parallelism.data_parallel_size = b.ranks;
    // Across nodes, solved with the node's efficiency already calibrated (a ring between nodes
    // runs at the lower of the NIC's and NVLink's rates).
    if (b.nodes > 1) q.cluster.gpu.calibration.intra_node_efficiency = cal.plan.cluster.gpu.calibration.intra_node_efficiency;
    (b.nodes > 1 ? q.cluster.gpu.calibration.nic_efficiency : q.cluster.gpu.calibration.intra_node_efficiency) = r.efficiency;
    const Collective c = b.collective == "all_reduce" ? Collective::all_reduce
                         : b.collective == "all_gather" ? Collective::all_gather
                         : b.collective == "reduce_scatter" ? Collective::reduce_scatter
                                                            : Collective::all_to_all;
    const auto& largest = b.points.back();
    const double t = collective_s(group_network(q, hardware_profile(q.cluster.gpu), plan::GroupKind::dp), c, largest.bytes);
    // Solved for the algorithm the model picks at the generation's efficiency; at the solved one
    // its choice may move to another that is a little faster (across 10 nodes: 0.14%).
    EXPECT_NEAR(t / largest.time_s, 1.0, 1e-2) << b.where;
    // Across 10 nodes the smallest size is where the model falls short: from 32 MiB to 256 MiB
    // that run's bandwidth ramps up (217 GB/s of algbw between the two against 330-360 above),
    // which NCCL's tuner's latencies do not give. In a node they hold
    // (TheTunersProtocolsFollowEverySizeOfARealAllReduce); what is left there is the lowest
    // efficiency of the node's blocks, which the plan takes for all of them.
    EXPECT_GT(r.max_error, 0.0);
    if (b.nodes > 1) {
      EXPECT_DOUBLE_EQ(r.max_error_bytes, b.points.front().bytes) << b.where;
    }
  }
  // The plan takes the lowest of each: no collective is priced faster than it measured.
  EXPECT_DOUBLE_EQ(cal.plan.cluster.gpu.calibration.intra_node_efficiency, intra);
  EXPECT_DOUBLE_EQ(cal.plan.cluster.gpu.calibration.nic_efficiency, nic);
  EXPECT_LT(intra, 1.0);
}

TEST(NcclTests, OnGpusTheTunersLatenciesStandAndACpuHostTakesTheFits) {
  const plan::Plan p = llama_plan();
  const auto dgx = read("h100x8_1node_dgx_nvidia-dgxc-benchmarking_allreduce.txt");
  // On H100 the collectives take NCCL's tuner's latencies per protocol: the plan's stays.
  EXPECT_EQ(calibrate_from_nccl_tests(p, dgx).plan.cluster.intra_node.latency_us, p.cluster.intra_node.latency_us);
  // A CPU host's MPI has one latency per step: the all-reduce's fitted latency over its ring's
  // 2(n - 1) = 14 steps.
  auto cpu = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 8, precision: fp32}\nparallelism: {dp: 8}\n"
                                  "cluster: {gpu: cpu-host, num_gpus: 8, gpus_per_node: 8, intra_node: {kind: shared_memory}}\n",
                                  plan::Format::yaml);
  ASSERT_TRUE(cpu.ok());
  const auto cal = calibrate_from_nccl_tests(cpu.plan, dgx);
  EXPECT_NEAR(cal.plan.cluster.intra_node.latency_us, fit_latency_bandwidth(dgx[0].points).latency_s * 1e6 / 14, 1e-9);
  // From 32 MiB up (the xxrjun runs) the latency is not determined: the plan's stays.
  const auto big = calibrate_from_nccl_tests(cpu.plan, read("h100x8_1node_nvswitch_xxrjun-cluster01_cnode3-002.txt"));
  EXPECT_EQ(big.plan.cluster.intra_node.latency_us, cpu.plan.cluster.intra_node.latency_us);
}

// Issue 20: collectives against message size. NCCL's tuner's latencies and protocols
// (models/nccl_tuner) follow a real all-reduce from 8 B to 16 GiB (ring LL up to 1 MiB, then
// NVLink SHARP), with the generation's efficiencies and nothing fitted on the run. One latency +
// bandwidth line misses it by 36% (LatencyAndBandwidthPredictTheSizesHeldBack); the fixed
// latency per step this replaced ran NVLS at 4 us throughout (-71% at 8 B, -58% at 8 MiB).
TEST(NcclTests, TheTunersProtocolsFollowEverySizeOfARealAllReduce) {
  const plan::Plan p = llama_plan();
  const auto dgx = read("h100x8_1node_dgx_nvidia-dgxc-benchmarking_allreduce.txt");
  ASSERT_EQ(dgx.size(), 1U);
  const plan::Plan q = [&] {
    plan::Plan g = p;
    g.parallelism = {};
    g.parallelism.data_parallel_size = 8;
    g.cluster.num_gpus = 8;
    return g;
  }();
  const GroupNetwork g = group_network(q, hardware_profile(q.cluster.gpu), plan::GroupKind::dp);
  std::vector<double> errors;
  for (const auto& point : dgx[0].points) {
    const double e = std::abs(collective_s(g, Collective::all_reduce, point.bytes) - point.time_s) / point.time_s;
    errors.push_back(e);
    // Every size within 40% but 32 B, whose out-of-place run took 68 us (13.5 us in place, and
    // 13-15 us at the sizes beside it). The largest errors left are NVLink SHARP's between
    // 2 and 64 MiB (model 17-33% fast): its bandwidth ramps up more slowly than NCCL's model of it.
    if (point.bytes != 32) {
      EXPECT_LT(e, 0.40) << point.bytes;
    }
  }
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2), errors.end());
  EXPECT_LT(errors[errors.size() / 2], 0.15);  // median: 12%
  // The protocols it takes: LL for a few bytes, NVLS Simple for a GiB.
  EXPECT_EQ(collective_flows(g, Collective::all_reduce, 8, algorithm_for(g, Collective::all_reduce, 8)).protocol, Protocol::ll);
  EXPECT_EQ(algorithm_for(g, Collective::all_reduce, 1 << 30), CollectiveAlgorithm::nvls);
  // The xxrjun node's all-gather and reduce-scatter, each at its own efficiency, from 32 MiB:
  // within 15% (the fixed latency: 32% and 26%, bench/RESULTS.md before issue 20's protocols).
  int checked = 0;
  for (const auto& b : read("h100x8_1node_nvswitch_xxrjun-cluster01_cnode3-002.txt")) {
    if (b.collective != "all_gather" && b.collective != "reduce_scatter") continue;
    ++checked;
    const auto own = calibrate_from_nccl_tests(p, {b});
    EXPECT_LT(own.blocks[0].max_error, 0.15) << b.where;
    EXPECT_DOUBLE_EQ(own.blocks[0].own_max_error, own.blocks[0].max_error) << b.where;  // one block: its own efficiency is the plan's
  }
  EXPECT_EQ(checked, 2);
}

TEST(NcclTests, ABlockThatDoesNotFitThePlansNodesIsAnError) {
  const NcclTestBlock b = block("all_reduce", "odd.txt:9", 3, {{1e6, 1e-4, 1e10, 1.3e10}, {1e8, 1e-3, 1e11, 1.3e11}});
  try {
    (void)calibrate_from_nccl_tests(llama_plan(), {b});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("odd.txt:9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpus_per_node"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshwork::models
