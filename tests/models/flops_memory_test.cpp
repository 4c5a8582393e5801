// FLOPs against Korthikanti eq. 7 / Narayanan eq. 3, memory against Korthikanti Table 2 and
// ZeRO's worked example, bubble fractions against the schedule formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/hardware.hpp"
#include "models/memory.hpp"
#include "models/program.hpp"
#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

plan::TrainingConfig training_in(plan::Precision precision) {
  plan::TrainingConfig t;
  t.precision = precision;
  return t;
}

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
    const auto b = model_state_bytes_per_param(stage, 64, training_in(plan::Precision::fp16));
    EXPECT_NEAR(psi * (b.weights + b.gradients + b.optimizer) / 1e9, want[stage], 0.06) << stage;
  }
}

// bf16: Megatron-LM keeps fp32 main gradients, 6 + 12/d bytes per parameter with the
// distributed optimizer (Megatron-LM docs, distributed optimizer table).
TEST(Memory, Bf16KeepsFp32Gradients) {
  const auto b = model_state_bytes_per_param(1, 8, training_in(plan::Precision::bf16));
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
  // m = 64 micro-batches, p = 8: the papers' (p-1)/m for equal stages. The end stages carry the
  // embedding and the LM head, so the slowest stage idles for the others' fill and drain,
  // a little less than 7 of its own micro-batches.
  const double one_f_one_b = estimate(pipeline(plan::PipelineSchedule::one_f_one_b, 1)).bubble_fraction;
  EXPECT_LT(one_f_one_b, 7.0 / 64);
  EXPECT_GT(one_f_one_b, 0.95 * 7.0 / 64);
  EXPECT_NEAR(estimate(pipeline(plan::PipelineSchedule::gpipe, 1)).bubble_fraction, one_f_one_b, 1e-12);
  // Interleaved, the replay of Megatron's order (models/pipeline) with the heavier end stages
  // idles a few per cent more than the paper's (p-1)/(v m), which assumes equal stages.
  EXPECT_NEAR(estimate(pipeline(plan::PipelineSchedule::interleaved, 3)).bubble_fraction, one_f_one_b / 3, 0.10 * one_f_one_b / 3);
  // ZB-H1 likewise, against Qi et al.'s (p-1)/(3m) for T_F = T_B = T_W.
  EXPECT_NEAR(estimate(pipeline(plan::PipelineSchedule::zero_bubble, 1)).bubble_fraction, one_f_one_b / 3, 0.10 * one_f_one_b / 3);
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

// NVIDIA DGX H100 datasheet: 10.2 kW maximum system power, a provisioning figure; metered
// nodes stay below it (8.48 kW at most, Latif et al. 2024). A node at full load stays under
// the rating, and a training step draws at least 60% of full load.
TEST(Estimate, DgxH100AtFullLoadStaysUnderItsRatedMaximumPower) {
  auto r = plan::load_plan_text("model: llama3-70b\ntraining: {global_batch_size: 64, recompute: selective}\n"
                                "parallelism: {tp: 8, pp: 1, sp: true}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  auto rep = estimate(r.plan);
  // Full load: every GPU at TDP.
  const double full_load_node_watts = (8 * 700 + hardware_profile(r.plan.cluster.gpu).host_watts_per_node) /
                                      hardware_profile(r.plan.cluster.gpu).psu_efficiency;
  EXPECT_LE(full_load_node_watts, 10200);
  EXPECT_LE(rep.power.node_watts, full_load_node_watts);
  EXPECT_GT(rep.power.node_watts, 0.6 * full_load_node_watts);
}

// Measured, not rated: an 8 x H100 HGX node training Llama 2 13B with its GPUs near full
// utilization peaked at 8.48 kW at the wall (Latif et al. 2024, arXiv:2412.08602, IEEE Access
// 13:61740), and compute-intensive training averaged 76% of the 10.2 kW rating, 7.75 kW
// (Newkirk et al. 2025, arXiv:2506.14551). A compute-bound single-node H100 plan must land in
// that range. The host share is taken from the first figure (models/hardware.cpp); the second,
// and where between the two a busy plan lands, is what the GPU share (idle to TDP by busy
// time) answers for.
TEST(Estimate, ATrainingH100NodeDrawsWhatMeteredNodesDraw) {
  auto r = plan::load_plan_text("model: {num_layers: 40, hidden_size: 5120, num_attention_heads: 40, ffn_hidden_size: 13824,\n"
                                "        vocab_size: 32000, seq_length: 4096, activation: swiglu, normalization: rmsnorm,\n"
                                "        position_embedding_type: rope}\n"
                                "training: {global_batch_size: 64, micro_batch_size: 1, recompute: selective}\n"
                                "parallelism: {tp: 1, pp: 1, zero: 3}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().path + ": " + r.diagnostics.items().front().message);
  const auto rep = estimate(r.plan);
  ASSERT_TRUE(rep.fits);
  EXPECT_GE(rep.power.node_watts, 0.76 * 10200);
  EXPECT_LE(rep.power.node_watts, 8480);
  EXPECT_LE(rep.power.gpu_watts, 700);
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

// Mixtral 8x7B on one H100 node (TP 8 with SP) in `precision`.
plan::Plan mixtral_on_h100(const char* precision) {
  auto r = plan::load_plan_text(std::string("model: mixtral-8x7b\ntraining: {global_batch_size: 8, precision: ") + precision +
                                    "}\ncluster: {gpu: h100-sxm, num_gpus: 8}\nparallelism: {tp: 8, sp: true}\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

// FP8 training: a layer's linear GEMM casts its input (forward) and its output's gradient
// (backward input) with TE's cast-transpose, 4 bytes an element; the weight gradient casts
// nothing; the router and every op of a bf16 plan cast nothing. The timer adds the casts at the
// elementwise rate, one launch more.
TEST(OpTable, Fp8GemmsPayTheirOperandCasts) {
  const plan::Plan fp8 = mixtral_on_h100("fp8"), bf16 = mixtral_on_h100("bf16");
  const double tokens = 32768, h = 4096;  // Mixtral: micro-batch 1 x seq 32768, hidden 4096
  ASSERT_EQ(fp8.model.seq_length * fp8.training.micro_batch_size, 32768);
  bool saw_qkv = false, saw_router = false;
  const ComputeTimer timer(fp8);
  for (const auto& op : layer_ops(fp8, true)) {
    if (op.name == "qkv" && op.phase == OpPhase::forward) {
      saw_qkv = true;
      EXPECT_DOUBLE_EQ(op.cast_bytes, 4 * tokens * h);  // its input, [tokens x h]
      Op plain = op;
      plain.cast_bytes = 0;
      EXPECT_NEAR(timer(op) - timer(plain), timer.hardware().kernel_overhead_s + 4 * tokens * h / timer.bytes_per_s(OpKind::elementwise), 1e-15);
    }
    if (op.name == "qkv" && op.phase == OpPhase::backward_input) {
      EXPECT_DOUBLE_EQ(op.cast_bytes, 4 * tokens * (32 + 2 * 8) * 128 / 8);  // its output's gradient, [tokens x (a + 2 g) d / t]
    }
    if (op.phase == OpPhase::backward_weight || op.kind != OpKind::gemm) {
      EXPECT_EQ(op.cast_bytes, 0) << op.name;
    }
    if (op.name == "router") {
      saw_router = true;
      EXPECT_EQ(op.cast_bytes, 0);
    }
  }
  EXPECT_TRUE(saw_qkv && saw_router);
  for (const auto& op : layer_ops(bf16, true)) EXPECT_EQ(op.cast_bytes, 0) << op.name;
  for (const auto& op : last_stage_ops(fp8)) EXPECT_EQ(op.cast_bytes, 0) << op.name;  // the head stays bf16
}

// FP8 training keeps the output layer and the MoE router in 16 bits (Megatron-core's head is its
// own ColumnParallelLinear, out of Transformer Engine's FP8 autocast; the router a plain
// linear): in an FP8 plan they take exactly the time the same ops take in the BF16 plan, and
// the layers' linear GEMMs run faster than theirs. Before Op::sixteen_bit the head ran at the
// FP8 peak, twice the rate Megatron gives it.
TEST(OpTable, Fp8PlansKeepTheHeadAndTheRouterIn16Bits) {
  const plan::Plan fp8 = mixtral_on_h100("fp8"), bf16 = mixtral_on_h100("bf16");
  const ComputeTimer fp8_timer(fp8), bf16_timer(bf16);
  auto pairs = [](const std::vector<Op>& a, const std::vector<Op>& b, const std::function<void(const Op&, const Op&)>& each) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].name, b[i].name);
      each(a[i], b[i]);
    }
  };
  int heads = 0, routers = 0, linears = 0;
  pairs(last_stage_ops(fp8), last_stage_ops(bf16), [&](const Op& f, const Op& b) {
    EXPECT_FALSE(b.sixteen_bit) << b.name;  // a BF16 plan's ops are all 16-bit: no flag
    if (f.name != "lm_head") return;
    ++heads;
    EXPECT_TRUE(f.sixteen_bit);
    EXPECT_DOUBLE_EQ(fp8_timer(f), bf16_timer(b));
  });
  pairs(layer_ops(fp8, true), layer_ops(bf16, true), [&](const Op& f, const Op& b) {
    EXPECT_FALSE(b.sixteen_bit) << b.name;
    if (f.kind != OpKind::gemm) return;
    if (f.name == "router") {
      ++routers;
      EXPECT_TRUE(f.sixteen_bit);
      EXPECT_DOUBLE_EQ(fp8_timer(f), bf16_timer(b));
    } else {
      ++linears;
      EXPECT_FALSE(f.sixteen_bit) << f.name;
      Op uncast = f;
      uncast.cast_bytes = 0;
      EXPECT_LT(fp8_timer(uncast), 0.75 * bf16_timer(b)) << f.name;  // twice the peak, the same fixed time
    }
  });
  EXPECT_EQ(heads, 3);    // forward, input and weight gradients
  EXPECT_EQ(routers, 3);
  EXPECT_GT(linears, 0);
  // The Program carries the flag to the simulator: its head and router instructions, and no other.
  const LowerResult lowered = lower(fp8);
  ASSERT_TRUE(lowered.program) << lowered.error;
  int flagged = 0;
  for (const auto& stage : lowered.program->classes) {
    for (const auto& in : stage.instrs) {
      const std::string& name = lowered.program->name(in);
      EXPECT_EQ(in.sixteen_bit, in.kind == InstrKind::compute && (name == "lm_head" || name == "router")) << name;
      flagged += in.sixteen_bit ? 1 : 0;
    }
  }
  EXPECT_GT(flagged, 0);
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
  // The estimate's optimizer time follows the measured rate: two kernels' fixed time (the
  // update and clipping's passes, clip_grad's default) and their bytes at the rate.
  const double fixed = 2 * 1e-6;
  const auto slow = estimate(r.plan).breakdown.optimizer_s;
  c.optimizer_efficiency = 0.5;
  EXPECT_NEAR(estimate(r.plan).breakdown.optimizer_s - fixed, (slow - fixed) / 2, slow * 1e-12);
}

// FP8 training runs its GEMMs at the FP8 peak and, unless training.fp8_attention (Transformer
// Engine's fp8_dpa), its attention at the BF16 peak: the attention takes as long as in a BF16
// plan, the GEMMs' multiply-adds half as long (both peaks H100's datasheet figures, 1,979 and
// 989 TFLOP/s) and their fixed part as long: a GEMM costs 2 (macs + half) / (peak max), with
// FP8's half size BF16's times the peaks' ratio (models/compute_time.cpp, curve_at).
TEST(ComputeTimer, Fp8RunsTheAttentionInBf16UnlessAsked) {
  auto plan = [](const char* precision, bool fp8_attention) {
    auto r = plan::load_plan_text(std::string("model: {preset: llama3-8b, seq_length: 8192}\ntraining: {global_batch_size: 8, precision: ") + precision +
                                      ", fp8_attention: " + (fp8_attention ? "true" : "false") + "}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return r.plan;
  };
  const ComputeTimer bf16(plan("bf16", false)), fp8(plan("fp8", false)), fp8_dpa(plan("fp8", true));
  const double flops = 1e12, overhead = bf16(OpKind::gemm, 0, 0);
  EXPECT_DOUBLE_EQ(fp8(OpKind::attention, flops, 1e6), bf16(OpKind::attention, flops, 1e6));
  const HardwareProfile& hw = bf16.hardware();
  const double macs = flops / 2, half = hw.gemm_half_macs, max = hw.gemm_max_efficiency;
  EXPECT_NEAR(bf16(OpKind::gemm, flops, 0) - overhead, 2 * (macs + half) / (989e12 * max), 1e-12);
  const double fp8_half = half * 1979.0 / 989;  // the peaks' ratio
  EXPECT_NEAR(fp8(OpKind::gemm, flops, 0) - overhead, 2 * (macs + fp8_half) / (1979e12 * max), 1e-12);
  // The same fixed time: a GEMM of no size costs 2 half / (989e12 max) at either peak.
  EXPECT_NEAR(fp8(OpKind::gemm, 2, 0) - overhead, bf16(OpKind::gemm, 2, 0) - overhead, 1e-9 * (bf16(OpKind::gemm, 2, 0) - overhead));
  // FP8 attention (fp8_dpa) on the same terms: the causal flash kernel executes half the FLOPs,
  // at its kernel's forward pace over the GEMM curve (auto on Hopper: cuDNN's, at 8,192 keys), at FP8's
  // peak with FP8's half size.
  const double executed = flops / 2, pace = hw.cudnn.forward.at(8192);  // a forward: the timer's default phase
  EXPECT_NEAR(fp8_dpa(OpKind::attention, flops, 1e6) - overhead, executed / (1979e12 * pace * max * macs / (macs + fp8_half)), 1e-12);
  // And so the step: an FP8 plan's attention is not halved.
  const auto est = estimate(plan("fp8", false)), est_dpa = estimate(plan("fp8", true));
  EXPECT_GT(est.step_time_s, est_dpa.step_time_s);
  // The peak `meshwork calibrate` measures the attention against is the same one.
  const plan::Plan p = plan("fp8", false);
  EXPECT_DOUBLE_EQ(plan::attention_peak_tflops(p.cluster.gpu, p.training), 989);
  EXPECT_DOUBLE_EQ(plan::attention_peak_tflops(p.cluster.gpu, plan("fp8", true).training), 1979);
  EXPECT_DOUBLE_EQ(plan::attention_peak_tflops(p.cluster.gpu, plan("bf16", false).training), 989);
  // A GPU with an FP8 peak and no BF16 one: the attention at the FP8 peak, and a warning.
  auto custom = plan::load_plan_text("model: {preset: llama3-8b}\ntraining: {global_batch_size: 8, precision: fp8}\n"
                                     "cluster: {gpu: {name: fp8-only, peak_tflops: {fp8: 1000}, hbm_gib: 80, hbm_gbytes_per_s: 3000, nvlink_gbytes_per_s: 450, tdp_watts: 700}, num_gpus: 8}\n",
                                     plan::Format::yaml);
  ASSERT_TRUE(custom.ok());
  EXPECT_NE(custom.diagnostics.find("cluster.gpu.peak_tflops.bf16"), nullptr);
  EXPECT_EQ(hardware_profile(custom.plan.cluster.gpu).generation, "generic");  // a GPU, not the CPU host's profile
  EXPECT_DOUBLE_EQ(plan::attention_peak_tflops(custom.plan.cluster.gpu, custom.plan.training), 1000);
  EXPECT_TRUE(std::isfinite(estimate(custom.plan).step_time_s));
}

// A Llama-3-style plan for hand calculations: no dropout, GQA (16 heads, 4 KV heads of 64),
// SwiGLU, RMSNorm, untied embeddings, no biases; TP 2 with SP, PP 2, DP 4, flash attention.
plan::Plan llama_style(std::int64_t zero, const char* extra = "", const char* training = "") {
  const std::string model =
      "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, num_query_groups: 4, kv_channels: 64, "
      "ffn_hidden_size: 2816, seq_length: 2048, vocab_size: 32000, activation: swiglu, normalization: rmsnorm, "
      "position_embedding_type: rope, untie_embeddings_and_output_weights: true, add_bias_linear: false, "
      "hidden_dropout: 0, attention_dropout: 0}\n";
  const std::string text = model + "training: {global_batch_size: 32, micro_batch_size: 1, precision: bf16" + training +
                           "}\nparallelism: {tp: 2, sp: true, pp: 2, dp: 4, zero_stage: " + std::to_string(zero) + extra +
                           "}\ncluster: {gpu: h100-sxm, gpus_per_node: 8}\n";
  auto r = plan::load_plan_text(text, plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().path + ": " + r.diagnostics.items().front().message);
  return r.plan;
}

// One layer's activations for one micro-batch, by hand (KOR22 §4.1 without dropout masks):
// kept whole and split by SP: two norm inputs, the QKV and MLP inputs, 2 bytes each (8 sbh);
// split by TP: Q, K, V (2 s (1024 + 2 x 256)), the attention output (2 s 1024), flash
// attention's fp32 statistics (4 a s), SwiGLU's two branches and product (2 s 2816 x 3).
double llama_style_layer_bytes() {
  const double s = 2048, h = 1024, t = 2;
  const double whole = 8 * s * h;
  const double split = 2 * s * (1024 + 2 * 256) + 2 * s * 1024 + 4 * 16 * s + 2 * s * 2816 * 3;
  return (whole + split) / t;
}

TEST(Memory, EachTermOfALlamaStylePlanIsTheHandCalculationUnderZero123) {
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  const double layer = llama_style_layer_bytes();
  EXPECT_DOUBLE_EQ(layer_activation_bytes(llama_style(1), false), layer);
  for (const std::int64_t zero : {1, 2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(zero));
    const plan::Plan p = llama_style(zero);
    const ParamCounts c = count_params(p.model);
    const auto mem = stage_memory(p);
    ASSERT_EQ(mem.size(), 2u);
    // Parameters per GPU: four layers a stage, the embedding on the first, the final norm and
    // the untied LM head on the last, all over TP 2.
    const double p0 = (4 * c.dense_layer() + c.embedding) / 2;
    const double p1 = (4 * c.dense_layer() + c.final_norm + c.lm_head) / 2;
    const double shards = 4;  // DP 4 x CP 1
    for (const auto& [sm, params] : {std::pair{mem[0], p0}, std::pair{mem[1], p1}}) {
      EXPECT_DOUBLE_EQ(sm.params, params);
      // bf16 weights (2 bytes), fp32 main gradients (4), fp32 master weights and Adam moments (12).
      const double gathered = zero == 3 ? 2 * (c.dense_layer() / 2) * 2 : 0;  // ZeRO-3: the layer in use and the one prefetched
      EXPECT_DOUBLE_EQ(sm.weights_bytes, (zero == 3 ? 2 * params / shards : 2 * params) + gathered);
      const double buckets = zero >= 2 ? 2 * std::min(40e6, params) * 4 : 0;  // unsharded buckets awaiting their reduce-scatter
      EXPECT_DOUBLE_EQ(sm.gradients_bytes, (zero >= 2 ? 4 * params / shards : 4 * params) + buckets);
      EXPECT_DOUBLE_EQ(sm.optimizer_bytes, 12 * params / shards);
      EXPECT_DOUBLE_EQ(sm.buffers_bytes, 1.5 * kGiB);  // runtime only: DDP buckets are views of the gradient buffer
      EXPECT_DOUBLE_EQ(sm.capacity_bytes, p.cluster.gpu.hbm_gib * kGiB);
      EXPECT_DOUBLE_EQ(sm.headroom_bytes, 0.05 * sm.capacity_bytes);
    }
    // 1F1B, 8 micro-batches: stage 0 holds 2 in flight, stage 1 one, plus its fp32 logits
    // 4 s b (h + V) / t; no dropout, so no embedding mask on stage 0.
    EXPECT_DOUBLE_EQ(mem[0].activations_bytes, 2 * 4 * layer);
    EXPECT_DOUBLE_EQ(mem[1].activations_bytes, 1 * 4 * layer + 4 * (2048.0 * 1024 + 2048.0 * 32000) / 2);
  }
}

TEST(Memory, InterleavedWithMicroBatchesEqualToStagesWarmsUpWithAll) {
  // 8 layers on 2 stages x 2 chunks, 2 micro-batches (8 / (1 x 4)): Megatron warms up with
  // every micro-batch when m = p, so both stages hold m v = 4 chunks of 2 layers; the general
  // count (p - s - 1) 2 + (v - 1) p + 1 would give stage 1 only 3.
  plan::Plan p = llama_style(1, ", vpp: 2, pipeline_schedule: interleaved");
  p.training.global_batch_size = 8;
  ASSERT_EQ(plan::derive(p).micro_batches_per_step, 2);
  const double layer = llama_style_layer_bytes();
  const auto mem = stage_memory(p);
  ASSERT_EQ(mem.size(), 2u);
  EXPECT_EQ(peak_chunks_in_flight(p, 0, 2), 4);
  EXPECT_EQ(peak_chunks_in_flight(p, 1, 2), 4);
  EXPECT_DOUBLE_EQ(mem[0].activations_bytes, 4 * 2 * layer);
  EXPECT_DOUBLE_EQ(mem[1].activations_bytes, 4 * 2 * layer + 4 * (2048.0 * 1024 + 2048.0 * 32000) / 2);
  // With 4 micro-batches the warm-up is the general one again.
  plan::Plan more = p;
  more.training.global_batch_size = 16;
  EXPECT_EQ(peak_chunks_in_flight(more, 1, 4), 3);
}

TEST(Memory, DropoutStoresItsMasksAndOnlyThen) {
  plan::Plan p = llama_style(1);
  const double without = layer_activation_bytes(p, false);
  p.model.hidden_dropout = 0.1;
  // Two 1-byte masks of s b h after attention and MLP, split by SP over TP 2.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(p, false) - without, 2 * 2048.0 * 1024 / 2);
  // Megatron's default keeps dropout; presets of models trained without it set 0.
  EXPECT_DOUBLE_EQ(plan::ModelConfig{}.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(plan::find_model_preset("llama3-405b")->model.hidden_dropout, 0);
}

TEST(Memory, PartialRecomputeKeepsTheOtherLayersActivationsAndSkipsTheirFlops) {
  const double layer = llama_style_layer_bytes();
  const double input = 2 * 2048.0 * 1024 / 2;  // the checkpointed layer input, split by SP
  // block, 1 layer per chunk: of each stage's 4 layers one stores its input, three their all;
  // during its backward the recomputed layer's activations exist once more.
  const plan::Plan block = llama_style(1, "", ", recompute: full, recompute_method: block, recompute_num_layers: 1");
  const auto mb = stage_memory(block);
  EXPECT_DOUBLE_EQ(mb[0].activations_bytes, 2 * (input + 3 * layer) + layer);
  // uniform in groups of 2: two checkpoints per stage, a group of two recomputed at a time.
  const plan::Plan uniform = llama_style(1, "", ", recompute: full, recompute_method: uniform, recompute_num_layers: 2");
  EXPECT_DOUBLE_EQ(stage_memory(uniform)[0].activations_bytes, 2 * (2 * input) + 2 * layer);
  // FLOPs: block repeats the forward of 1 layer in 4 (one per chunk, two chunks in all).
  const plan::Plan none = llama_style(1);
  const StepFlops f_none = step_flops(none), f_block = step_flops(block), f_uniform = step_flops(uniform);
  const double forward_layers = (f_uniform.hardware - f_none.hardware);  // all 8 layers' forward again
  EXPECT_NEAR((f_block.hardware - f_none.hardware) / forward_layers, 2.0 / 8, 1e-12);
}

}  // namespace
}  // namespace meshwork::models
