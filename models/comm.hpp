#pragma once
// Communication of a plan's parallel groups: which fabric a group's traffic crosses, its
// bandwidths, and the time of a collective of a given size under each algorithm NCCL has
// (ring, double binary tree, NVLink SHARP, and the hierarchical in-node / between-node
// split). Sizes and bandwidths follow the nccl-tests conventions (doc/PERFORMANCE.md): for
// all-reduce busbw = algbw * 2(n-1)/n, for reduce-scatter, all-gather and all-to-all
// busbw = algbw * (n-1)/n, algbw = bytes / time.

#include <cstdint>
#include <span>
#include <vector>

#include "models/hardware.hpp"
#include "models/nccl_tuner.hpp"
#include "models/program.hpp"
#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::models {

using plan::CollectiveAlgorithm;

struct GroupNetwork {
  std::int64_t size = 1;
  bool crosses_nodes = false;
  std::int64_t per_node = 1;  // members of one group in a node (placement is regular)
  std::int64_t nodes = 1;     // nodes one group spans
  // One pair of members, the bottleneck of a point-to-point transfer or a ring edge.
  double busbw_bytes_per_s = 0;
  double latency_s = 0;  // per step between nodes (or in the node, for an in-node group)
  // In the node: a ring's NVLink rate and NVLink SHARP's (0: none), and one hop's latency.
  double nvlink_bytes_per_s = 0;
  double nvls_bytes_per_s = 0;
  double nvlink_latency_s = 0;
  // Between nodes: one GPU's share of its node's NICs, as much of it as the leaf and pod tiers
  // above leave a ring edge (an all-to-all member's stream) when every group of the kind sends
  // at once (topology/fabric_share: an oversubscribed tier counts only for the groups whose
  // traffic crosses it).
  double nic_bytes_per_s = 0;
  double all_to_all_nic_bytes_per_s = 0;
  double fabric_fraction = 1;  // of the NIC's rate, what those tiers leave a ring edge
  // The pipeline group: per position i, what they leave the edge from member i to the next
  // (a pipeline boundary); empty when every edge has fabric_fraction.
  std::vector<double> edge_fractions;
  // The pipeline group: per position i, whether the boundary from member i to the next leaves
  // its node in some group (empty when the group stays on one node). A boundary inside a node
  // runs on NVLink, as the simulator routes it, though the group crosses nodes elsewhere.
  std::vector<char> edge_crosses_nodes;
  double nic_alone_bytes_per_s = 0;  // the NIC's share before those tiers
  // A DP group counted stage by stage (topology::staggered_by_stage): per pipeline stage, what
  // those tiers leave its own rings (fabric_fraction is the worst stage's); empty otherwise.
  std::vector<double> stage_fabric_fractions;
  // The same for two stages at once, at [k * stages + j] what stage k's rings get beside stage
  // j's (topology::TierShares' stage_pair_above_nic_fraction); empty where there are none.
  std::vector<double> stage_pair_fractions;
  // Collectives on NCCL (a GPU generation): its tuner's latencies and protocols
  // (models/nccl_tuner), over NVLink inside the node or PCIe, with LL's ceiling in one node.
  bool nccl = false;
  bool nvlink_in_node = true;
  double ll_busbw_bytes_per_s = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::automatic;  // the plan's choice
};

GroupNetwork group_network(const plan::Plan& plan, const HardwareProfile& hw, plan::GroupKind group);
// The same with the plan's rank layout made once by the caller (the estimate prices up to eight
// groups of one layout).
GroupNetwork group_network(const plan::Plan& plan, const HardwareProfile& hw, const plan::RankLayout& layout, plan::GroupKind group);
// The NIC's share between nodes one pipeline stage's rings find alone (stage_fabric_fractions),
// or the group's (nic_bytes_per_s) where it has no such figures.
double stage_nic_bytes_per_s(const GroupNetwork& g, std::int64_t stage);
// The NIC's share between nodes pipeline stage k's rings find beside stage j's
// (stage_pair_fractions): stage_nic_bytes_per_s(g, k) slowed as the pair's count slows the
// stage from its count alone; stage_nic_bytes_per_s(g, k) itself for j == k or a stage out of
// range; without the pairs' figures (more than 64 stages), at most the group's share.
double stage_pair_nic_bytes_per_s(const GroupNetwork& g, std::int64_t k, std::int64_t j);
// The same for every j at once: row[j] = stage_pair_nic_bytes_per_s(g, k, j), j < row.size()
// (the estimate's step's end asks for every pair).
void stage_pair_row_nic_bytes_per_s(const GroupNetwork& g, std::int64_t k, std::span<double> row);

// The rate of a ring member's flow through its own NIC when the ring crosses nodes: the node's
// NICs work together, NVLink caps the node's ring. At the group's NIC share, or at the rate given.
double ring_member_bytes_per_s(const GroupNetwork& g);
double ring_member_bytes_per_s(const GroupNetwork& g, double nic_bytes_per_s);

