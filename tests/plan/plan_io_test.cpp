#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::plan {
namespace {

using testing::base_plan;
using testing::dump;
using testing::has_error;
using testing::kBasePlan;
using testing::load_yaml;

TEST(PlanIo, BasePlanResolvesDerivedFields) {
  const Plan p = base_plan();
  EXPECT_EQ(p.parallelism.data_parallel_size, 4);  // 64 / (8 * 2)
  EXPECT_EQ(p.model.num_query_groups, 32);
  EXPECT_EQ(p.model.kv_channels, 128);
  EXPECT_EQ(p.model.ffn_hidden_size, 4 * 4096);
  EXPECT_EQ(p.cluster.gpu.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(p.cluster.gpu.peak_tflops.bf16, 989);
  EXPECT_DOUBLE_EQ(p.cluster.intra_node.bandwidth_gbytes_per_s, 450);  // from the GPU's NVLink
}

TEST(PlanIo, JsonRoundTripIsExact) {
  const Plan p = base_plan();
  const auto again = load_plan_json(to_json(p));
  ASSERT_TRUE(again.ok()) << dump(again.diagnostics);
  EXPECT_EQ(again.plan, p);
  EXPECT_EQ(to_json(again.plan), to_json(p));
}

TEST(PlanIo, RoundTripKeepsEverySectionIncludingListsAndIntervals) {
  auto r = load_yaml(std::string(kBasePlan) + R"(failures:
  mtbf_hours: {gpu: 50000, switch: "125d"}
  events: [{at: 2h, kind: gpu_down, target: 17}, {at: "1d", kind: link_down, target: leaf3-spine1}]
  stragglers: [{rank: 5, slowdown: 1.1}]
  degraded_links: [{target: leaf3-spine1, bandwidth_factor: 0.7}]
  sdc_per_gpu_hour: 1e-7
checkpoint: {interval: 30min, mode: sync, tiers: [memory, persistent], spares: 2, on_failure: shrink_dp}
run: {horizon: 54d, seed: 42, trials: 10}
)");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_DOUBLE_EQ(r.plan.failures.mtbf_hours.network_switch, 3000);
  EXPECT_DOUBLE_EQ(r.plan.failures.events[0].at_s, 7200);
  EXPECT_EQ(r.plan.failures.events[0].target, "17");
  EXPECT_FALSE(r.plan.checkpoint.interval.automatic);
  EXPECT_DOUBLE_EQ(r.plan.checkpoint.interval.seconds, 1800);
  EXPECT_DOUBLE_EQ(r.plan.run.horizon_s, 54 * 86400);

  const auto again = load_plan_json(to_json(r.plan));
  ASSERT_TRUE(again.ok()) << dump(again.diagnostics);
  EXPECT_EQ(again.plan, r.plan);
}

TEST(PlanIo, SaveWritesAtomicallyAndReloadsTheSamePlan) {
  const auto dir = std::filesystem::temp_directory_path() / "meshwork_plan_io_test";
  std::filesystem::create_directories(dir);
  const auto file = dir / "plan.json";
  const Plan p = base_plan();
  std::string error;
  ASSERT_TRUE(save_plan(p, file, error)) << error;
  const auto again = load_plan(file);
  ASSERT_TRUE(again.ok()) << dump(again.diagnostics);
  EXPECT_EQ(again.plan, p);
  // No temporary file is left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
  std::filesystem::remove_all(dir);
}

TEST(PlanIo, SaveToAMissingDirectoryFailsAndSaysWhy) {
  std::string error;
  EXPECT_FALSE(save_plan(base_plan(), "/nonexistent-dir/x/plan.json", error));
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;
}

TEST(PlanIo, YamlAndJsonSpellingsOfOnePlanAreEqual) {
  const auto yaml = load_yaml(kBasePlan);
  const auto json = load_plan_text(R"({"schema_version": 1, "name": "base",
    "model": {"num_layers": 24, "hidden_size": 4096, "num_attention_heads": 32, "seq_length": 2048, "vocab_size": 51200},
    "training": {"global_batch_size": 64, "micro_batch_size": 2},
    "parallelism": {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 2},
    "cluster": {"gpu": "h100-sxm", "num_gpus": 64}})",
                                   Format::json);
  ASSERT_TRUE(json.ok()) << dump(json.diagnostics);
  EXPECT_EQ(yaml.plan, json.plan);
}

