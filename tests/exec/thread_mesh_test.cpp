// Meshes run as threads of one process (exec/thread_mesh.hpp): the one Trainer on the CPU
// backend with groups in memory (exec/thread_group.hpp), every step against the single-rank
// reference as `execute --verify` checks it, and the same through StagedGroup, which carries a
// device backend's tensors through the host (issue 23's mixed backends: the GPU machine's check
// runs these meshes with the CUDA backend, tests/exec/cuda_mesh_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "exec/thread_mesh.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::exec {
namespace {

plan::Plan load(const std::string& name) {
  auto r = plan::load_plan(std::string(MESHWORK_SOURCE_DIR) + "/tests/data/exec/" + name);
  EXPECT_TRUE(r.ok()) << name;
  return r.plan;
}

std::unique_ptr<Backend> cpu(std::int64_t) { return make_cpu_backend(); }

TEST(ThreadMesh, EveryKindOfMeshVerifiesAgainstTheSingleRankRun) {
  for (const char* name : {"tp2-pp2.yaml", "llama-tp2-pp2-sp.yaml", "zero3-dp4.yaml", "interleaved-pp2-dp2.yaml", "zb-pp2-dp2.yaml", "cp2-tp2-sp.yaml",
                           "moe-ep2-dp2.yaml", "moe-tp2-ep2-zero1.yaml"}) {
    const ThreadMeshResult r = run_mesh_in_threads(load(name), 2, cpu, false);
    ASSERT_TRUE(r.error.empty()) << name << ": " << r.error;
    ASSERT_EQ(r.steps.size(), 2u) << name;
    for (const auto& s : r.steps) {
      EXPECT_LE(s.worst_relative_error, 1e-5) << name << " step " << s.step << ": " << s.worst_tensor;
      EXPECT_GT(s.loss, 0.0) << name;
      EXPECT_FALSE(s.worst_tensor.empty()) << name << ": nothing was compared";
    }
  }
}

// Staging through the host changes no bit on the CPU backend: the same losses, the same errors.
TEST(ThreadMesh, StagedGroupsCarryTheSameBits) {
  for (const char* name : {"tp2-pp2.yaml", "cp2-dp2.yaml", "moe-ep2-dp2.yaml"}) {
    const plan::Plan p = load(name);
    const ThreadMeshResult direct = run_mesh_in_threads(p, 2, cpu, false), staged = run_mesh_in_threads(p, 2, cpu, true);
    ASSERT_TRUE(direct.error.empty() && staged.error.empty()) << name << ": " << direct.error << staged.error;
    ASSERT_EQ(direct.steps.size(), staged.steps.size());
    for (std::size_t i = 0; i < direct.steps.size(); ++i) {
      EXPECT_EQ(direct.steps[i].loss, staged.steps[i].loss) << name;
      EXPECT_EQ(direct.steps[i].worst_relative_error, staged.steps[i].worst_relative_error) << name;
    }
  }
}

// A rank whose backend cannot be made is named, and the others do not wait for it forever.
TEST(ThreadMesh, ARankThatFailsIsNamed) {
  const ThreadMeshResult r = run_mesh_in_threads(load("tp2-pp2.yaml"), 1, [](std::int64_t rank) -> std::unique_ptr<Backend> {
    if (rank == 0) throw std::runtime_error("no device here");
    return make_cpu_backend();
  }, false, 2.0);
  EXPECT_NE(r.error.find("no device here"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace meshwork::exec
