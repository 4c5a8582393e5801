// The Program: per-stage orders against the published schedule functions, the zero-cost
// replay's bubbles against the papers' formulas, the checker against broken Programs, and
// the FLOPs of a lowered step against the cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>

#include "models/flops.hpp"
#include "models/pipeline.hpp"
#include "models/program.hpp"
#include "plan/pipeline_layout.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

using plan::PipelineSchedule;

std::string items(const std::vector<ScheduleItem>& s) {
  std::string out;
  for (const auto& it : s) {
    if (!out.empty()) out += ' ';
    out += std::string(to_string(it.pass)) + std::to_string(it.microbatch);
    if (it.chunk > 0) out += "." + std::to_string(it.chunk);
  }
  return out;
}

TEST(Schedules, OneFOneBAsMegatronOrdersIt) {
  // p = 4, m = 8: stage s runs p - s - 1 warm-up forwards.
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::one_f_one_b, 4, 0, 8, 1)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::one_f_one_b, 4, 3, 8, 1)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (int s = 0; s < 4; ++s) {
    const auto order = stage_schedule(PipelineSchedule::one_f_one_b, 4, s, 8, 1);
    int warmup = 0;
    while (order[static_cast<std::size_t>(warmup)].pass == Pass::forward) ++warmup;
    EXPECT_EQ(warmup - 1, 4 - s - 1) << s;  // the warm-up, then the steady state's first forward
  }
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::gpipe, 2, 0, 3, 1)), "F0 F1 F2 B0 B1 B2");
}

TEST(Schedules, ZeroBubbleH1AsThePaperOrdersIt) {
  // p = 4, m = 8 (Qi et al. 2024, Fig. 3): stage s runs (F_x, B_(x-(p-1-s)), W_(x-(p-1))).
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::zero_bubble, 4, 0, 8, 1)),
            "F0 F1 F2 F3 B_input0 W0 F4 B_input1 W1 F5 B_input2 W2 F6 B_input3 W3 F7 B_input4 W4 B_input5 W5 B_input6 W6 B_input7 W7");
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::zero_bubble, 4, 3, 8, 1)),
            "F0 B_input0 F1 B_input1 F2 B_input2 F3 B_input3 W0 F4 B_input4 W1 F5 B_input5 W2 F6 B_input6 W3 F7 B_input7 W4 W5 W6 W7");
}

TEST(Schedules, InterleavedAsMegatronOrdersIt) {
  // p = 4, v = 2, m = 8. Stage 0: (p - 1) 2 + (v - 1) p = 10 warm-up forwards: micro-batches
  // 0-3 of chunk 0, 0-3 of chunk 1, then 4-5 of chunk 0; backwards start with chunk 1.
  EXPECT_EQ(items(stage_schedule(PipelineSchedule::interleaved, 4, 0, 8, 2)),
            "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0 F7.1 B1 B2 B3 B4.1 B5.1 "
            "B6.1 B7.1 B4 B5 B6 B7");
  // The last stage: 4 warm-up forwards.
  const auto last = stage_schedule(PipelineSchedule::interleaved, 4, 3, 8, 2);
  EXPECT_EQ(items({last.begin(), last.begin() + 6}), "F0 F1 F2 F3 F0.1 B0.1");
}

// Megatron's formula for the k-th item of a direction (forward_backward_pipelining_with_
// interleaving's get_model_chunk_id and microbatch id), against the order stage_schedule
// counts up, on shapes with 1, 2 and 3 groups of p micro-batches and m = p.
TEST(Schedules, InterleavedOrderFollowsMegatronsFormula) {
  for (const auto [p, v, m] : {std::array<std::int64_t, 3>{3, 3, 9}, {4, 2, 8}, {2, 4, 6}, {4, 3, 4}, {8, 2, 24}}) {
    for (std::int64_t s = 0; s < p; ++s) {
      const auto order = stage_schedule(PipelineSchedule::interleaved, p, s, m, v);
      ASSERT_EQ(order.size(), static_cast<std::size_t>(2 * m * v));
      std::int64_t f = 0, b = 0;
      for (const ScheduleItem& it : order) {
        const bool forward = it.pass == Pass::forward;
        const std::int64_t k = forward ? f++ : b++;
        const std::int64_t chunk = (k % (p * v)) / p;
        EXPECT_EQ(it.chunk, forward ? chunk : v - 1 - chunk) << p << v << m << s << k;
        EXPECT_EQ(it.microbatch, (k / (p * v)) * p + k % p) << p << v << m << s << k;
      }
    }
  }
}

