#pragma once
// Routing: shortest paths with ECMP. A flow is split evenly over all its equal-cost paths (the
// fluid limit of per-packet spraying or adaptive routing), or hashed onto one of them per flow
// (what ECMP switches do). Either way the per-link, per-direction load of a set of flows is
// what the simulator and the analysis need; SimGrid's built-in fat-tree routing picks one
// fixed path and is not non-blocking for permutations (docs/reference/simgrid-3.32-notes.md).

#include <cstdint>
#include <vector>

#include "topology/topology.hpp"

namespace meshwork::topology {

struct Flow {
  std::int64_t src_gpu = 0;
  std::int64_t dst_gpu = 0;
  double gbytes_per_s = 0;
};

enum class Spreading { even, hashed };

// Load per link and direction: index 2 * link.id for the direction from the lower vertex id
// to the higher, 2 * link.id + 1 for the other.
std::vector<double> link_loads(const Topology& t, const std::vector<Flow>& flows, Spreading spreading,
                               std::uint64_t seed = 1);

// Equal-cost shortest paths between two GPUs (never through a third GPU).
double equal_cost_paths(const Topology& t, std::int64_t src_gpu, std::int64_t dst_gpu);

// The largest load over capacity among all links and directions.
double max_utilisation(const Topology& t, const std::vector<double>& loads);

}  // namespace meshwork::topology
