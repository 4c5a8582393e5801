// FLOPs against Korthikanti eq. 7 / Narayanan eq. 3, memory against Korthikanti Table 2 and
// ZeRO's worked example, bubble fractions against the schedule formulas.
#include <gtest/gtest.h>

#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/hardware.hpp"
#include "models/memory.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

plan::Plan gpt(const char* preset, std::int64_t gbs, plan::Recompute recompute) {
  plan::Plan p;
  p.model = plan::find_model_preset(preset)->model;
  p.training.global_batch_size = gbs;
  p.training.recompute = recompute;
  p.training.flash_attention = false;
  p.cluster.gpu = plan::find_gpu_preset("a100-sxm-80gb")->spec;
  p.cluster.num_gpus = 8;
  p.parallelism.tensor_model_parallel_size = 8;
  plan::Diagnostics d;
  plan::resolve(p, d);
  return p;
}

TEST(Flops, ModelFlopsAreKorthikantiEquation7) {
  // 72 B L s h^2 (1 + s/(6h) + V/(12 h L)).
  const plan::Plan p = gpt("gpt3-175b", 1536, plan::Recompute::none);
  const double B = 1536, L = 96, s = 2048, h = 12288, V = 51200;
  const double eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  EXPECT_NEAR(step_flops(p).model / eq7, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(step_flops(p).hardware, step_flops(p).model);
}

TEST(Flops, FullRecomputeHardwareFlopsAreNarayananEquation3) {
  // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
  const plan::Plan p = gpt("nar21-1t", 3072, plan::Recompute::full);
  const double B = 3072, l = 128, s = 2048, h = 25600, V = 51200;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(step_flops(p).hardware / eq3, 1.0, 1e-12);
}

TEST(Flops, SelectiveRecomputeRepeatsOneForwardOfTheAttentionCore) {
  // What runs again: Q K^T and attention x V forward, 4 B s^2 h per layer. KOR22 eq. 8
  // (72 B L s h^2 (1 + s/(3h) + ...)) counts three times that, a forward and a backward.
  const plan::Plan p = gpt("kor22-22b", 4, plan::Recompute::selective);
  const double B = 4, L = 48, s = 2048, h = 6144;
  const auto f = step_flops(p);
  EXPECT_NEAR(f.hardware - f.model, 4 * B * L * s * s * h, 1e-9 * f.model);
  const double eq8_extra = 72 * B * L * s * h * h * (s / (6 * h));
  EXPECT_NEAR(eq8_extra / (f.hardware - f.model), 3.0, 1e-12);
}

TEST(Flops, CausalOptionHalvesTheAttentionTerm) {
  const plan::Plan p = gpt("gpt3-175b", 8, plan::Recompute::none);
  const double full = step_flops(p).model;
  const double causal = step_flops(p, {.causal_attention = true}).model;
  const double B = 8, L = 96, s = 2048, h = 12288;
  EXPECT_NEAR(full - causal, 72 * B * L * s * h * h * s / (12 * h), full * 1e-12);
}

TEST(Flops, MoeCountsTopKExperts) {
  plan::Plan p = gpt("mixtral-8x7b", 8, plan::Recompute::none);
  const auto moe = moe_layer_flops(p.model);
  const auto dense = dense_layer_flops(p.model);
  // Two experts instead of one MLP, plus the router: 2 h E.
  EXPECT_DOUBLE_EQ(moe.gemm - dense.gemm, 2.0 * 3 * 2 * 4096 * 14336 - 3 * 2 * 4096 * 14336 + 2 * 4096 * 8);
}

// KOR22 Table 2, bytes per layer for one micro-batch: s b h (34 + 5 a s / h) and its variants.
TEST(Memory, ActivationsAreKorthikantiTable2) {
  plan::Plan p = gpt("kor22-22b", 4, plan::Recompute::none);
  p.training.micro_batch_size = 1;
  const double s = 2048, b = 1, h = 6144, a = 64, t = 8;
  const double sbh = s * b * h;
  p.parallelism.sequence_parallel = false;
  EXPECT_NEAR(layer_activation_bytes(p, false), sbh * (10 + 24 / t + 5 * a * s / (h * t)), 1);
  p.parallelism.sequence_parallel = true;
  EXPECT_NEAR(layer_activation_bytes(p, false), sbh / t * (34 + 5 * a * s / h), 1);
  p.training.recompute = plan::Recompute::selective;
  EXPECT_NEAR(layer_activation_bytes(p, false), 34 * sbh / t, 1);
  p.parallelism.sequence_parallel = false;
  EXPECT_NEAR(layer_activation_bytes(p, false), sbh * (10 + 24 / t), 1);
  p.training.recompute = plan::Recompute::full;
  EXPECT_NEAR(layer_activation_bytes(p, false), 2 * sbh, 1);
  // With TP = 1 and no recomputation: s b h (34 + 5 a s / h).
  p.training.recompute = plan::Recompute::none;
  p.parallelism.tensor_model_parallel_size = 1;
  EXPECT_NEAR(layer_activation_bytes(p, false), sbh * (34 + 5 * a * s / h), 1);
}

// ZeRO (Rajbhandari et al. 2019) §5 example: 7.5B parameters at N_d = 64 need 120 GB
// (baseline), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p).
TEST(Memory, ZeroStagesMatchTheZeroPaper) {
  const double psi = 7.5e9;
  const double want[] = {120, 31.4, 16.6, 1.9};
  for (std::int64_t stage = 0; stage <= 3; ++stage) {
    const auto b = model_state_bytes_per_param(stage, 64, plan::Precision::fp16);
    EXPECT_NEAR(psi * (b.weights + b.gradients + b.optimizer) / 1e9, want[stage], 0.06) << stage;
  }
}

// bf16: Megatron-LM keeps fp32 main gradients, 6 + 12/d bytes per parameter with the
// distributed optimizer (Megatron-LM docs, distributed optimizer table).
TEST(Memory, Bf16KeepsFp32Gradients) {
  const auto b = model_state_bytes_per_param(1, 8, plan::Precision::bf16);
  EXPECT_DOUBLE_EQ(b.weights + b.gradients, 6);
  EXPECT_DOUBLE_EQ(b.optimizer, 12.0 / 8);
}

TEST(Memory, NoPipelineHoldsOneMicroBatchWhateverTheSchedule) {
  plan::Plan p = gpt("gpt3-175b", 64, plan::Recompute::none);
  p.parallelism.pipeline_schedule = plan::PipelineSchedule::gpipe;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0, 64), 1);
}

