// Per-step fixed work (issue 20): every stage starts its step by zeroing its gradient buffer
// (Megatron-core's zero_grad_buffer), once whatever the micro-batches, and clips the reduced
// gradients by their global norm before the update (training.clip_grad), in the Program the
// simulator and the executor play and in the estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/layer_comm.hpp"
#include "models/memory.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

plan::Plan load(const std::string& parallelism, int gpus) {
  auto r = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 32, micro_batch_size: 1, precision: bf16}\n"
                                "cluster: {gpu: h100-sxm, num_gpus: " + std::to_string(gpus) + ", gpus_per_node: " + std::to_string(std::min(gpus, 8)) +
                                    "}\nparallelism: " + parallelism + "\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

// bf16 with Megatron's fp32 main gradients: 4 bytes a held parameter, whole under ZeRO-1.
TEST(StepWork, EveryStageFirstZeroesItsGradientBuffer) {
  const plan::Plan p = load("{tp: 2, pp: 2, dp: 2, zero_stage: 1}", 8);
  auto lowered = lower(p);
  ASSERT_TRUE(lowered.program) << lowered.error;
  const auto memory = stage_memory(p);
  for (const StageProgram& sp : lowered.program->classes) {
    int zeroings = 0;
    const Instr* first_compute = nullptr;
    for (const Instr& in : sp.instrs) {
      if (in.kind != InstrKind::compute) continue;
      if (first_compute == nullptr) first_compute = &in;
      if (lowered.program->name(in) == "zero_grad_buffer") ++zeroings;
    }
    ASSERT_NE(first_compute, nullptr);
    EXPECT_EQ(zeroings, 1) << "stage " << sp.stage;
    EXPECT_EQ(lowered.program->name(*first_compute), "zero_grad_buffer");
    EXPECT_EQ(first_compute->item, -1);
    // It waits for nothing: the parameter gathers dispatched before it run under it.
    EXPECT_EQ(first_compute->after, -1);
    EXPECT_EQ(first_compute->op, OpKind::elementwise);
    const double params = memory[static_cast<std::size_t>(sp.stage)].params;
    EXPECT_GT(params, 1e9);
    // The memory model splits the final norm over TP, the Program holds it whole on each TP
    // rank (2,048 parameters of the last stage's 4e9).
    EXPECT_NEAR(first_compute->bytes, 4 * params, 1e-5 * first_compute->bytes) << "stage " << sp.stage;
  }
  // ZeRO-2 keeps a shard of the gradients (over DP 2), and zeroes that.
  plan::Plan sharded = p;
  sharded.parallelism.zero_stage = 2;
  auto lowered2 = lower(sharded);
  ASSERT_TRUE(lowered2.program) << lowered2.error;
  const auto& instrs2 = lowered2.program->classes[0].instrs;
  std::size_t at = 0;
  while (at < instrs2.size() && lowered2.program->name(instrs2[at]) != "zero_grad_buffer") ++at;
  ASSERT_LT(at, instrs2.size());
  const Instr& zero2 = instrs2[at];
  EXPECT_NEAR(zero2.bytes, 4 * memory[0].params / 2, 1e-5 * zero2.bytes);
}

// On one GPU (no DP to hide it under) the estimate's compute is the Program's compute
// instructions, the zeroing once among them, at the elementwise rate.
TEST(StepWork, TheEstimateChargesTheZeroingOnceAStep) {
  const plan::Plan p = load("{}", 1);
  auto lowered = lower(p);
  ASSERT_TRUE(lowered.program) << lowered.error;
  const ComputeTimer timer(p);
  double compute_s = 0, zero_s = 0;
  for (const Instr& in : lowered.program->classes[0].instrs) {
    if (in.kind != InstrKind::compute || in.op == OpKind::optimizer || in.phase == OpPhase::recompute) continue;
    const double dt = timer(in.op, in.flops, in.bytes, in.cast_bytes, in.phase, in.sixteen_bit);
    compute_s += dt;
    if (lowered.program->name(in) == "zero_grad_buffer") zero_s = dt;
  }
  const double params = stage_memory(p)[0].params;
  EXPECT_NEAR(zero_s, timer.hardware().kernel_overhead_s + 4 * params / timer.bytes_per_s(OpKind::elementwise), 1e-5 * zero_s);
  const report::Report r = estimate(p);
  EXPECT_NEAR(r.breakdown.compute_s, compute_s, 1e-9 * compute_s);
  // 32 micro-batches of one sequence; the zeroing a few milliseconds of a step of seconds.
  EXPECT_GT(zero_s, 1e-3);
  EXPECT_LT(zero_s, 0.01 * r.breakdown.compute_s);
}