// The algorithm a collective of `bytes` runs with: the plan's when it applies to this group
// and collective, otherwise (and for `auto`) the one the cost model finds fastest, as NCCL's
// tuner picks by its own model (src/graph/tuning.cc).
CollectiveAlgorithm algorithm_for(const GroupNetwork& g, Collective c, double bytes);
// Whether `a` can run collective `c` on this group at all.
bool applies(const GroupNetwork& g, Collective c, CollectiveAlgorithm a);

// Time of a collective over a buffer of `bytes` (the full buffer, as nccl-tests' "size").
double collective_s(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a);
double collective_s(const GroupNetwork& g, Collective c, double bytes);  // algorithm_for's choice
double all_reduce_s(const GroupNetwork& g, double bytes);
double reduce_scatter_s(const GroupNetwork& g, double bytes);
double all_gather_s(const GroupNetwork& g, double bytes);
double all_to_all_s(const GroupNetwork& g, double bytes);
// One point-to-point transfer of `bytes` between pipeline neighbours; with `boundary`, across
// that boundary (stage boundary to the next): on NVLink inside a node, otherwise at its own
// share of the fabric.
double p2p_s(const GroupNetwork& g, double bytes);
double p2p_s(const GroupNetwork& g, double bytes, std::int64_t boundary);
// Another stream's flows on the same NICs: busy a fraction of the time, each of its flows at
// most `flow_bytes_per_s` (what the fabric leaves it).
struct NicSharing {
  double busy_fraction = 0;
  double flow_bytes_per_s = 0;
};
// The same, with the NIC shared (boundary -1: the group's own figure). While the other stream
// runs, max-min sharing leaves the transfer the NIC's rate less the other flow's, and at least
// half of it, or its own bottleneck's rate if lower (a transfer held to an oversubscribed
// tier's share loses nothing); over the step, for `busy_fraction` of its bytes. A boundary
// inside a node runs on NVLink and shares nothing.
double p2p_s(const GroupNetwork& g, double bytes, std::int64_t boundary, const NicSharing& shared);
// The same rule from the other side: the NIC's share between nodes a member of group `g`'s
// ring gets while another flow of `shared.flow_bytes_per_s` (a pipeline transfer) runs through
// its NIC: max-min sharing (SimGrid's, as the simulator shares its links) leaves it the NIC's
// rate less the other flow's, and at least half of it; at most the group's own share
// (g.nic_bytes_per_s), which it keeps without another flow. For CollectivePrices::at_nic_rate:
// a collective of the ring timed at this share beside the transfers (models/dp_replay).
double nic_bytes_per_s_beside(const GroupNetwork& g, const NicSharing& shared);
// What a transfer across pipeline boundary `boundary` runs on, as p2p_s prices it: NVLink
// inside a node, otherwise the NIC's share the fabric leaves that boundary.
struct BoundaryLink {
  double bytes_per_s = 0;
  double latency_s = 0;
  bool inside_node = false;
};
BoundaryLink boundary_link(const GroupNetwork& g, std::int64_t boundary);

// How both tiers put a collective on the links: every member sends `edge_bytes` to its ring
// neighbour (between nodes: the member at its own position on the next node, one rail per
// position as NCCL's channels use every NIC), the collective waits `latency_s`, and spends
// `in_node_s` in the hierarchical algorithm's in-node phases (a tree's chain through the node is
// latency, in `latency_s`). On NCCL the
// latency is its tuner's for the protocol it runs (`protocol`), and a protocol that keeps a
// fraction of the rate carries the bytes that would take as long at the full rate; on a CPU
// host it is `steps` of the group's latency. `steps`: the ring's steps (the simulator's
// `--per-message` splits the bytes and the latency over them).
struct CollectiveFlows {
  double edge_bytes = 0;
  double steps = 0;
  double latency_s = 0;
  double in_node_s = 0;
  Protocol protocol = Protocol::simple;
};
CollectiveFlows collective_flows(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a);

// Prices collectives with collective_s, each (group, collective, bytes) once: the collectives of
// a step repeat (a layer's TP pair in every layer, DP buckets of one size). For one caller's
// groups, which must outlive it and not change while it prices them.
class CollectivePrices {
 public:
  double operator()(const GroupNetwork& g, Collective c, double bytes);
  // The same collective at another share of the NICs between nodes (one pipeline stage's
  // rings alone, stage_nic_bytes_per_s): the algorithm and protocol are the tuner's, which
  // sees the NIC's own rate, so only the time at that share is new.
  double at_nic_rate(const GroupNetwork& g, Collective c, double bytes, double nic_bytes_per_s);

 private:
  struct Priced {
    const GroupNetwork* group;
    Collective collective;
    double bytes, seconds;
    CollectiveAlgorithm algorithm;
    CollectiveFlows flows;
  };
  const Priced& priced(const GroupNetwork& g, Collective c, double bytes);
  std::vector<Priced> priced_;
};

}  // namespace meshwork::models
