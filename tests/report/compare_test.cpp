// Predicted against measured: the comparison's errors and ranking, the op times it compares
// (their JSON, and the estimate's, which add up to its compute), Megatron-LM logs as measured.
#include "report/compare.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "report/megatron_log.hpp"
#include "report/report_io.hpp"

namespace meshwork::report {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MESHWORK_SOURCE_DIR;

// A 10 s step whose parts and op kinds add up: compute 6 s = gemm 4.5 + attention 1 +
// elementwise 0.3 + norm 0.2.
Report predicted() {
  Report r;
  r.method = Method::estimated;
  r.plan_name = "p";
  r.num_gpus = 64;
  r.step_time_s = 10;
  r.mfu = 0.5;
  r.hfu = 0.5;
  r.model_tflops_per_gpu = 160;
  r.hardware_tflops_per_gpu = 160;
  r.tokens_per_s = 26214.4;
  r.breakdown = {6, 0, 1, 0, 0, 1, 0, 1.5, 0.5, 0};
  r.op_times = {
      {"gemm", 4.5, 96}, {"attention", 1, 16}, {"elementwise", 0.3, 48}, {"norm", 0.2, 32}};
  return r;
}

const ComparisonRow& row(const Comparison& c, const std::string& what) {
  for (const auto& r : c.rows) {
    if (r.what == what) return r;
  }
  throw std::runtime_error("no row " + what);
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Compare, AReportAgainstItselfHasNoError) {
  const Comparison c = compare(predicted(), predicted());
  EXPECT_EQ(c.step_time_error_s, 0.0);
  EXPECT_TRUE(c.predicted_lacks.empty());
  EXPECT_TRUE(c.measured_lacks.empty());
  EXPECT_EQ(c.rows.size(), 6u + 10u + 4u);  // figures, breakdown parts, op kinds
  for (const auto& r : c.rows) {
    SCOPED_TRACE(r.what);
    ASSERT_TRUE(r.predicted && r.measured);
    EXPECT_EQ(*r.abs_error, 0.0);
    EXPECT_EQ(r.rel_error, *r.measured != 0 ? std::optional<double>(0.0) : std::nullopt);
    EXPECT_EQ(r.contribution_s,
              r.kind != RowKind::figure ? std::optional<double>(0.0) : std::nullopt);
  }
}

TEST(Compare, TheSlowerOpKindRanksFirstWithItsSeconds) {
  // Measured: a step 10% longer; GEMMs 0.5 s slower (so compute too), DP 0.3 s, bubble 0.2 s.
  Report m = predicted();
  m.method = Method::measured;
  m.step_time_s = 11;
  m.mfu = 0.5 / 1.1;
  m.breakdown.compute_s = 6.5;
  m.breakdown.dp_s = 1.3;
  m.breakdown.bubble_s = 1.7;
  m.op_times[0].seconds = 5.0;
  const Comparison c = compare(predicted(), m);

  ASSERT_EQ(c.rows.size(), 20u);
  const char* figures[] = {
      "step_time_s", "mfu", "hfu", "tflops_per_gpu.model", "tflops_per_gpu.hardware",
      "tokens_per_s"};
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(c.rows[i].what, figures[i]);
  EXPECT_EQ(*c.step_time_error_s, 1.0);
  EXPECT_DOUBLE_EQ(*c.rows[0].rel_error, 1.0 / 11);  // the measured step is the truth
  EXPECT_DOUBLE_EQ(*c.rows[1].abs_error, 0.5 - 0.5 / 1.1);

  EXPECT_EQ(c.rows[6].what, "op_times.gemm");
  EXPECT_EQ(*c.rows[6].contribution_s, 0.5);
  EXPECT_DOUBLE_EQ(*c.rows[6].rel_error, 0.1);
  EXPECT_EQ(c.rows[7].what, "breakdown.compute_s");
  EXPECT_EQ(*c.rows[7].contribution_s, 0.5);
  EXPECT_EQ(c.rows[8].what, "breakdown.dp_s");
  EXPECT_NEAR(*c.rows[8].contribution_s, 0.3, 1e-12);
  EXPECT_EQ(c.rows[9].what, "breakdown.bubble_s");
  EXPECT_NEAR(*c.rows[9].contribution_s, 0.2, 1e-12);
  for (std::size_t i = 10; i < c.rows.size(); ++i)
    EXPECT_EQ(*c.rows[i].contribution_s, 0.0) << c.rows[i].what;

  // The parts' contributions add up to the step time's error.
  double parts = 0;
  for (const auto& r : c.rows) parts += r.kind == RowKind::breakdown ? *r.contribution_s : 0;
  EXPECT_NEAR(parts, *c.step_time_error_s, 1e-12);
}

TEST(Compare, WhatOneSideLacksHasNoErrorAndComesLast) {
  Report m;
  m.method = Method::measured;
  m.step_time_s = 12.5;
  m.model_tflops_per_gpu = 128;
  const Comparison c =
      compare(predicted(), m, {"mfu", "hfu", "tflops_per_gpu.hardware", "tokens_per_s"});
  EXPECT_EQ(c.measured_lacks, (std::vector<std::string>{"mfu", "hfu", "tflops_per_gpu.hardware",
                                                        "tokens_per_s", "breakdown", "op_times"}));
  EXPECT_EQ(*c.step_time_error_s, 2.5);
  EXPECT_EQ(*row(c, "tflops_per_gpu.model").abs_error, 32.0);
  EXPECT_EQ(*row(c, "tflops_per_gpu.model").rel_error, 0.25);
  for (const char* what : {"mfu", "hfu", "tflops_per_gpu.hardware", "tokens_per_s",
                           "breakdown.dp_s", "op_times.gemm"}) {
    const ComparisonRow& r = row(c, what);
    EXPECT_TRUE(r.predicted) << what;
    EXPECT_FALSE(r.measured || r.abs_error || r.rel_error || r.contribution_s) << what;
  }
  EXPECT_EQ(c.rows.back().what, "op_times.norm");
}

TEST(Compare, AnOpKindOneSideDoesNotListTookNoTimeThere) {
  Report m = predicted();
  m.op_times.push_back({"loss", 0.25, 8});
  const Comparison c = compare(predicted(), m);
  EXPECT_EQ(*row(c, "op_times.loss").predicted, 0.0);
  EXPECT_EQ(*row(c, "op_times.loss").contribution_s, 0.25);
  EXPECT_EQ(*row(c, "op_times.loss").rel_error, 1.0);
}

TEST(Compare, JsonHasEveryRowWithNullsForWhatIsLacking) {
  Report m;
  m.step_time_s = 11;
  const auto j = to_json(compare(predicted(), m, {"mfu"}));
  EXPECT_EQ(j.at("rows").size(), 20u);
  EXPECT_EQ(j.at("rows")[0].at("what"), "step_time_s");
  EXPECT_EQ(j.at("rows")[1].at("what"), "mfu");
  EXPECT_TRUE(j.at("rows")[1].at("measured").is_null());
  EXPECT_EQ(j.at("step_time_error_s"), 1.0);
  EXPECT_TRUE(j.at("definitions").contains("contribution_s"));
  const std::string text = to_text(compare(predicted(), m, {"mfu"}));
  EXPECT_NE(text.find("measured lacks: mfu, breakdown, op_times"), std::string::npos) << text;
}

// Op times in the Report's JSON (here rather than in report_io_test.cpp, beside their comparison).
TEST(ReportIoOpTimes, RoundTripIsExactAndOlderReportsWithoutThemLoad) {
  const Report r = predicted();
  const auto j = report::to_json(r);
  EXPECT_EQ(report::to_json(from_json(j)), j);
  EXPECT_EQ(j.at("op_times")[0],
            (nlohmann::json{{"kind", "gemm"}, {"seconds", 4.5}, {"count", 96}}));
  auto older = j;
  older.erase("op_times");
  EXPECT_TRUE(from_json(older).op_times.empty());
}

// The estimate's op times split its compute and recompute by kind, per step.
TEST(EstimateOpTimes, AddUpToComputeAndRecompute) {
  for (const char* scenario :
       {"scenarios/gpt3-175b-a100-1024.yaml", "scenarios/published/kor22-530b.yaml",
        "scenarios/heldout/llama3-405b-h100-16384.yaml", "scenarios/cpu/tiny-moe-cpu.yaml"}) {
    SCOPED_TRACE(scenario);
    const auto loaded = plan::load_plan(kSource / scenario);
    ASSERT_TRUE(loaded.ok());
    const Report r = models::estimate(loaded.plan);
    double sum = 0;
    for (const auto& o : r.op_times) {
      EXPECT_GT(o.seconds, 0) << o.kind;
      EXPECT_GT(o.count, 0) << o.kind;
      sum += o.seconds;
    }
    const double compute = r.breakdown.compute_s + r.breakdown.recompute_s;
    EXPECT_NEAR(sum, compute, 1e-12 * compute);
    ASSERT_GE(r.op_times.size(), 4u);
    EXPECT_EQ(r.op_times[0].kind, "gemm");
    EXPECT_EQ(r.op_times[1].kind, "attention");
  }
}

TEST(EstimateOpTimes, CountIsOpsPerMicroBatchTimesMicroBatchesAndLayers) {
  // 24 layers over 2 stages, 64 / (2 x 4 DP) = 8 micro-batches. A dense layer has 4 GEMMs x 3
  // passes and one attention op forward and backward; the last stage adds the LM head's 3 GEMMs.
  const auto loaded = plan::load_plan_text(R"(schema_version: 1
name: base
model: {num_layers: 24, hidden_size: 4096, num_attention_heads: 32, seq_length: 2048, vocab_size: 51200}
training: {global_batch_size: 64, micro_batch_size: 2, recompute: none}
parallelism: {tp: 8, pp: 2}
cluster: {gpu: h100-sxm, num_gpus: 64}
)");
  ASSERT_TRUE(loaded.ok());
  const Report r = models::estimate(loaded.plan);
  std::int64_t gemms = 0, attention = 0;
  for (const auto& o : r.op_times) {
    if (o.kind == "gemm") gemms = o.count;
    if (o.kind == "attention") attention = o.count;
  }
  const std::int64_t m = 8, layers = 12;
  // The slowest stage is the last (its LM head): 12 layers x 12 GEMMs + 3.
  EXPECT_EQ(gemms, m * (layers * 12 + 3));
  EXPECT_EQ(attention, m * layers * 2);
}

// Megatron-LM logs.

TEST(MegatronLog, IntervalOneSkipsTheFirstThreeIterationsAndTakesTheMedian) {
  const MegatronLog log =
      parse_megatron_log(read(kSource / "tests/data/megatron/gpt-tp2-pp2-interval1.log"));
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log.intervals.size(), 12u);
  for (const auto& it : log.intervals) EXPECT_EQ(it.warmup, it.iteration <= 3) << it.iteration;
  EXPECT_EQ(log.intervals[0].line, 10);
  EXPECT_EQ(log.report.method, Method::measured);
  // Iterations 4-12: the median of 12489.3 ... 12540.8 ms is 12510.4 ms (iteration 4).
  EXPECT_DOUBLE_EQ(log.report.step_time_s, 12510.4 / 1e3);
  EXPECT_DOUBLE_EQ(log.report.model_tflops_per_gpu, 155.7);
  EXPECT_EQ(log.lacks, (std::vector<std::string>{"mfu", "hfu", "tflops_per_gpu.hardware",
                                                 "tokens_per_s", "breakdown", "op_times"}));
  EXPECT_NE(log.report.notes[0].find("median over 9 logged interval(s) (iterations 4-12)"),
            std::string::npos)
      << log.report.notes[0];
  EXPECT_NE(log.report.notes[0].find("3 warm-up interval(s) skipped"), std::string::npos);
}

