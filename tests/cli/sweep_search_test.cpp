// `meshwork estimate`, `sweep` and `search` end to end.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"

namespace meshwork::cli {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MESHWORK_SOURCE_DIR;

struct Outcome {
  int code;
  std::string out, err;
};

Outcome meshwork(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Estimate, JsonReportBreakdownAddsUpAndCarriesProvenance) {
  const Outcome r = meshwork({"estimate", "--json", (kSource / "scenarios/published/kor22-175b.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  double sum = 0;
  for (const auto& [k, v] : j["breakdown"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, j["step_time_s"].get<double>(), 1e-9);
  EXPECT_EQ(j["method"], "estimated");
  EXPECT_EQ(j["provenance"]["plan_hash"].get<std::string>().size(), 16u);
  EXPECT_EQ(j["memory"].size(), 8u);
  EXPECT_TRUE(j["definitions"].contains("mfu"));
}

TEST(Estimate, APlanThatDoesNotFitExitsThreeWithAVerdict) {
  const fs::path plan = fs::temp_directory_path() / "meshwork-oom.yaml";
  std::ofstream(plan) << "model: nar21-1t\ntraining: {global_batch_size: 8}\nparallelism: {tp: 8, zero: 0}\n"
                         "cluster: {gpu: a100-sxm-80gb, num_gpus: 8}\n";
  const Outcome r = meshwork({"estimate", plan.string()});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("memory: DOES NOT FIT; stage 0 needs"), std::string::npos) << r.out;
  const Outcome j = meshwork({"estimate", "--json", plan.string()});
  EXPECT_EQ(j.code, 3);
  const auto verdict = nlohmann::json::parse(j.out).at("memory_verdict");
  EXPECT_EQ(verdict.at("verdict"), "does_not_fit");
  EXPECT_EQ(verdict.at("largest_stage"), 0);
  // simulate prints the verdict first and simulates nothing; reliability models no run.
  const Outcome s = meshwork({"simulate", plan.string()});
  EXPECT_EQ(s.code, 3);
  EXPECT_EQ(s.out.rfind("memory: DOES NOT FIT", 0), 0u) << s.out;
  EXPECT_NE(s.err.find("not simulated: the plan does not fit in GPU memory"), std::string::npos) << s.err;
  const Outcome rel = meshwork({"reliability", "--trials", "2", plan.string()});
  EXPECT_EQ(rel.code, 3);
  EXPECT_EQ(rel.out.rfind("memory: DOES NOT FIT", 0), 0u) << rel.out;
  EXPECT_EQ(rel.out.find("goodput"), std::string::npos) << rel.out;
  fs::remove(plan);
}

TEST(Estimate, EveryCommandThatPricesAPlanShowsItsVerdict) {
  const std::string plan = (kSource / "scenarios/published/kor22-22b.yaml").string();
  const Outcome e = meshwork({"estimate", plan});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("memory: fits; the fullest stage"), std::string::npos) << e.out;
  const Outcome rel = meshwork({"reliability", "--trials", "2", plan});
  ASSERT_EQ(rel.code, 0) << rel.err;
  EXPECT_EQ(rel.out.rfind("memory: fits", 0), 0u) << rel.out;
  const Outcome rj = meshwork({"reliability", "--trials", "2", "--json", plan});
  EXPECT_EQ(nlohmann::json::parse(rj.out).at("memory_verdict").at("verdict"), "fits");
#ifdef MESHWORK_HAVE_SIMGRID
  const Outcome s = meshwork({"simulate", plan});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out.rfind("memory: fits", 0), 0u) << s.out;
  const Outcome sj = meshwork({"simulate", "--json", plan});
  EXPECT_EQ(nlohmann::json::parse(sj.out).at("memory_verdict").at("verdict"), "fits");
#endif
  // A plan that fits with less than its headroom warns and still exits 0.
  const fs::path tight = fs::temp_directory_path() / "meshwork-tight.yaml";
  std::ofstream(tight) << "model: kor22-22b\ntraining: {global_batch_size: 8}\nparallelism: {tp: 8}\n"
                          "cluster: {gpu: a100-sxm-80gb, num_gpus: 8, memory_headroom_fraction: 0.9}\n";
  const Outcome t = meshwork({"estimate", tight.string()});
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("memory: fits TIGHTLY"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("TIGHT"), std::string::npos);
  fs::remove(tight);
}

TEST(Program, ShowsWhatEachChunkHoldsUnderEachLayoutSwitch) {
  const fs::path plan = fs::temp_directory_path() / "meshwork-layout.yaml";
  auto run = [&](const std::string& parallelism) {
    std::ofstream(plan) << "model: {preset: tiny, num_layers: 6}\ntraining: {global_batch_size: 8}\n"
                           "parallelism: {pp: 2, " << parallelism << "}\ncluster: {gpu: h100-sxm, num_gpus: 2, gpus_per_node: 2}\n";
    return meshwork({"program", plan.string()});
  };
  Outcome r = run("account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage 0: 1 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks Et*3\n"), std::string::npos) << r.out;   // (6 + 2) / 2 = 4, one fewer for the embedding
  EXPECT_NE(r.out.find("chunks t*3L\n"), std::string::npos) << r.out;   // and one fewer for the loss
  r = run("account_for_loss_in_pipeline_split: true, vpp: 7, pipeline_schedule: interleaved");
  EXPECT_EQ(r.code, 1);  // 6 + 1 = 7 layers do not divide over 2 x 7 chunks
  EXPECT_NE(r.err.find("parallelism.account_for_loss_in_pipeline_split"), std::string::npos) << r.err;
  r = run("pipeline_schedule: interleaved, pipeline_model_parallel_layout: \"E|t*2|t*3|tL\"");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 stages x 2 chunks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks E t*3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks t*2 tL\n"), std::string::npos) << r.out;
  r = run("decoder_first_pipeline_num_layers: 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("chunks Et*2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks t*4L\n"), std::string::npos) << r.out;
  fs::remove(plan);
}

TEST(Estimate, CsvHasAHeaderAndOneRow) {
  const Outcome r = meshwork({"estimate", "--csv", (kSource / "scenarios/published/kor22-22b.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto l = lines(r.out);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(std::count(l[0].begin(), l[0].end(), ','), std::count(l[1].begin(), l[1].end(), ','));
}

TEST(Sweep, KeepsInvalidPlansWithTheReasonAndRanksTheRest) {
  const fs::path csv = fs::temp_directory_path() / "meshwork-sweep.csv";
  const Outcome r = meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string(), "--csv", csv.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("12 plans:"), std::string::npos) << r.out;
  std::ifstream in(csv);
  std::stringstream s;
  s << in.rdbuf();
  const auto rows = lines(s.str());
  ASSERT_EQ(rows.size(), 13u);  // header + 12
  int invalid = 0;
  double last_mfu = 2;
  bool ok_section = true;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].find(",invalid,") != std::string::npos) {
      ++invalid;
      ok_section = false;
      EXPECT_NE(rows[i].find("TP 3"), std::string::npos) << rows[i];  // 3 divides neither 1024 GPUs nor 96 heads
      continue;
    }
    if (rows[i].find(",ok,") == std::string::npos) continue;
    EXPECT_TRUE(ok_section) << "ok rows come first";
    // mfu is the 6th report column after index, 3 axes, status, reason, plan, method, num_gpus, step.
    std::vector<std::string> cols;
    std::stringstream row(rows[i]);
    for (std::string c; std::getline(row, c, ',');) cols.push_back(c);
    const double mfu = std::stod(cols[10]);
    EXPECT_LE(mfu, last_mfu);
    last_mfu = mfu;
  }
  EXPECT_EQ(invalid, 6);  // tp 3
  fs::remove(csv);
}

TEST(Sweep, EachRowCarriesItsVerdictAndNoneFittingExitsThree) {
  const Outcome r = meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string(), "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  int verdicts = 0;
  for (const auto& row : nlohmann::json::parse(r.out)) {
    if (row["status"] == "invalid") continue;
    const std::string v = row["memory_verdict"];
    EXPECT_TRUE(v == "fits" || v == "tight" || (v == "does_not_fit" && row["status"] == "out_of_memory")) << row.dump();
    ++verdicts;
  }
  EXPECT_EQ(verdicts, 6);
  const Outcome text = meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string()});
  EXPECT_NE(text.out.find("memory (GiB)  verdict"), std::string::npos) << text.out;
  // A grid none of whose plans fits: the estimate's exit rule.
  const fs::path dir = fs::temp_directory_path() / "meshwork-oom-sweep";
  fs::create_directories(dir);
  std::ofstream(dir / "base.yaml") << "model: nar21-1t\ntraining: {global_batch_size: 8}\nparallelism: {tp: 8, zero: 0}\n"
                                      "cluster: {gpu: a100-sxm-80gb, num_gpus: 8}\n";
  std::ofstream(dir / "oom.sweep.yaml") << "base: base.yaml\ngrid:\n  training.micro_batch_size: [1, 2]\n";
  const Outcome oom = meshwork({"sweep", (dir / "oom.sweep.yaml").string()});
  EXPECT_EQ(oom.code, 3) << oom.out << oom.err;
  EXPECT_NE(oom.out.find("2 out of memory"), std::string::npos) << oom.out;
  fs::remove_all(dir);
}