plan::Plan tiny(const std::string& schedule, std::int64_t pp, std::int64_t vpp, std::int64_t m, const std::string& extra = "") {
  auto r = plan::load_plan_text("model: {preset: tiny, num_layers: 8}\ntraining: {global_batch_size: " + std::to_string(m) +
                                    ", micro_batch_size: 1, precision: bf16}\nparallelism: {pp: " + std::to_string(pp) + ", vpp: " +
                                    std::to_string(vpp) + ", pipeline_schedule: " + schedule + extra + "}\n" +
                                    "cluster: {gpu: h100-sxm, num_gpus: " + std::to_string(pp) + ", gpus_per_node: " + std::to_string(pp) + "}\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

Program lowered(const plan::Plan& p) {
  auto r = lower(p);
  EXPECT_TRUE(r.program) << r.error;
  return *r.program;
}

TEST(Replay, BubblesAreThePapersFormulas) {
  // Equal forward, input-gradient and weight-gradient times, no communication cost.
  const struct {
    const char* schedule;
    std::int64_t vpp;
    double bubble;
  } cases[] = {{"gpipe", 1, 3.0 / 8}, {"1f1b", 1, 3.0 / 8}, {"interleaved", 2, 3.0 / 16}, {"zero_bubble", 1, 3.0 / 24}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.schedule);
    const Program prog = lowered(tiny(c.schedule, 4, c.vpp, 8));
    const ReplayResult r = replay(prog, unit_item_durations(prog));
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_NEAR(r.bubble_fraction, c.bubble, 1e-12);
  }
}

TEST(Checker, ALoweredStepIsConsistentAndHasTheCostModelsFlops) {
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zero_bubble"}) {
    SCOPED_TRACE(schedule);
    const plan::Plan p = tiny(schedule, 4, std::string(schedule) == "interleaved" ? 2 : 1, 8);
    const Program prog = lowered(p);
    const CheckResult c = check(prog, step_flops(p).hardware);
    EXPECT_TRUE(c.ok()) << (c.errors.empty() ? "" : c.errors.front());
    for (std::int64_t s = 0; s < prog.stages; ++s) EXPECT_LE(c.max_in_flight[static_cast<std::size_t>(s)], in_flight_bound(prog, s));
  }
}

TEST(Checker, FlopsMatchWithTensorSequenceAndDataParallelismAndRecompute) {
  auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 64, recompute: full, precision: bf16}\n"
                                "parallelism: {tp: 8, sp: true, pp: 8, vpp: 3, pipeline_schedule: interleaved, dp: 2, zero_stage: 1}\n"
                                "cluster: {gpu: h100-sxm}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const Program prog = lowered(r.plan);
  const CheckResult c = check(prog, step_flops(r.plan).hardware);
  EXPECT_TRUE(c.ok()) << (c.errors.empty() ? "" : c.errors.front());
}