TEST(MegatronLog, IntervalTenSkipsTheFirstLineAndLacksThroughput) {
  const MegatronLog log = parse_megatron_log(
      read(kSource / "tests/data/megatron/gpt-1.3b-interval10-no-throughput.log"));
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log.intervals.size(), 5u);
  EXPECT_TRUE(log.intervals[0].warmup);  // iterations 1-10
  EXPECT_EQ(log.intervals[0].first_iteration, 1);
  EXPECT_FALSE(log.intervals[1].warmup);  // 11-20
  // Even count: the mean of the middle two, 1728.8 and 1730.2 ms.
  EXPECT_DOUBLE_EQ(log.report.step_time_s, 1.7295);
  EXPECT_EQ(log.report.model_tflops_per_gpu, 0.0);
  EXPECT_EQ(log.lacks[2], "tflops_per_gpu.model");
  EXPECT_NE(std::find(log.report.notes.begin(), log.report.notes.end(), "global batch size 32"),
            log.report.notes.end());
}

std::string line(int iteration, double ms) {
  return " iteration " + std::to_string(iteration) +
         "/ 100 | elapsed time per iteration (ms): " + std::to_string(ms) + " |\n";
}

TEST(MegatronLog, ARestartedRunSkipsEachRunsWarmUp) {
  std::string text;
  for (int i = 1; i <= 6; ++i) text += line(i, i <= 3 ? 900 : 100);
  for (int i = 5; i <= 8; ++i) text += line(i, i <= 7 ? 900 : 200);  // resumed from iteration 4
  const MegatronLog log = parse_megatron_log(text);
  ASSERT_TRUE(log.ok());
  EXPECT_DOUBLE_EQ(log.report.step_time_s, 0.1);  // 100, 100, 100 (iterations 4-6) and 200 (8)
  EXPECT_NE(log.report.notes[1].find("2 runs"), std::string::npos) << log.report.notes[1];
}

