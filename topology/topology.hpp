#pragma once
// The physical cluster as a graph (Boost.Graph): GPUs, NVSwitch domains, NICs and switches,
// joined by links with a bandwidth per direction and a latency. Built from the plan's cluster
// section by the builders in builders.hpp; analysed in analysis.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

namespace meshwork::topology {

enum class VertexKind { gpu, nvswitch, nic, leaf, spine, core };
std::string_view to_string(VertexKind k);

struct Vertex {
  VertexKind kind = VertexKind::gpu;
  std::int64_t index = 0;  // among vertices of its kind
  std::int64_t node = -1;  // GPUs, NVSwitches, NICs: the node they are in
  std::int64_t group = -1; // switches: the pod (3-tier) or rail they belong to
  std::int64_t plane = -1; // switches of a multi-plane fabric: their plane
};

// Tier of a vertex kind, counted from the GPUs: every shortest path between two GPUs climbs
// tiers to a turning point and comes down (up*/down*), which the router relies on.
int tier_of(VertexKind k);

// Tiers of links, for the bill of materials and per-tier analysis.
enum class LinkTier { nvlink, nic_to_leaf, leaf_to_spine, spine_to_core, gpu_to_nic };
std::string_view to_string(LinkTier t);

struct Link {
  std::int64_t id = 0;  // 0 .. links-1, in creation order
  LinkTier tier = LinkTier::nvlink;
  double bandwidth_gbytes_per_s = 0;  // each direction
  double latency_us = 0;
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, Vertex, Link>;
using VertexId = Graph::vertex_descriptor;

struct Topology {
  Graph graph;
  std::vector<VertexId> gpus;  // by GPU index (= rank under the default placement)
  std::int64_t gpus_per_node = 0;
  std::int64_t nodes = 0;
  std::string kind;            // "single_node", "fat_tree (3 tiers)", "rail_optimized"...
  // Per GPU, the number destination-mod-k routes it by (PortGeometry::destination_number: as
  // a subnet manager numbers the end ports, leaf by leaf). Empty where that is the GPU index,
  // as on every fabric whose ports are in node order; a rail-optimized one puts them in rail
  // order.
  std::vector<std::int64_t> port_order;

  [[nodiscard]] std::int64_t count(VertexKind k) const;
  [[nodiscard]] std::int64_t count(LinkTier t) const;
};

}  // namespace meshwork::topology