TEST(Program, InterleavingWithUnevenEndsAsLlama3) {
  // 14 layers on 4 stages x 2 chunks: middle stages 2 + 2, the first stage's first chunk and
  // the last stage's last chunk one layer each (3 + 4 + 4 + 3 per stage).
  auto r = plan::load_plan_text("model: {preset: tiny, num_layers: 14}\ntraining: {global_batch_size: 8, precision: bf16}\n"
                                "parallelism: {pp: 4, vpp: 2, pipeline_schedule: interleaved, decoder_first_pipeline_num_layers: 3, "
                                "decoder_last_pipeline_num_layers: 3}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok()) << r.diagnostics.items().front().message;
  EXPECT_EQ(plan::layers_per_chunk(r.plan), (std::vector<std::vector<std::int64_t>>{{1, 2}, {2, 2}, {2, 2}, {2, 1}}));
  const Program prog = lowered(r.plan);
  const CheckResult c = check(prog, step_flops(r.plan).hardware);
  EXPECT_TRUE(c.ok()) << (c.errors.empty() ? "" : c.errors.front());
  // Every layer is lowered exactly once per micro-batch's forward.
  std::vector<int> seen(14, 0);
  for (const auto& sp : prog.classes) {
    for (const auto& in : sp.instrs) {
      if (in.kind == InstrKind::compute && in.phase == OpPhase::forward && in.layer >= 0 && prog.name(in) == "qkv") ++seen[static_cast<std::size_t>(in.layer)];
    }
  }
  for (int n : seen) EXPECT_EQ(n, 8);
  // A split that leaves the first chunk empty is refused, naming the field.
  auto bad = plan::load_plan_text("model: {preset: tiny, num_layers: 12}\ntraining: {global_batch_size: 8}\n"
                                  "parallelism: {pp: 4, vpp: 2, pipeline_schedule: interleaved, decoder_first_pipeline_num_layers: 2, "
                                  "decoder_last_pipeline_num_layers: 2}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n",
                                  plan::Format::yaml);
  EXPECT_NE(bad.diagnostics.find("parallelism.decoder_first_pipeline_num_layers"), nullptr);
}

TEST(Checker, RejectsAMisorderedProgramAndAMissingReceive) {
  const Program good = lowered(tiny("1f1b", 4, 1, 8));
  // Stage 1 runs its first receive of a gradient before any forward: it waits for stage 2,
  // which waits for stage 1's activation: a deadlock.
  Program misordered = good;
  auto& instrs = misordered.classes[1].instrs;
  const auto grad = std::find_if(instrs.begin(), instrs.end(), [&](const Instr& i) { return misordered.name(i) == "recv_gradient"; });
  ASSERT_NE(grad, instrs.end());
  const Instr moved = *grad;
  instrs.erase(grad);
  for (auto& i : instrs) i.after = -1;  // keep `after` from pointing forward after the move
  instrs.insert(instrs.begin(), moved);
  const CheckResult bad = check(misordered);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.errors.front().find("deadlock"), std::string::npos) << bad.errors.front();

  Program missing = good;
  auto& two = missing.classes[2].instrs;
  two.erase(std::find_if(two.begin(), two.end(), [&](const Instr& i) { return i.kind == InstrKind::recv; }));
  for (auto& i : two) i.after = -1;
  const CheckResult lost = check(missing);
  ASSERT_FALSE(lost.ok());
  EXPECT_NE(lost.errors.front().find("has no receive"), std::string::npos) << lost.errors.front();

  // A schedule that keeps more micro-batches in flight than 1F1B allows.
  Program greedy = good;
  greedy.classes[3].schedule = stage_schedule(PipelineSchedule::gpipe, 4, 3, 8, 1);
  const CheckResult memory = check(greedy);
  ASSERT_FALSE(memory.ok());
  EXPECT_NE(memory.errors.front().find("in flight"), std::string::npos) << memory.errors.front();
}

TEST(Program, AConsumerIsHandedEveryInstructionOnceInAnExecutableOrder) {
  const Program prog = lowered(tiny("interleaved", 4, 2, 8));
  RecordingConsumer rec;
  const ReplayResult r = replay(prog, unit_item_durations(prog), &rec);
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::size_t total = 0;
  for (const auto& c : prog.classes) total += c.instrs.size();
  ASSERT_EQ(rec.events.size(), total);
  // Per stage in list order; every receive starts no earlier than its send ended.
  std::vector<std::size_t> next(prog.classes.size(), 0);
  std::map<std::tuple<std::int64_t, std::int64_t, std::int32_t>, double> sent;
  for (const auto& e : rec.events) {
    const auto s = static_cast<std::size_t>(e.stage);
    EXPECT_EQ(e.index, next[s]++);
    const Instr& in = prog.classes[s].instrs[e.index];
    if (in.kind == InstrKind::send) sent[{e.stage, in.peer_stage, in.tag}] = e.end_s;
    if (in.kind == InstrKind::recv) {
      const auto it = sent.find({in.peer_stage, e.stage, in.tag});
      ASSERT_NE(it, sent.end());
      EXPECT_GE(e.start_s, it->second);
    }
  }
}

