// The Program's data parallelism: gradient buckets and their reductions per ZeRO stage, the
// distributed optimizer's gathers under the forward, ZeRO-3's per-layer gathers and their
// prefetch, and what each compute waits for.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "models/program.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

Program lowered(const plan::Plan& p) {
  auto r = lower(p);
  EXPECT_TRUE(r.program) << r.error;
  return *r.program;
}

// DP collectives of stage 0 by name and kind.
std::map<std::string, std::int64_t> dp_counts(const Program& prog) {
  std::map<std::string, std::int64_t> n;
  for (const auto& i : prog.classes[0].instrs) {
    if (i.stream == Stream::dp) ++n[std::string(to_string(i.collective))];
  }
  return n;
}

// ZeRO-2 keeps only its gradient shard, so every micro-batch reduce-scatters (ZeRO-1 only the
// last); ZeRO-3 gathers each layer in the forward and again in the backward.
TEST(Program, ShardedGradientsAreReducedEveryMicroBatch) {
  auto plan = [](int zero) {
    auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 64, precision: bf16}\n"
                                  "parallelism: {tp: 8, sp: true, pp: 8, dp: 4, zero_stage: " + std::to_string(zero) + "}\ncluster: {gpu: h100-sxm}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return lowered(r.plan);
  };
  const std::int64_t layers = 12, m = 16;  // a layer (226M parameters per TP rank) fills a bucket alone
  // Stage 0 also reduces the embedding, a bucket of its own after the last layer's.
  EXPECT_EQ(dp_counts(plan(1))["reduce_scatter"], layers + 1);
  EXPECT_EQ(dp_counts(plan(2))["reduce_scatter"], m * (layers + 1));
  // The distributed optimizer's gathers: in the gradient buckets under the next forward
  // (overlap.param_gather, the default), as DistributedOptimizerGathersUnderTheForward tests.
  EXPECT_EQ(dp_counts(plan(2))["all_gather"], layers + 1);
  const auto three = dp_counts(plan(3));
  EXPECT_EQ(three.at("reduce_scatter"), m * (layers + 1));
  EXPECT_EQ(three.at("all_gather"), m * layers * 2);
  for (int zero : {1, 2, 3}) {
    const Program prog = plan(zero);
    EXPECT_TRUE(check(prog).ok()) << zero;
  }
}

// ZeRO 1 and 2 with overlap.param_gather (Megatron-core's overlap_param_gather): the updated
// parameters are gathered under the next step's forward, in the gradient buckets, and none
// after the optimizer step. Each bucket is waited for by its chunk's first forward where it
// needs it; a chunk's first forward that receives its activation waits for both. Without the
// flag, one gather after the optimizer step.
TEST(Program, DistributedOptimizerGathersUnderTheForward) {
  auto plan = [](bool ahead) {
    auto r = plan::load_plan_text(std::string("model: gpt3-175b\ntraining: {global_batch_size: 64, precision: bf16}\n"
                                  "parallelism: {tp: 8, sp: true, pp: 4, vpp: 2, pipeline_schedule: interleaved, dp: 4, zero_stage: 1, "
                                  "overlap: {param_gather: ") + (ahead ? "true" : "false") + "}}\ncluster: {gpu: h100-sxm}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return lowered(r.plan);
  };
  const Program ahead = plan(true), after_step = plan(false);
  EXPECT_TRUE(check(ahead).ok());
  EXPECT_TRUE(check(after_step).ok());
  for (std::size_t s = 0; s < ahead.classes.size(); ++s) {
    SCOPED_TRACE(s);
    const auto& in = ahead.classes[s].instrs;
    std::size_t step = in.size();
    std::multiset<std::int64_t> grads, gathers;
    double grad_bytes = 0, gather_bytes = 0;
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (in[k].op == OpKind::optimizer && in[k].kind == InstrKind::compute) step = k;
      if (in[k].stream != Stream::dp) continue;
      if (in[k].collective == Collective::reduce_scatter) grads.insert(in[k].layer), grad_bytes += in[k].bytes;
      if (in[k].collective == Collective::all_gather) {
        gathers.insert(in[k].layer), gather_bytes += in[k].bytes;
        EXPECT_LT(k, step) << "a gather after the optimizer step";
      }
    }
    EXPECT_EQ(gathers, grads);  // the same buckets, at their lowest layer
    EXPECT_NEAR(gather_bytes, grad_bytes / 2, 1e-6 * grad_bytes);  // bf16 parameters, fp32 gradients
    // The first compute of each chunk's first forward waits for a gather, and for the
    // receive of its activation when it has one (all but stage 0's chunk 0).
    for (std::int64_t c = 0; c < 2; ++c) {
      const auto& sched = ahead.classes[s].schedule;
      std::int32_t item = -1;
      for (std::size_t i = 0; i < sched.size() && item < 0; ++i) {
        if (sched[i].pass == Pass::forward && sched[i].chunk == c) item = static_cast<std::int32_t>(i);
      }
      const auto first = std::find_if(in.begin(), in.end(), [&](const Instr& x) { return x.item == item && x.kind == InstrKind::compute; });
      ASSERT_NE(first, in.end());
      auto waits_for = [&](std::int32_t k) -> const Instr* { return k >= 0 ? &in[static_cast<std::size_t>(k)] : nullptr; };
      const Instr* one = waits_for(first->after);
      const Instr* two = waits_for(first->also_after);
      if (two != nullptr && two->collective == Collective::all_gather) std::swap(one, two);
      ASSERT_NE(one, nullptr) << "chunk " << c;
      EXPECT_EQ(one->collective, Collective::all_gather) << "chunk " << c;
      EXPECT_EQ(one->stream, Stream::dp);
      if (!(s == 0 && c == 0)) {
        ASSERT_NE(two, nullptr) << "chunk " << c;
        EXPECT_EQ(two->kind, InstrKind::recv);
      }
    }
    std::int64_t late = 0, all = 0;
    const auto& plain = after_step.classes[s].instrs;
    for (std::size_t k = 0; k < plain.size(); ++k) {
      if (plain[k].stream != Stream::dp || plain[k].collective != Collective::all_gather) continue;
      ++all;
      late += k > 0 && plain[k - 1].op == OpKind::optimizer ? 1 : 0;
    }
    EXPECT_EQ(all, 1);
    EXPECT_EQ(late, 1);
  }
}

