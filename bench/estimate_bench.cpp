// How fast is the closed form? Estimates per second on one core (of one plan, and of plans whose
// pipeline schedules differ each time), against loading and validating the same plan, and a
// 10,000-plan sweep to CSV.
//
//   build/release/bench/meshwork_bench
#include <benchmark/benchmark.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/estimate.hpp"
#include "models/pipeline.hpp"
#include "models/sweep.hpp"
#include "plan/document.hpp"
#include "plan/plan_io.hpp"

namespace {

using namespace meshwork;

nlohmann::json base_tree() {
  auto doc = plan::read_document(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/gpt3-175b-a100-1024.yaml");
  return doc.document->root;
}

void BM_LoadAndValidate(benchmark::State& state) {
  const auto tree = base_tree();
  for (auto _ : state) benchmark::DoNotOptimize(plan::load_plan_json(tree));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LoadAndValidate);

void BM_Estimate(benchmark::State& state) {
  const auto loaded = plan::load_plan_json(base_tree());
  models::EstimateOptions options;
  options.provenance = false;
  for (auto _ : state) benchmark::DoNotOptimize(models::estimate(loaded.plan, options));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Estimate);

// The estimate's part that grows with the step: its two-lane pipeline replay (models/pipeline)
// of the default scenario's shape (PP 8, interleaved v 2, 96 micro-batches), the stages' times
// a little uneven as the embedding and head make them.
void BM_PipelineReplay(benchmark::State& state) {
  models::PipelineSpec with_comm;
  with_comm.schedule = plan::PipelineSchedule::interleaved;
  with_comm.stages = 8;
  with_comm.chunks = 2;
  with_comm.microbatches = 96;
  with_comm.transfer_s = 0.004;
  for (int i = 0; i < 16; ++i) {
    const double edge = i == 0 || i == 15 ? 1.05 : 1.0;
    with_comm.forward_s.push_back(0.1 * edge);
    with_comm.backward_s.push_back(0.3 * edge);
    with_comm.weight_s.push_back(0.1 * edge);
  }
  models::PipelineSpec compute_only = with_comm;
  compute_only.transfer_s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(models::pipeline_times(with_comm, compute_only));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PipelineReplay);

// Twelve pipeline shapes of the same model and cluster (PP 2, 4, 8, 16 x interleaved v = 2, 3,
// 6): the estimate keeps the traversals of its thread's last 8 schedule shapes
// (models/pipeline.cpp). Cycling through all twelve, every estimate makes its traversal anew;
// taking each plan 8 times in a row, 7 of 8 find it kept. The ratio of the two is what keeping
// the traversal saves a sweep that repeats a shape.
std::vector<plan::Plan> twelve_shapes() {
  std::vector<plan::Plan> plans;
  for (const int pp : {2, 4, 8, 16}) {
    for (const int vpp : {2, 3, 6}) {
      auto tree = base_tree();
      tree["parallelism"]["pp"] = pp;
      tree["parallelism"]["vpp"] = vpp;
      auto loaded = plan::load_plan_json(tree);
      if (!loaded.ok()) throw std::runtime_error("a twelve-shapes plan does not load: PP " + std::to_string(pp) + ", v " + std::to_string(vpp));
      plans.push_back(std::move(loaded.plan));
    }
  }
  return plans;
}

void estimate_shapes(benchmark::State& state, std::size_t repeats) {
  const auto plans = twelve_shapes();
  models::EstimateOptions options;
  options.provenance = false;
  std::size_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(models::estimate(plans[n / repeats % plans.size()], options));
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_EstimateTwelveShapesInTurn(benchmark::State& state) { estimate_shapes(state, 1); }
void BM_EstimateTwelveShapesEachEightTimes(benchmark::State& state) { estimate_shapes(state, 8); }
BENCHMARK(BM_EstimateTwelveShapesInTurn);
BENCHMARK(BM_EstimateTwelveShapesEachEightTimes);

void BM_LoadValidateAndEstimate(benchmark::State& state) {
  const auto tree = base_tree();
  models::EstimateOptions options;
  options.provenance = false;
  for (auto _ : state) {
    auto loaded = plan::load_plan_json(tree);
    benchmark::DoNotOptimize(models::estimate(loaded.plan, options));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LoadValidateAndEstimate);

// 4 TP x 5 PP x 5 VPP x 5 micro-batch x 4 ZeRO x 5 GPU counts = 10,000 plans, written as CSV.
void BM_Sweep10000ToCsv(benchmark::State& state) {
  plan::SweepSpec spec;
  spec.base = std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/gpt3-175b-a100-1024.yaml";
  spec.base_tree = base_tree();
  spec.base_tree["parallelism"].erase("vpp");
  auto axis = [&](const char* section, const char* key, std::vector<nlohmann::json> values) {
    spec.axes.push_back({std::string(section) + "." + key, {key}, {section}, std::move(values), std::string(section) + "." + key});
  };
  axis("parallelism", "tp", {1, 2, 4, 8});
  axis("parallelism", "pp", {1, 2, 4, 8, 16});
  axis("parallelism", "vpp", {1, 2, 3, 4, 6});
  axis("training", "micro_batch_size", {1, 2, 4, 8, 16});
  axis("parallelism", "zero_stage", {0, 1, 2, 3});
  axis("cluster", "num_gpus", {512, 1024, 1536, 2048, 3072});
  for (auto _ : state) {
    auto rows = models::run_sweep(spec);
    models::rank_rows(rows, plan::RankBy::mfu);
    std::string csv = models::sweep_csv_header(spec) + '\n';
    for (const auto& r : rows) csv += models::sweep_csv_row(r) + '\n';
    benchmark::DoNotOptimize(csv);
    state.counters["plans"] = static_cast<double>(rows.size());
  }
}
BENCHMARK(BM_Sweep10000ToCsv)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
