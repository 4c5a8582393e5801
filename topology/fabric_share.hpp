#pragma once
// The fabric above the NICs in closed form, without building its graph: where each GPU's NIC
// port sits (which leaf, which pod) and what share of a tier's up-links one stream of a group's
// traffic gets when every group of its kind runs at once. This is the steady state the
// estimate prices (issue 11's definition: every flow at its steady-state share of each link),
// spread evenly over the equal-cost paths as adaptive routing does and ECMP hashing of many
// flows tends to. topology::ring_share_gbytes_per_s finds the same figure link by link on the
// built graph, and a test holds the two equal; the builders take their port counts from here.

#include <array>
#include <cstddef>
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
  std::int64_t radix = 0;       // the switches' ports (a 2-tier tree's spine count, the core's)

  // The slot of the NIC port a GPU sends through (GPU g of a node uses NIC g * nics / gpus).
  [[nodiscard]] std::int64_t port_of_gpu(std::int64_t gpu) const;
  // The number destination-mod-k routes a GPU by: its NIC's port slot, times the most GPUs a
  // NIC serves, plus its place among them. OpenSM's fat-tree routing indexes end ports by their
  // leaf and their port on it, so that consecutive numbers share a leaf; that is the GPU index
  // where ports are in node order, and on a rail-optimized fabric the GPU's place on its
  // rail, where a rail's GPUs are every gpus_per_node-th index (issue 21: numbered so, 32
  // flows of a rail met on 4 of a leaf's 32 up-links). GPUs that share a NIC share its LID in
  // InfiniBand, so one route; here each has its own number, as before.
  [[nodiscard]] std::int64_t destination_number(std::int64_t gpu) const;
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
  // Two tiers: the spines, as few as hold every leaf's up-links (leaf up-link u goes to spine
  // u mod spines). Three tiers: the core switches, as few as hold every pod's links to the core
  // (the pods' links dealt round-robin over them, pod by pod).
  [[nodiscard]] std::int64_t two_tier_spines() const;
  [[nodiscard]] std::int64_t cores() const;
};

// nullopt for one node or a node without NICs (nothing above the NVLink domain).
std::optional<PortGeometry> port_geometry(const plan::ClusterConfig& c);

// Destination-mod-k routes in closed form: the links above its leaf a flow takes, as
// Router::route_d_mod_k picks them on the fabric topology/builders wires (a test holds the two
// equal flow by flow on every fabric kind). Climbing, at each tier the flow takes up-link number
// (dst / w_1 ... w_(l-1)) mod w_l of the w_l that lead to a turning switch (Zahavi et al. 2010;
// OpenSM's ftree); descending, among parallel links to the switch below, number dst mod their
// count. The wiring mirrored: a leaf's up-link u goes to spine u mod spines (two tiers) or to its
// pod's spine (i * up + u) mod spines (leaf i of the pod, three tiers), and the pods' links to
// the core are dealt round-robin over the cores, pod by pod, spine by spine. One plane: every
// plane of a multi-plane fabric routes alike.
class DestinationModK {
 public:
  explicit DestinationModK(const PortGeometry& g);  // keeps a reference to g

  // Link slots: each leaf up-link u, both ways, at 2 (leaf * leaf.up + u) + (down ? 1 : 0);
  // then, from leaf_slots() on, each pod-to-core link x (numbered in the order dealt) at
  // leaf_slots() + 2 x + (down ? 1 : 0).
  [[nodiscard]] std::size_t leaf_slots() const;
  [[nodiscard]] std::size_t slots() const;
  struct Route {
    std::array<std::size_t, 4> slot{};
    int hops = 0;
  };
  // The flow from NIC port `from` to port `to`, whose destination GPU is numbered `dst`
  // (PortGeometry::destination_number; none within a leaf).
  [[nodiscard]] Route route(std::int64_t from, std::int64_t to, std::uint64_t dst) const;

