// Parameter counts against the exact published counts (within 0.5%).
#include "models/params.hpp"

#include <gtest/gtest.h>

#include "plan/presets.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

plan::ModelConfig preset(const char* key) {
  plan::Plan p;
  p.model = plan::find_model_preset(key)->model;
  plan::Diagnostics d;
  plan::resolve(p, d);
  return p.model;
}

void expect_within(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got / want, 1.0, rel) << what << ": " << got << " vs " << want;
}

TEST(Params, Gpt3_175b) {
  // Brown et al. 2020 Table 2.1: 175.0B.
  expect_within(count_params(preset("gpt3-175b")).total, 175.0e9, 0.005, "gpt3-175b");
}

TEST(Params, Nar21Equation2) {
  // NAR21 eq. 2 counts 12lh^2(1 + 13/(12h) + (V+s)/(12lh)): exactly our dense GPT count.
  const auto m = preset("nar21-1t");
  const double l = 128, h = 25600, V = 51200, s = 2048;
  const double eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  EXPECT_NEAR(count_params(m).total, eq2, eq2 * 1e-9 + 2 * h);  // eq. 2 omits the final norm
}

TEST(Params, Llama3ExactCounts) {
  // Exact counts of the released checkpoints (safetensors index "total_size" / 2 bytes):
  // Meta-Llama-3-8B 8,030,261,248; -70B 70,553,706,496; Llama-3.1-405B 405,853,388,800.
  EXPECT_DOUBLE_EQ(count_params(preset("llama3-8b")).total, 8030261248.0);
  EXPECT_DOUBLE_EQ(count_params(preset("llama3-70b")).total, 70553706496.0);
  EXPECT_DOUBLE_EQ(count_params(preset("llama3-405b")).total, 405853388800.0);
}

TEST(Params, MixtralTotalAndActive) {
  // Mixtral-8x7B-v0.1: 46,702,792,704 parameters (checkpoint); 12.9B active (Jiang et al. 2024 §2).
  const auto c = count_params(preset("mixtral-8x7b"));
  EXPECT_DOUBLE_EQ(c.total, 46702792704.0);
  expect_within(c.active, 12.9e9, 0.005, "mixtral active");
}

TEST(Params, DeepSeekV3TotalAndActive) {
  // DeepSeek-V3 (arXiv:2412.19437) abstract: 671B total, 37B activated per token. "37B" is
  // rounded to two digits: counting every parameter a token touches (embedding and LM head
  // included) gives 37.55B, 1.5% above; the total is within 0.5%.
  const auto c = count_params(preset("deepseek-v3-shaped"));
  expect_within(c.total, 671e9, 0.005, "dsv3 total");
  expect_within(c.active, 37e9, 0.015, "dsv3 active");
  expect_within(c.active, 37.55e9, 0.001, "dsv3 active, exact");
}

TEST(Params, TiedEmbeddingsAreCountedOnce) {
  auto m = preset("tiny");
  const double tied = count_params(m).total;
  m.untie_embeddings_and_output_weights = true;
  EXPECT_DOUBLE_EQ(count_params(m).total - tied, 256.0 * 64);
}

}  // namespace
}  // namespace meshwork::models
