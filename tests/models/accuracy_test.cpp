// The estimate against published measured runs (docs/reference/published-runs.md A1, A2, A3),
// with the presets unchanged and one documented default for what a paper does not state
// (micro-batch 1 in NAR21 Table 1; vpp the smallest chunk count >= 2 dividing a stage's
// layers). Errors are pinned under their bounds; the full table is in bench/RESULTS.md.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "models/calibration_set.hpp"
#include "models/estimate.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

struct Case {
  const char* scenario;
  double published;
  // The estimate's signed error, (estimated - published) / published in percent, as of the
  // last change that moved it (bench/RESULTS.md): pinned within +-1 point, so that a change
  // that moves a case fails here and gets reported, instead of hiding under the mean bound.
  double pinned_error_percent;
};

using Figure = PublishedFigure;

struct Errors {
  double mean_abs = 0, max_abs = 0;
};

Errors errors(const std::vector<Case>& cases, Figure figure) {
  Errors e;
  for (const auto& c : cases) {
    const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/published" /
                                        (std::string(c.scenario) + ".yaml"));
    EXPECT_TRUE(loaded.ok()) << c.scenario;
    const auto r = estimate(loaded.plan);
    const double got = figure_of(r, figure);
    const double err = std::fabs(got - c.published) / c.published;
    EXPECT_NEAR(100 * (got - c.published) / c.published, c.pinned_error_percent, 1.0) << c.scenario;
    e.mean_abs += err / static_cast<double>(cases.size());
    e.max_abs = std::max(e.max_abs, err);
  }
  return e;
}

// NAR21 Table 1: TFLOP/s per GPU, counting recomputation (hardware FLOPs).
TEST(Accuracy, Narayanan2021Table1) {
  const Errors e = errors({{"nar21-1.7b", 137, 1.6}, {"nar21-3.6b", 138, -2.8}, {"nar21-7.5b", 142, -5.9}, {"nar21-18.4b", 135, -5.8},
                           {"nar21-39.1b", 138, -0.8}, {"nar21-76.1b", 140, 3.3}, {"nar21-145.6b", 148, 2.1}, {"nar21-310.1b", 155, 3.1},
                           {"nar21-529.6b", 163, 1.5}, {"nar21-1t", 163, 2.0}},
                          Figure::hardware_tflops_per_gpu);
  EXPECT_LE(e.mean_abs, 0.05);
  EXPECT_LE(e.max_abs, 0.10);
}

// NAR21 Table 2, PTD-P rows.
TEST(Accuracy, Narayanan2021Table2PtdP) {
  const Errors e = errors({{"nar21-t2-175b-ptdp-384", 153, 3.0}, {"nar21-t2-175b-ptdp-768", 149, 3.3},
                           {"nar21-t2-175b-ptdp-1536", 141, 4.7}, {"nar21-t2-530b-ptdp-560", 171, 0.8},
                           {"nar21-t2-530b-ptdp-1120", 167, 1.7}, {"nar21-t2-530b-ptdp-2240", 159, 3.9}},
                          Figure::hardware_tflops_per_gpu);
  EXPECT_LE(e.mean_abs, 0.05);
  EXPECT_LE(e.max_abs, 0.10);
}

// NAR21 Table 2, ZeRO-3 without model parallelism (DeepSpeed of 2021). Until issue 18 a
// collective efficiency of 0.72/8 and the overlap p-norm, both fitted on these six rows, kept
// them within 10%. ZeRO-3 is now priced as it runs (per-layer gathers prefetched one layer
// ahead, per-micro-batch reduce-scatters, at the ring's bandwidth), and nothing in meshwork
// yet slows DeepSpeed's many small collectives (issue 20's message-size and protocol model):
// the estimate runs far ahead of these runs, the more so the more GPUs. Pinned, not bounded,
// and not re-fitted (bench/RESULTS.md reports them). The SMs the prefetched gathers and the
// reduce-scatters take from the compute beside them (models/sm_share.hpp) moved them 2 to 36
// points closer.
TEST(Accuracy, Narayanan2021Table2ZeroThreeArePinnedUntilTheMessageSizeModel) {
  const Errors e = errors({{"nar21-t2-175b-zero3-384", 144, 32.1}, {"nar21-t2-175b-zero3-768", 88, 115.4},
                           {"nar21-t2-175b-zero3-1536", 44, 315.2}, {"nar21-t2-530b-zero3-640", 138, 43.1},
                           {"nar21-t2-530b-zero3-1120", 98, 95.4}, {"nar21-t2-530b-zero3-2240", 48, 273.4}},
                          Figure::hardware_tflops_per_gpu);
  EXPECT_GT(e.mean_abs, 0.0);
}

