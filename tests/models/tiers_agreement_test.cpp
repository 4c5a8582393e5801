// The two tiers on every shipped scenario (issue 18): the closed form is the simulator without
// its dynamic effects, so their steps agree within 3%, and each term of the step's breakdown
// larger than 2% of it within 5%, unless the plan has contention or scheduling the closed form
// cannot see, and then this test names the plan (the term) and why. A plan outside 3% because
// its fabric blocks has a copy on a non-blocking fabric among the scenarios, where the 3% holds.
// It reads the goldens both tiers wrote for each scenario (tests/golden/scenarios/**, which the
// determinism tests hold to what this build prints), so it costs no simulation.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = fs::path(MESHWORK_SOURCE_DIR) / "tests/golden/scenarios";
const fs::path kScenarios = fs::path(MESHWORK_SOURCE_DIR) / "scenarios";

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
// until it is taken off this list, so the list stays true. The 1:7-pod Llama 3 plan and its
// degraded copy came within 3% when the estimate priced the NIC a pipeline transfer shares with
// its stage's DP collectives (issue 20's NCCL latencies had taken the non-blocking copy to
// -3.0%, the 16K plan to -3.8%). The 131K plan joined it on 2026-12-08 (-0.9% to -11.5%), when
// each stage's DP stream was played where its items place it (kPodShared below: its agreement
// had been two errors cancelling). It has no non-blocking copy where the 3% holds, as the issue
// asks of a plan listed here: a copy of it with pod_oversubscription 1 (not shipped) is 31%
// short (8.81 s against 12.81 s simulated, DP 2.55 s against 6.01: its 8,192-member rings meet
// each other under destination-mod-k across the non-blocking core, which no share counted tier
// by tier sees), as it was before (8.83 s).
constexpr const char* kPodShared = "DP rings and the pipeline's transfers sharing the 1:7 pods' links, priced one kind at a time";

const std::map<std::string, Known>& known_differences() {
  static const std::map<std::string, Known> k = {
      {"bench/llama3-405b-h100-131072", {0.12, kPodShared}},
  };
  return k;
}

// Plans on a blocking fabric, each with the scenario of the same plan on a non-blocking copy
// of its fabric: both agree within 3%.
const std::map<std::string, std::string>& nonblocking_copies() {
  static const std::map<std::string, std::string> k = {
      {"heldout/llama3-405b-h100-16384", "bench/llama3-405b-h100-16384-nonblocking"},
  };
  return k;
}

