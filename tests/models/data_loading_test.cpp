// Per-step fixed work outside the layers (issue 20): each micro-batch's load onto the GPUs of
// the first and last pipeline stages, as Megatron-LM's get_batch_on_this_tp_rank moves it (TP
// rank 0 copies it from the host and broadcasts each tensor to its TP group) or as NeMo 1.x
// does (every GPU copies what it needs), in the Program both tiers and the executors play.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/comm.hpp"
#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/nccl_tuner.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::models {
namespace {

plan::Plan load(const std::string& parallelism, int gpus, const std::string& gpu = "h100-sxm") {
  auto r = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 32, micro_batch_size: 2, precision: bf16}\n"
                                "cluster: {gpu: " + gpu + ", num_gpus: " + std::to_string(gpus) + ", gpus_per_node: " + std::to_string(std::min(gpus, 8)) + "}\nparallelism: " + parallelism + "\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

double bytes_of(const std::vector<BatchTensor>& ts) {
  double b = 0;
  for (const auto& t : ts) b += t.bytes;
  return b;
}

// Llama 3 8B's 8,192 tokens, two sequences a micro-batch: int64 tokens, labels and positions
// (8 bytes a token), a float32 loss mask (4) and the bool causal mask (b x s x s bytes).
TEST(DataLoading, TheBatchIsMegatronsTensors) {
  plan::Plan p = load("{tp: 2, pp: 2, dp: 2}", 8);
  const double b = 2, s = 8192;
  ASSERT_EQ(p.model.seq_length, 8192);
  std::vector<std::string> names;
  for (const auto& t : batch_tensors(p, true, false)) names.emplace_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tokens", "attention_mask", "position_ids"}));
  EXPECT_EQ(bytes_of(batch_tensors(p, true, false)), 8 * b * s + b * s * s + 8 * b * s);
  names.clear();
  for (const auto& t : batch_tensors(p, false, true)) names.emplace_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"labels", "loss_mask", "attention_mask"}));
  EXPECT_EQ(bytes_of(batch_tensors(p, false, true)), 8 * b * s + 4 * b * s + b * s * s);
  // A one-stage pipeline moves all five, the mask once; a middle stage none.
  EXPECT_EQ(batch_tensors(p, true, true).size(), 5u);
  EXPECT_EQ(bytes_of(batch_tensors(p, true, true)), 28 * b * s + b * s * s);
  EXPECT_TRUE(batch_tensors(p, false, false).empty());
  p.training.attention_mask_in_batch = false;
  EXPECT_EQ(bytes_of(batch_tensors(p, true, true)), 28 * b * s);
}

// The copy runs at the host link: PCIe Gen4 x16 on Ampere (31.5 GB/s a direction, of which
// an A100 SXM4 measured 25.13 GB/s, nvbandwidth#42), Gen5 on Hopper at the same share.
TEST(DataLoading, TheCopyRunsAtTheHostLink) {
  const double gen4 = 16 * 16e9 * 128 / 130 / 8;
  const ComputeTimer a100(load("{}", 1, "a100-sxm-80gb")), h100(load("{}", 1));
  EXPECT_NEAR(a100.bytes_per_s(OpKind::data), 25.13e9, 1);
  EXPECT_NEAR(h100.bytes_per_s(OpKind::data), 2 * gen4 * 25.13e9 / gen4, 1);
  EXPECT_NEAR(h100(OpKind::data, 0, 50.26e9), 1.0, 1e-9);
  // A CPU host's "copy" is a memcpy at its streaming rate.
  plan::Plan host = load("{}", 1);
  host.cluster.gpu = plan::find_gpu_preset("cpu-host")->spec;
  const ComputeTimer cpu(host);
  EXPECT_EQ(cpu.bytes_per_s(OpKind::data), cpu.hbm_bytes_per_s());
}