TEST(Memory, InFlightMicroBatchesBySchedule) {
  plan::Plan p = gpt("gpt3-175b", 64, plan::Recompute::none);
  p.parallelism.pipeline_model_parallel_size = 8;
  p.parallelism.pipeline_schedule = plan::PipelineSchedule::one_f_one_b;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0, 64), 8);  // p - stage
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 5, 64), 3);
  p.parallelism.pipeline_schedule = plan::PipelineSchedule::gpipe;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0, 64), 64);  // m
  p.parallelism.pipeline_schedule = plan::PipelineSchedule::interleaved;
  p.parallelism.virtual_pipeline_model_parallel_size = 3;
  // KOR22 eq. 5 factor: the first stage holds p (1 + (p-1)/(p v)) stages' worth.
  EXPECT_NEAR(in_flight_micro_batches(p, 0, 64), 8 * (1 + 7.0 / (8 * 3)), 1e-12);
}

plan::Plan pipeline(plan::PipelineSchedule schedule, std::int64_t vpp) {
  auto r = plan::load_plan_text(
      "model: gpt3-175b\ntraining: {global_batch_size: 64, recompute: selective}\n"
      "parallelism: {tp: 8, pp: 8, sp: true}\ncluster: {gpu: a100-sxm-80gb, num_gpus: 64}\n",
      plan::Format::yaml);
  EXPECT_TRUE(r.ok());
  r.plan.parallelism.pipeline_schedule = schedule;
  r.plan.parallelism.virtual_pipeline_model_parallel_size = vpp;
  return r.plan;
}

