#include "plan/hf_import.hpp"
#include "plan/presets.hpp"

#include <filesystem>

#include <gtest/gtest.h>

#include "plan/validate.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::plan {
namespace {

ModelConfig import(const char* file) {
  ModelConfig m;
  Diagnostics d;
  const auto path = std::filesystem::path(MESHWORK_SOURCE_DIR) / "tests/data/hf" / file;
  EXPECT_TRUE(import_hf_config_file(path, m, d)) << testing::dump(d);
  EXPECT_TRUE(d.empty()) << testing::dump(d);
  Plan p;
  p.model = m;
  resolve(p, d);
  return p.model;
}

TEST(HfImport, Llama3MatchesThePreset) {
  const ModelConfig m = import("meta-llama-3-8b.json");
  const ModelConfig& preset = find_model_preset("llama3-8b")->model;
  EXPECT_EQ(m.num_layers, preset.num_layers);
  EXPECT_EQ(m.hidden_size, preset.hidden_size);
  EXPECT_EQ(m.num_attention_heads, preset.num_attention_heads);
  EXPECT_EQ(m.num_query_groups, preset.num_query_groups);
  EXPECT_EQ(m.ffn_hidden_size, preset.ffn_hidden_size);
  EXPECT_EQ(m.vocab_size, preset.vocab_size);
  EXPECT_EQ(m.seq_length, 0) << "max_position_embeddings is the longest context, not a training length";
  EXPECT_EQ(m.activation, Activation::swiglu);
  EXPECT_EQ(m.normalization, Normalization::rmsnorm);
  EXPECT_TRUE(m.untie_embeddings_and_output_weights);
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_FALSE(m.is_moe());
}

TEST(HfImport, MixtralExpertsUseIntermediateSize) {
  const ModelConfig m = import("mixtral-8x7b.json");
  EXPECT_EQ(m.moe.num_moe_experts, 8);
  EXPECT_EQ(m.moe.moe_router_topk, 2);
  EXPECT_EQ(m.moe.moe_ffn_hidden_size, 14336);
  EXPECT_EQ(m.moe.moe_shared_expert_intermediate_size, 0);
  EXPECT_EQ(m.vocab_size, 32000);
}

TEST(HfImport, DeepSeekV3SharedExpertsAndDenseLayers) {
  const ModelConfig m = import("deepseek-v3.json");
  EXPECT_EQ(m.num_layers, 61);
  EXPECT_EQ(m.moe.num_moe_experts, 256);
  EXPECT_EQ(m.moe.moe_router_topk, 8);
  EXPECT_EQ(m.moe.moe_ffn_hidden_size, 2048);
  EXPECT_EQ(m.moe.moe_shared_expert_intermediate_size, 2048);  // 1 shared expert x 2048
  EXPECT_EQ(m.moe.first_k_dense_layers, 3);
  EXPECT_EQ(m.ffn_hidden_size, 18432);
  EXPECT_EQ(m.kv_channels, 128);  // v_head_dim
}

TEST(HfImport, QwenMoeSharedExpertWidth) {
  const ModelConfig m = import("qwen1.5-moe-a2.7b.json");
  EXPECT_EQ(m.moe.num_moe_experts, 60);
  EXPECT_EQ(m.moe.moe_router_topk, 4);
  EXPECT_EQ(m.moe.moe_ffn_hidden_size, 1408);
  EXPECT_EQ(m.moe.moe_shared_expert_intermediate_size, 5632);
}

TEST(HfImport, TextConfigOfAVisionLanguageModel) {
  const ModelConfig m = import("llama-3.2-11b-vision.json");
  EXPECT_EQ(m.num_layers, 40);
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.vocab_size, 128256);
}

TEST(HfImport, Gpt2StyleNames) {
  const ModelConfig m = import("gpt2.json");
  EXPECT_EQ(m.num_layers, 12);
  EXPECT_EQ(m.hidden_size, 768);
  EXPECT_EQ(m.ffn_hidden_size, 4 * 768);  // n_inner: null
  EXPECT_EQ(m.seq_length, 1024);
  EXPECT_EQ(m.activation, Activation::gelu);
  EXPECT_EQ(m.normalization, Normalization::layernorm);
  EXPECT_FALSE(m.untie_embeddings_and_output_weights);
  EXPECT_TRUE(m.add_bias_linear);
}

TEST(HfImport, ReportsMissingAndMalformedFields) {
  ModelConfig m;
  Diagnostics d;
  EXPECT_FALSE(import_hf_config(nlohmann::json{{"hidden_size", 64}}, m, d));
  EXPECT_TRUE(testing::has_error(d, "model.hf_config", "no num_hidden_layers")) << testing::dump(d);
  Diagnostics d2;
  EXPECT_FALSE(import_hf_config(nlohmann::json{{"num_hidden_layers", "two"}, {"hidden_size", 64}}, m, d2));
  EXPECT_TRUE(testing::has_error(d2, "model.hf_config", "num_hidden_layers must be a non-negative integer"));
  Diagnostics d3;
  EXPECT_FALSE(import_hf_config(nlohmann::json::array(), m, d3));
  Diagnostics d4;
  EXPECT_FALSE(import_hf_config_file("/nonexistent/config.json", m, d4));
  EXPECT_TRUE(testing::has_error(d4, "model.hf_config", "does not exist"));
  Diagnostics d5;
  EXPECT_FALSE(import_hf_config(nlohmann::json{{"num_hidden_layers", 2}, {"hidden_size", 64}, {"num_attention_heads", 4},
                                               {"vocab_size", 10}, {"hidden_act", "relu"}},
                                m, d5));
  EXPECT_TRUE(testing::has_error(d5, "model.hf_config", "hidden_act \"relu\" is not supported"));
}

TEST(HfImport, DropoutComesFromTheConfigAndIsZeroWhenAbsent) {
  // GPT-2 trains with resid_pdrop and attn_pdrop 0.1; Llama 3 gives attention_dropout 0.0 and
  // has no hidden dropout at all.
  const ModelConfig gpt2 = import("gpt2.json");
  EXPECT_DOUBLE_EQ(gpt2.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(gpt2.attention_dropout, 0.1);
  const ModelConfig llama = import("meta-llama-3-8b.json");
  EXPECT_DOUBLE_EQ(llama.hidden_dropout, 0);
  EXPECT_DOUBLE_EQ(llama.attention_dropout, 0);
  ModelConfig m;
  Diagnostics d;
  EXPECT_FALSE(import_hf_config(nlohmann::json{{"num_hidden_layers", 2}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"vocab_size", 10}, {"attention_dropout", 2}}, m, d));
  EXPECT_NE(testing::dump(d).find("attention_dropout must be a probability"), std::string::npos) << testing::dump(d);
}

}  // namespace
}  // namespace meshwork::plan
