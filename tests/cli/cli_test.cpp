// The `meshwork` program end to end, in-process: exit codes, messages, JSON outputs, and
// the README's field reference against the schema.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "plan/schema_doc.hpp"

namespace meshwork::cli {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MESHWORK_SOURCE_DIR;

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome meshwork(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// At least 30 malformed plans (tests/data/malformed): each exits 1 with a message that names
// the field or the cause. expected.json says which path and what words.
TEST(Cli, MalformedPlansGiveAClearErrorAndExitOne) {
  const fs::path dir = kSource / "tests/data/malformed";
  const auto expected = nlohmann::json::parse(read(dir / "expected.json"));
  int cases = 0;
  for (const auto& [file, want] : expected.items()) {
    if (file.rfind("__", 0) == 0) continue;
    SCOPED_TRACE(file);
    const fs::path path = dir / file;
    ASSERT_TRUE(fs::exists(path));
    const Outcome r = meshwork({"validate", path.string()});
    EXPECT_EQ(r.code, 1) << r.err;
    const std::string field = want["path"].get<std::string>();
    const std::string needle = (field.empty() ? "error: " : "error: " + field + ": ");
    bool found = false;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(path.string(), 0) == 0 && line.find(needle) != std::string::npos &&
          line.find(want["contains"].get<std::string>()) != std::string::npos) {
        found = true;
      }
    }
    EXPECT_TRUE(found) << "wanted \"" << needle << "...\" with \"" << want["contains"].get<std::string>()
                       << "\", got:\n" << r.err;
    ++cases;
  }
  EXPECT_GE(cases, 30);
}