// Clipping (Megatron's default --clip-grad 1.0) reads the gradients the GPU owns for their
// norm and scales them (12 bytes a parameter, kClipGradBytesPerParam): one clip_grads per
// stage, after the reductions and right before the update, on ZeRO-1's shard.
TEST(StepWork, ClippingReadsAndScalesTheOwnedGradientsBeforeTheUpdate) {
  const plan::Plan p = load("{tp: 2, pp: 2, dp: 2, zero_stage: 1}", 8);
  EXPECT_EQ(p.training.clip_grad, 1.0);
  auto lowered = lower(p);
  ASSERT_TRUE(lowered.program) << lowered.error;
  const auto memory = stage_memory(p);
  for (const StageProgram& sp : lowered.program->classes) {
    std::vector<const Instr*> computes;
    for (const Instr& in : sp.instrs) {
      if (in.kind == InstrKind::compute) computes.push_back(&in);
    }
    ASSERT_GE(computes.size(), 2u);
    int clips = 0;
    for (const Instr* in : computes) clips += lowered.program->name(*in) == "clip_grads" ? 1 : 0;
    EXPECT_EQ(clips, 1) << "stage " << sp.stage;
    const Instr& update = *computes.back();
    const Instr& clip = *computes[computes.size() - 2];
    ASSERT_EQ(lowered.program->name(update), "optimizer_step");
    ASSERT_EQ(lowered.program->name(clip), "clip_grads");
    EXPECT_EQ(clip.item, -1);
    EXPECT_EQ(clip.op, OpKind::optimizer);
    // It waits for the last gradient reduction (the update follows it on the compute stream).
    ASSERT_GE(clip.after, 0);
    EXPECT_EQ(sp.instrs[static_cast<std::size_t>(clip.after)].kind, InstrKind::collective);
    const double owned = memory[static_cast<std::size_t>(sp.stage)].params / 2;
    EXPECT_NEAR(clip.bytes, 12 * owned, 1e-5 * clip.bytes) << "stage " << sp.stage;
    // Adam (28 bytes) and the master weights' copy into the bf16 ones (6).
    EXPECT_NEAR(update.bytes, 34 * owned, 1e-5 * update.bytes);
  }
  plan::Plan unclipped = p;
  unclipped.training.clip_grad = 0;
  auto lowered0 = lower(unclipped);
  ASSERT_TRUE(lowered0.program) << lowered0.error;
  for (const StageProgram& sp : lowered0.program->classes) {
    for (const Instr& in : sp.instrs) EXPECT_NE(lowered0.program->name(in), "clip_grads");
  }
}

// The estimate's optimizer time grows by the clipping's bytes at the optimizer's streaming
// rate; nothing else moves.
TEST(StepWork, TheEstimateChargesClippingWithTheOptimizer) {
  const plan::Plan p = load("{tp: 2, dp: 4, zero_stage: 1}", 8);
  plan::Plan unclipped = p;
  unclipped.training.clip_grad = 0;
  const report::Report clipped = estimate(p), plain = estimate(unclipped);
  const ComputeTimer timer(p);
  const double owned = stage_memory(p)[0].params / 4;
  const double hand = 12 * owned / timer.bytes_per_s(OpKind::optimizer);
  EXPECT_GT(hand, 1e-4);
  EXPECT_NEAR(clipped.breakdown.optimizer_s - plain.breakdown.optimizer_s, hand, 1e-6 * hand);
  EXPECT_NEAR(clipped.step_time_s - plain.step_time_s, hand, 1e-6 * hand);
  EXPECT_EQ(clipped.breakdown.compute_s, plain.breakdown.compute_s);
}