TEST(PlanIo, AliasesAndUnitStringsMeanTheSameAsCanonicalKeys) {
  auto r = load_yaml(std::string(kBasePlan) + R"(
checkpoint: {write_gbytes_per_s: "2.184Tb/s"}
)");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_DOUBLE_EQ(r.plan.checkpoint.write_gbytes_per_s, 273);

  auto units = load_yaml(R"(model: {preset: tiny}
training: {gbs: 8, mbs: 1, precision: fp32, tokens: "1.5B"}
cluster:
  gpu: {preset: h100-sxm, hbm_gib: "96GiB", hbm_gbytes_per_s: "4TB/s"}
  gpus: 8
  nic_gbps: "50GB/s"
  intra_node: {latency_us: "0.5ms"}
)");
  ASSERT_TRUE(units.ok()) << dump(units.diagnostics);
  EXPECT_DOUBLE_EQ(units.plan.training.tokens, 1.5e9);
  EXPECT_DOUBLE_EQ(units.plan.cluster.gpu.hbm_gib, 96);
  EXPECT_DOUBLE_EQ(units.plan.cluster.gpu.hbm_gbytes_per_s, 4000);
  EXPECT_DOUBLE_EQ(units.plan.cluster.gpu.peak_tflops.bf16, 989);  // the rest of the preset stays
  EXPECT_DOUBLE_EQ(units.plan.cluster.nic_bandwidth_gbps, 400);
  EXPECT_DOUBLE_EQ(units.plan.cluster.intra_node.latency_us, 500);
  EXPECT_EQ(units.plan.parallelism.data_parallel_size, 8);
}

TEST(PlanIo, PresetFieldsCanBeOverridden) {
  auto r = load_yaml(R"(model: {preset: llama3-8b, num_layers: 16}
training: {global_batch_size: 8}
cluster: {gpu: h100-sxm, num_gpus: 8}
)");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_EQ(r.plan.model.num_layers, 16);
  EXPECT_EQ(r.plan.model.hidden_size, 4096);
  EXPECT_EQ(r.plan.model.num_query_groups, 8);
  EXPECT_EQ(r.plan.model.activation, Activation::swiglu);
}

TEST(PlanIo, ModelShorthandNamesAPreset) {
  auto r = load_yaml("model: gpt3-175b\ntraining: {global_batch_size: 8}\ncluster: {gpu: a100-sxm-80gb, num_gpus: 8}\nparallelism: {tp: 8}\n");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_EQ(r.plan.model.hidden_size, 12288);
}

TEST(PlanIo, ExplicitNullMeansDefault) {
  auto r = load_yaml(std::string(kBasePlan) + "failures: {detection_s: null}\n");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_DOUBLE_EQ(r.plan.failures.detection_s, FailureConfig{}.detection_s);
}

TEST(PlanIo, NumGpusIsDerivedFromAnExplicitMesh) {
  auto r = load_yaml(R"(model: {preset: tiny}
training: {global_batch_size: 8, precision: fp32}
parallelism: {tp: 2, dp: 4}
cluster: {gpu: cpu-host, gpus_per_node: 4, nics_per_node: 1, intra_node: {kind: shared_memory}}
)");
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_EQ(r.plan.cluster.num_gpus, 8);
}

TEST(PlanIo, DiagnosticsCarryTheSourceLine) {
  auto r = load_yaml("model:\n  preset: tiny\n  num_layers: -3\ntraining: {global_batch_size: 8}\ncluster:\n  gpu: cpu-host\n  num_gpus: 1\n  colour: blue\n");
  ASSERT_FALSE(r.ok());
  const Diagnostic* layers = r.diagnostics.find("model.num_layers");
  ASSERT_NE(layers, nullptr) << dump(r.diagnostics);
  EXPECT_EQ(layers->line, 3);
  const Diagnostic* colour = r.diagnostics.find("cluster.colour");
  ASSERT_NE(colour, nullptr) << dump(r.diagnostics);
  EXPECT_EQ(colour->line, 8);
}

TEST(PlanIo, QuotedNumbersAreStringsAndReportedAsSuch) {
  auto r = load_yaml(std::string(kBasePlan) + "run: {trials: \"12\"}\n");
  EXPECT_TRUE(has_error(r.diagnostics, "run.trials", "expected an integer, got the string \"12\"")) << dump(r.diagnostics);
}

TEST(PlanIo, HfConfigIsReadRelativeToThePlanFile) {
  const auto dir = std::filesystem::path(MESHWORK_SOURCE_DIR) / "tests" / "data";
  auto r = load_plan_text(R"(model: {hf_config: hf/meta-llama-3-8b.json, seq_length: 4096}
training: {global_batch_size: 8}
cluster: {gpu: h100-sxm, num_gpus: 8}
)",
                          Format::yaml, dir);
  ASSERT_TRUE(r.ok()) << dump(r.diagnostics);
  EXPECT_EQ(r.plan.model.num_layers, 32);
  EXPECT_EQ(r.plan.model.seq_length, 4096);  // the plan's field wins over max_position_embeddings
  EXPECT_EQ(r.plan.model.name, "meta-llama/Meta-Llama-3-8B");
}

}  // namespace
}  // namespace meshwork::plan

