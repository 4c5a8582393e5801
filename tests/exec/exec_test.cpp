// The executor's parts that need no second process: launcher detection, how parameters split
// over TP and back, checkpoint files, the CUDA backend's --verify reference.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

#include "exec/calibrate.hpp"
#include "exec/checkpoint.hpp"
#include "exec/execute.hpp"
#include "exec/launch.hpp"
#include "exec/measured_report.hpp"
#include "exec/params.hpp"
#include "exec/reference_check.hpp"
#include "exec/synthetic_batch.hpp"
#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/gemm_fit.hpp"
#include "models/op_table.hpp"
#include "exec/trainer.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::exec {
namespace {

LaunchResult with(const std::map<std::string, std::string>& env) {
  return detect_launch([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, EachLauncherAndNone) {
  auto r = with({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(r.launch);
  EXPECT_EQ(r.launch->launcher, "torchrun");
  EXPECT_EQ(r.launch->rank, 3);
  EXPECT_EQ(r.launch->world_size, 8);
  EXPECT_EQ(r.launch->local_rank, 1);
  EXPECT_EQ(r.launch->master_addr, "n0");
  EXPECT_EQ(r.launch->master_port, 29500);
  r = with({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}});
  ASSERT_TRUE(r.launch);
  EXPECT_EQ(r.launch->launcher, "slurm");
  EXPECT_EQ(r.launch->rank, 5);
  r = with({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(r.launch);
  EXPECT_EQ(r.launch->launcher, "openmpi");  // mpirun inside an allocation: its own variables win
  EXPECT_EQ(r.launch->world_size, 4);
  r = with({});
  ASSERT_TRUE(r.launch);
  EXPECT_EQ(r.launch->launcher, "none");
  EXPECT_EQ(r.launch->world_size, 1);
}

TEST(Launch, InconsistentVariablesAreAnError) {
  auto r = with({{"RANK", "8"}, {"WORLD_SIZE", "8"}});
  EXPECT_FALSE(r.launch);
  EXPECT_NE(r.error.find("outside a world of 8"), std::string::npos) << r.error;
  r = with({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}});
  EXPECT_FALSE(r.launch);
  EXPECT_NE(r.error.find("not whole numbers"), std::string::npos) << r.error;
}

// The measured Report's headline figures come from the measured step by the one function the
// estimate and the simulator use (models/headline): its time to train too, which used to keep
// the estimate's.
TEST(MeasuredReport, HeadlineFiguresAreTheMeasuredSteps) {
  auto loaded = plan::load_plan(std::string(MESHWORK_SOURCE_DIR) + "/scenarios/cpu/tiny-dp2-2rank.yaml");
  ASSERT_TRUE(loaded.ok());
  plan::Plan p = loaded.plan;
  p.training.tokens = 1e6;
  std::vector<StepRecord> steps(3);  // the first step is left out
  for (std::size_t i = 0; i < steps.size(); ++i) {
    steps[i].step = static_cast<std::int64_t>(i) + 1;
    steps[i].seconds = i == 0 ? 9.0 : 2.0;
  }
  const double peak = 1e12;
  const report::Report r = measured_report(p, steps, MeasuredSeconds{}, peak);
  const double tokens = static_cast<double>(p.training.global_batch_size * p.model.seq_length);
  const auto flops = models::step_flops(p);
  EXPECT_DOUBLE_EQ(r.step_time_s, 2.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, tokens / 2.0);
  EXPECT_DOUBLE_EQ(r.time_to_train_s, 1e6 / (tokens / 2.0));
  EXPECT_DOUBLE_EQ(r.model_tflops_per_gpu, flops.model / 2.0 / static_cast<double>(p.cluster.num_gpus) / 1e12);
  EXPECT_DOUBLE_EQ(r.mfu, r.model_tflops_per_gpu * 1e12 / peak);
  EXPECT_NE(r.time_to_train_s, models::estimate(p).time_to_train_s);
}

// A measurement carries no prediction interval: the estimate it starts from has one on an A100
// (models/calibration_set.hpp), which used to stay in the measured Report.
TEST(MeasuredReport, CarriesNoIntervalOfTheEstimate) {
  auto loaded = plan::load_plan(std::string(MESHWORK_SOURCE_DIR) + "/scenarios/gpt3-175b-a100-1024.yaml");
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE(models::estimate(loaded.plan).interval.has_value());
  std::vector<StepRecord> steps(2);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    steps[i].step = static_cast<std::int64_t>(i) + 1;
    steps[i].seconds = 20.0;
  }
  const report::Report r = measured_report(loaded.plan, steps, MeasuredSeconds{}, 312e12);
  EXPECT_FALSE(r.interval.has_value());
}

TEST(Params, ShardsPutBackTogetherGiveTheFullTensor) {
  for (const Split split : {Split::replicated, Split::rows, Split::columns, Split::column_halves}) {
    for (const Index cols : {Index{1}, Index{8}}) {
      const ParamSpec spec{"w", 8, cols, split, Init::normal, 0.02, false};
      const Mat full = initial_value(spec, 7);
      Mat back = Mat::Zero(8, cols);
      for (int r = 0; r < 2; ++r) {
        if (split == Split::columns && cols == 1) continue;
        place(shard(full, split, r, 2), back, split, r, 2);
      }
      if (split == Split::columns && cols == 1) continue;
      EXPECT_EQ(back, full) << static_cast<int>(split) << " " << cols;
    }
  }
  // SwiGLU keeps [gate block | up block]: rank 1 of 2 holds gate columns 2-3 and up 6-7.
  Mat full(1, 8);
  full << 0, 1, 2, 3, 4, 5, 6, 7;
  const Mat s = shard(full, Split::column_halves, 1, 2);
  EXPECT_EQ(s(0, 0), 2);
  EXPECT_EQ(s(0, 1), 3);
  EXPECT_EQ(s(0, 2), 6);
  EXPECT_EQ(s(0, 3), 7);
  // Every rank draws the same initial value: it depends on the seed and the name only.
  const ParamSpec a{"layers.0.q.weight", 4, 4, Split::columns, Init::normal, 0.02, false};
  EXPECT_EQ(initial_value(a, 7), initial_value(a, 7));
  EXPECT_NE(initial_value(a, 7), initial_value(a, 8));
}

TEST(Calibrate, TheGemmFitRecoversItsModel) {
  // eff(macs) = E macs / (macs + H), models::gemm_efficiency's shape, sampled and fitted back.
  const double e = 0.62, h = 3e5;
  std::vector<std::pair<double, double>> points;
  for (double macs = 1e4; macs < 1e9; macs *= 4) points.emplace_back(macs, e * macs / (macs + h));
  const models::GemmCurve fit = models::fit_gemm_curve(points);
  EXPECT_NEAR(fit.max_efficiency, e, 1e-9);
  EXPECT_NEAR(fit.half_macs, h, 1e-3);
}

TEST(Calibrate, AFlatOrFallingFitKeepsAPositiveHalfSize) {
  // No size dependence (or noise that makes large GEMMs slower): H is 1, never 0, which a plan
  // reads as "not calibrated".
  const models::GemmCurve flat = models::fit_gemm_curve({{1e4, 0.2}, {1e6, 0.2}, {1e8, 0.2}});
  EXPECT_NEAR(flat.max_efficiency, 0.2, 1e-12);
  EXPECT_EQ(flat.half_macs, 1);
  const models::GemmCurve falling = models::fit_gemm_curve({{1e4, 0.3}, {1e6, 0.2}, {1e8, 0.1}});
  EXPECT_GT(falling.max_efficiency, 0);
  EXPECT_EQ(falling.half_macs, 1);
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("meshwork-ckpt-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    state_.step = 4;
    state_.rank = 1;
    state_.world_size = 2;
    state_.plan_hash = "abc";
    state_.params = {1, 2, 3};
    state_.exp_avg = {0.5F};
    state_.exp_avg_sq = {0.25F};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  RankState state_;
};

TEST_F(Checkpoint, RoundTripsAndOnlyACompleteStepIsLatest) {
  save_shard(dir_, state_);
  EXPECT_FALSE(latest_step(dir_));  // written, not yet marked complete
  mark_complete(dir_, 4);
  ASSERT_EQ(latest_step(dir_), 4);
  const RankState back = load_shard(dir_, 4, 1, 2, "abc");
  EXPECT_EQ(back.params, state_.params);
  EXPECT_EQ(back.exp_avg, state_.exp_avg);
  EXPECT_EQ(back.exp_avg_sq, state_.exp_avg_sq);
  EXPECT_FALSE(std::filesystem::exists(shard_path(dir_, 4, 1).string() + ".tmp"));
}

TEST_F(Checkpoint, ACorruptTruncatedOrForeignShardIsRefusedByName) {
  save_shard(dir_, state_);
  const auto path = shard_path(dir_, 4, 1);
  auto expect_error = [&](const char* what, std::int64_t world, const std::string& hash) {
    try {
      (void)load_shard(dir_, 4, 1, world, hash);
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("ranks", 4, "abc");
  expect_error("another plan", 2, "xyz");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  expect_error("checksum", 2, "abc");
  std::filesystem::resize_file(path, 12);
  expect_error("not a meshwork checkpoint", 2, "abc");
  std::filesystem::remove(path);
  expect_error("no checkpoint shard", 2, "abc");
}

// A checkpoint is keyed on what decides the trained state: another cluster description,
// calibration, failure or checkpoint policy, token budget or overlap flag resumes from it (a
// field added to the cluster's calibration once refused every earlier checkpoint); another
// model, mesh, batch or seed does not.
TEST(CheckpointKey, OnlyWhatDecidesTheStateChangesIt) {
  const std::string base = "model: {preset: tiny}\n"
                           "training: {global_batch_size: 8, micro_batch_size: 2, precision: fp32}\n"
                           "parallelism: {tp: 1, dp: 2}\n"
                           "cluster: {gpu: cpu-host, num_gpus: 2, gpus_per_node: 2, intra_node: {kind: shared_memory}, nics_per_node: 0, "
                           "topology: {kind: single_node}}\n"
                           "run: {seed: 7}\n";
  auto key = [](const std::string& yaml) {
    const auto r = plan::load_plan_text(yaml, plan::Format::yaml);
    EXPECT_TRUE(r.ok()) << yaml;
    return checkpoint_plan_key(r.plan);
  };
  const std::string k = key(base);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string y = base;
    y.replace(y.find(from), from.size(), to);
    return key(y);
  };
  EXPECT_EQ(with("kind: shared_memory}", "kind: shared_memory, latency_us: 5}"), k);
  EXPECT_EQ(with("gpu: cpu-host", "gpu: {preset: cpu-host, calibration: {gemm_max_efficiency: 0.3}}"), k);
  EXPECT_EQ(with("run: {seed: 7}", "run: {seed: 7, trials: 5}\nfailures: {detection_s: 30}\ncheckpoint: {interval: 100}"), k);
  EXPECT_EQ(with("precision: fp32}", "precision: fp32, tokens: 1e9}"), k);
  EXPECT_EQ(with("dp: 2}", "dp: 2, overlap: {grad_reduce: false}}"), k);
  EXPECT_EQ(with("dp: 2}", "dp: 2, cp_comm_type: all_gather}"), k);
  EXPECT_EQ(with("precision: fp32}", "precision: fp32, fp8_attention: true}"), k);
  // The fused attention kernel prices; the executors run their own (on a GPU, where it validates).
  std::string gpu = base;
  gpu.replace(gpu.find("gpu: cpu-host"), 13, "gpu: h100-sxm");
  std::string gpu_cudnn = gpu;
  gpu_cudnn.replace(gpu_cudnn.find("precision: fp32}"), 16, "precision: fp32, attention_kernel: cudnn}");
  EXPECT_EQ(key(gpu_cudnn), key(gpu));
  EXPECT_NE(with("seed: 7", "seed: 8"), k);
  EXPECT_NE(with("tp: 1, dp: 2", "tp: 2, dp: 1"), k);
  EXPECT_NE(with("preset: tiny}", "preset: tiny, num_layers: 4}"), k);
  EXPECT_NE(with("micro_batch_size: 2", "micro_batch_size: 4"), k);
}

TEST_F(Checkpoint, LatestIsAStepNumberAndANewlineOrItsProblemIsNamed) {
  EXPECT_EQ(parse_latest("12\n").step, 12);
  for (const char* bad : {"", "\n", "0\n", "12", "12\n\n", "4x\n", "-3\n", "99999999999999999999\n"}) {
    const LatestRecord r = parse_latest(bad);
    EXPECT_FALSE(r.step) << bad;
    EXPECT_NE(r.problem.find("not a step number"), std::string::npos) << bad;
  }
  EXPECT_FALSE(read_latest(dir_).step);  // no file: nothing to say
  EXPECT_TRUE(read_latest(dir_).problem.empty());
}

TEST_F(Checkpoint, StepsAreListedNewestFirstAndSetAsideOnesAreNot) {
  for (std::int64_t step : {2, 10, 4}) {
    state_.step = step;
    save_shard(dir_, state_);
  }
  std::filesystem::create_directories(dir_ / "step-0000000x");
  std::filesystem::create_directories(dir_ / "scratch");
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<std::int64_t>{10, 4, 2}));
  const auto aside = set_aside(shard_path(dir_, 10, 0).parent_path());
  EXPECT_EQ(aside.filename(), "step-00000010.damaged");
  EXPECT_TRUE(std::filesystem::exists(aside / "rank-00001.ckpt"));  // kept whole
  state_.step = 10;
  save_shard(dir_, state_);
  EXPECT_EQ(set_aside(shard_path(dir_, 10, 0).parent_path()).filename(), "step-00000010.damaged-2");  // never over the first
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(prune_checkpoints(dir_, checkpoint_steps(dir_), 1), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "step-00000010.damaged"));  // retention leaves damaged ones alone
}

// Format 03 keeps AdamW's update count apart from the step (fp16 skips make them differ);
// a format-02 shard, written before skips existed, reads with the two equal.
TEST_F(Checkpoint, TheUpdateCountTravelsAndOlderShardsReadWithTheirStep) {
  state_.adam_step = 3;
  const RankState back = parse_shard(serialize_shard(state_), "x");
  EXPECT_EQ(back.step, 4);
  EXPECT_EQ(back.adam_step, 3);
  state_.adam_step = 5;  // more updates than steps: damage
  EXPECT_THROW((void)parse_shard(serialize_shard(state_), "x"), std::runtime_error);
  std::ifstream in(std::filesystem::path(MESHWORK_SOURCE_DIR) / "fuzz/corpus/checkpoint/shard-v2-dense", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(file.size(), 16u);
  const RankState v2 = parse_shard(file.substr(1), "shard-v2-dense");  // its first byte is the fuzzer's reader switch
  EXPECT_EQ(v2.adam_step, v2.step);
}

TEST_F(Checkpoint, ABitExactRoundTripInMemory) {
  state_.params = {1.5F, -0.0F, std::numeric_limits<float>::quiet_NaN()};
  const std::string bytes = serialize_shard(state_);
  EXPECT_EQ(serialize_shard(parse_shard(bytes, "x")), bytes);
  EXPECT_THROW((void)parse_shard(bytes.substr(0, bytes.size() - 1), "x"), std::runtime_error);
}

// The CUDA backend's --verify reference (a DP 2 plan's whole global batch on one CPU chunk)
// is the CPU executor's single-rank run: the same tokens, order and scaling, so a run that
// holds exactly the CPU trainer's gradients differs from it by nothing, and a tensor off by 1%
// is named.
TEST(ReferenceCheck, IsTheCpuTrainersSingleRankStep) {
  const auto loaded = plan::load_plan_text(R"(schema_version: 1
name: ref
model: {name: r, num_layers: 2, hidden_size: 32, num_attention_heads: 4, ffn_hidden_size: 64, seq_length: 16, vocab_size: 128, add_bias_linear: true}
training: {global_batch_size: 8, micro_batch_size: 2, precision: fp32, recompute: none, flash_attention: false}
parallelism: {tp: 1, pp: 1, zero_stage: 0}
cluster: {gpu: cpu-host, num_gpus: 2, gpus_per_node: 2, intra_node: {kind: shared_memory}, nics_per_node: 0, topology: {kind: single_node}}
run: {seed: 7}
)");
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded.plan.parallelism.data_parallel_size, 2);
  plan::Plan single = loaded.plan;
  single.parallelism.data_parallel_size = 1;
  single.cluster.num_gpus = 1;
  Groups g;
  for (auto* group : {&g.world, &g.tp, &g.dp, &g.pp, &g.embedding}) *group = std::make_unique<LocalGroup>();
  Trainer cpu(single, std::move(g), 0, nullptr);
  cpu.keep_reduced = true;
  const double loss = cpu.step(1, ExecuteOptions{});
  std::map<std::string, std::vector<float>> grads;
  for (const auto& r : cpu.reduced()) grads[r.spec->name] = r.grad;
  auto run = [&](const std::string& name) { return grads.at(name); };
  ReferenceCheck c = check_first_step(loaded.plan, loss, run);
  EXPECT_DOUBLE_EQ(c.reference_loss, loss);
  EXPECT_LT(c.worst_relative_error, 1e-6) << c.worst_tensor;
  for (auto& x : grads.at("layers.1.fc1.weight")) x *= 1.01F;
  c = check_first_step(loaded.plan, loss, run);
  EXPECT_EQ(c.worst_tensor, "layers.1.fc1.weight");
  EXPECT_NEAR(c.worst_relative_error, 1e-2, 1e-4);
}

// Zero-bubble schedules run a micro-batch's weight gradients in their own item, after its
// input gradients (Qi et al. 2024, ZB-H1): the chunk's input-gradient ops leave every weight
// gradient untouched, and its weight-gradient ops, run later, make exactly the gradients of the
// combined backward.
TEST(GptChunk, WeightGradientsRunWhereTheScheduleRunsThem) {
  const auto loaded = plan::load_plan_text(R"(schema_version: 1
name: zb
model: {name: z, num_layers: 2, hidden_size: 32, num_attention_heads: 4, ffn_hidden_size: 64, seq_length: 16, vocab_size: 128, add_bias_linear: true}
training: {global_batch_size: 2, micro_batch_size: 2, precision: fp32, recompute: none, flash_attention: false}
parallelism: {tp: 1, pp: 1, zero_stage: 0}
cluster: {gpu: cpu-host, num_gpus: 1, gpus_per_node: 1, intra_node: {kind: shared_memory}, nics_per_node: 0, topology: {kind: single_node}}
run: {seed: 7}
)");
  ASSERT_TRUE(loaded.ok());
  const plan::Plan& p = loaded.plan;
  const auto& m = p.model;
  LocalGroup tp;
  GptChunk whole(m, 0, m.num_layers, true, true, 7, TensorParallel{&tp, false});
  GptChunk split(m, 0, m.num_layers, true, true, 7, TensorParallel{&tp, false});
  const Batch batch = synthetic_batch(p, 1, 0, 1, 0);
  (void)whole.forward(0, batch, Mat(), 1.0);
  (void)whole.backward(0, Mat());
  (void)split.forward(0, batch, Mat(), 1.0);
  split.begin_backward(0, Mat());
  const auto layer = models::layer_ops(p, false, false);
  const auto head = models::last_stage_ops(p), embedding = models::first_stage_ops(p);
  auto input_half = [&](const std::vector<models::Op>& ops, std::int64_t l) {
    for (const models::Op* op : models::backward_order(ops, false)) split.run(op->name, op->phase, l, 0);
  };
  input_half(head, -1);
  for (std::int64_t l = m.num_layers - 1; l >= 0; --l) input_half(layer, l);
  EXPECT_EQ(split.find("layers.1.fc1.weight")->grad.norm(), 0.0F);
  EXPECT_EQ(split.find("layers.0.q.weight")->grad.norm(), 0.0F);
  EXPECT_EQ(split.find("embedding.word")->grad.norm(), 0.0F);
  EXPECT_GT(split.find("layers.0.ln1.gamma")->grad.norm(), 0.0F);  // norms belong to the input half
  auto weight_half = [&](const std::vector<models::Op>& ops, std::int64_t l) {
    for (const auto& op : ops) {
      if (op.phase == models::OpPhase::backward_weight) split.run(op.name, op.phase, l, 0);
    }
  };
  weight_half(head, -1);
  for (std::int64_t l = 0; l < m.num_layers; ++l) weight_half(layer, l);
  weight_half(embedding, -1);
  split.end_backward(0);
  for (auto& prm : whole.params()) {
    const Mat& got = split.find(prm.spec.name)->grad;
    EXPECT_LE((got - prm.grad).norm(), 1e-6F * (prm.grad.norm() + 1e-30F)) << prm.spec.name;
  }
}

TEST(Execute, AnUnknownBackendIsRefused) {
  ExecuteOptions o;
  o.backend = "tpu";
  EXPECT_THROW((void)execute(plan::Plan{}, o), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::exec
