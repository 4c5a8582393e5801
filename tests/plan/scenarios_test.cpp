// Every scenario file is loaded and validated; the published ones keep the mesh of their paper.
#include <filesystem>

#include <gtest/gtest.h>

#include "plan/plan_io.hpp"
#include "plan/sweep_spec.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::plan {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> scenario_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(MESHWORK_SOURCE_DIR) / "scenarios")) {
    const auto ext = e.path().extension();
    const bool sweep = e.path().filename().string().find(".sweep.") != std::string::npos;
    if (e.is_regular_file() && !sweep && (ext == ".yaml" || ext == ".yml" || ext == ".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(Scenarios, EveryScenarioLoadsWithoutErrorsOrWarnings) {
  const auto files = scenario_files();
  EXPECT_GE(files.size(), 17u);
  for (const auto& f : files) {
    const auto r = load_plan(f);
    EXPECT_TRUE(r.ok()) << f << "\n" << testing::dump(r.diagnostics);
    EXPECT_EQ(r.diagnostics.warning_count(), 0u) << f << "\n" << testing::dump(r.diagnostics);
    EXPECT_FALSE(r.plan.name.empty()) << f;
    EXPECT_EQ(r.plan.name, f.stem().string()) << "a scenario is named after its file";
  }
}

// Sweep files (*.sweep.yaml) load as sweeps, and every point of their grid is reachable.
TEST(Scenarios, EverySweepFileLoads) {
  int sweeps = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(MESHWORK_SOURCE_DIR) / "scenarios")) {
    if (e.path().filename().string().find(".sweep.") == std::string::npos) continue;
    const auto r = load_sweep(e.path());
    EXPECT_TRUE(r.ok()) << e.path() << "\n" << testing::dump(r.diagnostics);
    EXPECT_GT(r.spec.size(), 1u);
    ++sweeps;
  }
  EXPECT_GE(sweeps, 1);
}

struct PublishedMesh {
  const char* file;
  std::int64_t tp, pp, dp, gpus, gbs;
};

// NAR21 Table 1 and KOR22 Table 3 (docs/reference/published-runs.md A1, A2).
TEST(Scenarios, PublishedRunsKeepTheirMesh) {
  const PublishedMesh rows[] = {
      {"nar21-1.7b", 1, 1, 32, 32, 512},      {"nar21-3.6b", 2, 1, 32, 64, 512},
      {"nar21-7.5b", 4, 1, 32, 128, 512},     {"nar21-18.4b", 8, 1, 32, 256, 1024},
      {"nar21-39.1b", 8, 2, 32, 512, 1536},   {"nar21-76.1b", 8, 4, 32, 1024, 1792},
      {"nar21-145.6b", 8, 8, 24, 1536, 2304}, {"nar21-310.1b", 8, 16, 15, 1920, 2160},
      {"nar21-529.6b", 8, 35, 9, 2520, 2520}, {"nar21-1t", 8, 64, 6, 3072, 3072},
      {"kor22-22b", 8, 1, 1, 8, 4},           {"kor22-175b", 8, 8, 1, 64, 64},
      {"kor22-530b", 8, 35, 1, 280, 280},     {"kor22-1t", 8, 64, 1, 512, 512},
      {"kor22-530b-dp8", 8, 35, 8, 2240, 2240},
  };
  for (const auto& row : rows) {
    const auto r = load_plan(fs::path(MESHWORK_SOURCE_DIR) / "scenarios/published" / (std::string(row.file) + ".yaml"));
    ASSERT_TRUE(r.ok()) << row.file;
    const auto& p = r.plan.parallelism;
    EXPECT_EQ(p.tensor_model_parallel_size, row.tp) << row.file;
    EXPECT_EQ(p.pipeline_model_parallel_size, row.pp) << row.file;
    EXPECT_EQ(p.data_parallel_size, row.dp) << row.file;
    EXPECT_EQ(r.plan.cluster.num_gpus, row.gpus) << row.file;
    EXPECT_EQ(r.plan.training.global_batch_size, row.gbs) << row.file;
  }
}

}  // namespace
}  // namespace meshwork::plan
