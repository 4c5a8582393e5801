#pragma once
// One rank's process groups of a plan's mesh, whatever carries them (MpiGroup on the CPU
// backend; NcclGroup, or MpiGroup staged through the host, on the CUDA one): which world ranks
// each group holds, in which order, and the colour that tells one group of a kind from the
// others when the job splits its world.

#include <functional>
#include <memory>
#include <vector>

#include "exec/group.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// Makes the group `name` of world ranks `members` (ascending; this rank among them). Every
// rank of the job calls it for each kind of group in the same order (the split is
// collective), with `colour` equal across the members of one group and different between
// groups of one kind.
using GroupMaker = std::function<std::unique_ptr<Group>(const char* name, const std::vector<std::int64_t>& members, int colour)>;

// world, tp, dp (DP x CP with context parallelism, which reduces and shards the dense
// gradients, as Megatron-core's data-parallel group with CP), cp, pp, ep, expert_dp, and the
// tied embedding's pair (the first stage's rank and its peer on the last; a group of one
// elsewhere).
[[nodiscard]] Groups rank_groups(const plan::Plan& plan, std::int64_t rank, const GroupMaker& make);

}  // namespace meshwork::exec
