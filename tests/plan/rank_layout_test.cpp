#include "plan/rank_layout.hpp"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

namespace meshwork::plan {
namespace {

using Ranks = std::vector<std::int64_t>;

DimOrder order(const char* text) {
  std::string error;
  auto o = parse_order(text, error);
  EXPECT_TRUE(o) << error;
  return o.value_or(DimOrder{});
}

// Megatron-LM's parallel_state.initialize_model_parallel docstring: 16 GPUs, TP 2, PP 4 (so DP 2):
// 8 tensor groups [g0, g1], [g2, g3], ...; 8 data groups [g0, g2], [g1, g3], [g4, g6], ...;
// 4 pipeline groups [g0, g4, g8, g12], [g1, g5, g9, g13], ...
TEST(RankLayout, MatchesMegatronDocstringExample) {
  RankLayout l({.tp = 2, .cp = 1, .ep = 1, .dp = 2, .pp = 4}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.world_size(), 16);
  EXPECT_EQ(l.num_groups(GroupKind::tp), 8);
  EXPECT_EQ(l.group(GroupKind::tp, 0), (Ranks{0, 1}));
  EXPECT_EQ(l.group(GroupKind::tp, 1), (Ranks{2, 3}));
  EXPECT_EQ(l.num_groups(GroupKind::dp), 8);
  EXPECT_EQ(l.group(GroupKind::dp, 0), (Ranks{0, 2}));
  EXPECT_EQ(l.group(GroupKind::dp, 1), (Ranks{1, 3}));
  EXPECT_EQ(l.group(GroupKind::dp, 2), (Ranks{4, 6}));
  EXPECT_EQ(l.num_groups(GroupKind::pp), 4);
  EXPECT_EQ(l.group(GroupKind::pp, 0), (Ranks{0, 4, 8, 12}));
  EXPECT_EQ(l.group(GroupKind::pp, 3), (Ranks{3, 7, 11, 15}));
  EXPECT_EQ(l.group_members(GroupKind::pp, 9), (Ranks{1, 5, 9, 13}));
  EXPECT_EQ(l.rank_in_group(GroupKind::pp, 9), 2);
}

TEST(RankLayout, CoordinatesAndRanksAreInverse) {
  RankLayout l({.tp = 2, .cp = 3, .ep = 2, .dp = 4, .pp = 5}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.world_size(), 2 * 3 * 4 * 5);
  std::set<std::int64_t> seen;
  for (std::int64_t r = 0; r < l.world_size(); ++r) {
    const auto c = l.coord(r);
    EXPECT_EQ(l.rank(c), r);
    EXPECT_LT(c.edp, 2);
    seen.insert(r);
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(l.world_size()));
}

// Every kind of group partitions the world, and a rank's group_index/rank_in_group agree with
// the member lists.
void expect_partitions(const RankLayout& l) {
  for (GroupKind g : kAllGroupKinds) {
    std::vector<int> count(static_cast<std::size_t>(l.world_size()), 0);
    for (std::int64_t i = 0; i < l.num_groups(g); ++i) {
      const auto members = l.group(g, i);
      ASSERT_EQ(static_cast<std::int64_t>(members.size()), l.group_size(g));
      EXPECT_EQ(l.group_first(g, i), members.front());
      EXPECT_EQ(l.group_first(g, i) + l.group_span(g), members.back());
      EXPECT_TRUE(std::is_sorted(members.begin(), members.end()));
      for (std::size_t k = 0; k < members.size(); ++k) {
        ++count[static_cast<std::size_t>(members[k])];
        EXPECT_EQ(l.group_index(g, members[k]), i) << to_string(g);
        EXPECT_EQ(l.rank_in_group(g, members[k]), static_cast<std::int64_t>(k)) << to_string(g);
        EXPECT_EQ(l.group_members(g, members[k]), members);
      }
    }
    for (int c : count) EXPECT_EQ(c, 1) << to_string(g);
  }
}

TEST(RankLayout, GroupsPartitionTheWorldForEveryOrder) {
  for (const char* o : {"tp-cp-ep-dp-pp", "tp-pp-dp-ep-cp", "pp-dp-ep-cp-tp", "dp-tp-cp-ep-pp", "ep-tp-dp-pp-cp"}) {
    SCOPED_TRACE(o);
    expect_partitions(RankLayout({.tp = 2, .cp = 2, .ep = 2, .dp = 4, .pp = 3}, order(o)));
    expect_partitions(RankLayout({.tp = 2, .cp = 2, .ep = 2, .dp = 4, .pp = 3, .instances = 2}, order(o)));
    expect_partitions(RankLayout({.tp = 1, .cp = 3, .ep = 1, .dp = 4, .pp = 2, .instances = 6}, order(o)));
  }
}

// Distributed-optimizer instances as Megatron-core's parallel_state forms them: instance i is
// members [i x n/N, (i+1) x n/N) of the ascending DP x CP group, the replicas of position j are
// members j, j + n/N, ... (the intra- and inter-instance groups).
TEST(RankLayout, InstancesAreBlocksOfTheDataAndContextParallelGroup) {
  RankLayout l({.tp = 2, .cp = 2, .ep = 1, .dp = 4, .pp = 1, .instances = 2}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.group_members(GroupKind::dp_cp, 0), (Ranks{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(l.group_members(GroupKind::dp_shard, 0), (Ranks{0, 2, 4, 6}));
  EXPECT_EQ(l.group_members(GroupKind::dp_shard, 9), (Ranks{9, 11, 13, 15}));
  EXPECT_EQ(l.group_members(GroupKind::dp_replica, 6), (Ranks{6, 14}));
  EXPECT_TRUE(l.distinct(GroupKind::dp_shard));
  std::string why;
  EXPECT_TRUE(l.instance_split(GroupKind::dp_cp, why));
  // One instance: the shard is the whole group, and no listing names it twice.
  RankLayout one({.tp = 2, .cp = 2, .ep = 1, .dp = 4, .pp = 1}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(one.group_members(GroupKind::dp_shard, 0), one.group_members(GroupKind::dp_cp, 0));
  EXPECT_FALSE(one.distinct(GroupKind::dp_shard));
  EXPECT_FALSE(one.distinct(GroupKind::dp_replica));
  // CP 4 then DP 3: 2 instances of 6 would cut CP's 4 at 6.
  RankLayout uneven({.tp = 1, .cp = 4, .ep = 1, .dp = 3, .pp = 1, .instances = 2}, order("tp-cp-ep-dp-pp"));
  EXPECT_FALSE(uneven.instance_split(GroupKind::dp_cp, why));
  EXPECT_NE(why.find("inside one of its dimensions"), std::string::npos) << why;
  RankLayout indivisible({.tp = 1, .cp = 1, .ep = 1, .dp = 6, .pp = 1, .instances = 4}, order("tp-cp-ep-dp-pp"));
  EXPECT_FALSE(indivisible.instance_split(GroupKind::dp_cp, why));
  EXPECT_NE(why.find("does not divide"), std::string::npos) << why;
}

TEST(RankLayout, ExpertParallelismIsCarvedOutOfDataParallelism) {
  // DP 4 = EP 2 x expert-DP 2; the dense DP group spans both.
  RankLayout l({.tp = 1, .cp = 1, .ep = 2, .dp = 4, .pp = 1}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.group_members(GroupKind::ep, 0), (Ranks{0, 1}));
  EXPECT_EQ(l.group_members(GroupKind::expert_dp, 0), (Ranks{0, 2}));
  EXPECT_EQ(l.group_members(GroupKind::dp, 0), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(l.group_size(GroupKind::dp), 4);
}

TEST(RankLayout, ExpertDataParallelismSpansContextParallelism) {
  // MoE with CP (EP 1): each CP member holds every expert and its share of the tokens, so the
  // experts' gradients are reduced over CP x DP, as the dense ones are.
  RankLayout l({.tp = 1, .cp = 2, .ep = 1, .dp = 2, .pp = 1}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.group_members(GroupKind::expert_dp, 0), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(l.group_members(GroupKind::expert_dp, 0), l.group_members(GroupKind::dp_cp, 0));
}

TEST(RankLayout, DataAndContextParallelGroupForGradientReduction) {
  RankLayout l({.tp = 2, .cp = 2, .ep = 1, .dp = 2, .pp = 1}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.group_members(GroupKind::cp, 0), (Ranks{0, 2}));
  EXPECT_EQ(l.group_members(GroupKind::dp, 0), (Ranks{0, 4}));
  EXPECT_EQ(l.group_members(GroupKind::dp_cp, 1), (Ranks{1, 3, 5, 7}));
}

TEST(RankLayout, LargeMeshCostsNothingPerRank) {
  // 131,072 GPUs: TP 8 x CP 2 x PP 16 x DP 512; a few lookups, nothing materialised.
  RankLayout l({.tp = 8, .cp = 2, .ep = 8, .dp = 512, .pp = 16}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(l.world_size(), 131072);
  const std::int64_t r = 98765;
  EXPECT_EQ(l.rank(l.coord(r)), r);
  const auto pp = l.group_members(GroupKind::pp, r);
  EXPECT_EQ(pp.size(), 16u);
  EXPECT_NE(std::find(pp.begin(), pp.end(), r), pp.end());
  EXPECT_EQ(l.group_members(GroupKind::dp, r).size(), 512u);
}

// node_span's closed form against counting the nodes of every group's members, over orders,
// shapes (regular and not) and node sizes.
TEST(RankLayout, NodeSpanAgreesWithTheMembers) {
  const MeshShape shapes[] = {{.tp = 2, .cp = 2, .ep = 2, .dp = 4, .pp = 3},
                              {.tp = 8, .cp = 1, .ep = 1, .dp = 4, .pp = 2},
                              {.tp = 4, .cp = 2, .ep = 4, .dp = 8, .pp = 1},
                              {.tp = 3, .cp = 1, .ep = 1, .dp = 6, .pp = 2},
                              {.tp = 2, .cp = 2, .ep = 2, .dp = 4, .pp = 3, .instances = 2},
                              {.tp = 4, .cp = 2, .ep = 4, .dp = 8, .pp = 1, .instances = 4},
                              {.tp = 3, .cp = 1, .ep = 1, .dp = 6, .pp = 2, .instances = 3}};
  for (const char* o : {"tp-cp-ep-dp-pp", "tp-pp-dp-ep-cp", "pp-dp-ep-cp-tp", "dp-tp-cp-ep-pp"}) {
    for (const auto& shape : shapes) {
      const RankLayout l(shape, order(o));
      for (const std::int64_t node : {1, 2, 4, 8, 6}) {
        if (l.world_size() % node != 0) continue;
        for (GroupKind g : kAllGroupKinds) {
          if (l.group_size(g) <= 1) continue;
          std::int64_t nodes = 1;
          for (std::int64_t i = 0; i < l.num_groups(g); ++i) {
            std::set<std::int64_t> seen;
            for (auto r : l.group(g, i)) seen.insert(r / node);
            nodes = std::max(nodes, static_cast<std::int64_t>(seen.size()));
          }
          const auto span = l.node_span(g, node);
          EXPECT_EQ(span.nodes, nodes) << o << " " << to_string(g) << " node " << node << " world " << l.world_size();
          EXPECT_EQ(span.per_node, std::max<std::int64_t>(1, l.group_size(g) / nodes)) << o << " " << to_string(g) << " node " << node;
        }
      }
    }
  }
  // 131,072 GPUs in closed form: DP crosses 512 nodes with one member each, TP stays in the node.
  const RankLayout big({.tp = 8, .cp = 2, .ep = 8, .dp = 512, .pp = 16}, order("tp-cp-ep-dp-pp"));
  EXPECT_EQ(big.node_span(GroupKind::dp, 8).nodes, 512);
  EXPECT_EQ(big.node_span(GroupKind::dp, 8).per_node, 1);
  EXPECT_EQ(big.node_span(GroupKind::tp, 8).nodes, 1);
  EXPECT_EQ(big.node_span(GroupKind::tp, 8).per_node, 8);
}

TEST(RankLayout, ParseOrderReportsWhatIsWrong) {
  std::string error;
  EXPECT_FALSE(parse_order("tp-cp-dp-pp", error));
  EXPECT_NE(error.find("missing ep"), std::string::npos) << error;
  EXPECT_FALSE(parse_order("tp-tp-cp-dp-pp", error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  EXPECT_FALSE(parse_order("tp-cp-ep-dp-zz", error));
  EXPECT_NE(error.find("\"zz\""), std::string::npos) << error;
}

}  // namespace
}  // namespace meshwork::plan