// fp16's loss scaler: the gradients read, checked and written unscaled (8 bytes an owned
// parameter, kUnscaleGradBytesPerParam), before clipping and the update; the estimate's
// optimizer is the three passes' time.
TEST(StepWork, Fp16UnscalesTheOwnedGradientsBeforeClipping) {
  plan::Plan p = load("{tp: 2, dp: 4, zero_stage: 1}", 8);
  p.training.precision = plan::Precision::fp16;
  auto lowered = lower(p);
  ASSERT_TRUE(lowered.program) << lowered.error;
  std::vector<std::string> tail;
  const Instr* unscale = nullptr;
  for (const Instr& in : lowered.program->classes[0].instrs) {
    if (in.kind != InstrKind::compute || in.item >= 0) continue;
    tail.push_back(lowered.program->name(in));
    if (tail.back() == "unscale_grads") unscale = &in;
  }
  EXPECT_EQ(tail, (std::vector<std::string>{"zero_grad_buffer", "unscale_grads", "clip_grads", "optimizer_step"}));
  ASSERT_NE(unscale, nullptr);
  const double owned = stage_memory(p)[0].params / 4;
  EXPECT_NEAR(unscale->bytes, 8 * owned, 1e-5 * unscale->bytes);
  const ComputeTimer timer(p);
  const double hand = timer(OpKind::optimizer, 0, 34 * owned) + timer(OpKind::optimizer, 0, 8 * owned) + timer(OpKind::optimizer, 0, 12 * owned);
  EXPECT_NEAR(estimate(p).breakdown.optimizer_s, hand, 1e-5 * hand);
  // bf16 keeps no loss scale: no unscale.
  p.training.precision = plan::Precision::bf16;
  auto bf16 = lower(p);
  ASSERT_TRUE(bf16.program) << bf16.error;
  for (const Instr& in : bf16.program->classes[0].instrs) EXPECT_NE(bf16.program->name(in), "unscale_grads");
}


// Adam's bytes: the fused kernel's 28 an owned parameter, and with 16-bit weights the copy of
// the fp32 master weights into them, 6 more (kMasterCopyBytesPerParam); an fp32 plan has none.
TEST(StepWork, OnlySixteenBitWeightsPayTheMasterCopy) {
  plan::Plan p = load("{dp: 8, zero_stage: 1}", 8);
  for (const plan::Precision precision : {plan::Precision::bf16, plan::Precision::fp16, plan::Precision::fp8, plan::Precision::fp32}) {
    p.training.precision = precision;
    EXPECT_EQ(optimizer_bytes_per_param(p), precision == plan::Precision::fp32 ? 28 : 34) << plan::to_string(precision);
  }
}

