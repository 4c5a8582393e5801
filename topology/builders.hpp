#pragma once
// Builders: the plan's cluster section as a graph. One node (NVSwitch star, or an NVLink mesh
// for parts without switches); fat trees of two tiers (leaf/spine) and three (the k-ary
// fat-tree of Al-Fares et al. 2008, SIGCOMM, §3: k pods of k/2 edge and k/2 aggregation
// switches, (k/2)^2 core switches, k^3/4 hosts), with oversubscription at the leaf; and
// rail-optimized fabrics (NIC i of every node on rail i's leaf switches, rails joined by
// spines, as NVIDIA's DGX SuperPOD reference architecture); multi-plane fabrics (a fat tree
// per plane, each NIC with a port on each: Alibaba HPN); pods of a given size with
// oversubscription above them (Llama 3).

#include <optional>
#include <string>

#include "plan/plan.hpp"
#include "topology/topology.hpp"

namespace meshwork::topology {

struct BuildResult {
  std::optional<Topology> topology;
  std::string error;  // why it cannot be built (more GPUs than the fabric holds...)
};

BuildResult build(const plan::ClusterConfig& cluster);

// A full k-ary fat tree with k^3/4 hosts (one NIC each), for tests and what-ifs.
Topology build_k_ary_fat_tree(std::int64_t k, double link_gbytes_per_s, double latency_us);

}  // namespace meshwork::topology
