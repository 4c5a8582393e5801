// Each validation rule with a plan that breaks it and one that keeps it.
#include <cstdint>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "plan/backend_limits.hpp"
#include "plan/presets.hpp"
#include "plan/rank_layout.hpp"
#include "plan/validate.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::plan {
namespace {

using testing::base_plan;
using testing::dump;
using testing::has_error;
using testing::has_warning;
using testing::load_yaml;

Diagnostics check(const Plan& p) { return validate(p); }

TEST(Validate, BasePlanIsValid) {
  const auto d = check(base_plan());
  EXPECT_FALSE(d.has_errors()) << dump(d);
  EXPECT_EQ(d.warning_count(), 0u) << dump(d);
}

TEST(Validate, MeshProductMustEqualNumGpus) {
  Plan p = base_plan();
  p.parallelism.data_parallel_size = 8;  // 8 * 2 * 8 = 128 != 64
  EXPECT_TRUE(has_error(check(p), "parallelism.data_parallel_size", "= 128 GPUs, but cluster.num_gpus is 64"));
  p.cluster.num_gpus = 128;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
}

TEST(Validate, NumGpusMustDivideIntoModelParallelGroups) {
  auto r = load_yaml(std::string(testing::kBasePlan).replace(std::string(testing::kBasePlan).find("num_gpus: 64"), 12, "num_gpus: 72"));
  EXPECT_TRUE(has_error(r.diagnostics, "cluster.num_gpus", "do not divide into model-parallel groups of TP 8 x CP 1 x PP 2 = 16 GPUs each")) << dump(r.diagnostics);
}

TEST(Validate, NumGpusOrDpIsRequired) {
  Plan p = base_plan();
  p.cluster.num_gpus = 0;
  p.parallelism.data_parallel_size = 0;
  EXPECT_TRUE(has_error(check(p), "cluster.num_gpus", "required"));
}

TEST(Validate, HeadsMustDivideByTp) {
  Plan p = base_plan();
  p.parallelism.tensor_model_parallel_size = 6;
  p.parallelism.data_parallel_size = 0;
  p.cluster.num_gpus = 6 * 2 * 4;
  p.cluster.gpus_per_node = 6;
  {
    Diagnostics ignored;
    resolve(p, ignored);
  }
  EXPECT_TRUE(has_error(check(p), "parallelism.tensor_model_parallel_size", "6 does not divide num_attention_heads 32"))
      << dump(check(p));
  p.model.num_attention_heads = 36;
  p.model.num_query_groups = 36;
  p.model.hidden_size = 36 * 128;
  p.model.ffn_hidden_size = 4 * 36 * 128;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
}

TEST(Validate, QueryGroupsMustDivideByTp) {
  Plan p = base_plan();
  p.model.num_query_groups = 4;  // GQA with 4 KV heads over TP 8
  EXPECT_TRUE(has_error(check(p), "parallelism.tensor_model_parallel_size", "does not divide num_query_groups 4"));
  p.model.num_query_groups = 8;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
}

TEST(Validate, QueryGroupsMustDivideHeads) {
  Plan p = base_plan();
  p.parallelism.tensor_model_parallel_size = 1;
  p.parallelism.data_parallel_size = 32;
  p.model.num_query_groups = 12;
  EXPECT_TRUE(has_error(check(p), "model.num_query_groups", "12 does not divide num_attention_heads 32"));
}

TEST(Validate, LayersMustDivideOverStagesAndChunks) {
  Plan p = base_plan();
  p.model.num_layers = 25;
  EXPECT_TRUE(has_error(check(p), "parallelism.pipeline_model_parallel_size", "num_layers 25 does not divide over 2 stages"));
  p.model.num_layers = 24;
  p.parallelism.virtual_pipeline_model_parallel_size = 5;
  p.parallelism.pipeline_schedule = PipelineSchedule::interleaved;
  EXPECT_TRUE(has_error(check(p), "parallelism.pipeline_model_parallel_size", "2 stages x 5 model chunks"));
  p.parallelism.virtual_pipeline_model_parallel_size = 3;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
}

TEST(Validate, UnevenFirstAndLastStagesAsLlama3) {
  // Llama 3 405B: 126 layers on 16 stages, one layer fewer on the first and the last.
  Plan p = base_plan();
  p.model.num_layers = 126;
  p.parallelism.pipeline_model_parallel_size = 16;
  p.parallelism.data_parallel_size = 0;
  p.cluster.num_gpus = 8 * 16;
  {
    Diagnostics ignored;
    resolve(p, ignored);
  }
  p.training.global_batch_size = 16;
  p.training.micro_batch_size = 1;
  EXPECT_TRUE(has_error(check(p), "parallelism.pipeline_model_parallel_size"));
  p.parallelism.decoder_first_pipeline_num_layers = 7;
  p.parallelism.decoder_last_pipeline_num_layers = 7;
  const auto d = check(p);
  EXPECT_FALSE(d.has_errors()) << dump(d);
  const auto stages = layers_per_stage(p);
  ASSERT_TRUE(stages);
  EXPECT_EQ(stages->front(), 7);
  EXPECT_EQ((*stages)[1], 8);
  EXPECT_EQ(stages->back(), 7);

  p.parallelism.decoder_last_pipeline_num_layers = 9;  // 126 - 16 = 110 over 14 stages: no
  EXPECT_TRUE(has_error(check(p), "parallelism.decoder_first_pipeline_num_layers", "do not divide evenly"));
}

TEST(Validate, UnevenStagesNeedAPipeline) {
  Plan p = base_plan();
  p.parallelism.pipeline_model_parallel_size = 1;
  p.parallelism.data_parallel_size = 8;
  p.parallelism.decoder_first_pipeline_num_layers = 4;
  EXPECT_TRUE(has_error(check(p), "parallelism.decoder_first_pipeline_num_layers", "2 or more"));
}

TEST(Validate, GlobalBatchMustDivideByMicroBatchTimesDp) {
  Plan p = base_plan();
  p.training.global_batch_size = 60;  // 2 x 4 = 8 does not divide 60
  EXPECT_TRUE(has_error(check(p), "training.global_batch_size", "not a multiple of micro_batch_size 2 x data_parallel_size 4"));
  p.training.global_batch_size = 64;
  EXPECT_FALSE(check(p).has_errors());
}

TEST(Validate, TooFewMicroBatchesForThePipelineIsAWarning) {
  Plan p = base_plan();
  p.training.global_batch_size = 8;  // 8 / (2 * 4) = 1 micro-batch, 2 stages
  const auto d = check(p);
  EXPECT_FALSE(d.has_errors()) << dump(d);
  EXPECT_TRUE(has_warning(d, "training.global_batch_size", "never fills"));
}

TEST(Validate, SequenceMustDivideByCpAndTwiceCpWhenLoadBalanced) {
  Plan p = base_plan();
  p.parallelism.context_parallel_size = 2;
  p.parallelism.data_parallel_size = 2;
  p.model.seq_length = 2050;  // divisible by 2, not by 4
  EXPECT_TRUE(has_error(check(p), "parallelism.context_parallel_size", "2 x CP for load-balanced"));
  p.parallelism.context_parallel_load_balance = false;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.model.seq_length = 2051;
  EXPECT_TRUE(has_error(check(p), "parallelism.context_parallel_size", "does not divide into 2 chunks"));
}

TEST(Validate, ExpertsMustDivideByEpAndEpMustDivideDp) {
  Plan p = base_plan();
  p.model.moe.num_moe_experts = 6;
  p.model.moe.moe_ffn_hidden_size = 1024;
  p.parallelism.expert_model_parallel_size = 4;
  p.parallelism.sequence_parallel = true;  // Megatron-core: MoE with TP needs SP
  EXPECT_TRUE(has_error(check(p), "parallelism.expert_model_parallel_size", "4 does not divide num_moe_experts 6"));
  p.model.moe.num_moe_experts = 8;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.model.moe.num_moe_experts = 16;
  p.parallelism.expert_model_parallel_size = 8;  // DP is 4
  EXPECT_TRUE(has_error(check(p), "parallelism.expert_model_parallel_size", "does not divide data_parallel_size 4"));
}

Plan moe_plan() {
  Plan p = base_plan();
  p.model.moe.num_moe_experts = 8;
  p.model.moe.moe_ffn_hidden_size = 1024;
  p.parallelism.expert_model_parallel_size = 2;
  p.parallelism.sequence_parallel = true;
  return p;
}

TEST(Validate, ExpertAndDataDimensionsMustBeAdjacentInTheOrder) {
  Plan p = moe_plan();
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.parallelism.order = "tp-ep-cp-dp-pp";
  EXPECT_TRUE(has_error(check(p), "parallelism.order", "ep and dp must be adjacent"));
  p.parallelism.order = "tp-cp-dp-ep-pp";
  EXPECT_FALSE(has_error(check(p), "parallelism.order"));
}

TEST(Validate, ExpertParallelismWithContextParallelismIsRefused) {
  Plan p = moe_plan();
  p.parallelism.context_parallel_size = 2;
  p.parallelism.data_parallel_size = 2;
  EXPECT_TRUE(has_error(check(p), "parallelism.expert_model_parallel_size", "context_parallel_size > 1"));
}

TEST(Validate, RopeNeedsAnEvenHeadWidth) {
  Plan p = base_plan();
  p.model.position_embedding_type = PositionEmbedding::rope;
  ASSERT_FALSE(check(p).has_errors()) << dump(check(p));
  p.model.kv_channels = 63;
  EXPECT_TRUE(has_error(check(p), "model.kv_channels", "63 is odd: RoPE rotates"));
  p.model.position_embedding_type = PositionEmbedding::learned_absolute;
  EXPECT_FALSE(has_error(check(p), "model.kv_channels"));
}

// The execution backends' limits (plan/backend_limits): valid plans each backend cannot run,
// named on their fields; the CPU backend runs dense meshes of every kind.
TEST(Validate, BackendLimitsNameTheFieldsABackendCannotRun) {
  Plan p = moe_plan();  // TP and EP with MoE
  ASSERT_FALSE(check(p).has_errors()) << dump(check(p));
  p.parallelism.zero_stage = 3;
  const Diagnostics cpu = backend_diagnostics(p, Backend::cpu);
  EXPECT_FALSE(has_error(cpu, "parallelism.tensor_model_parallel_size"));  // experts split over TP
  EXPECT_TRUE(has_error(cpu, "parallelism.zero_stage", "MoE with ZeRO 0-2 only"));
  EXPECT_TRUE(has_error(backend_diagnostics(p, Backend::cuda), "parallelism.zero_stage", "MoE with ZeRO 0-2 only"));  // the CPU's limits are the CUDA's
  p.parallelism.zero_stage = 2;
  EXPECT_FALSE(has_error(backend_diagnostics(p, Backend::cpu), "parallelism.zero_stage"));
  const Diagnostics cuda = backend_diagnostics(p, Backend::cuda);
  EXPECT_FALSE(has_error(cuda, "parallelism.expert_model_parallel_size"));  // the same Trainer as the CPU's: every mesh
  EXPECT_TRUE(has_error(cuda, "model.add_bias_linear", "the CUDA backend's experts have no biases"));  // MoE with TP and EP, but biases
  // The CUDA backend plays the CPU backend's Trainer (issue 23): a dense TP x PP x DP mesh with
  // ZeRO, interleaved, is the CPU's and the CUDA's alike.
  Plan mesh = base_plan();
  mesh.parallelism.tensor_model_parallel_size = 2;
  mesh.parallelism.sequence_parallel = true;
  mesh.parallelism.pipeline_model_parallel_size = 2;
  mesh.parallelism.data_parallel_size = 2;
  mesh.parallelism.zero_stage = 3;
  mesh.cluster.num_gpus = 8;
  ASSERT_FALSE(check(mesh).has_errors()) << dump(check(mesh));
  EXPECT_FALSE(backend_diagnostics(mesh, Backend::cpu).has_errors()) << dump(backend_diagnostics(mesh, Backend::cpu));
  EXPECT_FALSE(backend_diagnostics(mesh, Backend::cuda).has_errors()) << dump(backend_diagnostics(mesh, Backend::cuda));
  // What the CPU backend refuses, the CUDA one refuses too.
  mesh.parallelism.num_distributed_optimizer_instances = 2;
  EXPECT_TRUE(has_error(backend_diagnostics(mesh, Backend::cuda), "parallelism.num_distributed_optimizer_instances"));
  Plan dense = base_plan();
  dense.parallelism.context_parallel_size = 2;
  EXPECT_FALSE(backend_diagnostics(dense, Backend::cpu).has_errors()) << dump(backend_diagnostics(dense, Backend::cpu));
  EXPECT_FALSE(backend_diagnostics(dense, Backend::cuda).has_errors()) << dump(backend_diagnostics(dense, Backend::cuda));
  EXPECT_EQ(parse_backend("cuda"), Backend::cuda);
  EXPECT_EQ(parse_backend("gpu"), std::nullopt);
}

// FP8 on the CUDA backend: a layer dimension per TP rank that cuBLASLt's e4m3 GEMMs cannot take
// (not a multiple of 16) is named in a warning, and those products run in bf16; the plan is
// still accepted, and the CPU backend (fp32 whatever the precision) says nothing.
TEST(Validate, Fp8OnTheCudaBackendNamesTheDimensionsItsGemmsCannotTake) {
  Plan p = base_plan();  // hidden 4096, TP 8: every dimension per rank a multiple of 16
  p.training.precision = Precision::fp8;
  ASSERT_FALSE(check(p).has_errors()) << dump(check(p));
  EXPECT_TRUE(backend_diagnostics(p, Backend::cuda).items().empty()) << dump(backend_diagnostics(p, Backend::cuda));
  p.model.ffn_hidden_size = 8 * 1000;  // 1000 per rank
  const Diagnostics cuda = backend_diagnostics(p, Backend::cuda);
  EXPECT_FALSE(cuda.has_errors()) << dump(cuda);
  EXPECT_TRUE(has_warning(cuda, "model.ffn_hidden_size", "1000: its products run in bf16")) << dump(cuda);
  EXPECT_FALSE(has_warning(cuda, "model.hidden_size"));
  EXPECT_TRUE(backend_diagnostics(p, Backend::cpu).items().empty());
  p.training.precision = Precision::bf16;
  EXPECT_TRUE(backend_diagnostics(p, Backend::cuda).items().empty());
}

TEST(Validate, MoeWithTensorParallelismNeedsSequenceParallelism) {
  Plan p = moe_plan();
  p.parallelism.sequence_parallel = false;
  EXPECT_TRUE(has_error(check(p), "parallelism.sequence_parallel", "MoE with tensor parallelism"));
}

TEST(Validate, SequenceParallelNeedsTokensDivisibleByTp) {
  Plan p = base_plan();
  p.parallelism.sequence_parallel = true;
  EXPECT_FALSE(check(p).has_errors());
  p.model.seq_length = 2052;  // / 8 is not whole
  EXPECT_TRUE(has_error(check(p), "parallelism.sequence_parallel", "does not divide by tensor_model_parallel_size 8"));
}

TEST(Validate, MlpWidthsMustDivideByTp) {
  Plan p = base_plan();
  p.model.ffn_hidden_size = 16388;
  EXPECT_TRUE(has_error(check(p), "model.ffn_hidden_size", "does not divide by tensor_model_parallel_size 8"));
  p = moe_plan();
  p.model.moe.moe_ffn_hidden_size = 1028;
  EXPECT_TRUE(has_error(check(p), "model.moe.moe_ffn_hidden_size"));
}

// Megatron-core runs the interleaved schedule's micro-batches in groups of PP and raises on a
// last group of 1 to PP - 1 (issue 18: the schedules referred to micro-batches past the step's,
// and a 24-micro-batch PP 16 plan of the GPT-3 mesh sweep was estimated at 36.0 s against
// 24.4 s, its bubble at 0.91).
TEST(Validate, InterleavedNeedsWholeGroupsOfPpMicroBatches) {
  Plan p = base_plan();
  p.parallelism.pipeline_schedule = PipelineSchedule::interleaved;
  p.parallelism.virtual_pipeline_model_parallel_size = 2;
  p.training.global_batch_size = 8;  // 1 micro-batch, PP 2
  EXPECT_TRUE(has_error(check(p), "training.global_batch_size", "needs at least PP = 2"));
  p.training.global_batch_size = 24;  // 3 micro-batches: a last group of 1
  EXPECT_TRUE(has_error(check(p), "training.global_batch_size", "not a multiple of PP = 2"));
  p.training.global_batch_size = 32;  // 4 micro-batches: two groups
  const auto d = check(p);
  EXPECT_FALSE(d.has_errors()) << dump(d);
}

TEST(Validate, ACustomGpuWithoutAPeakIsAnError) {
  Plan p = base_plan();
  p.cluster.gpu.name.clear();
  p.cluster.gpu.peak_tflops = {};
  EXPECT_TRUE(has_error(check(p), "training.precision", "the GPU has no bf16 peak"));
}

TEST(Validate, ExpertParallelismNeedsExperts) {
  Plan p = base_plan();
  p.parallelism.expert_model_parallel_size = 2;
  EXPECT_TRUE(has_error(check(p), "parallelism.expert_model_parallel_size", "needs a MoE model"));
}

TEST(Validate, TopKAndDenseLayersWithinTheModel) {
  Plan p = base_plan();
  p.model.moe.num_moe_experts = 4;
  p.model.moe.moe_ffn_hidden_size = 1024;
  p.model.moe.moe_router_topk = 5;
  EXPECT_TRUE(has_error(check(p), "model.moe.moe_router_topk", "more than num_moe_experts 4"));
  p.model.moe.moe_router_topk = 2;
  p.model.moe.first_k_dense_layers = 24;
  EXPECT_TRUE(has_error(check(p), "model.moe.first_k_dense_layers", "leaves no MoE layer"));
}

TEST(Validate, VirtualStagesOnlyWithTheInterleavedSchedule) {
  Plan p = base_plan();
  p.parallelism.virtual_pipeline_model_parallel_size = 2;
  EXPECT_TRUE(has_error(check(p), "parallelism.virtual_pipeline_model_parallel_size", "need pipeline_schedule: interleaved, not 1f1b"));
  p.parallelism.pipeline_schedule = PipelineSchedule::interleaved;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
}

TEST(Validate, InterleavedNeedsStagesAndChunks) {
  Plan p = base_plan();
  p.parallelism.pipeline_schedule = PipelineSchedule::interleaved;
  EXPECT_TRUE(has_error(check(p), "parallelism.pipeline_schedule", "virtual_pipeline_model_parallel_size of 2 or more"));
  p.parallelism.pipeline_model_parallel_size = 1;
  p.parallelism.data_parallel_size = 8;
  EXPECT_TRUE(has_error(check(p), "parallelism.pipeline_schedule", "pipeline_model_parallel_size of 2 or more"));
}

TEST(Validate, ZeroStageRange) {
  Plan p = base_plan();
  p.parallelism.zero_stage = 4;
  EXPECT_TRUE(has_error(check(p), "parallelism.zero_stage", "at most 3"));
  p.parallelism.zero_stage = -1;
  EXPECT_TRUE(has_error(check(p), "parallelism.zero_stage", "at least 0"));
  p.parallelism.zero_stage = 3;
  EXPECT_FALSE(check(p).has_errors());
}

// Megatron-core's --num-distributed-optimizer-instances: blocks of the DP x CP group, under a
// sharded optimizer; the CPU executor shards over all of it.
TEST(Validate, DistributedOptimizerInstancesSplitTheDataParallelGroup) {
  Plan p = base_plan();  // DP 4, ZeRO-1
  p.parallelism.num_distributed_optimizer_instances = 2;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  EXPECT_TRUE(has_error(backend_diagnostics(p, Backend::cpu), "parallelism.num_distributed_optimizer_instances", "shards the optimizer over all of DP x CP"));
  p.parallelism.num_distributed_optimizer_instances = 3;
  EXPECT_TRUE(has_error(check(p), "parallelism.num_distributed_optimizer_instances", "does not divide the dp_cp group (4 ranks)"));
  p.parallelism.num_distributed_optimizer_instances = 4;
  EXPECT_TRUE(has_warning(check(p), "parallelism.num_distributed_optimizer_instances", "the optimizer is not sharded"));
  p.parallelism.num_distributed_optimizer_instances = 2;
  p.parallelism.zero_stage = 0;
  EXPECT_TRUE(has_error(check(p), "parallelism.num_distributed_optimizer_instances", "need a sharded optimizer"));
  p.parallelism.num_distributed_optimizer_instances = 0;
  EXPECT_TRUE(has_error(check(p), "parallelism.num_distributed_optimizer_instances", "at least 1"));
}

TEST(Validate, GpusPerNodeMustDivideNumGpus) {
  Plan p = base_plan();
  p.cluster.gpus_per_node = 6;
  EXPECT_TRUE(has_error(check(p), "cluster.num_gpus", "not a whole number of 6-GPU nodes"));
  p.cluster.gpus_per_node = 4;
  EXPECT_FALSE(check(p).has_errors());
}

TEST(Validate, TpSpanningNodesIsAWarning) {
  Plan p = base_plan();
  p.cluster.gpus_per_node = 4;  // TP 8 over two 4-GPU nodes
  auto d = check(p);
  EXPECT_FALSE(d.has_errors()) << dump(d);
  EXPECT_TRUE(has_warning(d, "parallelism.tensor_model_parallel_size", "spans nodes"));
  // TP inside the node, but an order that strides it across nodes.
  p = base_plan();
  p.parallelism.order = "dp-tp-cp-ep-pp";
  d = check(p);
  EXPECT_TRUE(has_warning(d, "parallelism.tensor_model_parallel_size", "spans nodes")) << dump(d);
}

// The warning names the first TP group (by its first rank) that spans nodes, as a walk over
// every rank finds it, on every order, node size (some not a power of two) and mesh of the
// base plan on 64 and 48 GPUs.
TEST(Validate, TpSpanningNodesNamesTheFirstGroupThatSpans) {
  int warned = 0, checked = 0;
  const std::pair<std::int64_t, std::int64_t> clusters[] = {{64, 2}, {64, 4}, {64, 8}, {64, 16}, {48, 3}, {48, 6}, {48, 12}};
  for (const char* order : {"tp-cp-ep-dp-pp", "dp-tp-cp-ep-pp", "cp-tp-ep-dp-pp", "pp-dp-tp-cp-ep", "cp-dp-pp-ep-tp", "tp-pp-dp-cp-ep"}) {
    for (const auto& [gpus, per_node] : clusters) {
      for (const std::int64_t tp : {1, 2, 4, 8}) {
        for (const std::int64_t cp : {1, 2}) {
          Plan p = base_plan();
          p.parallelism.order = order;
          p.parallelism.tensor_model_parallel_size = tp;
          p.parallelism.context_parallel_size = cp;
          p.parallelism.data_parallel_size = gpus / (tp * cp * p.parallelism.pipeline_model_parallel_size);
          p.training.global_batch_size = 192;  // whole micro-batches on every DP size here
          p.cluster.num_gpus = gpus;
          p.cluster.gpus_per_node = per_node;
          const auto d = check(p);
          if (d.has_errors()) continue;
          ++checked;
          const RankLayout layout = RankLayout::from_plan(p.parallelism);
          const std::int64_t stride = layout.stride(MeshDim::tp);
          std::string expected;
          for (std::int64_t base = 0; base < layout.world_size() && expected.empty(); ++base) {
            if ((base / stride) % tp != 0) continue;
            const std::int64_t last = base + (tp - 1) * stride;
            if (base / per_node != last / per_node) expected = "the TP group of ranks " + std::to_string(base) + ".." + std::to_string(last) + " spans";
          }
          const std::string where = std::string(order) + ", " + std::to_string(gpus) + " GPUs, " + std::to_string(per_node) + " a node, TP " +
                                    std::to_string(tp) + ", CP " + std::to_string(cp);
          if (expected.empty()) {
            EXPECT_FALSE(has_warning(d, "parallelism.tensor_model_parallel_size", "spans nodes")) << where << "\n" << dump(d);
          } else {
            ++warned;
            EXPECT_TRUE(has_warning(d, "parallelism.tensor_model_parallel_size", expected)) << where << ": " << expected << "\n" << dump(d);
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 200);
  EXPECT_GE(warned, 50);
  EXPECT_LT(warned, checked);
}

TEST(Validate, OrderMustNameEachDimensionOnce) {
  Plan p = base_plan();
  for (const char* bad : {"tp-cp-ep-dp", "tp-cp-ep-dp-pp-tp", "tp-tp-ep-dp-pp", "tp-cp-xp-dp-pp", ""}) {
    p.parallelism.order = bad;
    EXPECT_TRUE(has_error(check(p), "parallelism.order")) << bad;
  }
  p.parallelism.order = "pp-dp-ep-cp-tp";
  EXPECT_FALSE(has_error(check(p), "parallelism.order"));
}

TEST(Validate, PrecisionNeedsAPeakOnTheGpu) {
  Plan p = base_plan();
  p.training.precision = Precision::fp8;
  EXPECT_FALSE(check(p).has_errors());  // H100 has FP8
  p.cluster.gpu.peak_tflops.fp8 = 0;
  EXPECT_TRUE(has_error(check(p), "training.precision", "has no fp8 peak"));
}

TEST(Validate, NonPositiveSizes) {
  Plan p = base_plan();
  p.parallelism.tensor_model_parallel_size = 0;
  p.training.micro_batch_size = -1;
  p.cluster.nic_bandwidth_gbps = 0;
  p.model.hidden_size = 0;
  const auto d = check(p);
  EXPECT_TRUE(has_error(d, "parallelism.tensor_model_parallel_size", "at least 1, got 0")) << dump(d);
  EXPECT_TRUE(has_error(d, "training.micro_batch_size", "at least 1, got -1"));
  EXPECT_TRUE(has_error(d, "cluster.nic_bandwidth_gbps", "greater than 0"));
  EXPECT_TRUE(has_error(d, "model.hidden_size", "required"));
}

TEST(Validate, SchemaVersion) {
  Plan p = base_plan();
  p.schema_version = 2;
  EXPECT_TRUE(has_error(check(p), "schema_version", "reads schema version 1, not 2"));
}

TEST(Validate, StragglersAndEventsRefertoExistingRanks) {
  Plan p = base_plan();
  p.failures.stragglers = {{64, 1.1}, {3, 1.2}, {3, 1.3}};
  p.failures.events = {{0, FailureEventKind::gpu_down, "64"}, {0, FailureEventKind::node_down, "7"},
                       {0, FailureEventKind::node_down, "8"}, {0, FailureEventKind::gpu_down, "leaf1"}};
  const auto d = check(p);
  EXPECT_TRUE(has_error(d, "failures.stragglers[0].rank", "outside the job's 64 GPUs"));
  EXPECT_TRUE(has_error(d, "failures.stragglers[2].rank", "listed twice"));
  EXPECT_TRUE(has_error(d, "failures.events[0].target", "GPU 64 does not exist"));
  EXPECT_FALSE(has_error(d, "failures.events[1].target"));
  EXPECT_TRUE(has_error(d, "failures.events[2].target", "node 8 does not exist"));
  EXPECT_TRUE(has_error(d, "failures.events[3].target", "expected a GPU index"));
}

TEST(Validate, MultiNodeJobsNeedNics) {
  Plan p = base_plan();
  p.cluster.nics_per_node = 0;
  EXPECT_TRUE(has_error(check(p), "cluster.nics_per_node", "8 nodes needs NICs"));
}

TEST(Validate, SequenceParallelWithoutTpIsAWarning) {
  Plan p = base_plan();
  p.parallelism.tensor_model_parallel_size = 1;
  p.parallelism.data_parallel_size = 32;
  p.parallelism.sequence_parallel = true;
  EXPECT_TRUE(has_warning(check(p), "parallelism.sequence_parallel", "no effect"));
}

TEST(Validate, EveryProblemIsReportedAtOnce) {
  Plan p = base_plan();
  p.parallelism.zero_stage = 7;
  p.training.global_batch_size = 63;
  p.model.num_layers = 23;
  p.parallelism.order = "nope";
  const auto d = check(p);
  EXPECT_GE(d.error_count(), 4u) << dump(d);
}

TEST(Validate, FailureAndCheckpointPoliciesAreChecked) {
  Plan p = base_plan();
  p.checkpoint.on_failure = FailureResponse::shrink_dp;
  const std::int64_t dp = p.parallelism.data_parallel_size;
  p.parallelism.data_parallel_size = 1;
  p.cluster.num_gpus /= dp;
  EXPECT_TRUE(has_error(check(p), "checkpoint.on_failure", "shrink_dp needs data parallelism above 1")) << dump(check(p));
  Plan q = base_plan();
  q.checkpoint.tiers = {CheckpointTier::memory};
  EXPECT_TRUE(has_warning(check(q), "checkpoint.tiers", "without a persistent tier")) << dump(check(q));
  q = base_plan();
  q.checkpoint.interval = {false, 100 * 86400.0};
  q.run.horizon_s = 10 * 86400.0;
  EXPECT_TRUE(has_warning(check(q), "checkpoint.interval", "longer than run.horizon")) << dump(check(q));
  q = base_plan();
  q.failures.events.push_back({20 * 86400.0, FailureEventKind::maintenance, ""});
  q.run.horizon_s = 10 * 86400.0;
  EXPECT_TRUE(has_warning(check(q), "failures.events[0].at", "after run.horizon")) << dump(check(q));
}

TEST(Validate, FailureFieldsOutOfRangeAreDiagnosticsWithTheirPath) {
  const auto r = load_yaml(std::string(testing::kBasePlan) + "failures: {weibull_shape: 0, sdc_check_s: 0, straggler_slowdown: 0.5}\ncheckpoint: {snapshot_gbytes_per_s: -1}\n");
  EXPECT_TRUE(has_error(r.diagnostics, "failures.weibull_shape", "")) << dump(r.diagnostics);
  EXPECT_TRUE(has_error(r.diagnostics, "failures.sdc_check_s", "")) << dump(r.diagnostics);
  EXPECT_TRUE(has_error(r.diagnostics, "failures.straggler_slowdown", "")) << dump(r.diagnostics);
  EXPECT_TRUE(has_error(r.diagnostics, "checkpoint.snapshot_gbytes_per_s", "")) << dump(r.diagnostics);
}

// A fused kernel where it runs: FlashAttention-3 on Hopper only, any of them with
// flash_attention on and on a GPU; auto is always valid.
TEST(Validate, TheAttentionKernelMustRunOnTheGpu) {
  Plan p = base_plan();  // h100-sxm
  for (const AttentionKernel k : {AttentionKernel::automatic, AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn}) {
    p.training.attention_kernel = k;
    EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  }
  p.cluster.gpu = find_gpu_preset("a100-sxm-80gb")->spec;
  p.training.attention_kernel = AttentionKernel::flash3;
  EXPECT_TRUE(has_error(check(p), "training.attention_kernel", "FlashAttention-3 runs only on Hopper")) << dump(check(p));
  p.training.attention_kernel = AttentionKernel::cudnn;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.training.flash_attention = false;
  EXPECT_TRUE(has_error(check(p), "training.attention_kernel", "training.flash_attention is false")) << dump(check(p));
  p.training.attention_kernel = AttentionKernel::automatic;
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.training.flash_attention = true;
  p.training.attention_kernel = AttentionKernel::flash2;
  p.cluster.gpu.peak_tflops = {0, 0, 0, 0, 1};  // a CPU host: no tensor peak
  p.training.precision = Precision::fp32;
  EXPECT_TRUE(has_error(check(p), "training.attention_kernel", "is not a GPU")) << dump(check(p));
}

// Megatron's dataloader's causal mask, b x s^2 bytes a micro-batch: from a GiB (32K tokens) a
// warning says how much and which flag leaves it out.
TEST(Validate, AGibibyteCausalMaskInTheBatchIsWarnedOf) {
  Plan p = base_plan();
  p.model.seq_length = 16384;
  auto mask_warned = [&](const Plan& q) {
    const auto d = check(q);
    for (const auto& item : d.items()) {
      if (item.path == "training.attention_mask_in_batch" && item.message.find("no-create-attention-mask-in-dataloader") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_FALSE(mask_warned(p));
  p.model.seq_length = 32768;
  EXPECT_TRUE(mask_warned(p)) << dump(check(p));
  EXPECT_FALSE(check(p).has_errors()) << dump(check(p));
  p.training.attention_mask_in_batch = false;
  EXPECT_FALSE(mask_warned(p));
}

}  // namespace
}  // namespace meshwork::plan