// The breakdown terms outside 5% on plans whose steps agree or are listed above, by scenario
// and term, each with its reason; as above, a term that comes back within 5% fails the test
// until it is taken off. Two reasons cover them, beside the degraded plan's straggler (a fifth, a ring held to its busiest link,
// went when both tiers took NCCL's latencies: the ZeRO-3 plans' DP difference was the
// simulator's route latency per ring step against the estimate's tier count; a fourth, BLOOM's
// transfers priced at one steady share of the NICs, went when destination-mod-k spread a
// leaf's parallel down-links (topology/router.cpp, issue 21). The same change took GPT3-175B on
// 512 GPUs' pipeline term under the 2% gate without bringing the tiers together (PP 0.053 s
// estimated against 0.134 s simulated, where it was 0.203 against 0.262 s), and moved the
// critical stage's exposed time from DP to PP in the simulator, DP + PP unchanged: the
// default scenario's DP 0.652 to 0.445 s and PP 0.234 to 0.441 s, KOR22 530B with DP 8's DP
// 1.142 to 0.591 s and PP 0.249 to 0.799 s; the estimate followed on 2026-12-07, kStaggered
// below):
// - kStaggered (no term is listed for it now): destination-mod-k's collisions above the leaves (topology/fabric_share)
//   counted one pipeline stage's DP rings at a time, as the schedule staggers their
//   reductions under the backward; in the simulator the flows that meet on a link end at
//   different times, so the survivors take the bandwidth freed. Where the reductions wait for
//   the end of the backward (no overlap.grad_reduce), the estimate plays the step's end stage
//   by stage (models/end_of_step: each stage's reduction from its own end, beside the stages
//   still reducing, at the share its rings get beside each of theirs), as the simulator plays
//   it. The default scenario's trace (release build, 2026-12-07): every stage's reduction ends
//   within 10 ms of the simulator's (28.906 s against 28.898 for stage 0, 27.859 against
//   27.858 for stage 7, which reduces almost alone and waits 1.0 s for the others, counted as
//   its PP); NAR21 145.6B's eight stages end within 0.6 s of each other, reduce at 72 ms a
//   bucket beside their neighbour stage against 37 ms alone, and end within 32 ms of the
//   simulator's. That took NAR21 145.6B and T2 175B on 1,536 GPUs off this list (DP 0.383 and
//   0.300 s estimated, 0.672 and 0.528 s now, against 0.668 and 0.525 s simulated); before it,
//   timing the reported stage's own rings alone had taken the default scenario, KOR22 530B with
//   DP 8 and NAR21 310.1B off (DP 0.881, 1.178 and 0.788 s against 0.445, 0.591 and 0.398 s).
//   The held-out 16K plan's DP, which overlaps its reductions with the backward, was the last
//   listed for it, until 2026-12-08 (kPodShared now).
// - kNicShared: the pipeline's sends share their NICs with the same ranks' DP reductions
//   (ZeRO-2 reduce-scatters every micro-batch). Since 2026-12-08 the estimate plays each
//   stage's DP stream beside its items in the pipeline replay, a transfer at the NIC's half for
//   what of it runs beside a collective of its sender's or receiver's stream (PipelineSpec::
//   shared_transfer_s), each collective slowed by the transfers through its NICs for the share
//   of the stage's span they run (models::nic_shared_factor); in the simulator the sends also
//   meet other stages' flows under destination-mod-k across the tree, and its reduce-scatters
//   run at 35.4 ms alone and 37.3 ms at the median beside the transfers, flow by flow. The
//   non-blocking 16K copy's PP: 0.516 s before, 0.524 s now, against 0.576 s; its DP 1.264 s
//   before, 1.225 s now, against 1.293 s.
// - kPodShared: on the 1:7 pods every pipeline boundary crosses pods, and the DP rings that
//   leave a pod share its links with those transfers; topology/fabric_share prices each kind's
//   share alone. In the simulator's trace of the 131K plan (release build, 2026-12-08) stage
//   1's reduce-scatters take 60-66 ms while the transfers run and 45.5 ms alone at the step's
//   end (the estimate: 47.5 ms, its NICs shared with the transfers), 7.0 s in all against 6.1
//   s, so each stage's DP stream ends later: its DP is longer, and where the estimate's
//   reported stage ends its stream sooner it waits for the last stage instead (PP). Until each
//   stage's stream was played where its items place it, each stage's own replay (its
//   neighbours never late) ran its reductions behind more compute than the pipeline gives it,
//   and its tail came out about as long as the pods' crowding makes it (131K: DP 2.564 s
//   against 2.536 simulated, now 1.364; the 16K plan's 1.264 against 1.475, now 1.109).
// - The NeMo 24.07 plans' pipeline terms (kCoolDown until 2026-12-08: Llama 2 70B's PP 0.079 s
//   against 0.096, Nemotron-22B's 0.095 against 0.144) went when each stage's DP stream was
//   played beside its items: in the simulator's trace of Nemotron-340B (release build) the
//   warm-up agreed item by item and the cool-down ran 84.6 ms a chunk against 88.7 estimated,
//   each stage's reduce-scatter timed with its neighbours never late slowing items that in the
//   pipeline start after an idle wait; the first stage's first chunk waits 17 ms for the
//   embedding's gather (now its own, not the reported stage's scaled); each stage's last
//   reductions end its step; and the transfers of the cool-down arrive while the receiver's
//   reduce-scatter shares its NIC (0.80 ms simulated against 0.44). Now 0.096, 0.147 and 0.195 s
//   against 0.096, 0.144 and 0.188.
constexpr const char* kNicShared = "pipeline sends sharing NICs with DP flows, and meeting other stages' flows above the leaves";