// ZeRO-3 with overlap.param_gather prefetches one layer ahead: the first op of a layer waits for
// a gather issued before the previous layer's compute; without, for one issued just before it.
TEST(Program, ZeroThreePrefetchesTheNextLayer) {
  auto plan = [](bool prefetch) {
    auto r = plan::load_plan_text(std::string("model: {preset: tiny, num_layers: 4}\ntraining: {global_batch_size: 8, precision: bf16}\n"
                                  "parallelism: {dp: 4, zero_stage: 3, overlap: {param_gather: ") + (prefetch ? "true" : "false") +
                                  "}}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return lowered(r.plan);
  };
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch);
    const Program prog = plan(prefetch);
    const auto& in = prog.classes[0].instrs;
    std::int64_t checked = 0;
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (in[k].kind != InstrKind::compute || in[k].after < 0) continue;
      const Instr& waited = in[static_cast<std::size_t>(in[k].after)];
      if (waited.collective != Collective::all_gather || waited.stream != Stream::dp) continue;
      EXPECT_EQ(waited.layer, in[k].layer);
      // Computes between the gather and the op that waits for it: the previous layer's, when prefetched.
      std::int64_t between = 0;
      for (auto j = static_cast<std::size_t>(in[k].after) + 1; j < k; ++j) between += in[j].kind == InstrKind::compute ? 1 : 0;
      if (prefetch && in[k].layer != 0 && in[k].layer != 3) {
        EXPECT_GT(between, 0) << "layer " << in[k].layer;
      }
      if (!prefetch) {
        EXPECT_EQ(between, 0);
      }
      ++checked;
    }
    EXPECT_EQ(checked, 2 /*micro-batches*/ * 4 /*layers*/ * 2 /*forward, backward*/);
    EXPECT_TRUE(check(prog).ok());
  }
}
// ZeRO-2 and 3 without overlapped reduction: each micro-batch's reduce-scatter holds the
// backward where it is issued (the gradient buffer is reused by the next micro-batch), so the
// next compute waits for it, also when a pipeline receive comes between the two (the receive
// once took the reduction's place as the compute's only dependency), when ZeRO-3's prefetched
// gather of the next layer is waited for (it once replaced the reduction), and when a third
// thing is waited for (CP's exchange before a recomputed attention: it then starts after the
// reduction, as the compute stream orders it).
TEST(Program, AHeldReductionIsWaitedForPastAReceive) {
  auto lower_plan = [](const std::string& parallelism, const std::string& model = "gpt3-175b", const std::string& training = "") {
    auto r = plan::load_plan_text("model: " + model + "\ntraining: {global_batch_size: 64, precision: bf16" + training + "}\n"
                                  "parallelism: {" + parallelism + ", overlap: {grad_reduce: false}}\ncluster: {gpu: h100-sxm}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok()) << parallelism;
    return lowered(r.plan);
  };
  struct Case {
    Program prog;
    bool receives;
  };
  const Case cases[] = {
      {lower_plan("tp: 8, sp: true, pp: 4, dp: 4, zero_stage: 2"), true},
      {lower_plan("tp: 8, sp: true, pp: 4, dp: 4, zero_stage: 3"), true},
      {lower_plan("tp: 8, sp: true, pp: 2, cp: 2, dp: 2, zero_stage: 2", "{preset: llama3-8b, seq_length: 8192}", ", recompute: selective"), true},
  };
  for (std::size_t c = 0; c < std::size(cases); ++c) {
    SCOPED_TRACE(c);
    const Program& prog = cases[c].prog;
    EXPECT_TRUE(check(prog).ok());
    std::int64_t reductions = 0, past_a_receive = 0;
    for (std::size_t s = 0; s < prog.classes.size(); ++s) {
      SCOPED_TRACE(s);
      const auto& in = prog.classes[s].instrs;
      // Waiting for `dep` is waiting for instruction i on the DP stream: a DP collective issued
      // at or after i (the stream runs in order), or a collective that starts after one.
      auto covers = [&](auto&& self, std::int32_t dep, std::size_t i) -> bool {
        if (dep < static_cast<std::int32_t>(i)) return false;
        const Instr& d = in[static_cast<std::size_t>(dep)];
        if (d.stream == Stream::dp) return true;
        return d.kind == InstrKind::collective && self(self, d.after, i);
      };
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i].stream != Stream::dp || in[i].collective != Collective::reduce_scatter) continue;
        ++reductions;
        std::size_t j = i + 1;
        bool received = false;
        for (; j < in.size() && in[j].kind != InstrKind::compute; ++j) received = received || in[j].kind == InstrKind::recv;
        if (j == in.size()) continue;  // the step's last reduction: the optimizer waits for it
        EXPECT_TRUE(covers(covers, in[j].after, i) || covers(covers, in[j].also_after, i)) << "reduction " << i << ", compute " << j;
        if (received) ++past_a_receive;
      }
    }
    EXPECT_GT(reductions, 0);
    if (cases[c].receives) {
      EXPECT_GT(past_a_receive, 0);
    }
  }
}