TEST(MegatronLog, OnlyWarmUpIsUsedAndSaidSo) {
  const MegatronLog log = parse_megatron_log(line(1, 500) + line(2, 300));
  ASSERT_TRUE(log.ok());
  EXPECT_DOUBLE_EQ(log.report.step_time_s, 0.4);
  EXPECT_NE(log.report.notes[1].find("the median includes them"), std::string::npos);
}

TEST(MegatronLog, MalformedLogsGiveEveryProblemWithItsLine) {
  EXPECT_EQ(parse_megatron_log("").errors,
            (std::vector<std::string>{
                "no Megatron-LM or Megatron-DeepSpeed iteration lines (\" iteration N/ M | ... | elapsed time per "
                "iteration (ms): T |\", or 'elapsed time per iteration (s)')"}));
  EXPECT_FALSE(
      parse_megatron_log(" validation loss at iteration 10 | lm loss value: 9.9 |\n").ok());
  const MegatronLog log = parse_megatron_log(
      " iteration 1/ 10 | elapsed time per iteration (ms): fast |\n"
      "noise\n"
      " iteration 2/ 10 | consumed samples: 64 |\n"
      " iteration 3/ 10 | elapsed time per iteration (ms): 1.0 | throughput per GPU (TFLOP/s/GPU): "
      "nan |\n"
      " iteration 4/ 10 | elapsed time per iteration (ms): inf |\n");
  EXPECT_EQ(log.errors,
            (std::vector<std::string>{
                "1: 'elapsed time per iteration (ms)' must be a positive number, not 'fast'",
                "3: an iteration line without 'elapsed time per iteration (ms)' (Megatron-LM) or 'elapsed time per "
                "iteration (s)' (Megatron-DeepSpeed)",
                "4: 'throughput per GPU (TFLOP/s/GPU)' must be a number >= 0, not 'nan'",
                "5: 'elapsed time per iteration (ms)' must be a positive number, not 'inf'"}));
}