const std::map<std::pair<std::string, std::string>, Known>& known_term_differences() {
  static const std::map<std::pair<std::string, std::string>, Known> k = {
      {{"bench/llama3-405b-h100-131072", "dp_s"}, {0.5, kPodShared}},
      {{"bench/llama3-405b-h100-16384-degraded", "dp_s"}, {0.15, kPodShared}},
      {{"bench/llama3-405b-h100-16384-degraded", "pp_s"},
       {2.0, "the straggler's and the degraded link's waits, which the closed form does not model (the simulator counts part of "
              "the pipeline's wait as the straggler's stalls: PP 0.39 s and stalls 0.51 s, against 1.11 s of PP estimated), and "
              "the 1:7 pods' links (kPodShared)"}},
      {{"bench/llama3-405b-h100-16384-degraded", "stalls_s"}, {1.0, "the straggler's stalls, which the closed form does not model"}},
      {{"bench/llama3-405b-h100-16384-nonblocking", "dp_s"}, {0.1, kNicShared}},
      {{"bench/llama3-405b-h100-16384-nonblocking", "pp_s"}, {0.1, kNicShared}},
      {{"heldout/llama3-405b-h100-16384", "dp_s"}, {0.3, kPodShared}},
      {{"heldout/llama3-405b-h100-16384", "pp_s"}, {0.7, kPodShared}},
      {{"heldout/llama3-405b-h100-8192", "dp_s"}, {0.15, kPodShared}},
      {{"heldout/llama3-405b-h100-8192", "pp_s"}, {0.35, kPodShared}},
  };
  return k;
}

constexpr const char* kTerms[] = {"compute_s", "recompute_s", "tp_s", "cp_s", "ep_s", "dp_s", "pp_s", "bubble_s", "optimizer_s", "stalls_s"};

// Both tiers' Reports of a shipped scenario, by its path under scenarios/ without ".yaml".
struct Compared {
  std::string key;
  nlohmann::json estimated, simulated;
};
// Every scenario both tiers have a Report of (a plan that does not fit is simulated by neither).
std::vector<Compared> compared_scenarios() {
  std::vector<Compared> out;
  const std::string suffix = ".simulate.json";
  for (const auto& entry : fs::recursive_directory_iterator(kGolden)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string stem = name.substr(0, name.size() - suffix.size());
    auto simulated = report_of(entry.path());
    auto estimated = report_of(entry.path().parent_path() / (stem + ".estimate.json"));
    if (!simulated || !estimated) continue;
    out.push_back({fs::relative(entry.path().parent_path() / stem, kGolden).generic_string(), std::move(*estimated), std::move(*simulated)});
  }
  return out;
}