TEST(Cli, AFileFarLargerThanAnyPlanIsRefusedBeforeParsing) {
  const fs::path file = fs::temp_directory_path() / "meshwork-huge-plan.yaml";
  {
    std::ofstream out(file);
    out << read(kSource / "scenarios/gpt3-175b-a100-1024.yaml");
    const std::string padding(100, '#');
    for (int i = 0; i < 22000; ++i) out << padding << '\n';  // ~2.2 MB
  }
  const Outcome r = meshwork({"validate", file.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("refused before parsing"), std::string::npos) << r.err;
  fs::remove(file);
}

TEST(Cli, MissingFileAndDirectory) {
  Outcome r = meshwork({"validate", "/nonexistent/plan.yaml"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/plan.yaml: error: the file does not exist"), std::string::npos) << r.err;
  r = meshwork({"validate", fs::temp_directory_path().string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

TEST(Cli, ValidateAcceptsEveryScenarioAndReportsEachFile) {
  std::vector<std::string> args = {"validate"};
  for (const auto& e : fs::recursive_directory_iterator(kSource / "scenarios")) {
    const bool sweep = e.path().filename().string().find(".sweep.") != std::string::npos;
    if (e.path().extension() == ".yaml" && !sweep) args.push_back(e.path().string());
  }
  const Outcome r = meshwork(args);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n')), args.size() - 1) << r.out;
}

TEST(Cli, ValidateExitsOneIfAnyOfSeveralPlansIsBad) {
  const Outcome r = meshwork({"validate", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string(),
                          (kSource / "tests/data/malformed/62-empty.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("gpt3-175b-a100-1024.yaml: ok"), std::string::npos);
}

// validate --backend: what `execute --backend` cannot run of a valid plan is an error on its
// field (plan/backend_limits, the list execute itself refuses with); every mesh of the
// executor's tests runs on the CPU backend, CP included.
TEST(Cli, ValidateForABackendNamesWhatItCannotRun) {
  const std::string gpt3 = (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string();
  Outcome r = meshwork({"validate", "--backend", "cpu", gpt3});
  EXPECT_EQ(r.code, 0) << r.err;
  // The CUDA backend plays the CPU backend's Trainer (issue 23): TP 8 x PP 8 x DP 16 is its too.
  r = meshwork({"validate", "--backend", "cuda", gpt3});
  EXPECT_EQ(r.code, 0) << r.err;
  // Every mesh the CPU backend runs, the CUDA backend runs (the same Trainer; its chunk has
  // every op of the CPU's, MoE and context parallelism included).
  for (const char* backend : {"cpu", "cuda"}) {
    std::vector<std::string> meshes = {"validate", "--backend", backend};
    for (const auto& e : fs::directory_iterator(kSource / "tests/data/exec")) meshes.push_back(e.path().string());
    r = meshwork(meshes);
    EXPECT_EQ(r.code, 0) << backend << ": " << r.err;
  }
  r = meshwork({"validate", "--backend", "tpu", gpt3});
  EXPECT_EQ(r.code, 2) << r.err;
}

// Golden: the resolved default scenario, as `show --json` prints it.
TEST(Cli, ShowJsonOfTheDefaultScenarioMatchesTheGoldenFile) {
  const Outcome r = meshwork({"show", "--json", "--derived", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out);
  const fs::path golden = kSource / "tests/golden/show-gpt3-175b-a100-1024.json";
  if (std::getenv("MESHWORK_UPDATE_GOLDEN")) std::ofstream(golden) << got.dump(2) << '\n';
  EXPECT_EQ(got, nlohmann::json::parse(read(golden))) << "update with MESHWORK_UPDATE_GOLDEN=1 if intended";
  EXPECT_EQ(got["derived"]["data_parallel_size"], 16);
  EXPECT_EQ(got["derived"]["micro_batches_per_step"], 96);
}

// What `show --json` prints is a plan file: loaded again, it is the same plan.
TEST(Cli, ShowJsonLoadsBackAsTheSamePlan) {
  const fs::path plan = kSource / "scenarios/published/kor22-175b.yaml";
  const Outcome r = meshwork({"show", "--json", plan.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path saved = fs::temp_directory_path() / "meshwork-show-roundtrip.json";
  std::ofstream(saved) << r.out;
  const Outcome again = meshwork({"show", "--json", saved.string()});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
  fs::remove(saved);
}

TEST(Cli, ShowSummaryNamesTheMesh) {
  const Outcome r = meshwork({"show", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("TP 8 x CP 1 x PP 8 x DP 16 = 1024 GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("96 micro-batches per step"), std::string::npos) << r.out;
}

TEST(Cli, ShowOfABadPlanPrintsDiagnosticsAndExitsOne) {
  const Outcome r = meshwork({"show", (kSource / "tests/data/malformed/20-mesh-product-mismatch.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("parallelism.data_parallel_size"), std::string::npos) << r.err;
}

TEST(Cli, PresetsListsEveryPresetWithItsSource) {
  Outcome r = meshwork({"presets"});
  ASSERT_EQ(r.code, 0);
  for (const char* name : {"a100-sxm-40gb", "h100-sxm", "h200-sxm", "h800-sxm", "b200", "cpu-host", "gpt3-175b",
                           "nar21-1t", "llama3-405b", "mixtral-8x7b", "deepseek-v3-shaped", "tiny"}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  }
  r = meshwork({"presets", "--json"});
  ASSERT_EQ(r.code, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["gpus"].size(), 7u);
  for (const auto& g : j["gpus"]) EXPECT_FALSE(g["source"].get<std::string>().empty());
}

TEST(Cli, ImportHfPrintsAModelSection) {
  const Outcome r = meshwork({"import-hf", (kSource / "tests/data/hf/mixtral-8x7b.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"]["num_layers"], 32);
  EXPECT_EQ(j["model"]["moe"]["num_moe_experts"], 8);
  EXPECT_EQ(meshwork({"import-hf", "/nonexistent.json"}).code, 1);
}

// A config's max_position_embeddings is how far the positions reach, not a training length
// (issue 24: Llama 3.1's 131,072 became seq_length and the plan missed by 1 TB).
TEST(Cli, HfConfigLeavesTheSequenceLengthToThePlan) {
  const fs::path dir = fs::temp_directory_path() / ("meshwork-hf-seq-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string config = (kSource / "docs/reference/hf-configs/Llama-3.1-8B.json").string();
  const std::string rest = "training: {global_batch_size: 64, micro_batch_size: 1}\ncluster: {gpu: h100-sxm, num_gpus: 8}\n";
  std::ofstream(dir / "without.yaml") << "model: {hf_config: " << config << "}\n" << rest;
  std::ofstream(dir / "with.yaml") << "model: {hf_config: " << config << ", seq_length: 8192}\n" << rest;

  Outcome r = meshwork({"validate", (dir / "without.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("error: model.seq_length: required field is missing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("max_position_embeddings (131072) is the longest context the model supports"), std::string::npos) << r.err;

  r = meshwork({"show", "--json", (dir / "with.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["model"]["seq_length"], 8192);

  // A plan that reads a config through model.hf_config hears what the import left out, as
  // import-hf's reader does.
  std::ofstream(dir / "mtp.yaml") << "model: {hf_config: " << (kSource / "docs/reference/hf-configs/DeepSeek-V3.json").string()
                                  << ", seq_length: 4096}\n" << rest;
  r = meshwork({"validate", (dir / "mtp.yaml").string()});
  EXPECT_NE(r.err.find("warning: model.hf_config: ignored num_nextn_predict_layers 1"), std::string::npos) << r.err;

  // import-hf writes no seq_length and says why; --seq-length writes one.
  r = meshwork({"import-hf", config});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["model"].contains("seq_length"));
  EXPECT_NE(r.err.find("max_position_embeddings (131072) is the longest context"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("8.03B parameters"), std::string::npos) << r.err;
  r = meshwork({"import-hf", config, "--seq-length", "8192"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["model"]["seq_length"], 8192);

  // search --model config.json keeps the cluster plan's sequence length.
  std::ofstream(dir / "cluster.yaml") << "model: {preset: llama3-8b, seq_length: 4096}\n" << rest;
  r = meshwork({"search", "--model", config, "--cluster", (dir / "cluster.yaml").string(), "--top", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["plan"]["model"]["seq_length"], 4096) << r.out.substr(0, 400);
  fs::remove_all(dir);
}

// Every config of docs/reference/hf-configs imports through the command, phi-4's CRLF included.
TEST(Cli, ImportHfReadsEveryReferenceConfig) {
  int configs = 0;
  for (const auto& entry : fs::directory_iterator(kSource / "docs/reference/hf-configs")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const Outcome r = meshwork({"import-hf", entry.path().string()});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find(" parameters ("), std::string::npos) << r.err;
    ++configs;
  }
  EXPECT_EQ(configs, 14);
}

// The first sanity check after an import: show, estimate and their JSON give the counts.
TEST(Cli, ParameterCountsInShowAndEstimate) {
  const std::string plan = (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string();
  Outcome r = meshwork({"show", plan});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("params    174.6B parameters (174.0B non-embedding, 654M embedding)"), std::string::npos) << r.out;
  r = meshwork({"show", "--json", "--derived", plan});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto shown = nlohmann::json::parse(r.out)["derived"]["parameters"];
  EXPECT_NEAR(shown["total"].get<double>(), 174.6e9, 0.05e9);
  EXPECT_DOUBLE_EQ(shown["total"].get<double>(), shown["embedding"].get<double>() + shown["non_embedding"].get<double>());
  r = meshwork({"estimate", plan, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["parameters"], shown);
  r = meshwork({"estimate", (kSource / "scenarios/published/kor22-175b.yaml").string()});
  EXPECT_NE(r.out.find("  model: 174.6B parameters"), std::string::npos) << r.out;
}

// import-megatron end to end: a real script to a plan that, with a GPU, shows the script's mesh.
TEST(Cli, ImportMegatronWritesAPlanThatNeedsOnlyTheCluster) {
  const fs::path dir = fs::temp_directory_path() / ("meshwork-import-megatron-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string script = (kSource / "tests/data/megatron-import/train_gpt3_175b_distributed.sh").string();
  Outcome r = meshwork({"import-megatron", script, "--set", "NUM_NODES=16", "--out", (dir / "gpt3.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("mapped   --num-layers 96 -> model.num_layers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ignored  --lr 6.0e-5: the learning-rate schedule changes no cost"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("The plan needs its cluster: cluster.gpu"), std::string::npos) << r.err;
  auto plan = nlohmann::json::parse(read(dir / "gpt3.json"));
  EXPECT_EQ(meshwork({"validate", (dir / "gpt3.json").string()}).code, 1) << "no GPU yet";
  plan["cluster"]["gpu"] = "a100-sxm-80gb";
  std::ofstream(dir / "with-gpu.json") << plan.dump(2);
  r = meshwork({"show", (dir / "with-gpu.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("96 layers, hidden 12288, 96 heads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TP 8 x CP 1 x PP 16 x DP 1 = 128 GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("global batch 1536 x micro-batch 1, fp16"), std::string::npos) << r.out;

  r = meshwork({"import-megatron", "--args", "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["model"]["num_layers"], 4);
  std::ofstream(dir / "no-command.sh") << "echo hello\n";
  r = meshwork({"import-megatron", (dir / "no-command.sh").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no training command"), std::string::npos) << r.err;
  EXPECT_EQ(meshwork({"import-megatron", "/nonexistent.sh"}).code, 1);
  EXPECT_EQ(meshwork({"import-megatron"}).code, 2);
  EXPECT_EQ(meshwork({"import-megatron", script, "--set", "NOEQUALS"}).code, 2);
  fs::remove_all(dir);
}

// docs/megatron-flags.md is `import-megatron --flags`: every flag of the pinned arguments.py.
TEST(Cli, MegatronFlagTableInTheDocsIsCurrent) {
  const Outcome r = meshwork({"import-megatron", "--flags"});
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path doc = kSource / "docs/megatron-flags.md";
  const std::string text = read(doc);
  const std::size_t table = text.find("| flag |");
  ASSERT_NE(table, std::string::npos);
  if (std::getenv("MESHWORK_UPDATE_GOLDEN")) std::ofstream(doc) << text.substr(0, table) << r.out;
  EXPECT_EQ(read(doc).substr(table), r.out) << "update with MESHWORK_UPDATE_GOLDEN=1 if intended";
}

// Issue 24's messages: near misses are named, and ratios and port speeds read as people write them.
TEST(Cli, MessagesSuggestWhatWasMeant) {
  const fs::path dir = fs::temp_directory_path() / ("meshwork-messages-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "typos.yaml")
      << "model: {preset: llama3-8b}\n"
         "training: {global_batch_size: 64, micro_batch_size: 1, recompute: selctive, precision: bfloat16, attention_kernel: fused}\n"
         "cluster: {gpu: h100, num_gpus: 8, hbm_gib: 80}\n";
  Outcome r = meshwork({"validate", (dir / "typos.yaml").string()});
  EXPECT_EQ(r.code, 1);
  for (const char* want : {"training.recompute: expected one of none | selective | full, got the string \"selctive\"; did you mean \"selective\"?",
                           "training.precision: expected one of bf16 | fp16 | fp8 | fp32, got the string \"bfloat16\"; did you mean \"bf16\"?",
                           "training.attention_kernel: expected one of auto | flash2 | flash3 | cudnn, got the string \"fused\"; did you mean \"cudnn\"?",
                           "cluster.gpu: unknown GPU preset \"h100\" (`meshwork presets` lists them); did you mean \"h100-sxm\"?",
                           "cluster.hbm_gib: unknown key; did you mean cluster.gpu.hbm_gib? (the field belongs there)"}) {
    EXPECT_NE(r.err.find(want), std::string::npos) << want << "\n" << r.err;
  }
  // The size of one group, said as such (it read "144 model-parallel groups").
  std::ofstream(dir / "mesh.yaml") << "model: {preset: llama3-8b}\ntraining: {global_batch_size: 60, micro_batch_size: 1}\n"
                                      "parallelism: {tp: 8}\ncluster: {gpu: h100-sxm, num_gpus: 100}\n";
  r = meshwork({"validate", (dir / "mesh.yaml").string()});
  EXPECT_NE(r.err.find("100 GPUs do not divide into model-parallel groups of TP 8 x CP 1 x PP 1 = 8 GPUs each"), std::string::npos) << r.err;
  // Key errors and mesh errors in one pass.
  std::ofstream(dir / "both.yaml") << "model: {preset: llama3-8b, colour: red}\ntraining: {global_batch_size: 64, micro_batch_size: 1}\n"
                                      "parallelism: {tp: 3}\ncluster: {gpu: h100-sxm, num_gpus: 96}\n";
  r = meshwork({"validate", (dir / "both.yaml").string()});
  EXPECT_NE(r.err.find("model.colour: unknown key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("parallelism.tensor_model_parallel_size: 3 does not divide num_attention_heads 32"), std::string::npos) << r.err;
  r = meshwork({"estimat", "x.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command \"estimat\"; did you mean \"estimate\"?"), std::string::npos) << r.err;

  std::ofstream(dir / "units.yaml") << "model: {preset: llama3-8b}\n"
                                       "training: {global_batch_size: 64, micro_batch_size: 1}\n"
                                       "cluster: {gpu: h100-sxm, num_gpus: 64, nic_bandwidth_gbps: \"400G\", topology: {oversubscription: \"2:1\"}}\n";
  r = meshwork({"show", "--json", (dir / "units.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cluster"]["nic_bandwidth_gbps"], 400.0);
  EXPECT_EQ(j["cluster"]["topology"]["oversubscription"], 2.0);
  // A ratio in quotes without its ":1" is the ratio.
  std::ofstream(dir / "ratio.yaml") << "model: {preset: llama3-8b}\n"
                                       "training: {global_batch_size: 64, micro_batch_size: 1}\n"
                                       "cluster: {gpu: h100-sxm, num_gpus: 64, topology: {oversubscription: \"3\"}}\n";
  r = meshwork({"show", "--json", (dir / "ratio.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["cluster"]["topology"]["oversubscription"], 3.0);
  std::ofstream(dir / "bytes.yaml") << "model: {preset: llama3-8b}\n"
                                       "training: {global_batch_size: 64, micro_batch_size: 1}\n"
                                       "cluster: {gpu: h100-sxm, num_gpus: 64, nic_bandwidth_gbps: \"400GB/s\"}\n";
  r = meshwork({"validate", (dir / "bytes.yaml").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: cluster.nic_bandwidth_gbps: 3200 Gb/s per NIC is more than any NIC gives"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

#ifdef MESHWORK_HAVE_SIMGRID
// Issue 24: --fail past the end of the step was silently ignored.
TEST(Cli, AFailureAfterTheStepEndsIsAnError) {
  const std::string plan = (kSource / "scenarios/cpu/tiny-pp2-2rank.yaml").string();
  const Outcome r = meshwork({"simulate", plan, "--fail", "gpu1@100s"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("before the failure at 100 s: a failure inside the step must come before its end"), std::string::npos) << r.err;
  EXPECT_EQ(meshwork({"simulate", plan, "--fail", "gpu1@0s"}).code, 0);
}
#endif

// Issue 24: the MFU convention was a flag of estimate alone; now one plan field, the same flag
// on every command, and every Report says which it used.
TEST(Cli, MfuConventionIsOnePlanFieldAndEveryReportSaysWhich) {
  const std::string plan = (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string();
  Outcome r = meshwork({"estimate", plan, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto full = nlohmann::json::parse(r.out);
  EXPECT_EQ(full["mfu_attention"], "full");
  r = meshwork({"estimate", plan, "--json", "--causal-flops"});
  const auto causal = nlohmann::json::parse(r.out);
  EXPECT_EQ(causal["mfu_attention"], "causal");
  EXPECT_LT(causal["mfu"].get<double>(), full["mfu"].get<double>());
  EXPECT_EQ(causal["step_time_s"], full["step_time_s"]) << "the convention changes no time";

  // The plan field gives the same figure as the flag.
  r = meshwork({"show", "--json", plan});
  auto tree = nlohmann::json::parse(r.out);
  tree["training"]["attention_flops"] = "causal";
  const fs::path file = fs::temp_directory_path() / ("meshwork-causal-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << tree.dump();
  r = meshwork({"estimate", file.string(), "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)["mfu"], causal["mfu"]);
  r = meshwork({"estimate", file.string()});
  EXPECT_NE(r.out.find("(causal attention) | HFU"), std::string::npos) << r.out;
  fs::remove(file);
#ifdef MESHWORK_HAVE_SIMGRID
  r = meshwork({"simulate", (kSource / "scenarios/cpu/tiny-pp2-2rank.yaml").string(), "--json", "--causal-flops"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["mfu_attention"], "causal");
#endif
}

// Issue 24: a run without failure rates printed 100% goodput and said nothing.
TEST(Cli, ReliabilityWithoutAFailureModelSaysSo) {
  const Outcome r = meshwork({"reliability", (kSource / "scenarios/cpu/tiny-dp2-2rank.yaml").string(), "--trials", "10", "--horizon", "1d"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: no failure rates in the plan"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("add failures: {preset: llama3}"), std::string::npos) << r.out;
  // With a token target, the automatic interval is the run's length, not the horizon's (the
  // default plan: 31 days to train, and a 34-day horizon it used to checkpoint at).
  const Outcome gpt3 = meshwork({"reliability", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string(), "--trials", "10", "--json"});
  ASSERT_EQ(gpt3.code, 0) << gpt3.err;
  const auto rel = nlohmann::json::parse(gpt3.out)["reliability"];
  EXPECT_NEAR(rel["checkpoint_interval_s"].get<double>(), rel["time_to_train_s"].get<double>(), 1e-4 * rel["time_to_train_s"].get<double>());
  const Outcome with = meshwork({"reliability", (kSource / "scenarios/heldout/llama3-405b-h100-16384.yaml").string(), "--trials", "10"});
  EXPECT_EQ(with.err.find("no failure rates"), std::string::npos) << with.err;
}

// The README documents every plan field: its reference table is the schema's, verbatim.
TEST(Cli, ReadmeFieldReferenceMatchesTheSchema) {
  const std::string readme = read(kSource / "README.md");
  const std::string begin = "<!-- fields:begin (generated by `meshwork schema`) -->\n";
  const std::string end = "<!-- fields:end -->";
  const auto a = readme.find(begin);
  const auto b = readme.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(readme.substr(a + begin.size(), b - a - begin.size()), plan::field_reference_markdown())
      << "regenerate the README block with `meshwork schema`";
  EXPECT_EQ(meshwork({"schema"}).out, plan::field_reference_markdown());
}

TEST(Cli, ReliabilityPrintsGoodputAndItsSweepWritesCsvAndSvg) {
  const fs::path dir = fs::temp_directory_path() / "meshwork-reliability-test";
  fs::create_directories(dir);
  const std::string plan = (kSource / "scenarios/heldout/llama3-405b-h100-16384.yaml").string();
  Outcome r = meshwork({"reliability", plan, "--trials", "20"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("goodput (ETTR)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interruptions by cause: gpu"), std::string::npos) << r.out;
  r = meshwork({"reliability", plan, "--trials", "10", "--horizon", "7d", "--sweep-interval", "--csv", (dir / "s.csv").string(), "--svg",
                (dir / "s.svg").string(), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j.at("reliability").at("goodput").get<double>(), 0.5);
  EXPECT_GT(j.at("reliability").at("best_interval_s").get<double>(), 0);
  EXPECT_EQ(j.at("reliability").at("horizon_s").get<double>(), 7 * 86400.0);
  EXPECT_NE(read(dir / "s.csv").find("interval_s,goodput"), std::string::npos);
  EXPECT_NE(read(dir / "s.svg").find("<svg"), std::string::npos);
  // Bad input: a usage error, not a crash.
  EXPECT_EQ(meshwork({"reliability", plan, "--horizon", "soon"}).code, 2);
  fs::remove_all(dir);
}

TEST(Cli, HelpForEverySubcommandAndUsageErrors) {
  for (const char* sub : {"validate", "show", "presets", "schema", "import-hf", "reliability"}) {
    const Outcome r = meshwork({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << ": " << r.out;
  }
  EXPECT_EQ(meshwork({"--help"}).code, 0);
  EXPECT_EQ(meshwork({}).code, 2);
  EXPECT_EQ(meshwork({"frobnicate"}).code, 2);
  EXPECT_EQ(meshwork({"validate"}).code, 2);
  const Outcome v = meshwork({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("meshwork 0.1.0"), std::string::npos) << v.out;
  // The allocator, which benchmarks record beside their timings (cmake/MeshworkOptions.cmake).
  EXPECT_TRUE(v.out.find("; jemalloc ") != std::string::npos || v.out.find("; system malloc)") != std::string::npos) << v.out;
}

}  // namespace
}  // namespace meshwork::cli
