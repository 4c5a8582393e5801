// The CUDA backend on a mesh, on one GPU (issue 23's mixed backends): every rank a thread of
// this process with its own CudaBackend on the same device, its groups in memory and its
// tensors staged through the host (NCCL takes one rank per GPU), each step checked against the
// single-rank fp32 run of the CPU backend within --verify's bf16 bound. The same Trainer as the
// CPU's (tests/exec/thread_mesh_test.cpp runs these meshes on it). Skips without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "exec/cuda/cuda_backend.hpp"
#include "exec/thread_mesh.hpp"
#include "plan/plan_io.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec::cuda {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// tests/data/exec's meshes, in JSON: the GPU-only build reads no YAML.
plan::Plan mesh(const std::string& model, const std::string& training, const std::string& parallelism) {
  const std::string text = R"({"schema_version": 1, "model": )" + model + R"(, "training": )" + training + R"(, "parallelism": )" + parallelism +
                           R"(, "cluster": {"gpu": "cpu-host", "num_gpus": 4, "gpus_per_node": 4, "intra_node": {"kind": "shared_memory"}, "nics_per_node": 0,
                              "topology": {"kind": "single_node"}}, "run": {"seed": 7}})";
  auto r = plan::load_plan_text(text, plan::Format::json);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? text : r.diagnostics.items().front().message);
  return r.plan;
}
const std::string kTiny = R"({"preset": "tiny"})";
const std::string kTraining = R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "none", "flash_attention": false})";

// The plan is checked first, so that a machine without a GPU still loads it.
void check_mesh(const char* name, const plan::Plan& p, std::int64_t steps = 2) {
  ASSERT_EQ(p.cluster.num_gpus, 4) << name << " did not load";
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const ThreadMeshResult m = run_mesh_in_threads(p, steps, [](std::int64_t) { return make_cuda_backend(0); }, true);
  ASSERT_TRUE(m.error.empty()) << name << ": " << m.error;
  ASSERT_EQ(m.steps.size(), static_cast<std::size_t>(steps)) << name;
  for (const auto& s : m.steps) {
    EXPECT_LE(s.worst_relative_error, kBf16VerifyTolerance) << name << " step " << s.step << ": " << s.worst_tensor << " (loss " << s.loss << ", reference "
                                                            << s.reference_loss << ")";
    std::printf("%s step %lld: loss %.6f, reference %.6f, worst %.3e (%s)\n", name, static_cast<long long>(s.step), s.loss, s.reference_loss,
                s.worst_relative_error, s.worst_tensor.c_str());
  }
}

TEST(CudaMesh, TensorAndPipelineParallel) {
  check_mesh("tp2-pp2", mesh(kTiny, kTraining, R"({"tp": 2, "pp": 2, "pipeline_schedule": "gpipe"})"));
}
TEST(CudaMesh, SequenceParallelRopeSwiglu) {
  check_mesh("llama-tp2-pp2-sp", mesh(R"({"preset": "tiny", "activation": "swiglu", "normalization": "rmsnorm", "num_query_groups": 2,
                                           "untie_embeddings_and_output_weights": true, "add_bias_linear": false, "position_embedding_type": "rope"})",
                                       kTraining, R"({"tp": 2, "pp": 2, "sequence_parallel": true, "zero_stage": 1})"));
}
TEST(CudaMesh, RecomputationUnderSequenceParallelism) {
  check_mesh("recompute-tp2-pp2-sp",
             mesh(kTiny, R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "full", "recompute_method": "uniform",
                             "recompute_num_layers": 1, "flash_attention": false})",
                  R"({"tp": 2, "pp": 2, "sequence_parallel": true})"));
}
TEST(CudaMesh, ZeroThreeOverFourReplicas) {
  check_mesh("zero3-dp4", mesh(kTiny, kTraining, R"({"zero_stage": 3})"));
}
TEST(CudaMesh, InterleavedAndZeroBubbleSchedules) {
  check_mesh("interleaved-pp2-dp2", mesh(R"({"preset": "tiny", "num_layers": 4})", R"({"global_batch_size": 8, "micro_batch_size": 1, "precision": "fp32"})",
                                          R"({"pp": 2, "pipeline_schedule": "interleaved", "virtual_pipeline_model_parallel_size": 2})"));
  check_mesh("zb-pp2-dp2", mesh(kTiny, R"({"global_batch_size": 16, "micro_batch_size": 2, "precision": "fp32", "recompute": "selective"})",
                                 R"({"pp": 2, "pipeline_schedule": "zero_bubble"})"));
}

TEST(CudaMesh, ContextParallelWithTensorAndPipelineParallel) {
  check_mesh("cp2-tp2-sp", mesh(R"({"preset": "tiny", "activation": "swiglu", "normalization": "rmsnorm", "num_query_groups": 2,
                                   "untie_embeddings_and_output_weights": true, "add_bias_linear": false, "position_embedding_type": "rope"})",
                                kTraining, R"({"tp": 2, "cp": 2, "sequence_parallel": true})"));
  // Contiguous shares (no load balancing), full recomputation, ZeRO-1, learned positions.
  check_mesh("cp2-pp2", mesh(kTiny, R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "full"})",
                             R"({"cp": 2, "pp": 2, "zero_stage": 1, "context_parallel_load_balance": false})"));
}

TEST(CudaMesh, ExpertParallelMoe) {
  const std::string moe = R"({"preset": "tiny-moe"})";
  check_mesh("moe-ep2-dp2", mesh(moe, kTraining, R"({"ep": 2})"));
  // Expert tensor parallelism (TP 2) with EP 2, ZeRO-1 over the experts' data parallelism.
  check_mesh("moe-tp2-ep2-zero1", mesh(moe, kTraining, R"({"tp": 2, "ep": 2, "sequence_parallel": true, "zero_stage": 1})"));
  check_mesh("moe-tp2-pp2", mesh(moe, R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "full"})",
                                 R"({"tp": 2, "pp": 2, "sequence_parallel": true})"));
}

}  // namespace
}  // namespace meshwork::exec::cuda
