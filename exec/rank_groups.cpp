#include "exec/rank_groups.hpp"

#include "plan/rank_layout.hpp"

namespace meshwork::exec {

Groups rank_groups(const plan::Plan& plan, std::int64_t rank, const GroupMaker& make) {
  const auto layout = plan::RankLayout::from_plan(plan.parallelism);
  Groups g;
  std::vector<std::int64_t> all(static_cast<std::size_t>(layout.world_size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  g.world = make("world", all, 0);
  auto group = [&](const char* name, plan::GroupKind kind) { return make(name, layout.group_members(kind, rank), static_cast<int>(layout.group_index(kind, rank))); };
  g.tp = group("tp", plan::GroupKind::tp);
  const bool cp = plan.parallelism.context_parallel_size > 1;
  g.dp = group(cp ? "dp_cp" : "dp", cp ? plan::GroupKind::dp_cp : plan::GroupKind::dp);
  g.cp = group("cp", plan::GroupKind::cp);
  g.pp = group("pp", plan::GroupKind::pp);
  g.ep = group("ep", plan::GroupKind::ep);
  g.expert_dp = group("expert_dp", plan::GroupKind::expert_dp);
  const auto pp_members = layout.group_members(plan::GroupKind::pp, rank);
  const std::int64_t stage = layout.coord(rank).pp, last = static_cast<std::int64_t>(pp_members.size()) - 1;
  if (last > 0 && (stage == 0 || stage == last)) {
    g.embedding = make("embedding", {pp_members.front(), pp_members.back()}, static_cast<int>(layout.group_index(plan::GroupKind::pp, rank)));
  } else {
    g.embedding = make("embedding", {rank}, static_cast<int>(layout.num_groups(plan::GroupKind::pp) + rank));
  }
  return g;
}

}  // namespace meshwork::exec
