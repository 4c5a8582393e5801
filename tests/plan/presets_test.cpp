#include "plan/presets.hpp"

#include <gtest/gtest.h>

#include "plan/validate.hpp"

namespace meshwork::plan {
namespace {

TEST(Presets, GpusHaveSourcesAndPositiveFigures) {
  for (const auto& g : gpu_presets()) {
    EXPECT_FALSE(g.source.empty()) << g.key;
    EXPECT_EQ(g.spec.name, g.key);
    EXPECT_GT(g.spec.hbm_gib, 0) << g.key;
    EXPECT_GT(g.spec.hbm_gbytes_per_s, 0) << g.key;
    EXPECT_GT(g.spec.peak_tflops.fp32, 0) << g.key;
  }
  // Datasheet peaks against docs/reference/published-runs.md C3.
  EXPECT_DOUBLE_EQ(find_gpu_preset("a100-sxm-80gb")->spec.peak_tflops.bf16, 312);
  EXPECT_DOUBLE_EQ(find_gpu_preset("h100-sxm")->spec.peak_tflops.bf16, 989);
  EXPECT_DOUBLE_EQ(find_gpu_preset("h200-sxm")->spec.hbm_gbytes_per_s, 4800);
  EXPECT_DOUBLE_EQ(find_gpu_preset("b200")->spec.peak_tflops.bf16, 2250);
  EXPECT_DOUBLE_EQ(find_gpu_preset("h800-sxm")->spec.nvlink_gbytes_per_s, 200);
  EXPECT_NE(find_gpu_preset("cpu-host"), nullptr);
  EXPECT_NE(find_gpu_preset("H100-SXM"), nullptr);  // names are case-insensitive
  EXPECT_EQ(find_gpu_preset("h900"), nullptr);
}

// NAR21 eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)); Table 1 lists the results.
TEST(Presets, Nar21ModelsHaveTheirPublishedParameterCounts) {
  const std::pair<const char*, double> rows[] = {
      {"nar21-1.7b", 1.7},    {"nar21-3.6b", 3.6},    {"nar21-7.5b", 7.5},    {"nar21-18.4b", 18.4},
      {"nar21-39.1b", 39.1},  {"nar21-76.1b", 76.1},  {"nar21-145.6b", 145.6}, {"nar21-310.1b", 310.1},
      {"nar21-529.6b", 529.6}, {"nar21-1t", 1008.0}};
  for (const auto& [key, billions] : rows) {
    const ModelConfig& m = find_model_preset(key)->model;
    const double l = static_cast<double>(m.num_layers), h = static_cast<double>(m.hidden_size);
    const double V = static_cast<double>(m.vocab_size), s = static_cast<double>(m.seq_length);
    const double p = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
    EXPECT_NEAR(p / 1e9, billions, billions * 0.01 + 0.05) << key;
  }
}

TEST(Presets, EveryModelPresetResolvesToAValidModel) {
  for (const auto& mp : model_presets()) {
    Plan p;
    p.model = mp.model;
    p.training.global_batch_size = 8;
    p.cluster.gpu = find_gpu_preset("h100-sxm")->spec;
    p.cluster.num_gpus = 8;
    p.parallelism.expert_model_parallel_size = 1;
    Diagnostics d;
    resolve(p, d);
    const auto v = validate(p);
    EXPECT_FALSE(d.has_errors() || v.has_errors()) << mp.key;
    EXPECT_FALSE(mp.source.empty()) << mp.key;
  }
}

}  // namespace
}  // namespace meshwork::plan