 private:
  struct Pod {
    std::int64_t spines = 0, first_link = 0, links = 0;
    std::vector<std::int64_t> spine_first, spine_links;  // each spine's links to the core
    bool every_core = false;  // its links reach every core
    bool regular = false;     // and every spine has a link to the core
  };
  [[nodiscard]] std::size_t leaf_slot(std::int64_t leaf, std::int64_t u, bool down) const;
  [[nodiscard]] std::size_t pod_slot(std::int64_t x, bool down) const;
  // The up-link number of leaf `k` of its pod (0 on two tiers) by which spine `spine` of
  // `spines` comes down to it: the spine's links to the leaf are u = first + n * spines, and a
  // flow takes number (d / spines) mod their count, the digit after the one that picked the
  // spine (Router::route_d_mod_k).
  [[nodiscard]] std::int64_t down_link(std::int64_t spine, std::int64_t k, std::int64_t spines, std::int64_t d) const;
  [[nodiscard]] bool reaches(const Pod& pod, std::int64_t core) const;
  // Small or partly filled fabrics, where a pod does not reach every core or a spine has no link
  // to the core: the choices are only the links that lead to a core both pods reach.
  bool irregular_climb(const Pod& src, const Pod& dst, std::int64_t i, std::int64_t d, std::int64_t& u, std::int64_t& x) const;

  const PortGeometry& g_;
  std::int64_t up_;
  std::int64_t spines_ = 1;  // two tiers
  std::int64_t cores_ = 1, leaves_per_pod_ = 1, pod_links_ = 0;
  std::vector<Pod> pods_;
};

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
// the stream goes at the pace of the busiest (mean / busiest-link flows). With `routing:
// d_mod_k` each flow's route is known: the links are those Router::route_d_mod_k takes on the
// fabric topology/builders wires, worked out here without the graph, and each tier's share is
// the NIC's rate over the busiest link's streams (destination-mod-k keeps a shift pattern
// apart on a full tree, but not every ring of a step, nor an oversubscribed or uneven one).
// Adaptive routing spreads evenly, as the plain closed form assumes.
struct TierShares {
  double nic_gbytes_per_s;
  double leaf_gbytes_per_s;
  double pod_gbytes_per_s;

  // Ring and pipeline, when asked for: per position i in a group, the edge from member i to its
  // successor (a pipeline's boundary between stage i and the next), the least over the groups
  // of what the leaves and pods it crosses leave it, as a fraction of nic_gbytes_per_s in
  // (0, 1]; 1 for an edge that crosses no tier or stays in its node.
  std::vector<double> edge_above_nic_fraction;

  // A kind counted stage by stage (staggered_by_stage): per pipeline stage, what the leaf and
  // pod tiers leave its own rings of the NIC's rate, as above_nic_fraction() (which is the worst
  // stage's); empty for the other kinds.
  std::vector<double> stage_above_nic_fraction;
  // The same for two stages running at once: at [k * stages + j], what stage k's rings get
  // among its own and stage j's (at most its figure alone, which [k * stages + k] holds); for
  // the kinds counted stage by stage (data parallelism's rings) of up to 64 stages, empty
  // otherwise. The end of a step runs
  // the stages' gradient reductions beside each other (models/end_of_step).
  std::vector<double> stage_pair_above_nic_fraction;

  // The streams' rate: the least of the three (infinity: nothing leaves a node).
  [[nodiscard]] double least() const;
  // What the leaf and pod tiers leave of the NIC's rate, in (0, 1]; 1 when nothing crosses.
  [[nodiscard]] double above_nic_fraction() const;
};
// Whether the kind's rings are counted one pipeline stage at a time: the gradient collectives
// of data parallelism run when a stage's backward ends, which the schedule staggers stage by
// stage (1F1B: a micro-batch apart, the last stage first), so rings of different stages seldom
// run at once (the simulator's stages overlap in part: bench/RESULTS.md); every other kind's
// traffic runs on every stage at once in the steady state, a micro-batch on each. Such a kind's
// shares are its worst stage's, and it has no per-edge figures.
bool staggered_by_stage(plan::GroupKind kind);
TierShares tier_shares(const plan::ClusterConfig& c, const plan::RankLayout& layout, plan::GroupKind kind, Pattern pattern,
                       bool per_edge = false);

// Whether a leaf or a pod has fewer up-links than ports below it.
bool has_oversubscribed_tier(const plan::ClusterConfig& c);
// Whether any tier above the NICs can hold a stream below its NIC's rate: an oversubscribed
// leaf or pod, ECMP hashing's collisions, or destination-mod-k's above a leaf. When not, tier_shares' above_nic_fraction() is 1
// for every kind, and callers in a hurry (the estimate) skip the count.
bool tiers_can_slow(const plan::ClusterConfig& c);

}  // namespace meshwork::topology