namespace meshwork::plan {
namespace {

TEST(PlanIo, SwigluDefaultsToMegatronsFfnWidth) {
  auto r = testing::load_yaml(R"(model: {num_layers: 2, hidden_size: 4096, num_attention_heads: 32, seq_length: 128, vocab_size: 1000, activation: swiglu}
training: {global_batch_size: 8}
cluster: {gpu: h100-sxm, num_gpus: 8}
)");
  ASSERT_TRUE(r.ok()) << testing::dump(r.diagnostics);
  EXPECT_EQ(r.plan.model.ffn_hidden_size, 10880);  // int(4 * 4096 * 2/3 / 64) * 64
}

TEST(PlanIo, PresetAndHfConfigTogetherIsAnError) {
  auto r = load_plan_text("model: {preset: mixtral-8x7b, hf_config: hf/meta-llama-3-8b.json}\ntraining: {global_batch_size: 8}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n",
                          Format::yaml, std::filesystem::path(MESHWORK_SOURCE_DIR) / "tests/data");
  EXPECT_TRUE(testing::has_error(r.diagnostics, "model.hf_config", "not both")) << testing::dump(r.diagnostics);
}

TEST(PlanIo, LongNonAsciiStringsInMessagesStayValidUtf8) {
  // A message quotes at most 37 bytes of a bad value; the cut must not split a character.
  std::string value;
  for (int i = 0; i < 30; ++i) value += "\xC3\xA9";  // é
  auto r = testing::load_yaml(std::string(testing::kBasePlan) + "run: {trials: \"" + value + "\"}\n");
  EXPECT_TRUE(testing::has_error(r.diagnostics, "run.trials", "expected an integer")) << testing::dump(r.diagnostics);
}

TEST(PlanIo, OutOfRangeValuesAreNotComputedWith) {
  // cp = 2^62 would overflow 2 * cp in the sequence rule; it is reported and not used.
  auto r = load_plan_text(R"({"model": {"preset": "tiny"}, "training": {"global_batch_size": 8},
    "parallelism": {"cp": 4611686018427387904, "decoder_first_pipeline_num_layers": 9223372036854775807},
    "cluster": {"gpu": "h100-sxm", "num_gpus": 8}})", Format::json);
  EXPECT_TRUE(testing::has_error(r.diagnostics, "parallelism.context_parallel_size", "at most")) << testing::dump(r.diagnostics);
  EXPECT_TRUE(testing::has_error(r.diagnostics, "parallelism.decoder_first_pipeline_num_layers", "at most"));
}

TEST(PlanIo, JsonSyntaxErrorsCarryTheirLine) {
  auto r = load_plan_text("\n\n\n{\n  \"model\": {\n    \"preset\": \"tiny\",\n  }\n}\n", Format::json);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.diagnostics.items().front().line, 7) << testing::dump(r.diagnostics);
}

TEST(PlanIo, OrderIsCaseInsensitive) {
  auto r = testing::load_yaml(std::string(testing::kBasePlan) + "failures: {}\n");
  Plan p = r.plan;
  p.parallelism.order = "TP-CP-EP-DP-PP";
  EXPECT_FALSE(validate(p).has_errors());
}

TEST(PlanIo, AHuggingFaceConfigGivenAsAPlanSaysSoOnce) {
  // Issue 24: `validate config.json` gave 26 "unknown key" errors.
  const auto path = std::filesystem::path(MESHWORK_SOURCE_DIR) / "tests/data/hf/meta-llama-3-8b.json";
  const LoadResult r = load_plan(path);
  ASSERT_EQ(r.diagnostics.items().size(), 1u);
  EXPECT_NE(r.diagnostics.items().front().message.find("this is a Hugging Face config.json (model_type llama), not a plan"), std::string::npos)
      << r.diagnostics.items().front().message;
  EXPECT_NE(r.diagnostics.items().front().message.find("model: {hf_config: FILE}"), std::string::npos);
  // A plan that happens to have a model_type key elsewhere is still read as a plan.
  const LoadResult plan = load_plan_text("model: {preset: tiny}\ntraining: {global_batch_size: 8}\ncluster: {gpu: h100-sxm, num_gpus: 1, gpus_per_node: 1}\n", Format::yaml);
  EXPECT_TRUE(plan.ok());
}

}  // namespace
}  // namespace meshwork::plan
