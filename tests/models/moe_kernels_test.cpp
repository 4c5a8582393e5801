// An MoE layer's own kernels (issue 20): the router's softmax and top-k, the token dispatcher's
// permute and unpermute, each priced by its bytes, and the local experts as one grouped GEMM
// timed at its whole size; the Program places EP's dispatch after the permute and its combine
// before the unpermute.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/compute_time.hpp"
#include "models/hardware.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

// Mixtral 8x7B (h 4096, 8 experts, top-2, SwiGLU experts of 14336) on 16 H100, micro-batch 1 x
// 32768 tokens (its sequence) in bf16, with the given TP (and SP) and EP.
plan::Plan mixtral(int tp, int ep) {
  auto r = plan::load_plan_text("model: mixtral-8x7b\ntraining: {global_batch_size: 16, micro_batch_size: 1, precision: bf16}\n"
                                "cluster: {gpu: h100-sxm, num_gpus: 16}\nparallelism: {tp: " + std::to_string(tp) +
                                    ", sp: " + (tp > 1 ? "true" : "false") + ", ep: " + std::to_string(ep) + "}\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

std::map<std::pair<std::string, OpPhase>, Op> by_name(const std::vector<Op>& ops) {
  std::map<std::pair<std::string, OpPhase>, Op> out;
  for (const Op& op : ops) out[{std::string(op.name), op.phase}] = op;
  return out;
}

TEST(MoeKernels, TheRoutingOpsMoveTheirBytes) {
  const plan::Plan p = mixtral(2, 4);
  const auto ops = by_name(layer_ops(p, true));
  // With SP each of the 2 TP ranks routes half the micro-batch's 32768 tokens.
  ASSERT_EQ(p.model.seq_length, 32768);
  const double sp_tokens = 16384, experts = 8, k = 2, h = 4096, e = 2;
  // Softmax and top-k in fp32: logits read, probabilities written and read; 8-byte indices and
  // 4-byte gates per choice. Backward: probabilities, their gradient, the logits' gradient.
  EXPECT_DOUBLE_EQ(ops.at({"router_topk", OpPhase::forward}).bytes, 3 * 4 * sp_tokens * experts + 12 * sp_tokens * k);
  EXPECT_DOUBLE_EQ(ops.at({"router_topk", OpPhase::backward_input}).bytes, 3 * 4 * sp_tokens * experts);
  // Permute: k copies of each token read and written, both ways.
  EXPECT_DOUBLE_EQ(ops.at({"moe_permute", OpPhase::forward}).bytes, 2 * e * sp_tokens * k * h);
  EXPECT_DOUBLE_EQ(ops.at({"moe_permute", OpPhase::backward_input}).bytes, 2 * e * sp_tokens * k * h);
  // Unpermute: k copies read and one token row written; backward: the token's gradient read,
  // k copies written, k outputs read again for the gates.
  EXPECT_DOUBLE_EQ(ops.at({"moe_unpermute", OpPhase::forward}).bytes, e * sp_tokens * h * (k + 1));
  EXPECT_DOUBLE_EQ(ops.at({"moe_unpermute", OpPhase::backward_input}).bytes, e * sp_tokens * h * (2 * k + 1));
  for (const char* name : {"router_topk", "moe_permute", "moe_unpermute"}) {
    EXPECT_EQ(ops.count({name, OpPhase::backward_weight}), 0U) << name;
    EXPECT_EQ(ops.at({name, OpPhase::forward}).kind, OpKind::elementwise) << name;
  }
  // The router's GEMM is one, the experts' a group of the 8 / EP 4 = 2 local experts.
  EXPECT_EQ(ops.at({"router", OpPhase::forward}).gemm_groups, 1);
  for (const char* name : {"expert_fc1", "expert_fc2"}) {
    for (const OpPhase phase : {OpPhase::forward, OpPhase::backward_input, OpPhase::backward_weight}) {
      EXPECT_EQ(ops.at({name, phase}).gemm_groups, 2) << name;
    }
  }
  // A dense layer has none of them.
  for (const Op& op : layer_ops(p, false)) {
    EXPECT_NE(op.name, "router_topk");
    EXPECT_EQ(op.gemm_groups, 1) << op.name;
  }
}

// A grouped GEMM is timed as one GEMM of its whole size (its members' tiles share one grid), and
// its bytes count every member's weights.
TEST(MoeKernels, AGroupedGemmIsTimedAsOneGemmOfItsWholeSize) {
  const plan::Plan p = mixtral(1, 4);
  const ComputeTimer timer(p);
  const HardwareProfile& hw = timer.hardware();
  const double peak = plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12;
  // 2 local experts (8 / EP 4) of [m/2 x 4096] x [4096 x 28672] (SwiGLU's fc1: 2 x 14336).
  const auto ops = by_name(layer_ops(p, true));
  const Op& fc1 = ops.at({"expert_fc1", OpPhase::forward});
  ASSERT_EQ(fc1.gemm_groups, 2);
  const double m = fc1.shape.m, n = 28672, k = 4096, e = 2;
  EXPECT_DOUBLE_EQ(fc1.shape.n, n);
  EXPECT_DOUBLE_EQ(fc1.bytes, e * (m * k + 2 * k * n + m * n));
  const double macs = m * n * k;
  EXPECT_DOUBLE_EQ(fc1.flops, 2 * macs);
  const double seconds = 2 * macs / (peak * hw.gemm_max_efficiency * macs / (macs + hw.gemm_half_macs));
  EXPECT_NEAR(timer(fc1), hw.kernel_overhead_s + seconds, 1e-12);
  Op ungrouped = fc1;
  ungrouped.gemm_groups = 1;
  EXPECT_DOUBLE_EQ(timer(ungrouped), timer(fc1));
}

// Megatron-core's all-to-all dispatcher sends the permuted rows and unpermutes what comes back:
// in the forward the dispatch follows moe_permute and the combine precedes moe_unpermute; the
// backward mirrors both.
TEST(MoeKernels, TheDispatchFollowsThePermuteAndTheCombinePrecedesTheUnpermute) {
  auto lowered = lower(mixtral(1, 4));
  ASSERT_TRUE(lowered.program) << lowered.error;
  const Program& prog = *lowered.program;
  auto sequence = [&](bool forward) {
    std::vector<std::string> names;
    const auto& stage = prog.classes[0];
    for (const Instr& in : stage.instrs) {
      if (in.item < 0 || in.layer != 0 || in.stream == Stream::dp) continue;
      const ScheduleItem& it = stage.schedule[static_cast<std::size_t>(in.item)];
      if (it.microbatch != 0 || (it.pass == Pass::forward) != forward) continue;
      const std::string& n = prog.name(in);
      if (n.starts_with("router") || n.starts_with("moe_") || n.starts_with("expert_fc") || n.starts_with("ep_") || n == "mlp_residual") {
        if (in.kind == InstrKind::compute && in.phase == OpPhase::backward_weight) continue;
        names.push_back(n);
      }
    }
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
  };
  EXPECT_EQ(sequence(true), "router router_topk moe_permute ep_dispatch_all_to_all expert_fc1 expert_fc2 ep_combine_all_to_all moe_unpermute mlp_residual");
  EXPECT_EQ(sequence(false), "mlp_residual moe_unpermute ep_combine_all_to_all expert_fc2 expert_fc1 ep_dispatch_all_to_all moe_permute router_topk router");
}

}  // namespace
}  // namespace meshwork::models