TEST(Program, RanksOfAStageShareOneListAndKnowTheirNeighbours) {
  auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 64, precision: bf16}\n"
                                "parallelism: {tp: 8, sp: true, pp: 8, dp: 4}\ncluster: {gpu: h100-sxm}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const Program prog = lowered(r.plan);
  ASSERT_EQ(prog.classes.size(), 8u);
  for (const auto& c : prog.classes) EXPECT_EQ(c.ranks, 32);
  const auto layout = plan::RankLayout::from_plan(r.plan.parallelism);
  const RankView v = for_rank(prog, layout, 40);  // TP 8 x DP 4 = 32 ranks per stage: stage 1
  EXPECT_EQ(v.stage->stage, 1);
  EXPECT_EQ(v.prev_rank, 8);
  EXPECT_EQ(v.next_rank, 72);
  // TP all-reduces: with SP, a reduce-scatter and an all-gather per block and direction.
  std::int64_t tp = 0;
  for (const auto& i : v.stage->instrs) tp += i.stream == Stream::tp ? 1 : 0;
  const std::int64_t layers = 96 / 8, m = 64 / 4;
  EXPECT_EQ(tp, m * layers * 2 /*blocks*/ * 2 /*RS + AG*/ * 2 /*forward, backward*/);
  // DP: a layer (226M parameters per TP rank) fills a 40M bucket alone: one reduce-scatter each
  // (ZeRO 1 by default), then the distributed optimizer's parameter all-gather.
  std::int64_t dp = 0;
  for (const auto& i : v.stage->instrs) dp += i.stream == Stream::dp && i.collective != Collective::all_gather ? 1 : 0;
  EXPECT_EQ(dp, layers);
  // Without data parallelism there is nothing to reduce.
  const Program small = lowered(tiny("1f1b", 2, 1, 4));
  for (const auto& c : small.classes) {
    for (const auto& i : c.instrs) EXPECT_NE(i.stream, Stream::dp);
  }
}

// Selective recomputation repeats the attention core in every layer's backward: the Program
// holds it (it once skipped every layer that full recomputation's method would not repeat).
TEST(Program, SelectiveRecomputationIsInEveryLayer) {
  auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 64, recompute: selective, precision: bf16}\n"
                                "parallelism: {tp: 8, sp: true, pp: 8, dp: 2}\ncluster: {gpu: h100-sxm}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const Program prog = lowered(r.plan);
  const CheckResult c = check(prog, step_flops(r.plan).hardware);
  EXPECT_TRUE(c.ok()) << (c.errors.empty() ? "" : c.errors.front());
  std::int64_t recomputed = 0;
  for (const auto& i : prog.classes[0].instrs) recomputed += i.kind == InstrKind::compute && i.phase == OpPhase::recompute ? 1 : 0;
  EXPECT_EQ(recomputed, 32 /*micro-batches*/ * 12 /*layers*/);
}

