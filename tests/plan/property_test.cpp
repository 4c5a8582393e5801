// Randomly generated plans: each loads to a valid plan or to diagnostics, never a crash; valid
// ones round-trip exactly and have a consistent rank layout; consistent meshes are accepted.
#include <random>

#include <gtest/gtest.h>

#include "plan/derived.hpp"
#include "plan/rank_layout.hpp"
#include "plan/validate.hpp"
#include "tests/plan/test_plans.hpp"

namespace meshwork::plan {
namespace {

using nlohmann::json;

json random_scalar(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 11);
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 2: return std::uniform_int_distribution<std::int64_t>(-4, 4)(rng);
    case 3: return std::uniform_int_distribution<std::int64_t>(1, 1 << 12)(rng);
    case 4: return std::uniform_int_distribution<std::int64_t>(INT64_MIN, INT64_MAX)(rng);
    case 5: return std::uniform_real_distribution<double>(-1e3, 1e3)(rng);
    case 6: return 1e300;
    case 7: return "400Gb/s";
    case 8: return "2h";
    case 9: return "garbage";
    case 10: return json::array({1, "x"});
    default: return json::object({{"k", 1}});
  }
}

// Mutates one random leaf or section of `j`, or adds a random key.
void mutate(json& j, std::mt19937_64& rng, int depth = 0) {
  if (!j.is_object() || j.empty() || depth > 4) return;
  std::uniform_int_distribution<std::size_t> pick(0, j.size() - 1);
  auto it = j.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(pick(rng)));
  const int action = std::uniform_int_distribution<int>(0, 9)(rng);
  if (action < 5 && it->is_object()) {
    mutate(*it, rng, depth + 1);
  } else if (action < 9) {
    *it = random_scalar(rng);
  } else {
    j["unexpected_" + std::to_string(rng() % 7)] = random_scalar(rng);
  }
}

void expect_consistent(const LoadResult& r, const std::string& context) {
  for (const auto& d : r.diagnostics.items()) {
    EXPECT_FALSE(d.message.empty()) << context;
  }
  if (!r.ok()) return;
  const Plan& p = r.plan;
  const auto again = load_plan_json(to_json(p));
  EXPECT_TRUE(again.ok()) << context << testing::dump(again.diagnostics);
  EXPECT_EQ(again.plan, p) << context;
  const auto layout = RankLayout::from_plan(p.parallelism);
  EXPECT_EQ(layout.world_size(), p.cluster.num_gpus) << context;
  const auto d = derive(p);
  EXPECT_EQ(d.micro_batches_per_step * p.training.micro_batch_size * p.parallelism.data_parallel_size,
            p.training.global_batch_size)
      << context;
  std::int64_t layers = 0;
  for (auto l : d.layers_per_stage) layers += l;
  EXPECT_EQ(layers, p.model.num_layers) << context;
}

TEST(PlanProperty, RandomMutationsGiveAPlanOrDiagnosticsNeverACrash) {
  std::mt19937_64 rng(20261129);
  const json base = to_json(testing::base_plan());
  int valid = 0;
  for (int i = 0; i < 3000; ++i) {
    json j = base;
    const int mutations = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int m = 0; m < mutations; ++m) mutate(j, rng);
    const auto r = load_plan_json(j);
    expect_consistent(r, j.dump());
    if (r.ok()) ++valid;
    if (::testing::Test::HasFailure()) break;
  }
  // Some mutations are harmless (a bool flipped, a valid size): both outcomes are exercised.
  EXPECT_GT(valid, 50);
  EXPECT_LT(valid, 3000);
}

std::int64_t pick(std::mt19937_64& rng, std::initializer_list<std::int64_t> values) {
  std::uniform_int_distribution<std::size_t> d(0, values.size() - 1);
  return *(values.begin() + static_cast<std::ptrdiff_t>(d(rng)));
}

TEST(PlanProperty, ConsistentRandomMeshesAreAccepted) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    const std::int64_t tp = pick(rng, {1, 2, 4, 8});
    const std::int64_t pp = pick(rng, {1, 2, 3, 4, 8});
    const std::int64_t ep = pick(rng, {1, 2, 4});
    const std::int64_t cp = ep > 1 ? 1 : pick(rng, {1, 2, 4});  // Megatron-core: no EP with CP
    const std::int64_t dp = ep * pick(rng, {1, 2, 3, 4});
    const std::int64_t vpp = pp > 1 ? pick(rng, {1, 2}) : 1;
    const std::int64_t mbs = pick(rng, {1, 2});
    const std::int64_t micro_batches = pp * pick(rng, {1, 4, 16});  // interleaving needs >= PP
    const std::int64_t gpus = tp * cp * pp * dp;
    const std::int64_t per_node = gpus % 8 == 0 ? 8 : gpus;
    json j = {{"model",
               {{"num_layers", pp * vpp * pick(rng, {1, 2, 3})},
                {"hidden_size", 1024},
                {"num_attention_heads", 16},
                {"num_query_groups", pick(rng, {8, 16})},
                {"seq_length", 4096},
                {"vocab_size", 32000},
                {"moe", {{"num_moe_experts", ep > 1 ? 8 * ep : 0}}}}},
              {"training", {{"global_batch_size", mbs * dp * micro_batches}, {"micro_batch_size", mbs}}},
              {"parallelism",
               {{"tp", tp}, {"cp", cp}, {"pp", pp}, {"ep", ep}, {"vpp", vpp},
                {"sequence_parallel", tp > 1},
                {"pipeline_schedule", vpp > 1 ? "interleaved" : "1f1b"}}},
              {"cluster", {{"gpu", "h100-sxm"}, {"num_gpus", gpus}, {"gpus_per_node", per_node}}}};
    const auto r = load_plan_json(j);
    EXPECT_TRUE(r.ok()) << j.dump() << "\n" << testing::dump(r.diagnostics);
    expect_consistent(r, j.dump());
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace meshwork::plan