// KOR22 Tables 3-5: MFU of sequence parallelism with selective recomputation.
TEST(Accuracy, Korthikanti2022Mfu) {
  const Errors e = errors({{"kor22-22b", 41.5, 0.4}, {"kor22-175b", 51.4, -0.5}, {"kor22-530b", 56.0, -3.7}, {"kor22-1t", 56.3, -5.0},
                           {"kor22-530b-dp8", 54.2, -3.6}},
                          Figure::mfu_percent);
  EXPECT_LE(e.mean_abs, 0.05);
  EXPECT_LE(e.max_abs, 0.10);
}

// A3, NeMo 24.07 FP8 on DGX-H100 (tokens/s per GPU): Hopper's check, nothing fitted on it.
// Every case but Nemotron-340B runs ahead of its published figure: FP8 GEMMs are priced at twice BF16's curve,
// and no Hopper FP8 microbenchmark is in docs/reference (XLA's newest sm_90 table reports FP8
// above the 1,979 TFLOP/s peak: not usable; issue 20). Pinned, not bounded; Hopper's half size
// fitted on XLA's measured BF16 table moved them 0.4 to 1.1 points closer; the attention at
// cuDNN's measured paces rather than 0.8 of a GEMM (docs/reference/attention) 1.3 to 11.1 closer;
// the output layer at the BF16 peak, as Megatron-core runs it (Op::sixteen_bit), 1.3 to 20.8
// (Nemotron's 256K vocabulary most; Nemotron-340B from +1.4% to -4.4%); each plan's gradients and
// Apex's optimizer states as its recipe and example script keep them (training.grad_reduce_in_bf16,
// training.optimizer_states) 0 to 3.4 further (GPT3-20B's halved DP most). Every stage's items held
// for its own DP in the pipeline replay, so that its neighbours wait (issue 18, 2026-12-07), 0.1 to
// 0.7 points slower on six of the seven plans with a pipeline, Nemotron-340B from -2.8% to -5.1%.
// Each stage's DP stream played beside its items there (2026-12-08) moved the same seven 0.1 to
// 1.7 points faster (Nemotron-22B +15.7% to +14.0%, Nemotron-340B -5.1% to -4.9%), the
// estimate's steps within 0.2% of the simulator's.
TEST(Accuracy, NeMo2407HopperFp8ArePinned) {
  const Errors e = errors({{"nemo2407-gpt3-5b-64", 23406, 19.1}, {"nemo2407-gpt3-20b-64", 5851, 24.9}, {"nemo2407-gpt3-175b-128", 716, 8.9},
                           {"nemo2407-gpt3-175b-512", 825, 11.4}, {"nemo2407-llama2-7b-8", 16934, 15.5}, {"nemo2407-llama2-13b-16", 8715, 16.0},
                           {"nemo2407-llama2-70b-64", 1728, 21.9}, {"nemo2407-nemotron-8b-64", 12507, 24.9},
                           {"nemo2407-nemotron-22b-64", 4312, 14.0}, {"nemo2407-nemotron-340b-128", 326, -4.9},
                           {"nemo2407-llama3-8b-8", 12273, 19.1}, {"nemo2407-llama3-70b-64", 1524, 19.8}},
                          Figure::tokens_per_s_per_gpu);
  EXPECT_GT(e.mean_abs, 0.0);
}

}  // namespace
}  // namespace meshwork::models