TEST(Estimate, BubbleFractionFollowsTheSchedule) {
  // m = 64 micro-batches, p = 8.
  EXPECT_DOUBLE_EQ(estimate(pipeline(plan::PipelineSchedule::one_f_one_b, 1)).bubble_fraction, 7.0 / 64);
  EXPECT_DOUBLE_EQ(estimate(pipeline(plan::PipelineSchedule::gpipe, 1)).bubble_fraction, 7.0 / 64);
  EXPECT_DOUBLE_EQ(estimate(pipeline(plan::PipelineSchedule::interleaved, 3)).bubble_fraction, 7.0 / (3 * 64));
  EXPECT_DOUBLE_EQ(estimate(pipeline(plan::PipelineSchedule::zero_bubble, 1)).bubble_fraction, 7.0 / (3 * 64));
}

TEST(Estimate, BreakdownAddsUpToTheStepTime) {
  const auto r = estimate(pipeline(plan::PipelineSchedule::interleaved, 3));
  EXPECT_NEAR(r.breakdown.total(), r.step_time_s, 1e-12 * r.step_time_s);
  EXPECT_GT(r.mfu, 0);
  EXPECT_LE(r.mfu, r.hfu);
  EXPECT_NEAR(r.model_tflops_per_gpu / 312, r.mfu, 1e-12);
}

TEST(Estimate, AModelThatDoesNotFitSaysSo) {
  auto r = plan::load_plan_text("model: nar21-1t\ntraining: {global_batch_size: 8}\nparallelism: {tp: 8, zero: 0}\n"
                                "cluster: {gpu: a100-sxm-80gb, num_gpus: 8}\n", plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const auto rep = estimate(r.plan);
  EXPECT_FALSE(rep.fits);
  ASSERT_FALSE(rep.notes.empty());
  EXPECT_NE(rep.notes.front().find("does not fit"), std::string::npos);
}

// NVIDIA DGX H100 datasheet: 10.2 kW maximum system power. A node at full load within 10%.
TEST(Estimate, DgxH100AtFullLoadIsWithinTenPercentOfItsMaximumPower) {
  auto r = plan::load_plan_text("model: llama3-70b\ntraining: {global_batch_size: 64, recompute: selective}\n"
                                "parallelism: {tp: 8, pp: 1, sp: true}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  auto rep = estimate(r.plan);
  // Full load: every GPU at TDP.
  const double full_load_node_watts = (8 * 700 + hardware_profile(r.plan.cluster.gpu).host_watts_per_node) /
                                      hardware_profile(r.plan.cluster.gpu).psu_efficiency;
  EXPECT_NEAR(full_load_node_watts / 10200, 1.0, 0.10);
  EXPECT_LE(rep.power.node_watts, full_load_node_watts);
  EXPECT_GT(rep.power.node_watts, 0.6 * full_load_node_watts);
}

}  // namespace
}  // namespace meshwork::models

#include "models/op_table.hpp"
#include "models/params.hpp"

namespace meshwork::models {
namespace {

// The op table is what lowering builds the Program from: its forward and backward FLOPs, over
// every layer, micro-batch and rank, are the model FLOPs of eq. 7.
TEST(OpTable, FlopsOverAllRanksAreTheModelFlops) {
  auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 64, micro_batch_size: 2}\n"
                                "parallelism: {tp: 8, pp: 4, cp: 2, sp: true}\ncluster: {gpu: h100-sxm, num_gpus: 128}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const auto& p = r.plan;
  double per_rank = 0;
  for (const auto& op : layer_ops(p, false)) {
    if (op.phase != OpPhase::recompute) per_rank += op.flops;
  }
  double head = 0;
  for (const auto& op : last_stage_ops(p)) head += op.flops;
  const double micro_batches = 64.0 / (2 * 2);  // GBS / (MBS x DP), DP = 128 / (8 x 4 x 2) = 2
  const double dp = 2, tp = 8, cp = 2;
  const double total = (per_rank * 96 + head) * micro_batches * dp * tp * cp;
  EXPECT_NEAR(total / step_flops(p).model, 1.0, 1e-9);
}

TEST(OpTable, BackwardSplitsIntoInputAndWeightGradients) {
  auto r = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 8}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n"
                                "parallelism: {tp: 8, sp: true}\n", plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  double fwd = 0, input = 0, weight = 0;
  for (const auto& op : layer_ops(r.plan, false)) {
    if (op.kind != OpKind::gemm) continue;
    if (op.phase == OpPhase::forward) fwd += op.flops;
    if (op.phase == OpPhase::backward_input) input += op.flops;
    if (op.phase == OpPhase::backward_weight) weight += op.flops;
    if (op.name == "qkv" && op.phase == OpPhase::forward) {
      // [b s x h] x [h x (a + 2 g) d / t]: 8192 tokens, 4096 -> (32 + 16) x 128 / 8.
      EXPECT_DOUBLE_EQ(op.shape.m, 8192);
      EXPECT_DOUBLE_EQ(op.shape.k, 4096);
      EXPECT_DOUBLE_EQ(op.shape.n, 48.0 * 128 / 8);
    }
  }
  EXPECT_DOUBLE_EQ(input, fwd);
  EXPECT_DOUBLE_EQ(weight, fwd);
}