TEST(Sweep, SlicesPartitionTheGrid) {
  std::size_t total = 0;
  for (const char* slice : {"0/3", "1/3", "2/3"}) {
    const Outcome r = meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string(), "--slice", slice, "--csv", "-"});
    ASSERT_EQ(r.code, 0) << r.err;
    total += lines(r.out).size() - 1;
  }
  EXPECT_EQ(total, 12u);
  EXPECT_EQ(meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string(), "--slice", "3/3"}).code, 2);
}

TEST(Sweep, ABadSweepFileGetsEveryDiagnostic) {
  const Outcome r = meshwork({"sweep", (kSource / "tests/data/sweeps/bad.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("grid.parallelism.tpp: \"parallelism.tpp\" is not a plan field"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("grid.training.micro_batch_size: expected a non-empty list"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank_by: expected one of"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("colour: unknown key"), std::string::npos) << r.err;
  EXPECT_EQ(meshwork({"sweep", "/nonexistent/sweep.yaml"}).code, 1);
}

// NAR21 §5.1 ran GPT-3 175B on 1,024 A100s at TP 8, PP 8, interleaved, full recompute; the
// search must find a plan predicted at least as fast.
TEST(Search, FindsAPlanAtLeastAsFastAsThePublishedGpt3Configuration) {
  const fs::path cluster = kSource / "scenarios/gpt3-175b-a100-1024.yaml";
  const Outcome published = meshwork({"estimate", "--json", cluster.string()});
  ASSERT_EQ(published.code, 0) << published.err;
  const double published_step = nlohmann::json::parse(published.out)["step_time_s"].get<double>();
  const Outcome r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--top", "3", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto best = nlohmann::json::parse(r.out);
  ASSERT_EQ(best.size(), 3u);
  EXPECT_LE(best[0]["report"]["step_time_s"].get<double>(), published_step);
  EXPECT_LE(best[0]["report"]["step_time_s"].get<double>(), best[1]["report"]["step_time_s"].get<double>());
  EXPECT_EQ(best[0]["plan"]["cluster"]["num_gpus"], 1024);
  // Each plan carries its memory verdict, in the JSON and as the text table's last column.
  for (const auto& c : best) EXPECT_NE(c["report"]["memory_verdict"]["verdict"], "does_not_fit");
  const Outcome text = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--top", "3"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("memory (GiB)  verdict"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Rejected, by reason:\n  "), std::string::npos) << text.out;
  const auto rows = lines(text.out);
  ASSERT_GE(rows.size(), 3u);
  const std::string& first = rows[2];
  EXPECT_TRUE(first.ends_with("fits") || first.ends_with("tight")) << first;
}

// Issue 24: the closed form's best plans ranked by simulation; the order is checked against
// separate `simulate` runs of each plan, and pinned dimensions hold in every plan.
TEST(Search, SimulatedMethodRanksByTheSimulatorsStepTime) {
#ifndef MESHWORK_HAVE_SIMGRID
  GTEST_SKIP() << "this build has no simulator";
#else
  const fs::path cluster = kSource / "scenarios/cpu/tiny-dp2-2rank.yaml";
  const Outcome r = meshwork({"search", "--model", "tiny", "--cluster", cluster.string(), "--top", "5", "--method", "simulated", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto best = nlohmann::json::parse(r.out);
  ASSERT_EQ(best.size(), 5u);
  const fs::path dir = fs::temp_directory_path() / ("meshwork-search-sim-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  double previous = 0;
  for (std::size_t i = 0; i < best.size(); ++i) {
    const double ranked = best[i]["simulated"]["step_time_s"].get<double>();
    EXPECT_GE(ranked, previous) << "plan " << i + 1;
    previous = ranked;
    const fs::path plan = dir / ("plan" + std::to_string(i) + ".json");
    std::ofstream(plan) << best[i]["plan"].dump();
    const Outcome alone = meshwork({"simulate", plan.string(), "--json"});
    ASSERT_EQ(alone.code, 0) << alone.err;
    EXPECT_DOUBLE_EQ(nlohmann::json::parse(alone.out)["step_time_s"].get<double>(), ranked) << "plan " << i + 1;
  }
  fs::remove_all(dir);
  const Outcome text = meshwork({"search", "--model", "tiny", "--cluster", cluster.string(), "--top", "3", "--method", "simulated"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("Ranked by simulated step time"), std::string::npos) << text.out;
#endif
}

TEST(Search, PinnedDimensionsCsvAndTheTable) {
  const fs::path cluster = kSource / "scenarios/gpt3-175b-a100-1024.yaml";
  Outcome r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--top", "4", "--tp", "8", "--pp", "16", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& c : nlohmann::json::parse(r.out)) {
    EXPECT_EQ(c["plan"]["parallelism"]["tensor_model_parallel_size"], 8);
    EXPECT_EQ(c["plan"]["parallelism"]["pipeline_model_parallel_size"], 16);
  }
  r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--top", "2", "--tp", "8", "--csv", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = lines(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(rows[0].rfind("rank,tp,pp,cp,ep,dp,sp,schedule,vpp,mbs,recompute,zero,layers_per_stage,", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1].rfind("1,8,", 0), 0u) << rows[1];
  // PP 1 shows no schedule; the table has SP, layers per stage and days to train.
  r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--top", "3", "--pp", "1", "--tp", "8", "--zero", "3"});
  EXPECT_NE(r.out.find("layers/stage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" days "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1f1b"), std::string::npos) << r.out;
  // Without a token target there is no time to train: "-", not "0.0" days.
  const fs::path dir = fs::temp_directory_path() / ("meshwork-search-days-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "no-target.yaml") << "model: gpt3-175b\ntraining: {global_batch_size: 1536}\n"
                                        << "cluster: {gpu: a100-sxm-80gb, num_gpus: 1024}\n";
  r = meshwork({"search", "--model", "gpt3-175b", "--cluster", (dir / "no-target.yaml").string(), "--top", "2", "--tp", "8", "--pp", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto table = lines(r.out);
  ASSERT_GE(table.size(), 3u) << r.out;
  EXPECT_NE(table[2].find("%        -"), std::string::npos) << table[2];
  EXPECT_EQ(table[2].find(" 0.0 "), std::string::npos) << table[2];
  // Pins that leave nothing to try say so.
  r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--pp", "1", "--vpp", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--vpp 2 needs pipeline stages"), std::string::npos) << r.err;
  r = meshwork({"search", "--model", "gpt3-175b", "--cluster", cluster.string(), "--tp", "3"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("do not divide the 1024 GPUs"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Search, NoValidPlanSaysWhy) {
  // A 1T-parameter model on 8 GPUs: nothing fits.
  const Outcome r = meshwork({"search", "--model", "nar21-1t", "--cluster",
                              (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string(), "--gpus", "8"});
  EXPECT_EQ(r.code, 3);  // valid meshes, none of which fits
  EXPECT_NE(r.err.find("no valid plan among"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("do not fit in memory: the smallest needs"), std::string::npos) << r.err;
  const Outcome bad = meshwork({"search", "--model", "gpt5", "--cluster", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("unknown model preset \"gpt5\""), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace meshwork::cli

namespace meshwork::cli {
namespace {

TEST(Topology, BillOfMaterialsBisectionAndGroupsAsJson) {
  const fs::path dot = fs::temp_directory_path() / "meshwork-topology.dot";
  const Outcome r = meshwork({"topology", "--json", "--dot", dot.string(), (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"], 1024);
  EXPECT_EQ(j["switches"]["nvswitch"], 128);
  EXPECT_EQ(j["links"]["nic_to_leaf"], 1024);
  EXPECT_DOUBLE_EQ(j["bisection_gbytes_per_s"].get<double>(), 1024 * 25.0 / 2);
  EXPECT_EQ(j["groups"]["tp"]["hops"], 2);
  EXPECT_TRUE(fs::exists(dot));
  fs::remove(dot);
}

// The pipeline's boundaries as the estimate prices them: four stages two to a node (TP 1 x
// DP 4), so boundaries 0-1 and 2-3 stay on NVLink and 1-2 and the wrap 3-0 leave the node.
// And the leaves: radix 64 at 1:1 takes 32 NIC ports, whole nodes of 8; radix 40, 20 ports,
// splits nodes between leaves, which the text says.
TEST(Topology, PipelineBoundariesAndLeavesThatSplitNodes) {
  const Outcome r = meshwork({"topology", "--json", (kSource / "scenarios/published/nemo2407-llama2-13b-16.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["pipeline_boundaries"].size(), 4u);
  const bool inside[] = {true, false, true, false};
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(j["pipeline_boundaries"][b]["inside_node"].get<bool>(), inside[b]) << b;
    EXPECT_EQ(j["pipeline_boundaries"][b]["to_stage"].get<std::int64_t>(), static_cast<std::int64_t>((b + 1) % 4));
  }
  EXPECT_GT(j["pipeline_boundaries"][0]["gbytes_per_s"].get<double>(), 5 * j["pipeline_boundaries"][1]["gbytes_per_s"].get<double>());
  EXPECT_EQ(j["leaf_nic_ports"], 32);
  EXPECT_FALSE(j["nodes_straddle_leaves"].get<bool>());

  const Outcome a100 = meshwork({"topology", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  ASSERT_EQ(a100.code, 0) << a100.err;
  EXPECT_NE(a100.out.find("a leaf takes 20 NIC ports (radix 40 at 1:1), which do not hold whole nodes of 8 NICs"), std::string::npos) << a100.out;
  EXPECT_NE(a100.out.find("stage 7 -> 0  between nodes"), std::string::npos) << a100.out;
}

}  // namespace
}  // namespace meshwork::cli

namespace meshwork::cli {
namespace {

TEST(Sweep, ColumnsFollowTheFilesAxisOrder) {
  const Outcome r = meshwork({"sweep", (kSource / "tests/data/sweeps/small.yaml").string(), "--csv", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  // small.yaml lists tp, pp, recompute: in that order, not alphabetically.
  EXPECT_EQ(r.out.rfind("index,parallelism.tensor_model_parallel_size,parallelism.pipeline_model_parallel_size,"
                        "training.recompute,status",
                        0),
            0u)
      << r.out.substr(0, 200);
}

TEST(Search, TriesUnevenFirstAndLastStages) {
  // Llama 3 405B's 126 layers: PP 16 only with uneven stages (7 + 14 x 8 + 7).
  const fs::path cluster = fs::temp_directory_path() / "meshwork-16k.yaml";
  std::ofstream(cluster) << "model: llama3-405b\ntraining: {global_batch_size: 2048}\n"
                            "cluster: {gpu: h100-sxm, num_gpus: 16384, topology: {tiers: 3, switch_radix: 64}}\n";
  const Outcome r = meshwork({"search", "--model", "llama3-405b", "--cluster", cluster.string(), "--top", "50", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  bool uneven = false;
  for (const auto& c : nlohmann::json::parse(r.out)) {
    uneven = uneven || c["plan"]["parallelism"]["decoder_first_pipeline_num_layers"].get<int>() > 0;
  }
  EXPECT_TRUE(uneven);
  fs::remove(cluster);
}

}  // namespace
}  // namespace meshwork::cli

namespace meshwork::cli {
namespace {

TEST(Program, SummaryChecksTheLoweredStep) {
  const Outcome r = meshwork({"program", "--json", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stages"], 8);
  EXPECT_EQ(j["classes"].size(), 8u);
  EXPECT_EQ(j["classes"][0]["ranks"], 128);
  EXPECT_TRUE(j["check"]["ok"].get<bool>());
  // Interleaved, p = 8, v = 2, m = 96: (p - 1) / (v m).
  EXPECT_NEAR(j["unit_replay_bubble_fraction"].get<double>(), 7.0 / 192, 1e-12);
}

TEST(Program, ARanksStreamAndAnOutOfRangeRank) {
  const std::string plan = (kSource / "scenarios/cpu/tiny-dense-cpu.yaml").string();
  const Outcome r = meshwork({"program", "--rank", "1", "--json", plan});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rank"], 1);
  ASSERT_FALSE(j["ops"].empty());
  EXPECT_EQ(j["ops"][0]["stream"], "compute");
  const Outcome bad = meshwork({"program", "--rank", "100000", plan});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("outside the plan's"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace meshwork::cli

#ifdef MESHWORK_HAVE_SIMGRID
namespace meshwork::cli {
namespace {

TEST(Simulate, AReportWithMethodSimulatedAndTheHottestLinks) {
  const Outcome r = meshwork({"simulate", "--json", (kSource / "scenarios/cpu/tiny-dense-cpu.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["method"], "simulated");
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_FALSE(j["hottest_links"].empty());
  const Outcome explained = meshwork({"simulate", "--explain", (kSource / "scenarios/cpu/tiny-dense-cpu.yaml").string()});
  ASSERT_EQ(explained.code, 0) << explained.err;
  EXPECT_NE(explained.out.find("where the step went"), std::string::npos);
  // The text carries what estimate's does: the memory table and the power (issue 24).
  EXPECT_NE(explained.out.find("  memory per GPU (GiB): stage  weights"), std::string::npos) << explained.out;
  EXPECT_NE(explained.out.find("  power: "), std::string::npos) << explained.out;
}

// A simulation process that dies is one error naming the plan file, the cause found in its
// messages and what to do, with those messages kept in a file the error names (issue 25).
TEST(Simulate, ADeadSimulationProcessIsExplainedAndItsMessagesKept) {
  const std::string plan = (kSource / "scenarios/cpu/tiny-dense-cpu.yaml").string();
  struct Case {
    const char* how;
    const char* cause;
  };
  for (const Case c : {Case{"abort", "died of SIGABRT: a SimGrid assertion: \"[0.000000] /build/simgrid/src/kernel/EngineImpl.cpp:123: [root/CRITICAL] Assertion"},
                       Case{"kill", "died of SIGKILL: killed from outside, most likely by the kernel's out-of-memory killer"},
                       Case{"bad_alloc", "ended without a result (exit status 4): out of memory"}}) {
    const Outcome r = meshwork({"simulate", plan, "--inject-child-death", c.how});
    EXPECT_EQ(r.code, 1) << c.how;
    EXPECT_EQ(r.err.rfind(plan + ": error: the simulation process " , 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.cause), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    const auto at = r.err.find("are in ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const fs::path log = r.err.substr(at + 7, r.err.size() - at - 7 - 2);  // up to ")\n"
    EXPECT_TRUE(fs::exists(log)) << log;
    if (std::string(c.how) == "abort") {
      std::ifstream in(log);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(text.find("Assertion `injected' failed"), std::string::npos) << text;
    }
    fs::remove(log);
  }
  // A simulation that ends well leaves no log behind.
  const Outcome ok = meshwork({"simulate", plan});
  ASSERT_EQ(ok.code, 0) << ok.err;
}

}  // namespace
}  // namespace meshwork::cli
#endif

#ifdef MESHWORK_HAVE_SIMGRID
namespace meshwork::cli {
namespace {

TEST(Sweep, EveryPointCanBeSimulated) {
  const Outcome r = meshwork({"sweep", "--method", "simulated", (kSource / "tests/data/sweeps/tiny-simulated.yaml").string(), "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u) << r.out.substr(0, 400);
  int simulated = 0;
  for (const auto& row : j) {
    if (row["status"] == "ok") {
      EXPECT_EQ(row["method"], "simulated") << row.dump();
      ++simulated;
    }
  }
  EXPECT_GT(simulated, 0);
  const Outcome bad = meshwork({"sweep", "--method", "guessed", (kSource / "tests/data/sweeps/tiny-simulated.yaml").string()});
  EXPECT_EQ(bad.code, 2);
}

// The closed form's best two, simulated and ranked by the simulation at the top; the rest
// stay estimated.
TEST(Sweep, SimulateBestRanksTheClosedFormsBestBySimulation) {
  const std::string sweep = (kSource / "tests/data/sweeps/tiny-simulated.yaml").string();
  const Outcome all = meshwork({"sweep", "--method", "simulated", sweep, "--json", "-"});
  const Outcome r = meshwork({"sweep", "--simulate-best", "2", sweep, "--json", "-"});
  ASSERT_EQ(all.code, 0) << all.err;
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out), every = nlohmann::json::parse(all.out);
  ASSERT_GE(j.size(), 3u);
  EXPECT_EQ(j[0]["method"], "simulated");
  EXPECT_EQ(j[1]["method"], "simulated");
  EXPECT_EQ(j[2]["method"], "estimated");
  EXPECT_GE(j[0]["mfu"].get<double>(), j[1]["mfu"].get<double>());
  int matched = 0;
  for (int i = 0; i < 2; ++i) {
    for (const auto& row : every) {
      if (row["point"] == j[i]["point"]) {
        ++matched;
        EXPECT_DOUBLE_EQ(row["mfu"].get<double>(), j[i]["mfu"].get<double>()) << row.dump();
      }
    }
  }
  EXPECT_EQ(matched, 2) << "each re-ranked point is a point of the all-simulated sweep";
}

}  // namespace
}  // namespace meshwork::cli
#endif