// Each GEMM's weight gradient follows its own input gradient (the op table's order), so that the
// executor's weight-gradient half reads the gradient its input-gradient half left. The lowering
// once walked each layer's op list backwards and put every weight gradient before its input's.
TEST(Program, EachWeightGradientFollowsItsInputGradient) {
  auto r = plan::load_plan_text("model: gpt3-175b\ntraining: {global_batch_size: 16, precision: bf16}\n"
                                "parallelism: {tp: 8, sp: true, pp: 8, dp: 2}\ncluster: {gpu: h100-sxm}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const Program prog = lowered(r.plan);
  std::int64_t weights = 0;
  for (const auto& sp : prog.classes) {
    std::map<std::tuple<std::int32_t, std::int32_t, std::string>, bool> input_done;  // (item, layer, op)
    for (const auto& in : sp.instrs) {
      if (in.kind != InstrKind::compute) continue;
      const auto key = std::make_tuple(in.item, in.layer, prog.name(in));
      if (in.phase == OpPhase::backward_input) input_done[key] = true;
      if (in.phase == OpPhase::backward_weight && prog.name(in) != "embedding") {
        EXPECT_TRUE(input_done[key]) << "stage " << sp.stage << " item " << in.item << " layer " << in.layer << " " << prog.name(in);
        ++weights;
      }
    }
  }
  EXPECT_GT(weights, 0);
}

// Megatron reduces the vocabulary-parallel embedding's output over TP (reduce-scatter with SP)
// and gathers the final norm's output for the column-parallel LM head; their backward passes
// mirror them. Both tiers price them (models/layer_comm).
TEST(Program, TheEmbeddingAndTheHeadHaveTheirTensorParallelCollectives) {
  for (const bool sp : {true, false}) {
    auto r = plan::load_plan_text(std::string("model: gpt3-175b\ntraining: {global_batch_size: 16, precision: bf16}\n"
                                              "parallelism: {tp: 8, sp: ") + (sp ? "true" : "false") + ", pp: 8, dp: 2}\ncluster: {gpu: h100-sxm}\n",
                                  plan::Format::yaml);
    ASSERT_TRUE(r.ok());
    const Program prog = lowered(r.plan);
    // The TP collectives outside the layers (layer -1), per stage, in order.
    auto outside = [&](const StageProgram& stage) {
      std::vector<std::string> out;
      for (const auto& in : stage.instrs) {
        // (The micro-batch's broadcasts, before them, are tests/models/data_loading_test.cpp's.)
        if (in.kind == InstrKind::collective && in.stream == Stream::tp && in.layer < 0 && in.item == 0 && in.collective != Collective::broadcast) {
          out.push_back(prog.name(in));
        }
      }
      return out;
    };
    const std::string reduce = sp ? "tp_reduce_scatter" : "tp_all_reduce";
    // Stage 0, item 0 (a forward): the embedding's reduction.
    EXPECT_EQ(outside(prog.classes.front()), std::vector<std::string>{reduce}) << sp;
    // The last stage's item 0 is micro-batch 0's forward: the gather before the head (SP only).
    EXPECT_EQ(outside(prog.classes.back()), sp ? std::vector<std::string>{"tp_all_gather"} : std::vector<std::string>{}) << sp;
    EXPECT_TRUE(check(prog, step_flops(r.plan).hardware).ok());
    // The last stage's first backward (item 1): the loss, the head, its reduction, the final
    // norm, then the layers. (The op table once had no backward of the final norm.)
    std::vector<std::string> head;
    for (const auto& in : prog.classes.back().instrs) {
      if (in.item == 1 && in.layer < 0 && (in.kind == InstrKind::compute || in.kind == InstrKind::collective)) head.push_back(prog.name(in) + (in.kind == InstrKind::compute ? ":" + std::string(to_string(in.phase)) : ""));
    }
    EXPECT_EQ(head, (std::vector<std::string>{"loss:backward_input", "lm_head:backward_input", "lm_head:backward_weight", reduce, "final_norm:backward_input"})) << sp;
  }
}

// Layers of each chunk as the lowered Program holds them: [stage][chunk] counts, from the
// forward QKV ops of micro-batch 0.
std::vector<std::vector<std::int64_t>> lowered_layers(const Program& prog) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& sp : prog.classes) {
    std::vector<std::int64_t> chunks(static_cast<std::size_t>(prog.chunks), 0);
    for (const auto& in : sp.instrs) {
      if (in.kind != InstrKind::compute || in.phase != OpPhase::forward || in.item < 0 || prog.name(in) != "qkv") continue;
      const auto& it = sp.schedule[static_cast<std::size_t>(in.item)];
      if (it.microbatch == 0) ++chunks[static_cast<std::size_t>(it.chunk)];
    }
    out.push_back(chunks);
  }
  return out;
}

plan::LoadResult layout_plan(const std::string& layers, const std::string& parallelism) {
  return plan::load_plan_text("model: {preset: tiny, num_layers: " + layers + "}\ntraining: {global_batch_size: 8, precision: bf16}\n"
                              "parallelism: {" + parallelism + "}\ncluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4}\n",
                              plan::Format::yaml);
}

TEST(Program, EmbeddingAndLossCountedAsLayersAsMegatronSplitsThem) {
  // 6 layers + embedding + loss = 8 over 4 stages x 2 chunks, one each: virtual stage 0 (stage
  // 0, chunk 0) holds only the embedding, virtual stage 7 (stage 3, chunk 1) only the loss.
  auto r = layout_plan("6", "pp: 4, vpp: 2, pipeline_schedule: interleaved, account_for_embedding_in_pipeline_split: true, "
                            "account_for_loss_in_pipeline_split: true");
  ASSERT_TRUE(r.ok()) << r.diagnostics.items().front().message;
  const std::vector<std::vector<std::int64_t>> want = {{0, 1}, {1, 1}, {1, 1}, {1, 0}};
  EXPECT_EQ(plan::layers_per_chunk(r.plan), want);
  const Program prog = lowered(r.plan);
  EXPECT_EQ(lowered_layers(prog), want);
  const CheckResult c = check(prog, step_flops(r.plan).hardware);
  EXPECT_TRUE(c.ok()) << (c.errors.empty() ? "" : c.errors.front());
  // Only the embedding: 3 layers + 1 over 2 stages (no interleaving).
  auto e = layout_plan("3", "pp: 2, account_for_embedding_in_pipeline_split: true");
  ASSERT_TRUE(e.ok()) << e.diagnostics.items().front().message;
  EXPECT_EQ(lowered_layers(lowered(e.plan)), (std::vector<std::vector<std::int64_t>>{{1}, {2}}));
  // A total that does not divide is refused, naming the switch.
  auto bad = layout_plan("7", "pp: 4, vpp: 2, pipeline_schedule: interleaved, account_for_embedding_in_pipeline_split: true, "
                              "account_for_loss_in_pipeline_split: true");
  EXPECT_NE(bad.diagnostics.find("parallelism.account_for_embedding_in_pipeline_split"), nullptr);
}