// Megatron's pattern in the Program: on the first stage, each forward item starts with the
// load and one broadcast over TP a tensor; the last stage loads its labels at the start of its
// forward; a middle stage loads nothing.
TEST(DataLoading, OnlyTheFirstAndLastStagesLoadEachMicroBatch) {
  const plan::Plan p = load("{tp: 2, pp: 4, dp: 1}", 8);
  auto lowered = lower(p);
  ASSERT_TRUE(lowered.program) << lowered.error;
  const Program& prog = *lowered.program;
  for (const StageProgram& sp : prog.classes) {
    const bool first = sp.stage == 0, last = sp.stage == prog.stages - 1;
    int loads = 0, broadcasts = 0;
    double broadcast_bytes = 0;
    for (std::size_t k = 0; k < sp.instrs.size(); ++k) {
      const Instr& in = sp.instrs[k];
      if (in.kind == InstrKind::compute && in.op == OpKind::data) {
        ++loads;
        EXPECT_EQ(prog.name(in), first ? "batch_inputs" : "batch_targets");
        // TP rank 0 copies all five tensors (Megatron's get_batch_on_this_tp_rank), and
        // broadcasts the stage's.
        EXPECT_EQ(in.bytes, bytes_of(batch_tensors(p, true, true)));
        // Before any of the item's layer ops.
        for (std::size_t j = 0; j < k; ++j) {
          if (sp.instrs[j].item == in.item) {
            EXPECT_NE(sp.instrs[j].kind, InstrKind::compute) << prog.name(sp.instrs[j]);
          }
        }
      }
      if (in.kind == InstrKind::collective && in.collective == Collective::broadcast) {
        ++broadcasts;
        broadcast_bytes += in.bytes;
        EXPECT_EQ(in.stream, Stream::tp);
        EXPECT_EQ(in.group, plan::GroupKind::tp);
      }
    }
    const int mbs = static_cast<int>(prog.microbatches);
    EXPECT_EQ(loads, first || last ? mbs : 0) << "stage " << sp.stage;
    EXPECT_EQ(broadcasts, first || last ? 3 * mbs : 0) << "stage " << sp.stage;
    EXPECT_EQ(broadcast_bytes, first || last ? mbs * bytes_of(batch_tensors(p, first, last)) : 0) << "stage " << sp.stage;
  }
  // NeMo's way, and a TP group of one: the copy alone.
  for (const auto& [what, plan] : {std::pair{"every_rank", [&] { auto q = p; q.training.data_loading = plan::DataLoading::every_rank; return q; }()},
                                   std::pair{"tp 1", load("{tp: 1, pp: 4, dp: 2}", 8)}}) {
    auto l = lower(plan);
    ASSERT_TRUE(l.program) << l.error;
    int loads = 0;
    for (const StageProgram& sp : l.program->classes) {
      for (const Instr& in : sp.instrs) {
        EXPECT_NE(in.collective, Collective::broadcast) << what;
        loads += in.kind == InstrKind::compute && in.op == OpKind::data ? 1 : 0;
      }
    }
    EXPECT_EQ(loads, 2 * l.program->microbatches) << what;
  }
  // NeMo's way: each GPU copies its stage's tensors alone.
  plan::Plan nemo = p;
  nemo.training.data_loading = plan::DataLoading::every_rank;
  auto l = lower(nemo);
  ASSERT_TRUE(l.program) << l.error;
  for (const Instr& in : l.program->classes.front().instrs) {
    if (in.kind == InstrKind::compute && in.op == OpKind::data) {
      EXPECT_EQ(in.bytes, bytes_of(batch_tensors(nemo, true, false)));
    }
  }
}

// NCCL runs a broadcast on the ring only: nRanks steps of one latency each, the node's link's
// inside a node and the network's across nodes, Simple's from the tree's row (tuning.cc
// @5067397c), at a bus bandwidth equal to its algorithm bandwidth (nccl-tests' doc/PERFORMANCE,
// "Broadcast").
TEST(DataLoading, NcclPricesABroadcastAsARingOfEveryRank) {
  const TunerShape node{8, 1, true}, two_nodes{16, 2, true};
  const double base[] = {6.6, 14.0, 8.4}, nvlink[] = {0.6, 1.9, 4.0}, net[] = {2.7, 4.0, 14.0};
  for (const Protocol pr : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    const auto i = static_cast<std::size_t>(pr);
    EXPECT_NEAR(nccl_latency_s(plan::CollectiveAlgorithm::ring, Collective::broadcast, pr, node, 1e6), (base[i] + 8 * nvlink[i]) * 1e-6, 1e-12);
    EXPECT_NEAR(nccl_latency_s(plan::CollectiveAlgorithm::ring, Collective::broadcast, pr, two_nodes, 1e6), (base[i] + 16 * net[i]) * 1e-6, 1e-12);
  }
}

// By hand, on one stage of TP 2 x DP 4 (the first stage is also the last: all five tensors):
// each micro-batch's load adds its copy at the host link and its five broadcasts over NVLink,
// Simple's 8.4 + 2 x 4.0 us and bytes at 370 GB/s of H100's NVLink (models/hardware.cpp) for
// the 268 MB mask, whichever protocol is fastest for the small tensors.
TEST(DataLoading, TheEstimateChargesTheCopyAndTheBroadcasts) {
  const plan::Plan p = load("{tp: 2, dp: 4}", 8);
  plan::Plan none = p;
  none.training.attention_mask_in_batch = false;
  none.training.data_loading = plan::DataLoading::every_rank;
  const double b = 2, s = 8192, micro_batches = 32.0 / (2 * 4);
  const ComputeTimer timer(p);
  const GroupNetwork tp = group_network(p, timer.hardware(), plan::GroupKind::tp);
  const double mask = b * s * s;
  ASSERT_EQ(mask, 134217728.0);
  EXPECT_NEAR(collective_s(tp, Collective::broadcast, mask), mask / 370e9 + (8.4 + 2 * 4.0) * 1e-6, 1e-9);
  double broadcasts = 0;
  for (const BatchTensor& t : batch_tensors(p, true, true)) broadcasts += collective_s(tp, Collective::broadcast, t.bytes);
  const double copy_with = timer(OpKind::data, 0, 28 * b * s + mask), copy_without = timer(OpKind::data, 0, 28 * b * s);
  const double hand = micro_batches * (copy_with + broadcasts - copy_without);
  EXPECT_GT(hand, 0.005);
  const report::Report with = estimate(p), without = estimate(none);
  EXPECT_NEAR(with.step_time_s - without.step_time_s, hand, 1e-6 * with.step_time_s);
  EXPECT_NEAR(with.breakdown.tp_s - without.breakdown.tp_s, micro_batches * broadcasts, 1e-6 * with.breakdown.tp_s);
}

}  // namespace
}  // namespace meshwork::models
