#pragma once
// The fabric above the NICs in closed form, without building its graph: where each GPU's NIC
// port sits (which leaf, which pod) and what share of a tier's up-links one stream of a group's
// traffic gets when every group of its kind runs at once. This is the steady state the
// estimate prices (issue 11's definition: every flow at its steady-state share of each link),
// spread evenly over the equal-cost paths as adaptive routing does and ECMP hashing of many
// flows tends to. topology::ring_share_gbytes_per_s finds the same figure link by link on the
// built graph, and a test holds the two equal; the builders take their port counts from here.

#include <cstdint>
#include <optional>
#include <vector>

#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::topology {

// Ports of a switch split by an oversubscription (down / up), at least one of each.
struct PortSplit {
  std::int64_t down = 1;
  std::int64_t up = 1;
};
PortSplit split_ports(std::int64_t radix, double oversubscription);

// One plane of a multi-node fabric: its NIC ports in order (node by node, or rail by rail on a
// rail-optimized fabric, each rail padded to whole leaves), `leaf.down` to a leaf; with three
// tiers, `pod_ports` to a pod whose spines split their ports by `spine`.
struct PortGeometry {
  std::int64_t gpus_per_node = 1;
  std::int64_t nics_per_node = 1;
  std::int64_t ports = 0;       // port slots of one plane (padding included)
  std::int64_t rail_ports = 0;  // rail-optimized: slots per rail; 0 otherwise
  PortSplit leaf;
  std::int64_t pod_ports = 0;   // 0: two tiers
  PortSplit spine;              // Al-Fares pods: k/2 down, k/2 up
  // Pods of pod_gpus (non-blocking inside, as Llama 3's are stated): every leaf has one link to
  // each of its pod's leaf.up aggregation switches, which then have as many down-links as the
  // pod has leaves, more than a switch's radix in a large pod (the aggregation layer of a real
  // pod is several switches deep; here it is one switch per leaf up-link, with its bandwidth).
  // The pod's links to the core are its leaf-spine links over pod_oversubscription.
  bool pod_mesh = false;
  double pod_oversubscription = 1;

  // The slot of the NIC port a GPU sends through (GPU g of a node uses NIC g * nics / gpus).
  [[nodiscard]] std::int64_t port_of_gpu(std::int64_t gpu) const;
  // Leaves are numbered pod by pod, each pod's from its first port (as the builder makes them).
  [[nodiscard]] std::int64_t leaf_of(std::int64_t port) const;
  [[nodiscard]] std::int64_t pod_of(std::int64_t port) const { return pod_ports > 0 ? port / pod_ports : 0; }
  [[nodiscard]] std::int64_t leaves() const;
  [[nodiscard]] std::int64_t pods() const;
  // Leaves of pod p and the spines that hold their up-links (the last pod may be partly filled).
  [[nodiscard]] std::int64_t leaves_in_pod(std::int64_t p) const;
  [[nodiscard]] std::int64_t spines_in_pod(std::int64_t p) const;
  // The pod's links to the core, and those of its spine j (spread evenly, the first ones one
  // more when they do not divide).
  [[nodiscard]] std::int64_t pod_up_links(std::int64_t p) const;
  [[nodiscard]] std::int64_t spine_up_links(std::int64_t p, std::int64_t j) const;
};

// nullopt for one node or a node without NICs (nothing above the NVLink domain).
std::optional<PortGeometry> port_geometry(const plan::ClusterConfig& c);

// What one stream of a group's traffic moves: a ring edge to plan::ring_successor's member; a
// pipeline's send from member i to member i + 1 (stage to stage, the last to the first as the
// interleaved schedule does), whatever the members per node; or a member's traffic to every
// other member in equal parts (the pairwise all-to-all).
enum class Pattern { ring, pipeline, all_to_all };

// GB/s one way that one stream gets at each level with every group of the kind sending at once:
// a NIC port's rate over the streams through it, and a leaf's (pod's) up-link capacity over
// the streams leaving or entering it, the more loaded direction of the most loaded leaf (pod).
// Infinity at a level nothing crosses. Only traffic between nodes counts (NVLink is the
// NVSwitch's). A stream of the all-to-all is a member's traffic to the other nodes. With
// `routing: ecmp_hash` each tier's share is further cut by its collisions: a stream's
// flows_per_peer flows (one per plane at least) are each hashed onto a link of the tier, and
// the stream goes at the pace of the busiest (mean / busiest-link flows; d_mod_k and adaptive
// routing spread a step's regular patterns evenly, as the closed form assumes).
struct TierShares {
  double nic_gbytes_per_s;
  double leaf_gbytes_per_s;
  double pod_gbytes_per_s;

  // Ring and pipeline, when asked for: per position i in a group, the edge from member i to its
  // successor (a pipeline's boundary between stage i and the next), the least over the groups
  // of what the leaves and pods it crosses leave it, as a fraction of nic_gbytes_per_s in
  // (0, 1]; 1 for an edge that crosses no tier or stays in its node.
  std::vector<double> edge_above_nic_fraction;

  // The streams' rate: the least of the three (infinity: nothing leaves a node).
  [[nodiscard]] double least() const;
  // What the leaf and pod tiers leave of the NIC's rate, in (0, 1]; 1 when nothing crosses.
  [[nodiscard]] double above_nic_fraction() const;
};
TierShares tier_shares(const plan::ClusterConfig& c, const plan::RankLayout& layout, plan::GroupKind kind, Pattern pattern,
                       bool per_edge = false);

// Whether a leaf or a pod has fewer up-links than ports below it.
bool has_oversubscribed_tier(const plan::ClusterConfig& c);
// Whether any tier above the NICs can hold a stream below its NIC's rate: an oversubscribed
// leaf or pod, or ECMP hashing's collisions. When not, tier_shares' above_nic_fraction() is 1
// for every kind, and callers in a hurry (the estimate) skip the count.
bool tiers_can_slow(const plan::ClusterConfig& c);

}  // namespace meshwork::topology
