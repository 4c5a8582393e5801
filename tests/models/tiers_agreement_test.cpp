// The two tiers on every shipped scenario (issue 18): the closed form is the simulator without
// its dynamic effects, so their steps agree within 3% unless the plan has contention or
// scheduling the closed form cannot see, and then this test names the plan and why. It reads
// the goldens both tiers wrote for each scenario (tests/golden/scenarios/**, which the
// determinism tests hold to what this build prints), so it costs no simulation.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace meshwork::models {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = fs::path(MESHWORK_SOURCE_DIR) / "tests/golden/scenarios";

// A golden is "exit N" and then, for exit 0, the command's JSON.
std::optional<nlohmann::json> report_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string first;
  std::getline(in, first);
  if (first != "exit 0") return std::nullopt;
  std::stringstream rest;
  rest << in.rdbuf();
  return nlohmann::json::parse(rest.str());
}

struct Known {
  double band;      // |estimate / simulate - 1| allowed
  const char* why;  // what the closed form cannot see
};

// The plans outside 3%, each with its reason. A plan that comes back within 3% fails the test
// until it is taken off this list, so the list stays true.
const std::map<std::string, Known>& known_differences() {
  static const std::map<std::string, Known> k = {
      {"heldout/llama3-405b-h100-16384",
       {0.05, "1:7 oversubscribed pods, crossed by 6 of the pipeline's 16 boundaries (the last pod, a third full, by the "
              "interleaved wrap too): the closed form prices each boundary and each kind at its steady-state share alone, "
              "destination-mod-k's collisions included (topology/fabric_share); in the simulator the pipeline's sends bunch "
              "and meet DP flows of other stages on the same links (PP 0.69 s and DP 1.45 s simulated, 0.61 s and 1.28 s "
              "estimated)"}},
      {"bench/llama3-405b-h100-16384-degraded",
       {0.05, "1:7 oversubscribed pods, and the simulator's stragglers (0.50 s of stalls the closed form has no model of)"}},
  };
  return k;
}

TEST(Tiers, EveryShippedScenarioAgreesWithinThreePercentOrSaysWhy) {
  int compared = 0;
  std::map<std::string, bool> seen;
  for (const auto& entry : fs::recursive_directory_iterator(kGolden)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".simulate.json";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const fs::path estimate_file = entry.path().parent_path() / (name.substr(0, name.size() - suffix.size()) + ".estimate.json");
    const auto simulated = report_of(entry.path());
    const auto estimated = report_of(estimate_file);
    if (!simulated || !estimated) continue;  // a plan that does not fit is simulated by neither
    const std::string scenario = fs::relative(estimate_file, kGolden).generic_string();
    const std::string key = scenario.substr(0, scenario.size() - std::string(".estimate.json").size());
    const double e = estimated->at("step_time_s").get<double>(), s = simulated->at("step_time_s").get<double>();
    ASSERT_GT(s, 0) << key;
    const double diff = e / s - 1;
    ++compared;
    const auto it = known_differences().find(key);
    if (it == known_differences().end()) {
      EXPECT_LE(std::abs(diff), 0.03) << key << ": estimate " << e << " s against simulate " << s << " s";
    } else {
      seen[key] = true;
      EXPECT_GT(std::abs(diff), 0.03) << key << " now agrees within 3%: take it off the list (" << it->second.why << ")";
      EXPECT_LE(std::abs(diff), it->second.band) << key << ": " << it->second.why;
    }
  }
  EXPECT_GE(compared, 39) << "every shipped scenario that fits has both tiers' goldens";
  for (const auto& [key, known] : known_differences()) EXPECT_TRUE(seen.count(key)) << key << " is listed but has no goldens";
}

}  // namespace
}  // namespace meshwork::models