TEST(Program, AnExplicitLayoutIsLoweredAsWritten) {
  // Megatron's syntax: virtual stages c pp + s split by |, E embedding, t layer, L loss.
  // Stage 0: [E t t] [t]; stage 1: [t] [t L]: 5 layers, the vpp (2) inferred from the layout.
  auto r = layout_plan("5", "pp: 2, pipeline_schedule: interleaved, pipeline_model_parallel_layout: \"Et*2|t|t,|tL\"");
  ASSERT_TRUE(r.ok()) << r.diagnostics.items().front().message;
  EXPECT_EQ(r.plan.parallelism.virtual_pipeline_model_parallel_size, 2);
  const std::vector<std::vector<std::int64_t>> want = {{2, 1}, {1, 1}};
  EXPECT_EQ(plan::layers_per_chunk(r.plan), want);
  const Program prog = lowered(r.plan);
  EXPECT_EQ(lowered_layers(prog), want);
  EXPECT_TRUE(check(prog, step_flops(r.plan).hardware).ok());
  // Errors name the field and the cause.
  for (const auto& [layout, why] : std::vector<std::pair<std::string, std::string>>{
           {"tEt|t|t|tL", "must begin with the embedding"},
           {"Et|t|t|t", "must end with the loss"},
           {"Et|tt|t|ttL", "places 6 decoder layers"},
           {"Et|t|t|tmL", "multi-token-prediction"},
           {"Et|t|tx|tL", "is not a layer letter"},
           {"(Et|t|t|tL", "without its ')'"},
           {"Et|t|tL", "do not divide over pipeline_model_parallel_size 2"}}) {
    auto bad = layout_plan("5", "pp: 2, pipeline_schedule: interleaved, pipeline_model_parallel_layout: \"" + layout + "\"");
    const auto* d = bad.diagnostics.find("parallelism.pipeline_model_parallel_layout");
    ASSERT_NE(d, nullptr) << layout;
    EXPECT_NE(d->message.find(why), std::string::npos) << layout << ": " << d->message;
  }
  auto mixed = layout_plan("5", "pp: 2, pipeline_schedule: interleaved, pipeline_model_parallel_layout: \"Et*2|t|t|tL\", "
                                "decoder_first_pipeline_num_layers: 3");
  EXPECT_NE(mixed.diagnostics.find("parallelism.pipeline_model_parallel_layout"), nullptr);
}