TEST(Tiers, EveryShippedScenarioAgreesWithinThreePercentOrSaysWhy) {
  int compared = 0;
  std::map<std::string, bool> seen;
  for (const auto& [key, estimated, simulated] : compared_scenarios()) {
    const double e = estimated.at("step_time_s").get<double>(), s = simulated.at("step_time_s").get<double>();
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
  EXPECT_GE(compared, 40) << "every shipped scenario that fits has both tiers' goldens";
  for (const auto& [key, known] : known_differences()) EXPECT_TRUE(seen.count(key)) << key << " is listed but has no goldens";
}

// A plan on a blocking fabric (nonblocking_copies) agrees within 3% on its non-blocking copy, which is
// the same plan but for the fabric's oversubscription.
TEST(Tiers, BlockingFabricPlansAgreeOnTheirNonBlockingCopy) {
  int copies = 0;
  for (const auto& [key, copy] : nonblocking_copies()) {
    ++copies;
    const auto estimated = report_of(kGolden / (copy + ".estimate.json"));
    const auto simulated = report_of(kGolden / (copy + ".simulate.json"));
    ASSERT_TRUE(estimated && simulated) << copy << ": no goldens";
    // The same plan but for its name, description and the oversubscription above the pods.
    const auto original = plan::load_plan(kScenarios / (key + ".yaml")), nonblocking = plan::load_plan(kScenarios / (copy + ".yaml"));
    ASSERT_TRUE(original.ok() && nonblocking.ok()) << key << ", " << copy;
    EXPECT_GT(original.plan.cluster.topology.pod_oversubscription, 1) << key;
    EXPECT_EQ(nonblocking.plan.cluster.topology.pod_oversubscription, 1) << copy;
    nlohmann::json a = plan::to_json(original.plan), b = plan::to_json(nonblocking.plan);
    for (nlohmann::json* j : {&a, &b}) {
      j->erase("name");
      j->erase("description");
      j->at("cluster").at("topology").erase("pod_oversubscription");
    }
    EXPECT_EQ(a, b) << copy << " is not " << key << " on another fabric";
    const double e = estimated->at("step_time_s").get<double>(), s = simulated->at("step_time_s").get<double>();
    EXPECT_LE(std::abs(e / s - 1), 0.03) << copy << ": estimate " << e << " s against simulate " << s << " s";
  }
  EXPECT_GE(copies, 1);
}

// Each term of the breakdown larger than 2% of the simulated step agrees within 5%, or is
// listed with its reason (known_term_differences).
TEST(Tiers, EveryBreakdownTermAgreesWithinFivePercentOrSaysWhy) {
  std::map<std::pair<std::string, std::string>, bool> seen;
  int terms = 0;
  for (const auto& [key, estimated, simulated] : compared_scenarios()) {
    const double step = simulated.at("step_time_s").get<double>();
    for (const char* term : kTerms) {
      const double e = estimated.at("breakdown").value(term, 0.0), s = simulated.at("breakdown").value(term, 0.0);
      if (std::max(e, s) <= 0.02 * step) continue;
      ++terms;
      const double diff = s > 0 ? e / s - 1 : 1;
      const auto it = known_term_differences().find({key, term});
      if (it == known_term_differences().end()) {
        EXPECT_LE(std::abs(diff), 0.05) << key << " " << term << ": estimate " << e << " s against simulate " << s << " s";
      } else {
        seen[{key, term}] = true;
        EXPECT_GT(std::abs(diff), 0.05) << key << " " << term << " now agrees within 5%: take it off the list (" << it->second.why << ")";
        EXPECT_LE(std::abs(diff), it->second.band) << key << " " << term << ": " << it->second.why;
      }
    }
  }
  EXPECT_GE(terms, 150) << "the shipped scenarios' terms over 2% of their steps";
  for (const auto& [key, known] : known_term_differences()) {
    EXPECT_TRUE(seen.count(key)) << key.first << " " << key.second << " is listed but no longer over 2% of its step";
  }
}

// A term of a shipped scenario's goldens within 5% of the simulator's, whatever the 2% gate.
void term_within_five_percent(const std::string& key, const char* term) {
  const auto estimated = report_of(kGolden / (key + ".estimate.json"));
  const auto simulated = report_of(kGolden / (key + ".simulate.json"));
  ASSERT_TRUE(estimated && simulated) << key;
  const double e = estimated->at("breakdown").at(term).get<double>(), s = simulated->at("breakdown").at(term).get<double>();
  ASSERT_GT(s, 0) << key;
  EXPECT_LE(std::abs(e / s - 1), 0.05) << key << ": " << term << " estimated " << e << " s against " << s << " s simulated";
}

// Without overlap.grad_reduce every stage reduces its gradients after its last item, and the
// reported stage (the one that computes longest, here the last, done first) reduces while the
// others still compute or reduce: its DP is its own reduction beside those running, then it
// waits (models/end_of_step), whatever the 2% gate above. The estimate priced it at the worst
// stage's collisions until 2026-12-07 (DP 0.881, 1.178 and 0.788 s).
TEST(Tiers, AStageDoneFirstReducesBesideTheOthersThenWaitsForTheLast) {
  for (const char* key : {"gpt3-175b-a100-1024", "published/kor22-530b-dp8", "published/nar21-310.1b"}) {
    term_within_five_percent(key, "dp_s");
    // The wait, where it waits, is counted as the pipeline's, as the simulator counts a stage
    // done early (NAR21 310.1B's reported stage hardly waits: 0.19 s of PP against 0.58 s when
    // it was priced as the difference between the worst stage's rings and its own).
    term_within_five_percent(key, "pp_s");
  }
}

// Where every stage's reduction runs at the step's end at once (NAR21 145.6B's interleaved
// schedule ends its eight stages within 0.6 s of each other), a stage's rings meet its
// neighbour stage's on the links above the leaves (destination-mod-k: 72 ms a bucket against
// 37 ms alone in the simulator). The estimate counted each stage's rings alone until
// 2026-12-07 (DP 0.383 and 0.300 s against 0.668 and 0.525 s simulated).
TEST(Tiers, StagesReducingAtTheStepsEndTogetherMeetOnTheirLinks) {
  for (const char* key : {"published/nar21-145.6b", "published/nar21-t2-175b-ptdp-1536"}) term_within_five_percent(key, "dp_s");
}

// Where the reported stage's own reduction ends after every other stage's (NAR21 39.1B: two
// stages of four, the reported one with more parameters), its collectives fill the idle after
// its items that the bubble (the replay without communication) counts too: the step is the last
// stage's end, not that plus the overlap. Until the review of 2026-12-07 the estimate counted
// both (bubble 0.118 s against 0.081 simulated, the step +0.23%); now 0.094 s and +0.07%.
TEST(Tiers, AReportedStageEndingLastIsNotCountedTwice) {
  const auto estimated = report_of(kGolden / "published/nar21-39.1b.estimate.json");
  const auto simulated = report_of(kGolden / "published/nar21-39.1b.simulate.json");
  ASSERT_TRUE(estimated && simulated);
  const double e = estimated->at("step_time_s").get<double>(), s = simulated->at("step_time_s").get<double>();
  EXPECT_LE(std::abs(e / s - 1), 0.0015) << "estimate " << e << " s against " << s << " s simulated";
  EXPECT_EQ(estimated->at("breakdown").at("pp_s").get<double>(), 0.0);
}

// With overlap.grad_reduce and param_gather each stage's DP holds some of its items (its
// collectives take SMs from them; its chunks' first forwards wait for the gathers dispatched
// with the step): the estimate holds every stage's in its pipeline replay, so that its
// neighbours wait for it there, as the simulator's do (PipelineSpec::dp_streams, not_before).
// Before, the neighbours were never late: Nemotron-340B's PP 0.104 s against 0.188 s simulated,
// the 131K Llama 3 plan's 3.175 s against 3.383 s.
TEST(Tiers, NeighboursWaitForAStageItsOwnDpHolds) {
  term_within_five_percent("published/nemo2407-nemotron-340b-128", "pp_s");
  term_within_five_percent("bench/llama3-405b-h100-131072", "pp_s");
}

// Each stage's DP stream played beside its items where the schedule places them (each stage's
// own buckets, gathers and reductions; a transfer sharing its NIC with the stream of its sender
// or receiver where both run), as the simulator plays it, rather than each stage's items held
// for what its own replay, its neighbours never late, measured. Before (2026-12-07): NeMo's
// Llama 2 70B's PP 0.079 s against 0.096 s simulated, Nemotron-22B's 0.095 s against 0.144 s.
TEST(Tiers, EachStagesDpStreamRunsWhereItsItemsFall) {
  for (const char* key : {"published/nemo2407-llama2-70b-64", "published/nemo2407-nemotron-22b-64", "published/nemo2407-nemotron-340b-128"}) {
    term_within_five_percent(key, "pp_s");
  }
}

}  // namespace
}  // namespace meshwork::models