// Several distributed-optimizer instances (hybrid sharding): each bucket is reduce-scattered
// in its instance and its shard all-reduced across the instances, on the DP stream in that
// order; the parameters are gathered in the instance; the optimizer owns 1/instance-size.
TEST(Program, InstancesReduceInTheirShardThenAcrossReplicas) {
  auto plan = [](int instances) {
    auto r = plan::load_plan_text("model: {preset: llama3-8b, seq_length: 4096}\ntraining: {global_batch_size: 16, micro_batch_size: 1, precision: bf16}\n"
                                  "parallelism: {dp: 16, zero_stage: 1, num_distributed_optimizer_instances: " + std::to_string(instances) + "}\n"
                                  "cluster: {gpu: h100-sxm, num_gpus: 16, gpus_per_node: 8}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok());
    return lowered(r.plan);
  };
  const Program one = plan(1), two = plan(2);
  EXPECT_TRUE(check(two).ok());
  std::int64_t buckets = 0;
  double reduced = 0, optimizer_one = 0, optimizer_two = 0;
  for (const auto& i : one.classes[0].instrs) {
    if (i.stream == Stream::dp && i.collective == Collective::reduce_scatter) ++buckets, reduced += i.bytes;
    if (i.op == OpKind::optimizer) optimizer_one = i.bytes;
  }
  const auto& in = two.classes[0].instrs;
  std::int64_t shards = 0, replicas = 0, gathers = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const Instr& i = in[k];
    if (i.op == OpKind::optimizer) optimizer_two = i.bytes;
    if (i.stream != Stream::dp) continue;
    if (i.collective == Collective::reduce_scatter) {
      EXPECT_EQ(i.group, plan::GroupKind::dp_shard);
      ++shards;
      ASSERT_LT(k + 1, in.size());
      const Instr& next = in[k + 1];
      EXPECT_EQ(next.collective, Collective::all_reduce);
      EXPECT_EQ(next.group, plan::GroupKind::dp_replica);
      EXPECT_DOUBLE_EQ(next.bytes, i.bytes / 8);
    } else if (i.collective == Collective::all_reduce) {
      ++replicas;
    } else if (i.collective == Collective::all_gather) {
      EXPECT_EQ(i.group, plan::GroupKind::dp_shard);
      ++gathers;
    }
  }
  EXPECT_GT(buckets, 1);
  EXPECT_EQ(shards, buckets);
  EXPECT_EQ(replicas, buckets);
  EXPECT_EQ(gathers, buckets);
  EXPECT_GT(reduced, 0);
  EXPECT_DOUBLE_EQ(optimizer_two, 2 * optimizer_one);
}

}  // namespace
}  // namespace meshwork::models
