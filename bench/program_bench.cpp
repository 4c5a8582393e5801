// Lowering a plan to its Program, at the scale: a Llama-3-405B-shaped plan (128
// layers so that interleaving divides them) on 16,384 GPUs, TP 8 x PP 16 x DP 128,
// interleaved with 2 chunks, 16 micro-batches per step. Baseline: the GPT-3 175B default.
//
//   /usr/bin/time -v build/release/bench/meshwork_program_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "models/flops.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"

namespace {

using namespace meshwork;

plan::Plan load(const std::string& text) {
  auto r = plan::load_plan_text(text, plan::Format::yaml);
  if (!r.ok()) {
    std::fprintf(stderr, "benchmark plan is invalid: %s\n", r.diagnostics.items().front().message.c_str());
    std::abort();
  }
  return r.plan;
}

const plan::Plan& llama() {
  static const plan::Plan p = load(
      "model: {preset: llama3-405b, num_layers: 128}\ntraining: {global_batch_size: 2048, precision: bf16}\n"
      "parallelism: {tp: 8, sp: true, pp: 16, vpp: 2, pipeline_schedule: interleaved, dp: 128, zero_stage: 1}\n"
      "cluster: {gpu: h100-sxm, topology: {tiers: 3, switch_radix: 64}}\n");
  return p;
}

void lower_and_enumerate(benchmark::State& state, const plan::Plan& p) {
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  for (auto _ : state) {
    const auto r = models::lower(p);
    std::size_t ops = 0;
    for (const auto& c : r.program->classes) ops += c.instrs.size();
    // Every rank's view: its class, neighbours and groups.
    std::int64_t groups = 0;
    for (std::int64_t rank = 0; rank < layout.world_size(); ++rank) groups += static_cast<std::int64_t>(models::for_rank(*r.program, layout, rank).groups.size());
    benchmark::DoNotOptimize(groups);
    state.counters["ops"] = static_cast<double>(ops);
    state.counters["ranks"] = static_cast<double>(layout.world_size());
  }
}

void BM_LowerGpt3Default(benchmark::State& state) {
  static const plan::Plan p = load(std::string("model: gpt3-175b\ntraining: {global_batch_size: 1536, precision: fp16, recompute: full}\n") +
                                   "parallelism: {tp: 8, pp: 8, vpp: 2, pipeline_schedule: interleaved, dp: 16}\n"
                                   "cluster: {gpu: a100-sxm-80gb, topology: {tiers: 3, switch_radix: 40}}\n");
  lower_and_enumerate(state, p);
}
BENCHMARK(BM_LowerGpt3Default)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_LowerLlama405b16k(benchmark::State& state) { lower_and_enumerate(state, llama()); }
BENCHMARK(BM_LowerLlama405b16k)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_CheckLlama405b16k(benchmark::State& state) {
  const auto r = models::lower(llama());
  const double flops = models::step_flops(llama()).hardware;
  for (auto _ : state) benchmark::DoNotOptimize(models::check(*r.program, flops));
}
BENCHMARK(BM_CheckLlama405b16k)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
