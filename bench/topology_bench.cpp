// Building fabrics and routing every parallel group on them.
//
//   build/release/bench/meshwork_topology_bench
#include <benchmark/benchmark.h>

#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"

namespace {

using namespace meshwork;

plan::Plan plan_for(std::int64_t gpus, std::int64_t dp) {
  auto r = plan::load_plan_text("model: llama3-405b\ntraining: {global_batch_size: " + std::to_string(dp) +
                                    "}\nparallelism: {tp: 8, pp: 16, vpp: 1, sp: true, decoder_first_pipeline_num_layers: 7, "
                                    "decoder_last_pipeline_num_layers: 7}\ncluster: {gpu: h100-sxm, num_gpus: " +
                                    std::to_string(gpus) + ", topology: {tiers: 3, switch_radix: 64}}\n",
                                plan::Format::yaml);
  return r.plan;
}

void BM_BuildFabric(benchmark::State& state) {
  const auto p = plan_for(state.range(0), state.range(0) / 128);
  for (auto _ : state) benchmark::DoNotOptimize(topology::build(p.cluster));
  state.counters["gpus"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_BuildFabric)->Arg(16384)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(1);

// One path per group: from each group's first member to its farthest (TP 8 x PP 16 x DP 128).
void BM_RouteEveryGroup16k(benchmark::State& state) {
  const auto p = plan_for(16384, 128);
  const auto t = *topology::build(p.cluster).topology;
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  for (auto _ : state) {
    std::int64_t groups = 0;
    for (auto kind : {plan::GroupKind::tp, plan::GroupKind::dp, plan::GroupKind::pp}) {
      for (std::int64_t g = 0; g < layout.num_groups(kind); ++g, ++groups) {
        benchmark::DoNotOptimize(topology::group_path(t, layout, kind, g));
      }
    }
    state.counters["groups"] = static_cast<double>(groups);
  }
}
BENCHMARK(BM_RouteEveryGroup16k)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
