#pragma once
// Faults: a GPU, node, NIC, link or switch taken down, or a link degraded; routes are
// recomputed on the faulted graph and the groups of a plan that lost paths or bandwidth named.
// Names: "gpu17", "nic5", "node2", "leaf3", "spine1", "core0", "nvswitch4", and a link as its
// two ends, lower tier first: "leaf3-spine1", "nic5-leaf0".

#include <optional>
#include <string>
#include <vector>

#include "plan/rank_layout.hpp"
#include "topology/topology.hpp"

namespace meshwork::topology {

enum class FaultKind { down, degrade };

struct Fault {
  FaultKind kind = FaultKind::down;
  std::string target;           // a vertex or link name
  double bandwidth_factor = 1;  // degrade: remaining fraction
};

std::string vertex_name(const Topology& t, VertexId v);

// Applies the fault to `t` (a copy the caller keeps); an error when the target is unknown.
std::optional<std::string> apply_fault(Topology& t, const Fault& fault);

struct GroupImpact {
  plan::GroupKind group = plan::GroupKind::tp;
  std::int64_t index = 0;        // which group of that kind
  double paths_before = 0, paths_after = 0;           // equal-cost paths, summed over members
  double bottleneck_before = 0, bottleneck_after = 0; // GB/s, slowest member path
  bool disconnected = false;
};

// Every group (of every kind with more than one member) whose paths, bottleneck or
// reachability changed between `before` and `after`.
std::vector<GroupImpact> fault_impact(const Topology& before, const Topology& after, const plan::RankLayout& layout);

}  // namespace meshwork::topology
