// Building fabrics and routing every parallel group on them.
//
//   build/release/bench/meshwork_topology_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"
#include "topology/router.hpp"

namespace {

using namespace meshwork;

// TP 8 x PP 16 x DP gpus/128 of Llama 3 405B on a 3-tier fat tree: radix 64 holds 65,536
// NICs (k^3/4 at one NIC per GPU), so 131,072 GPUs take 128-port switches.
plan::Plan plan_for(std::int64_t gpus) {
  const std::int64_t radix = gpus > 65536 ? 128 : 64;
  auto r = plan::load_plan_text("model: llama3-405b\ntraining: {global_batch_size: " + std::to_string(gpus / 128) +
                                    "}\nparallelism: {tp: 8, pp: 16, vpp: 1, sp: true, decoder_first_pipeline_num_layers: 7, "
                                    "decoder_last_pipeline_num_layers: 7}\ncluster: {gpu: h100-sxm, num_gpus: " +
                                    std::to_string(gpus) + ", topology: {tiers: 3, switch_radix: " + std::to_string(radix) + "}}\n",
                                plan::Format::yaml);
  if (!r.ok()) {
    std::fprintf(stderr, "benchmark plan for %lld GPUs is invalid: %s\n", static_cast<long long>(gpus),
                 r.diagnostics.items().front().message.c_str());
    std::abort();
  }
  return r.plan;
}

topology::Topology fabric(const plan::Plan& p) {
  auto b = topology::build(p.cluster);
  if (!b.topology) {
    std::fprintf(stderr, "benchmark fabric: %s\n", b.error.c_str());
    std::abort();
  }
  return std::move(*b.topology);
}

void BM_BuildFabric(benchmark::State& state) {
  const auto p = plan_for(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(fabric(p));
  state.counters["gpus"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_BuildFabric)->Arg(16384)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(1);

// The farthest member of every group from its first (TP 8 x PP 16 x DP gpus/128), one router
// for all groups: build plus routing is the budget (16,384 GPUs under 1 s, 131,072
// under 10 s).
void BM_BuildAndRouteEveryGroup(benchmark::State& state) {
  const std::int64_t gpus = state.range(0);
  const auto p = plan_for(gpus);
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  for (auto _ : state) {
    const auto t = fabric(p);
    topology::Router router(t);
    std::int64_t groups = 0;
    for (auto kind : {plan::GroupKind::tp, plan::GroupKind::dp, plan::GroupKind::pp}) {
      for (std::int64_t g = 0; g < layout.num_groups(kind); ++g, ++groups) {
        benchmark::DoNotOptimize(topology::group_path(router, layout, kind, g));
      }
    }
    state.counters["groups"] = static_cast<double>(groups);
  }
  state.counters["gpus"] = static_cast<double>(gpus);
}
BENCHMARK(BM_BuildAndRouteEveryGroup)->Arg(16384)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(1);

// Routes one flow per DP ring edge (every DP group's neighbours), hashed over equal-cost paths:
// what the simulator asks of topology/ when it puts a step's gradient reduction on the links.
void BM_RouteDpRingEdges(benchmark::State& state) {
  const std::int64_t gpus = state.range(0);
  const auto p = plan_for(gpus);
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  const auto t = fabric(p);
  topology::Router router(t);
  for (auto _ : state) {
    std::int64_t flows = 0;
    for (std::int64_t g = 0; g < layout.num_groups(plan::GroupKind::dp); ++g) {
      const auto members = layout.group(plan::GroupKind::dp, g);
      for (std::size_t i = 0; i < members.size(); ++i, ++flows) {
        benchmark::DoNotOptimize(router.route(members[i], members[(i + 1) % members.size()], static_cast<std::uint64_t>(flows)));
      }
    }
    state.counters["flows"] = static_cast<double>(flows);
  }
}
BENCHMARK(BM_RouteDpRingEdges)->Arg(16384)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