TEST(Program, Llama3405bLayoutValidatesAndLowers) {
  // Llama 3 §3.3.2: 126 layers on 16 stages x 8 chunks, one layer a chunk, the first chunk of
  // the first stage only the embedding and the last of the last only the loss.
  auto r = plan::load_plan_text("model: {preset: llama3-405b}\ntraining: {global_batch_size: 16}\n"
                                "parallelism: {tp: 8, sp: true, pp: 16, vpp: 8, pipeline_schedule: interleaved, dp: 1, "
                                "account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true}\n"
                                "cluster: {gpu: h100-sxm}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok()) << r.diagnostics.items().front().path << ": " << r.diagnostics.items().front().message;
  std::vector<std::vector<std::int64_t>> want(16, std::vector<std::int64_t>(8, 1));
  want.front().front() = 0;
  want.back().back() = 0;
  EXPECT_EQ(plan::layers_per_chunk(r.plan), want);
  const auto firsts = plan::chunk_first_layers(want);
  for (std::int64_t s = 0; s < 16; ++s) {
    for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(firsts[s][c], plan::first_layer_of_chunk(want, s, c));
  }
  EXPECT_EQ(firsts[1][0], 0);   // stage 0's first chunk holds no layer: stage 1 starts at layer 0
  EXPECT_EQ(firsts[0][1], 15);  // virtual stage 16
  // The same split written as a layout.
  plan::Plan as_layout = r.plan;
  as_layout.parallelism.account_for_embedding_in_pipeline_split = as_layout.parallelism.account_for_loss_in_pipeline_split = false;
  as_layout.parallelism.pipeline_model_parallel_layout = "E|(t|)*126L";
  EXPECT_FALSE(plan::validate(as_layout).has_errors());
  EXPECT_EQ(plan::layers_per_chunk(as_layout), want);
  const Program prog = lowered(r.plan);
  EXPECT_EQ(lowered_layers(prog), want);
  EXPECT_TRUE(check(prog, step_flops(r.plan).hardware).ok());
}

TEST(PipelineLayout, UnrollsRepeatsAndIgnoresCommas) {
  std::string error;
  auto v = plan::parse_pipeline_layout("Et*3|(tt|)*2,m|L", error);
  ASSERT_TRUE(v) << error;
  EXPECT_EQ(*v, (std::vector<std::string>{"Ettt", "tt", "tt", "m", "L"}));
  v = plan::parse_pipeline_layout("((t|)*2)*2", error);  // nesting, which Megatron's regexes lack
  ASSERT_TRUE(v) << error;
  EXPECT_EQ(v->size(), 5u);
  EXPECT_FALSE(plan::parse_pipeline_layout("(t*99999)*99999", error));
  EXPECT_NE(error.find("more than"), std::string::npos) << error;
  EXPECT_FALSE(plan::parse_pipeline_layout("t*", error));
  EXPECT_NE(error.find("without a count"), std::string::npos) << error;
}

// models/pipeline replays the schedule item by item for the estimate; with communication free
// it must be the Program's replay (which the simulator's bubble comes from), on unequal stages.
TEST(Pipeline, ItemReplayIsTheProgramsReplayWithFreeCommunication) {
  const struct {
    const char* schedule;
    std::int64_t pp, vpp, m;
  } cases[] = {{"gpipe", 4, 1, 8}, {"1f1b", 4, 1, 8}, {"1f1b", 4, 1, 3}, {"interleaved", 4, 2, 8}, {"interleaved", 2, 4, 2}, {"zero_bubble", 4, 1, 8}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.schedule) + " p" + std::to_string(c.pp) + " v" + std::to_string(c.vpp) + " m" + std::to_string(c.m));
    const Program prog = lowered(tiny(c.schedule, c.pp, c.vpp, c.m));
    // Stage s's items take (1 + s/4) of the unit times, shared among the item's compute.
    std::vector<std::vector<double>> count(prog.classes.size());
    for (const auto& sp : prog.classes) {
      auto& n = count[static_cast<std::size_t>(sp.stage)];
      n.assign(sp.schedule.size(), 0);
      for (const auto& in : sp.instrs) {
        if (in.kind == InstrKind::compute && in.item >= 0) n[static_cast<std::size_t>(in.item)] += 1;
      }
    }
    const double v = static_cast<double>(c.vpp);
    auto scale = [](std::int64_t s) { return 1 + static_cast<double>(s) / 4; };
    const ReplayResult r = replay(prog, [&](const StageProgram& sp, const Instr& in) {
      if (in.kind != InstrKind::compute || in.item < 0) return 0.0;
      const ScheduleItem& it = sp.schedule[static_cast<std::size_t>(in.item)];
      const double units = it.pass == Pass::backward ? 3 : it.pass == Pass::backward_input ? 2 : 1;
      return scale(sp.stage) * units / v / count[static_cast<std::size_t>(sp.stage)][static_cast<std::size_t>(in.item)];
    });
    ASSERT_TRUE(r.error.empty()) << r.error;
    PipelineSpec spec;
    spec.schedule = prog.schedule;
    spec.stages = c.pp;
    spec.chunks = c.vpp;
    spec.microbatches = c.m;
    for (std::int64_t s = 0; s < c.pp; ++s) {
      for (std::int64_t k = 0; k < c.vpp; ++k) {
        spec.forward_s.push_back(scale(s) / v);
        spec.backward_s.push_back(scale(s) * 3 / v);
        spec.weight_s.push_back(scale(s) / v);
      }
    }
    const PipelineTimes t = pipeline_times(spec);
    EXPECT_NEAR(t.makespan_s, r.makespan_s, 1e-9);
    for (std::size_t s = 0; s < t.idle_s.size(); ++s) EXPECT_NEAR(t.idle_s[s], r.idle_s[s], 1e-9) << s;
  }
}

