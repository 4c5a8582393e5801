// Meshes run as threads of one process (exec/thread_mesh.hpp): the one Trainer on the CPU
// backend with groups in memory (exec/thread_group.hpp), every step against the single-rank
// reference as `execute --verify` checks it, and the same through StagedGroup, which carries a
// device backend's tensors through the host (issue 23's mixed backends: the GPU machine's check
// runs these meshes with the CUDA backend, tests/exec/cuda_mesh_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "exec/checkpoint.hpp"
#include "exec/executor_adamw.hpp"
#include "exec/reference_step.hpp"
#include "exec/thread_group.hpp"
#include "exec/thread_mesh.hpp"
#include "exec/trainer.hpp"
#include "tests/exec/json_meshes.hpp"

namespace meshwork::exec {
namespace {

std::unique_ptr<Backend> cpu(std::int64_t) { return make_cpu_backend(); }

// The meshes the GPU check runs on the CUDA backend (tests/exec/json_meshes.hpp), here on the
// CPU's: every one verifies, so a failure there is the CUDA backend's, not the mesh's.
TEST(ThreadMesh, EveryKindOfMeshVerifiesAgainstTheSingleRankRun) {
  auto meshes = test::json_meshes();
  // Precision fp8 changes nothing on the CPU backend (fp32 whatever the plan's precision).
  for (auto& m : test::json_fp8_meshes()) meshes.push_back(std::move(m));
  for (const auto& [name, plan] : meshes) {
    ASSERT_EQ(plan.cluster.num_gpus, 4) << name << " did not load";
    const ThreadMeshResult r = run_mesh_in_threads(plan, 2, cpu, false);
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
  for (const char* name : {"tp2-pp2", "cp2-dp2", "moe-ep2-dp2"}) {
    const plan::Plan p = test::json_mesh_named(name);
    const ThreadMeshResult direct = run_mesh_in_threads(p, 2, cpu, false), staged = run_mesh_in_threads(p, 2, cpu, true);
    ASSERT_TRUE(direct.error.empty() && staged.error.empty()) << name << ": " << direct.error << staged.error;
    ASSERT_EQ(direct.steps.size(), staged.steps.size());
    for (std::size_t i = 0; i < direct.steps.size(); ++i) {
      EXPECT_EQ(direct.steps[i].loss, staged.steps[i].loss) << name;
      EXPECT_EQ(direct.steps[i].worst_relative_error, staged.steps[i].worst_relative_error) << name;
    }
  }
}

// NCCL's point-to-point semantics (NcclGroup holds a send until the sender's next receive or
// flush): every mesh with a pipeline still runs. Before the fix the tied embedding's all-reduce
// at the optimizer waited for the first stage while the first stage waited for the last
// stage's held gradient: a deadlock on every step with PP > 1 and tied embeddings.
TEST(ThreadMesh, SendsHeldAsNcclHoldsThemDoNotDeadlock) {
  for (const char* name : {"tp2-pp2", "interleaved-pp2-dp2", "zb-pp2-dp2", "cp2-pp2", "moe-tp2-pp2", "llama-tp2-pp2-sp"}) {
    const ThreadMeshResult r = run_mesh_in_threads(test::json_mesh_named(name), 2, cpu, false, 10.0, true);
    ASSERT_TRUE(r.error.empty()) << name << ": " << r.error;
    ASSERT_EQ(r.steps.size(), 2u) << name;
    for (const auto& s : r.steps) EXPECT_LE(s.worst_relative_error, 1e-5) << name << " step " << s.step << ": " << s.worst_tensor;
  }
}

// A rank whose backend cannot be made is named, and the others stop at once with errors that
// name it, not at their timeout (before, each waited it out: 120 s by default, and said only
// that "a member waited"): here well inside the 60 s a wait would take.
TEST(ThreadMesh, ARankThatFailsIsNamed) {
  for (const bool held : {false, true}) {
    const auto t0 = std::chrono::steady_clock::now();
    const ThreadMeshResult r = run_mesh_in_threads(test::json_mesh_named("tp2-pp2"), 1, [](std::int64_t rank) -> std::unique_ptr<Backend> {
      if (rank == 0) throw std::runtime_error("no device here");
      return make_cpu_backend();
    }, false, 60.0, held);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
    EXPECT_EQ(r.error, "rank 0: no device here");
    ASSERT_EQ(r.rank_errors.size(), 4u) << r.error;
    for (std::size_t i = 1; i < r.rank_errors.size(); ++i) {
      EXPECT_NE(r.rank_errors[i].find("rank 0 failed: no device here"), std::string::npos) << r.rank_errors[i];
    }
  }
}

// A rank that fails while others already wait for it stops them in whatever they wait for: a
// receive, a collective (both blocked before the failure: the notice wakes them, well inside
// the 60 s timeout), and a group made after the failure at its first wait.
TEST(ThreadWorld, AFailureReachesEveryWaitingMember) {
  ThreadWorld world(60.0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::int64_t> pair{0, 1};
  auto a = world.maker(0)("pp", pair, 0), b = world.maker(1)("pp", pair, 0);
  std::string receive_error, reduce_error;
  std::thread receiver([&] {
    std::vector<float> x(4);
    try {
      a->recv(1, 7, x);
    } catch (const CollectiveError& e) {
      receive_error = e.what();
    }
  });
  auto c = world.maker(0)("dp", pair, 0);
  std::thread reducer([&] {
    std::vector<float> x(4, 1.0f);
    try {
      c->all_reduce_sum(std::span<float>(x));
    } catch (const CollectiveError& e) {
      reduce_error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both are waiting by now
  world.fail(1, "out of memory");
  receiver.join();
  reducer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_EQ(receive_error, "thread group pp: rank 1 failed: out of memory");
  EXPECT_EQ(reduce_error, "thread group dp: rank 1 failed: out of memory");
  // A group made after the failure stops at its first wait too.
  auto late = world.maker(0)("tp", pair, 0);
  std::vector<float> x(2);
  EXPECT_THROW(late->all_reduce_sum(std::span<float>(x)), CollectiveError);
}

// A broadcast leaves every member with the root's buffer (a micro-batch's load over TP).
TEST(ThreadWorld, ABroadcastCarriesTheRootsBuffer) {
  ThreadWorld world(60.0);
  const std::vector<std::int64_t> three{0, 1, 2};
  std::vector<std::vector<float>> data(3);
  std::vector<std::thread> members;
  for (int r = 0; r < 3; ++r) {
    data[static_cast<std::size_t>(r)] = std::vector<float>(5, static_cast<float>(r + 10));
    members.emplace_back([&, r] {
      auto g = world.maker(r)("tp", three, 0);
      g->broadcast(1, data[static_cast<std::size_t>(r)]);
    });
  }
  for (auto& m : members) m.join();
  for (const auto& d : data) EXPECT_EQ(d, std::vector<float>(5, 11.0f));
}

// One replica: AdamW updates the parameters where the chunks hold them, without the flat copies
// (what the GPU's single-rank step saves); the same bits as the flat path (--verify's, which
// keeps the reduced gradients), step after step, checkpoints included.
TEST(Trainer, UpdatesInPlaceAsTheFlatPathDoes) {
  const plan::Plan p = single_rank(test::json_mesh_named("llama-tp2-pp2-sp"));
  Trainer in_place(p, local_groups(), 0, nullptr), flat(p, local_groups(), 0, nullptr);
  flat.keep_reduced = true;
  for (std::int64_t s = 1; s <= 3; ++s) {
    EXPECT_EQ(in_place.step(s, ExecuteOptions{}), flat.step(s, ExecuteOptions{})) << "step " << s;
  }
  const RankState a = in_place.state(), b = flat.state();
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.exp_avg, b.exp_avg);
  EXPECT_EQ(a.exp_avg_sq, b.exp_avg_sq);
}

// Switching paths between steps: steps in place, then the flat path (--verify's keep_reduced,
// or a bit flip), which updates params_ and writes it back: it must start from the values the
// in-place steps left in the chunks, not from params_ as it was before them.
TEST(Trainer, TheFlatPathAfterInPlaceStepsStartsFromTheirParameters) {
  const plan::Plan p = single_rank(test::json_mesh_named("llama-tp2-pp2-sp"));
  Trainer switched(p, local_groups(), 0, nullptr), flat(p, local_groups(), 0, nullptr);
  flat.keep_reduced = true;
  for (std::int64_t s = 1; s <= 4; ++s) {
    switched.keep_reduced = s >= 3;  // in place for steps 1 and 2, flat for 3 and 4
    EXPECT_EQ(switched.step(s, ExecuteOptions{}), flat.step(s, ExecuteOptions{})) << "step " << s;
  }
  EXPECT_EQ(switched.state().params, flat.state().params);
}


// Clipping (training.clip_grad) by the global norm of the reduced gradients: after one step,
// AdamW's first moment is (1 - beta1) times the clipped gradient, min(1, clip / (norm + 1e-6))
// times the reduced one, with the norm computed by hand from the reduced gradients.
TEST(Trainer, ClipsTheReducedGradientsByTheirGlobalNorm) {
  for (const double clip : {1e-3, 1e6}) {
    plan::Plan p = single_rank(test::json_mesh_named("tp2-pp2"));
    p.training.clip_grad = clip;
    Trainer t(p, local_groups(), 0, nullptr);
    t.keep_reduced = true;
    t.step(1, ExecuteOptions{});
    double sum = 0;
    for (const auto& r : t.reduced()) {
      for (const float g : r.grad) sum += static_cast<double>(g) * g;
    }
    const double norm = std::sqrt(sum);
    ASSERT_GT(norm, 1e-2) << "clip " << clip;
    EXPECT_NEAR(t.grad_norm(), norm, 1e-9 * norm);
    const double coefficient = std::min(1.0, clip / (norm + 1e-6));
    const RankState st = t.state();
    std::size_t at = 0, wrong = 0;
    for (const auto& r : t.reduced()) {
      for (const float g : r.grad) {
        const double expected = (1 - kExecutorAdamW.beta1) * coefficient * g;
        if (std::abs(st.exp_avg.at(at++) - expected) > 1e-6 * std::abs(expected) + 1e-30) ++wrong;
      }
    }
    EXPECT_EQ(at, st.exp_avg.size());
    EXPECT_EQ(wrong, 0u) << "clip " << clip;
  }
}

// The norm over a mesh counts every element once: a parameter TP replicates by TP rank 0,
// the tied embedding by the first stage, DP replicas and ZeRO shards by their owner, experts
// over EP and expert DP. Each mesh's norm is the single-rank reference's.
TEST(ThreadMesh, TheGradientNormCountsEveryElementOnce) {
  for (const char* name : {"tp2-pp2", "llama-tp2-pp2-sp", "zero3-dp4", "cp2-dp2", "moe-ep2-dp2", "moe-tp2-ep2-zero1", "interleaved-pp2-dp2"}) {
    const plan::Plan p = test::json_mesh_named(name);
    ASSERT_GT(p.training.clip_grad, 0) << name;
    const ThreadMeshResult r = run_mesh_in_threads(p, 2, cpu, false);
    ASSERT_TRUE(r.error.empty()) << name << ": " << r.error;
    for (const auto& s : r.steps) {
      EXPECT_GT(s.reference_grad_norm, 1e-3) << name;
      EXPECT_NEAR(s.grad_norm, s.reference_grad_norm, 1e-6 * s.reference_grad_norm) << name << " step " << s.step;
    }
  }
}


// fp16's loss scaler on the executor: with finite gradients it changes no bit (the executor
// scales no loss, so it unscales by 1); a non-finite gradient skips the update, as Megatron
// skips the iteration, where a plan without a loss scaler stops with the cause named.
TEST(Trainer, TheLossScalerSkipsAStepWithANonFiniteGradient) {
  plan::Plan fp32 = single_rank(test::json_mesh_named("tp2-pp2"));
  plan::Plan fp16 = fp32;
  fp16.training.precision = plan::Precision::fp16;
  {
    Trainer a(fp32, local_groups(), 0, nullptr), b(fp16, local_groups(), 0, nullptr);
    for (std::int64_t s = 1; s <= 2; ++s) EXPECT_EQ(a.step(s, ExecuteOptions{}), b.step(s, ExecuteOptions{}));
    EXPECT_FALSE(b.skipped());
    EXPECT_EQ(a.state().params, b.state().params);
  }
  for (const plan::Plan& p : {fp16, fp32}) {
    Trainer t(p, local_groups(), 0, nullptr);
    for (auto& c : t.chunks()) {
      for (const auto& slot : c->slots()) slot.value[0] = std::numeric_limits<float>::quiet_NaN();
    }
    t.load_from_chunks();
    const bool scaler = p.training.precision == plan::Precision::fp16;
    if (!scaler) {
      // No scaler to skip it: the norm is not finite, and the step stops with the cause named.
      try {
        t.step(1, ExecuteOptions{});
        ADD_FAILURE() << "a NaN gradient was applied";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("global norm is not finite"), std::string::npos) << e.what();
      }
      continue;
    }
    t.step(1, ExecuteOptions{});
    EXPECT_TRUE(t.skipped());
    const RankState st = t.state();
    EXPECT_EQ(st.step, 1);
    EXPECT_EQ(st.adam_step, 0);
    EXPECT_TRUE(std::all_of(st.exp_avg.begin(), st.exp_avg.end(), [](float m) { return m == 0.0F; }));
  }
}


// A checkpoint after a skipped fp16 step: its step is the steps played, its AdamW count the
// updates made, and a Trainer restored from it continues as the original does, bit for bit.
TEST(Trainer, ACheckpointAfterASkippedStepKeepsBothCounts) {
  plan::Plan p = single_rank(test::json_mesh_named("tp2-pp2"));
  p.training.precision = plan::Precision::fp16;
  Trainer t(p, local_groups(), 0, nullptr);
  std::vector<std::vector<float>> kept;
  for (auto& c : t.chunks()) {
    for (const auto& slot : c->slots()) {
      kept.emplace_back(slot.value.begin(), slot.value.end());
      slot.value[0] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  t.load_from_chunks();
  t.step(1, ExecuteOptions{});
  ASSERT_TRUE(t.skipped());
  // The values put back; step 2 updates.
  std::size_t k = 0;
  for (auto& c : t.chunks()) {
    for (const auto& slot : c->slots()) std::copy(kept[k].begin(), kept[k].end(), slot.value.begin()), ++k;
  }
  t.load_from_chunks();
  t.step(2, ExecuteOptions{});
  ASSERT_FALSE(t.skipped());
  const RankState saved = t.state();
  EXPECT_EQ(saved.step, 2);
  EXPECT_EQ(saved.adam_step, 1);
  EXPECT_EQ(parse_shard(serialize_shard(saved), "x"), saved);
  Trainer resumed(p, local_groups(), 0, nullptr);
  resumed.restore(saved);
  EXPECT_EQ(t.step(3, ExecuteOptions{}), resumed.step(3, ExecuteOptions{}));
  EXPECT_EQ(t.state(), resumed.state());
}

}  // namespace
}  // namespace meshwork::exec