std::string reference_log(const char* name) {
  std::ifstream in(std::filesystem::path(MESHWORK_SOURCE_DIR) / "docs/reference/megatron-logs" / name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Issue 24: every line of the BLOOM log was refused ("an iteration line without 'elapsed time
// per iteration (ms)'"). Megatron-DeepSpeed logs seconds, behind a rank prefix, with hardware TFLOPs.
TEST(MegatronLog, ReadsMegatronDeepSpeedLogs) {
  const MegatronLog log = parse_megatron_log(reference_log("bloom-176b_megatron-deepspeed_384xA100-80G_tp4pp12dp8.log"));
  ASSERT_TRUE(log.ok()) << log.errors.front();
  EXPECT_EQ(log.format, MegatronLogFormat::megatron_deepspeed);
  ASSERT_EQ(log.intervals.size(), 11u);
  EXPECT_EQ(log.intervals.front().iteration, 31214);
  EXPECT_DOUBLE_EQ(log.intervals.front().elapsed_ms, 106460);
  // The first three iterations are the warm-up; the median of the other eight (106.09, 106.13,
  // 106.13, 106.30, 106.33, 106.36, 106.44, 107.53 s) is (106.30 + 106.33) / 2.
  EXPECT_NEAR(log.report.step_time_s, 106.315, 1e-9);
  EXPECT_NEAR(log.report.hardware_tflops_per_gpu, (147.46 + 147.51) / 2, 1e-9);
  EXPECT_EQ(log.report.model_tflops_per_gpu, 0);  // not logged: its TFLOPs count recomputation
  EXPECT_EQ(log.shape.seq_length, 2048);         // 97,829,879,808 tokens over 47,768,496 samples
  EXPECT_EQ(log.shape.global_batch_size, 2048);
  EXPECT_FALSE(log.shape.world_size);
  EXPECT_EQ(log.report.shape.seq_length, 2048);
  EXPECT_NEAR(log.report.tokens_per_s, (19.260 + 19.266) / 2 * 2048, 1e-6);
  const std::vector<std::string> lacks = {"mfu", "hfu", "tflops_per_gpu.model", "breakdown", "op_times"};
  EXPECT_EQ(log.lacks, lacks);
}

TEST(MegatronLog, ReadsTheRunsShapeFromTheWorldSizeLineAndTheArgumentsDump) {
  const MegatronLog mixtral = parse_megatron_log(reference_log("megatron-lm-issue756_mixtral-8x7b_16xH100_tp4dp4_turn0.log"));
  ASSERT_TRUE(mixtral.ok());
  EXPECT_EQ(mixtral.format, MegatronLogFormat::megatron_lm);
  EXPECT_EQ(mixtral.shape.world_size, 16);
  EXPECT_EQ(mixtral.shape.data, 4);
  EXPECT_EQ(mixtral.shape.context, 1);
  EXPECT_EQ(mixtral.shape.tensor, 4);
  EXPECT_EQ(mixtral.shape.pipeline, 1);
  EXPECT_EQ(mixtral.shape.global_batch_size, 128);
  EXPECT_EQ(mixtral.report.num_gpus, 16);

  const MegatronLog dumped = parse_megatron_log(
      "------------------------ arguments ------------------------\n"
      "  micro_batch_size ................................ 2\n"
      "  seq_length ...................................... 4096\n"
      "  tensor_model_parallel_size ...................... 8\n"
      "  world_size ...................................... 64\n"
      " iteration 1/ 10 | elapsed time per iteration (ms): 100.0 |\n");
  ASSERT_TRUE(dumped.ok());
  EXPECT_EQ(dumped.shape.micro_batch_size, 2);
  EXPECT_EQ(dumped.shape.seq_length, 4096);
  EXPECT_EQ(dumped.shape.tensor, 8);
  EXPECT_EQ(dumped.shape.world_size, 64);
  EXPECT_FALSE(dumped.shape.pipeline);
}

TEST(Compare, ReportsOfDifferentRunsAreNamed) {
  Report a, b;
  a.num_gpus = 1024;
  a.shape = {1536, 1, 2048, 8, 8, 16, 1, 1};
  b.num_gpus = 16;
  b.shape = {128, 0, 0, 4, 1, 4, 1, 0};  // 0: not known
  const auto m = shape_mismatches(a, b);
  const std::vector<std::string> want = {
      "the measured run's world size is 16, the predicted run's 1024",
      "the measured run's global batch size is 128, the predicted run's 1536",
      "the measured run's tensor-parallel size is 4, the predicted run's 8",
      "the measured run's pipeline-parallel size is 1, the predicted run's 8",
      "the measured run's data-parallel size is 4, the predicted run's 16"};
  EXPECT_EQ(m, want);
  EXPECT_EQ(compare(a, b).mismatches, want);
  EXPECT_TRUE(shape_mismatches(a, a).empty());
}

}  // namespace
}  // namespace meshwork::report