// CP's p2p ring (the default --cp-comm-type) is split with the attention it feeds: the attention
// does not wait for the exchange before it, only its last 1/CP does (tail_after), in the
// forward, the recomputation and the backward; the gradients' return stays blocking. With
// all_gather the attention waits for the exchange. The replay ends the attention at
// max(start + d, exchange end + d / CP).
TEST(Program, ContextParallelRingIsSplitWithTheAttention) {
  auto plan = [](const char* type) {
    auto r = plan::load_plan_text(std::string("model: {preset: llama3-8b, seq_length: 8192}\n"
                                              "training: {global_batch_size: 8, micro_batch_size: 1, precision: bf16, recompute: selective}\n"
                                              "parallelism: {cp: 4, dp: 2, cp_comm_type: ") + type + "}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                                  plan::Format::yaml);
    EXPECT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics.items().front().message);
    return lowered(r.plan);
  };
  for (const char* type : {"p2p", "all_gather"}) {
    SCOPED_TRACE(type);
    const bool ring = std::string(type) == "p2p";
    const Program prog = plan(type);
    EXPECT_TRUE(check(prog).ok());
    const auto& in = prog.classes[0].instrs;
    std::map<OpPhase, int> split;
    int exchanges = 0, attentions = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in[i].kind == InstrKind::collective && prog.name(in[i]) == "cp_ring_exchange") {
        ++exchanges;
        // The attention right after it.
        ASSERT_LT(i + 1, in.size());
        const Instr& att = in[i + 1];
        ASSERT_EQ(prog.name(att), "attention");
        ++attentions;
        if (ring) {
          EXPECT_EQ(att.tail_after, static_cast<std::int32_t>(i));
          EXPECT_DOUBLE_EQ(att.tail_fraction, 0.25);
          EXPECT_NE(att.after, static_cast<std::int32_t>(i));
          EXPECT_NE(att.also_after, static_cast<std::int32_t>(i));
          ++split[att.phase];
        } else {
          EXPECT_EQ(att.tail_after, -1);
          EXPECT_TRUE(att.after == static_cast<std::int32_t>(i) || att.also_after == static_cast<std::int32_t>(i));
        }
      }
      // The gradients' return holds the next compute in both.
      if (in[i].kind == InstrKind::collective && prog.name(in[i]) == "cp_grad_ring_exchange") {
        for (std::size_t j = i + 1; j < in.size(); ++j) {
          if (in[j].kind != InstrKind::compute) continue;
          EXPECT_TRUE(in[j].after == static_cast<std::int32_t>(i) || in[j].also_after == static_cast<std::int32_t>(i)) << j;
          break;
        }
      }
    }
    EXPECT_EQ(exchanges, 32 * 4 * 3);  // 32 layers x 4 micro-batches x (forward, recomputation, backward)
    EXPECT_EQ(attentions, exchanges);
    if (ring) {
      EXPECT_EQ(split[OpPhase::forward], 32 * 4);
      EXPECT_EQ(split[OpPhase::recompute], 32 * 4);
      EXPECT_EQ(split[OpPhase::backward_input], 32 * 4);
    }
  }
  // The replay: an exchange of 3 s beside an attention of 2 s (the rest free) ends it at
  // max(2, 3 + 2/4) = 3.5 s after it started with p2p, 3 + 2 = 5 s with all_gather.
  for (const char* type : {"p2p", "all_gather"}) {
    SCOPED_TRACE(type);
    const Program prog = plan(type);
    auto duration = [&](const StageProgram& sp, const Instr& i) {
      if (i.layer != 0 || i.item != 0) return 0.0;
      if (i.kind == InstrKind::collective && sp.stage == 0 && prog.name(i) == "cp_ring_exchange") return 3.0;
      if (i.kind == InstrKind::compute && prog.name(i) == "attention") return 2.0;
      return 0.0;
    };
    const ReplayResult r = replay(prog, duration);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_DOUBLE_EQ(r.makespan_s, std::string(type) == "p2p" ? 3.5 : 5.0);
  }
}

}  // namespace
}  // namespace meshwork::models