TEST(Estimate, OneBitCompressionCutsDataParallelTime) {
  auto r = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 64}\ncluster: {gpu: h100-sxm, num_gpus: 64}\n"
                                "parallelism: {tp: 1, zero: 0, overlap: {grad_reduce: false}}\n", plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const double plain = estimate(r.plan).breakdown.dp_s;
  r.plan.parallelism.gradient_compression = plan::GradientCompression::onebit;
  const double onebit = estimate(r.plan).breakdown.dp_s;
  EXPECT_GT(plain, 0);
  EXPECT_NEAR(onebit / plain, (1.0 / 8) / 2, 0.05);  // 1 bit against 16, all else equal but latency
}

TEST(ComputeTimer, MeasuredKernelsPriceTheirOwnKinds) {
  // The CPU host (100 GB/s, 0.192 TFLOP/s fp32) with `meshwork calibrate`'s figures: each kind
  // it measured is priced at its own rate, the others at memory_efficiency's.
  auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 4, precision: fp32}\n"
                                "cluster: {gpu: cpu-host, num_gpus: 1, gpus_per_node: 1, intra_node: {kind: shared_memory}, nics_per_node: 0, topology: {kind: single_node}}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  auto& c = r.plan.cluster.gpu.calibration;
  c.memory_efficiency = 0.5;
  c.kernel_overhead_us = 1;
  c.loss_efficiency = 0.1;
  c.embedding_efficiency = 0.2;
  c.optimizer_efficiency = 0.25;
  c.attention_max_efficiency = 0.1;
  c.attention_half_macs = 1e6;
  const ComputeTimer timer(r.plan);
  const double bw = r.plan.cluster.gpu.hbm_gbytes_per_s * 1e9;
  EXPECT_DOUBLE_EQ(timer(OpKind::loss, 0, 1e6), 1e-6 + 1e6 / (0.1 * bw));
  EXPECT_DOUBLE_EQ(timer(OpKind::embedding, 0, 1e6), 1e-6 + 1e6 / (0.2 * bw));
  EXPECT_DOUBLE_EQ(timer(OpKind::optimizer, 0, 1e6), 1e-6 + 1e6 / (0.25 * bw));
  EXPECT_DOUBLE_EQ(timer.bytes_per_s(OpKind::optimizer), 0.25 * bw);
  EXPECT_DOUBLE_EQ(timer(OpKind::elementwise, 0, 1e6), 1e-6 + 1e6 / (0.5 * bw));  // not measured: memory_efficiency
  // Attention on its own curve: at 1e6 multiply-adds, half of 0.1 of the peak.
  const double peak = r.plan.cluster.gpu.peak_tflops.fp32 * 1e12;
  EXPECT_DOUBLE_EQ(timer(OpKind::attention, 2e6, 123), 1e-6 + 2e6 / (peak * 0.05));
  // The estimate's optimizer time follows the measured rate.
  const auto slow = estimate(r.plan).breakdown.optimizer_s;
  c.optimizer_efficiency = 0.5;
  EXPECT_NEAR(estimate(r.plan).breakdown.optimizer_s, slow / 2, slow * 1e-12);
}

}  // namespace
}  // namespace meshwork::models
