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
#include "tests/exec/json_meshes.hpp"

namespace meshwork::exec::cuda {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The plan is checked first, so that a machine without a GPU still loads it.
void check_mesh(const char* name, const plan::Plan& p, std::int64_t steps = 2, double tolerance = kBf16VerifyTolerance) {
  ASSERT_EQ(p.cluster.num_gpus, 4) << name << " did not load";
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const ThreadMeshResult m = run_mesh_in_threads(p, steps, [](std::int64_t) { return make_cuda_backend(0); }, true);
  ASSERT_TRUE(m.error.empty()) << name << ": " << m.error;
  ASSERT_EQ(m.steps.size(), static_cast<std::size_t>(steps)) << name;
  for (const auto& s : m.steps) {
    EXPECT_LE(s.worst_relative_error, tolerance) << name << " step " << s.step << ": " << s.worst_tensor << " (loss " << s.loss << ", reference "
                                                            << s.reference_loss << ")";
    std::printf("%s step %lld: loss %.6f, reference %.6f, worst %.3e (%s)\n", name, static_cast<long long>(s.step), s.loss, s.reference_loss,
                s.worst_relative_error, s.worst_tensor.c_str());
  }
}

using exec::test::json_mesh_named;

TEST(CudaMesh, TensorAndPipelineParallel) { check_mesh("tp2-pp2", json_mesh_named("tp2-pp2")); }
TEST(CudaMesh, SequenceParallelRopeSwiglu) { check_mesh("llama-tp2-pp2-sp", json_mesh_named("llama-tp2-pp2-sp")); }
TEST(CudaMesh, RecomputationUnderSequenceParallelism) { check_mesh("recompute-tp2-pp2-sp", json_mesh_named("recompute-tp2-pp2-sp")); }
TEST(CudaMesh, ZeroThreeOverFourReplicas) { check_mesh("zero3-dp4", json_mesh_named("zero3-dp4")); }
TEST(CudaMesh, InterleavedAndZeroBubbleSchedules) {
  check_mesh("interleaved-pp2-dp2", json_mesh_named("interleaved-pp2-dp2"));
  check_mesh("zb-pp2-dp2", json_mesh_named("zb-pp2-dp2"));
}
TEST(CudaMesh, ContextParallelWithTensorAndPipelineParallel) {
  check_mesh("cp2-tp2-sp", json_mesh_named("cp2-tp2-sp"));
  check_mesh("cp2-pp2", json_mesh_named("cp2-pp2"));
}
TEST(CudaMesh, ExpertParallelMoe) {
  check_mesh("moe-ep2-dp2", json_mesh_named("moe-ep2-dp2"));
  check_mesh("moe-tp2-ep2-zero1", json_mesh_named("moe-tp2-ep2-zero1"));
  check_mesh("moe-tp2-pp2", json_mesh_named("moe-tp2-pp2"));
  check_mesh("moe-zb-pp2-ep2", json_mesh_named("moe-zb-pp2-ep2"));
}

// The layers' GEMMs in e4m3 (precision fp8, CudaChunk::linear), dense with TP, SP and PP and
// MoE with expert TP and EP, against the CPU's fp32 step within --verify's FP8 bound. Needs
// compute capability 8.9 (Ada, Hopper); the H200 of the GPU check has 9.0.
TEST(CudaMesh, Fp8GemmsAgainstTheFp32Reference) {
  const auto meshes = exec::test::json_fp8_meshes();
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  if (10 * major + minor < 89) GTEST_SKIP() << "no FP8 GEMMs below compute capability 8.9";
  for (const auto& [name, plan] : meshes) check_mesh(name.c_str(), plan, 2, kFp8VerifyTolerance);
}

}  // namespace
}  // namespace meshwork::exec::cuda
