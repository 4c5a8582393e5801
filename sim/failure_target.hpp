#pragma once
// What `simulate --fail TARGET@TIME` takes down: a GPU ("gpu17": its rank), a node ("node3":
// its ranks), or a part of the fabric, a link ("leaf3-spine1", either end first) or a switch or
// NIC ("spine2", "nic5": every link of it), named as `meshwork topology` names them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace meshwork::sim {

struct FailureTarget {
  std::vector<bool> rank;                    // per rank: on the GPU or node that fails
  std::vector<std::int64_t> links;           // the topology links that go down (the fabric's)
  std::unique_ptr<topology::Topology> after;  // the fabric without them (when `links` is not empty)
  std::string error;                         // the target names nothing, or nothing up
};

// `topo` is the plan's fabric (faults of the plan applied), `world` its ranks, one per GPU.
FailureTarget resolve_failure_target(const std::string& target, const topology::Topology& topo, std::int64_t world, std::int64_t gpus_per_node);

}  // namespace meshwork::sim