// Gradients reduced in bf16 (Megatron's --grad-reduce-in-bf16, NeMo's grad_sync_dtype: bf16):
// the buffer a GPU keeps and zeroes, and each DP reduction's bytes, halve (2 bytes a parameter
// instead of fp32's 4); the optimizer first copies its shard into fp32 main gradients, 6 bytes
// more an owned parameter (kMainGradCopyBytesPerParam). Both tiers see it: the estimate's DP and
// the Program's reduce-scatters.
TEST(StepWork, GradientsReducedInBf16HalveTheBufferAndTheReduction) {
  plan::Plan fp32_grads = load("{tp: 2, pp: 2, dp: 2, zero_stage: 1}", 8);
  plan::Plan bf16_grads = fp32_grads;
  bf16_grads.training.grad_reduce_in_bf16 = true;
  EXPECT_EQ(gradient_bytes(fp32_grads.training), 4);
  EXPECT_EQ(gradient_bytes(bf16_grads.training), 2);
  EXPECT_EQ(gradient_reduction(bf16_grads, false).bytes_per_param, 2);
  EXPECT_EQ(optimizer_bytes_per_param(fp32_grads), 34);
  EXPECT_EQ(optimizer_bytes_per_param(bf16_grads), 40);
  const auto m32 = stage_memory(fp32_grads), m16 = stage_memory(bf16_grads);
  for (std::size_t s = 0; s < m32.size(); ++s) {
    EXPECT_NEAR(m16[s].gradients_bytes, m32[s].gradients_bytes / 2, 1e-9 * m32[s].gradients_bytes) << "stage " << s;
    EXPECT_EQ(m16[s].optimizer_bytes, m32[s].optimizer_bytes) << "stage " << s;
  }
  // The Program: its zeroing and its DP reduce-scatters carry half the bytes.
  auto bytes_of = [](const plan::Plan& p, const std::string& prefix) {
    auto lowered = lower(p);
    EXPECT_TRUE(lowered.program) << lowered.error;
    double bytes = 0;
    for (const Instr& in : lowered.program->classes[0].instrs) {
      if (lowered.program->name(in).rfind(prefix, 0) == 0) bytes += in.bytes;
    }
    return bytes;
  };
  const double zero32 = bytes_of(fp32_grads, "zero_grad_buffer"), grads32 = bytes_of(fp32_grads, "dp_grad");
  EXPECT_GT(grads32, 0);
  EXPECT_NEAR(bytes_of(bf16_grads, "zero_grad_buffer"), zero32 / 2, 1e-9 * zero32);
  EXPECT_NEAR(bytes_of(bf16_grads, "dp_grad"), grads32 / 2, 1e-9 * grads32);
  // The estimate: the same reduction in half the bytes is no slower.
  EXPECT_LE(estimate(bf16_grads).breakdown.dp_s, estimate(fp32_grads).breakdown.dp_s);
  // fp16 keeps 16-bit gradients already, fp32 none: the field is refused for both.
  for (const char* precision : {"fp16", "fp32"}) {
    auto r = plan::load_plan_text(std::string("model: llama3-8b\ntraining: {global_batch_size: 32, precision: ") + precision +
                                      ", grad_reduce_in_bf16: true}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                  plan::Format::yaml);
    EXPECT_FALSE(r.ok()) << precision;
    bool named = false;
    for (const auto& item : r.diagnostics.items()) named = named || item.path == "training.grad_reduce_in_bf16";
    EXPECT_TRUE(named) << precision;
  }
}

// Adam's states in lower precision (Megatron's precision-aware optimizer, Apex's
// DistributedFusedAdam with its state in bf16): the optimizer's bytes a GPU keeps per parameter
// it owns are its master weights' and its two moments', and its step is one fused kernel over
// them that reads the gradient as kept and writes the 16-bit weight itself.
TEST(StepWork, OptimizerStatesInLowerPrecisionShrinkTheStateAndTheStep) {
  // Bytes of the first stage's instructions of one name in the Program.
  auto named_bytes = [](const plan::Plan& p, std::string_view name) {
    auto lowered = lower(p);
    EXPECT_TRUE(lowered.program) << lowered.error;
    double bytes = 0;
    for (const Instr& in : lowered.program->classes[0].instrs) {
      if (lowered.program->name(in) == name) bytes += in.bytes;
    }
    EXPECT_GT(bytes, 0) << name;
    return bytes;
  };
  auto optimizer_step_bytes = [&](const plan::Plan& p) { return named_bytes(p, "optimizer_step"); };
  plan::Plan fp32_states = load("{tp: 2, pp: 2, dp: 2, zero_stage: 1}", 8);
  ASSERT_TRUE(fp32_states.training.optimizer_states.classic());
  EXPECT_EQ(optimizer_state_bytes_per_param(fp32_states.training), 12);
  struct Case {
    plan::Precision m, v;
    plan::MasterWeights master;
    double state_bytes, step_bytes;  // the step: gradient 4 + weights + m and v read and written
  };
  using plan::MasterWeights;
  using plan::Precision;
  for (const Case c : {Case{Precision::bf16, Precision::bf16, MasterWeights::none, 4, 4 + 4 + 4 + 4},          // Apex, NeMo's optim.dtype bf16
                       Case{Precision::fp32, Precision::fp32, MasterWeights::remainders, 10, 4 + 8 + 8 + 8},  // --use-precision-aware-optimizer
                       Case{Precision::bf16, Precision::fp32, MasterWeights::fp32, 10, 4 + 10 + 4 + 8},       // DeepSeek-V3's m in bf16 (v too there)
                       Case{Precision::fp8, Precision::fp16, MasterWeights::fp16, 5, 4 + 6 + 2 + 4}}) {
    plan::Plan p = fp32_states;
    p.training.optimizer_states = {c.m, c.v, c.master};
    EXPECT_FALSE(p.training.optimizer_states.classic());
    EXPECT_EQ(optimizer_state_bytes_per_param(p.training), c.state_bytes) << plan::to_string(c.master);
    EXPECT_EQ(optimizer_bytes_per_param(p), c.step_bytes) << plan::to_string(c.master);
    // The states a GPU keeps scale with their bytes; weights and gradients do not move.
    const auto m12 = stage_memory(fp32_states), mk = stage_memory(p);
    for (std::size_t s = 0; s < m12.size(); ++s) {
      EXPECT_NEAR(mk[s].optimizer_bytes, m12[s].optimizer_bytes * c.state_bytes / 12, 1e-9 * m12[s].optimizer_bytes) << "stage " << s;
      EXPECT_EQ(mk[s].gradients_bytes, m12[s].gradients_bytes);
      EXPECT_EQ(mk[s].weights_bytes, m12[s].weights_bytes);
    }
    // The Program's optimizer instruction streams the same bytes, and the estimate prices them.
    EXPECT_NEAR(optimizer_step_bytes(p), optimizer_step_bytes(fp32_states) * c.step_bytes / 34, 1e-9 * optimizer_step_bytes(fp32_states));
    EXPECT_LT(estimate(p).breakdown.optimizer_s, estimate(fp32_states).breakdown.optimizer_s) << plan::to_string(c.master);
  }
  // The fused kernel reads bf16 gradients as they are: no copy into fp32 main gradients.
  plan::Plan apex = fp32_states;
  apex.training.grad_reduce_in_bf16 = true;
  apex.training.optimizer_states = {Precision::bf16, Precision::bf16, MasterWeights::none};
  EXPECT_EQ(optimizer_bytes_per_param(apex), 2 + 4 + 4 + 4);
  // Clipping and fp16's unscale read (and write) the gradients as kept, not fp32 main gradients.
  EXPECT_EQ(clip_grad_bytes_per_param(fp32_states), kClipGradBytesPerParam);
  EXPECT_EQ(clip_grad_bytes_per_param(apex), 3 * 2);
  EXPECT_EQ(unscale_grad_bytes_per_param(fp32_states), kUnscaleGradBytesPerParam);
  EXPECT_EQ(unscale_grad_bytes_per_param(apex), 2 * 2);
  plan::Plan compressed = apex;  // the compensated gradient is fp32 whatever the states
  compressed.parallelism.gradient_compression = plan::GradientCompression::onebit;
  EXPECT_EQ(clip_grad_bytes_per_param(compressed), kClipGradBytesPerParam);
  plan::Plan clipped_classic = fp32_states, clipped_apex = apex;
  clipped_classic.training.clip_grad = clipped_apex.training.clip_grad = 1.0;
  auto clip_bytes = [&](const plan::Plan& p) { return named_bytes(p, "clip_grads"); };
  EXPECT_NEAR(clip_bytes(clipped_apex), clip_bytes(clipped_classic) * 6 / kClipGradBytesPerParam, 1e-9 * clip_bytes(clipped_classic));
  // fp32 training keeps no master copy; remainders complete bf16 weights only.
  for (const auto& [precision, master] : {std::pair{"fp32", "none"}, std::pair{"fp16", "remainders"}}) {
    auto r = plan::load_plan_text(std::string("model: llama3-8b\ntraining: {global_batch_size: 32, precision: ") + precision +
                                      ", optimizer_states: {master_weights: " + master + "}}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                  plan::Format::yaml);
    EXPECT_FALSE(r.ok()) << precision;
    bool named = false;
    for (const auto& item : r.diagnostics.items()) named = named || item.path == "training.optimizer_states.master_weights";
    EXPECT_TRUE(named) << precision;
  }
  auto fp32 = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 32, precision: fp32, optimizer_states: {exp_avg: bf16, exp_avg_sq: bf16}}\n"
                                   "cluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                   plan::Format::yaml);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(optimizer_state_bytes_per_param(fp32.plan.training), 4);
  EXPECT_EQ(optimizer_bytes_per_param(fp32.plan), 4 + 8 + 4 + 4);
}

}  // namespace
}  // namespace meshwork::models
