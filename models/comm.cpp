#include "models/comm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "topology/fabric_share.hpp"

namespace meshwork::models {

namespace {

// Per position i of the pipeline group, whether the boundary from member i to the next (the
// last to the first) leaves its node in some group. A group's members step by the pipeline
// dimension's stride from its first member, the sum of the other dimensions' digits times their
// strides, so where its boundaries fall on nodes depends only on that first member modulo the
// node size: the residues the other dimensions can give it, built dimension by dimension
// (at most gpus_per_node of them, whatever the order of the dimensions).
std::vector<char> boundaries_crossing_nodes(const plan::RankLayout& layout, std::int64_t gpus_per_node) {
  const std::int64_t n = layout.size(plan::MeshDim::pp), stride = layout.stride(plan::MeshDim::pp), g = gpus_per_node;
  std::vector<char> crosses(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)), 0);
  if (n <= 1 || g <= 0) return crosses;
  // Neighbours a node's size or more apart are on different nodes, whatever the first member
  // (the common case: pipeline outside TP, which fills a node; the loops below divide twice
  // per member and position, issue 18).
  if (stride >= g) {
    std::fill(crosses.begin(), crosses.end(), char{1});
    return crosses;
  }
  std::vector<char> residue(static_cast<std::size_t>(g), 0);
  residue[0] = 1;
  for (const plan::MeshDim dim : {plan::MeshDim::tp, plan::MeshDim::cp, plan::MeshDim::ep, plan::MeshDim::dp}) {
    const std::int64_t step = layout.stride(dim) % g, size = layout.size(dim);
    if (step == 0 || size <= 1) continue;
    const std::int64_t period = g / std::gcd(step, g);  // the digits' residues repeat after it
    std::vector<char> next(static_cast<std::size_t>(g), 0);
    for (std::int64_t r = 0; r < g; ++r) {
      if (residue[static_cast<std::size_t>(r)] == 0) continue;
      for (std::int64_t digit = 0; digit < std::min(size, period); ++digit) next[static_cast<std::size_t>((r + digit * step) % g)] = 1;
    }
    residue.swap(next);
  }
  for (std::int64_t first = 0; first < g; ++first) {
    if (residue[static_cast<std::size_t>(first)] == 0) continue;
    for (std::int64_t i = 0; i < n; ++i) {
      if ((first + i * stride) / g != (first + (i + 1) % n * stride) / g) crosses[static_cast<std::size_t>(i)] = 1;
    }
  }
  return crosses;
}

}  // namespace

GroupNetwork group_network(const plan::Plan& p, const HardwareProfile& hw, plan::GroupKind group) {
  return group_network(p, hw, plan::RankLayout::from_plan(p.parallelism), group);
}

GroupNetwork group_network(const plan::Plan& p, const HardwareProfile& hw, const plan::RankLayout& layout, plan::GroupKind group) {
  GroupNetwork g;
  g.algorithm = p.cluster.collective_algorithm;
  g.size = layout.group_size(group);
  const auto& c = p.cluster;
  // A collective runs at the pace of its slowest group: the groups cross nodes when any of
  // them has members on two nodes (RankLayout::node_span, in closed form for regular meshes).
  if (g.size > 1 && c.gpus_per_node > 0) {
    const auto span = layout.node_span(group, c.gpus_per_node);
    g.nodes = span.nodes;
    g.crosses_nodes = g.nodes > 1;
    g.per_node = span.per_node;
  }
  g.nvlink_bytes_per_s = c.intra_node.bandwidth_gbytes_per_s * 1e9 * hw.nvlink_efficiency;
  g.nvlink_latency_s = c.intra_node.latency_us * 1e-6;
  g.nccl = hw.nccl;
  g.nvlink_in_node = c.intra_node.kind == plan::IntraNodeKind::nvswitch || c.intra_node.kind == plan::IntraNodeKind::nvlink_mesh;
  g.ll_busbw_bytes_per_s = hw.ll_busbw_bytes_per_s;
  if (c.intra_node.kind == plan::IntraNodeKind::nvswitch) g.nvls_bytes_per_s = c.intra_node.bandwidth_gbytes_per_s * 1e9 * hw.nvls_efficiency;
  // Across nodes each GPU has its share of the node's NICs; an oversubscribed leaf or pod
  // divides it further for the groups whose traffic crosses it, by the share of the tier one
  // stream gets with every group of the kind at once (the steady state of issue 11), and ECMP
  // hashing by its expected collisions; flows of different kinds meeting and the order of
  // events are the simulator's.
  g.nic_bytes_per_s = static_cast<double>(c.nics_per_node) * c.nic_bandwidth_gbps * 1e9 / 8 /
                      static_cast<double>(std::max<std::int64_t>(1, c.gpus_per_node)) * hw.nic_efficiency;
  g.all_to_all_nic_bytes_per_s = g.nic_alone_bytes_per_s = g.nic_bytes_per_s;
  if (g.crosses_nodes && group == plan::GroupKind::pp) g.edge_crosses_nodes = boundaries_crossing_nodes(layout, c.gpus_per_node);
  if (g.crosses_nodes && topology::tiers_can_slow(c)) {
    // A pipeline's boundaries each at their own share: only some cross a pod (Llama 3's stages
    // of 1,024 GPUs, three to a pod of 3,072).
    const bool pipeline = group == plan::GroupKind::pp;
    auto ring = topology::tier_shares(c, layout, group, pipeline ? topology::Pattern::pipeline : topology::Pattern::ring, pipeline);
    g.fabric_fraction = ring.above_nic_fraction();
    g.nic_bytes_per_s *= g.fabric_fraction;
    g.edge_fractions = std::move(ring.edge_above_nic_fraction);
    g.stage_fabric_fractions = std::move(ring.stage_above_nic_fraction);
    g.stage_pair_fractions = std::move(ring.stage_pair_above_nic_fraction);
    // Only expert parallelism runs all-to-all (models/layer_comm).
    if (group == plan::GroupKind::ep) {
      g.all_to_all_nic_bytes_per_s *= topology::tier_shares(c, layout, group, topology::Pattern::all_to_all).above_nic_fraction();
    }
  }
  if (!g.crosses_nodes) {
    g.busbw_bytes_per_s = g.nvlink_bytes_per_s;
    g.latency_s = g.nvlink_latency_s;
    return g;
  }
  g.busbw_bytes_per_s = std::min(g.nvlink_bytes_per_s, g.nic_bytes_per_s);
  // A message crosses up to 2 x tiers switch hops and two NICs (~1 us each, docs/reference/published-runs.md C1).
  g.latency_s = (2.0 * static_cast<double>(c.topology.tiers) * c.topology.link_latency_us + 2.0) * 1e-6;
  return g;
}

double stage_nic_bytes_per_s(const GroupNetwork& g, std::int64_t stage) {
  if (stage < 0 || static_cast<std::size_t>(stage) >= g.stage_fabric_fractions.size()) return g.nic_bytes_per_s;
  // As group_network sets the group's from its fabric's fraction, and never below the group's:
  // the group's share is the least of every stage's NIC and fabric shares, which is the worst
  // stage's own where the stages load their NICs alike, and at most it otherwise.
  return std::max(g.nic_bytes_per_s, g.nic_alone_bytes_per_s * g.stage_fabric_fractions[static_cast<std::size_t>(stage)]);
}

namespace {

// Stage K's share beside stage j, j != K, both under P, its alone share given.
double beside_stage(const GroupNetwork& g, double alone, std::size_t K, std::size_t j, std::size_t P) {
  // Without the pairs' figures (more than 64 stages), beside another stage at the group's share,
  // the worst stage's, as the step's end was priced before the pairs were counted.
  if (g.stage_pair_fractions.size() != P * P) return std::min(alone, g.nic_bytes_per_s);
  // The stage's own rate (at least the group's, stage_nic_bytes_per_s) slowed as the pair's
  // count slows it from the stage's alone: the same floor either way.
  const double* fractions = g.stage_pair_fractions.data() + K * P;
  return std::min(alone, alone * fractions[j] / fractions[K]);
}

}  // namespace

double stage_pair_nic_bytes_per_s(const GroupNetwork& g, std::int64_t k, std::int64_t j) {
  const double alone = stage_nic_bytes_per_s(g, k);
  const auto P = static_cast<std::int64_t>(g.stage_fabric_fractions.size());
  if (k < 0 || j < 0 || k >= P || j >= P || k == j) return alone;
  return beside_stage(g, alone, static_cast<std::size_t>(k), static_cast<std::size_t>(j), static_cast<std::size_t>(P));
}

void stage_pair_row_nic_bytes_per_s(const GroupNetwork& g, std::int64_t k, std::span<double> row) {
  const double alone = stage_nic_bytes_per_s(g, k);
  std::fill(row.begin(), row.end(), alone);
  const std::size_t P = g.stage_fabric_fractions.size();
  if (k < 0 || static_cast<std::size_t>(k) >= P) return;
  const auto K = static_cast<std::size_t>(k);
  for (std::size_t j = 0; j < std::min(row.size(), P); ++j) {
    if (j != K) row[j] = beside_stage(g, alone, K, j, P);
  }
}

namespace {

double d(std::int64_t v) { return static_cast<double>(v); }

// Bytes each member sends per byte of the buffer, and the steps of a ring of n members
// (Patarasuk & Yuan 2009: reduce-scatter then all-gather, n-1 steps each). A broadcast runs as a
// pipelined chain from the root round the ring: every edge but the last carries the whole
// buffer, and n-1 hops (nccl-tests' doc/PERFORMANCE, "Broadcast": its bus bandwidth is its
// algorithm bandwidth).
double ring_volume(Collective c, double n) {
  switch (c) {
    case Collective::all_reduce: return 2 * (n - 1) / n;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all: return (n - 1) / n;
    case Collective::ring_exchange:
    case Collective::broadcast: return 1;
    case Collective::none: break;
  }
  return 0;
}
double ring_steps(Collective c, double n) { return c == Collective::all_reduce ? 2 * (n - 1) : n - 1; }

// The in-node phases of the hierarchical algorithm: a ring reduce-scatter (or all-gather) of
// the buffer over the k members of a node; its bytes, and on a CPU host its steps' latency.
double in_node_phase_s(const GroupNetwork& g, double bytes) {
  const double k = d(g.per_node);
  return (k - 1) / k * bytes / g.nvlink_bytes_per_s;
}
double in_node_phase_latency_s(const GroupNetwork& g) { return (d(g.per_node) - 1) * g.nvlink_latency_s; }

double log2_ceil(double m) { return std::ceil(std::log2(std::max(1.0, m))); }

}  // namespace

bool applies(const GroupNetwork& g, Collective c, CollectiveAlgorithm a) {
  const bool reduction = c == Collective::all_reduce || c == Collective::reduce_scatter || c == Collective::all_gather;
  switch (a) {
    case CollectiveAlgorithm::automatic:
    case CollectiveAlgorithm::ring: return true;
    // The double binary tree runs all-reduce only, between nodes (NCCL; Sanders et al. 2009).
    case CollectiveAlgorithm::tree: return g.crosses_nodes && c == Collective::all_reduce;
    // NVLink SHARP: the NVSwitch reduces (Hopper and later), for a group inside one node.
    case CollectiveAlgorithm::nvls: return !g.crosses_nodes && g.size > 1 && g.nvls_bytes_per_s > 0 && reduction;
    // In-node phases only pay off when a node holds several members.
    case CollectiveAlgorithm::hierarchical: return g.crosses_nodes && g.per_node > 1 && reduction;
  }
  return false;
}

namespace {

// The flows of algorithm `a` (one that applies) at Simple's full rate, and a CPU host's latency
// of its in-node phases.
CollectiveFlows full_rate_flows(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a, double& in_node_latency_s) {
  CollectiveFlows f;
  const double n = d(g.size), k = d(g.per_node), m = d(g.nodes);
  switch (a) {
    case CollectiveAlgorithm::automatic:
    case CollectiveAlgorithm::ring:
      if (c == Collective::all_to_all && g.crosses_nodes) {
        // Pairwise exchange: a member's own NIC carries what goes to the other nodes'
        // members, (n - k)/n of its buffer; the rest crosses NVLink, faster and alongside.
        f.edge_bytes = (n - k) / n * bytes;
      } else {
        // Between nodes each member's NIC carries 1/k of the ring (see collective_s).
        f.edge_bytes = ring_volume(c, n) * bytes / (g.crosses_nodes && c != Collective::ring_exchange ? k : 1);
      }
      f.steps = ring_steps(c, n);
      break;
    case CollectiveAlgorithm::tree:
      // Two binary trees, each carrying half the buffer, reduce up and broadcast down
      // pipelined: every node sends and receives the buffer twice in all (Sanders, Speck &
      // Traeff 2009, "Two-tree algorithms for full bandwidth broadcast, reduction and scan",
      // §4), shared by its k members' NICs as NCCL's channels share it; 2 log2(m) steps of
      // latency between nodes and a chain through the node's members.
      f.edge_bytes = 2 * bytes / k;
      f.steps = 2 * log2_ceil(m);
      in_node_latency_s = 2 * (k - 1) * g.nvlink_latency_s;
      break;
    case CollectiveAlgorithm::nvls:
      // Every GPU sends its buffer to the switch, which reduces it, and reads the result
      // back (NVIDIA Hopper whitepaper, "NVLink SHARP"): the buffer once each way at NVLS's
      // rate, here as the bytes a ring-rate link would need to take as long.
      f.edge_bytes = c == Collective::all_reduce ? bytes * g.nvlink_bytes_per_s / g.nvls_bytes_per_s : ring_volume(c, n) * bytes;
      f.steps = 2;
      break;
    case CollectiveAlgorithm::hierarchical: {
      // In-node reduce-scatter, the between-node collective on 1/k of the buffer over the
      // members at one position of every node, in-node all-gather (as Horovod's and
      // Megatron's hierarchical all-reduce; Jia et al. 2018, §4.2).
      f.edge_bytes = ring_volume(c, m) * bytes / k;
      f.steps = ring_steps(c, m);
      f.in_node_s = (c == Collective::all_reduce ? 2 : 1) * in_node_phase_s(g, bytes);
      in_node_latency_s = (c == Collective::all_reduce ? 2 : 1) * in_node_phase_latency_s(g);
      break;
    }
  }
  return f;
}

// The rate a member's edge bytes move at, between nodes at the given NIC rates (a ring's, an
// all-to-all's).
double edge_rate(const GroupNetwork& g, Collective c, CollectiveAlgorithm a, double nic_bytes_per_s, double all_to_all_nic_bytes_per_s) {
  double rate = g.crosses_nodes ? nic_bytes_per_s : g.nvlink_bytes_per_s;
  if (a == CollectiveAlgorithm::ring && g.crosses_nodes && c != Collective::all_to_all && c != Collective::ring_exchange) {
    rate = ring_member_bytes_per_s(g, nic_bytes_per_s);
  }
  if (c == Collective::ring_exchange) rate = g.busbw_bytes_per_s;
  if (c == Collective::all_to_all && g.crosses_nodes) rate = all_to_all_nic_bytes_per_s;
  return rate;
}

TunerShape tuner_shape(const GroupNetwork& g) { return {g.size, g.crosses_nodes ? g.nodes : 1, g.nvlink_in_node}; }

// The flows of `a` (normalised to one that applies) with their latency, at the protocol NCCL's
// tuner would run: the fastest at the NIC's own rate, as it knows the node and its NICs and not
// the fabric above them.
CollectiveFlows flows_with_latency(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a) {
  if (g.size <= 1 || bytes <= 0) return {};
  if (!applies(g, c, a) || a == CollectiveAlgorithm::automatic) a = CollectiveAlgorithm::ring;
  double in_node_latency_s = 0;
  CollectiveFlows f = full_rate_flows(g, c, bytes, a, in_node_latency_s);
  // NCCL's tuner prices the ring collectives, the tree and NVLS; all-to-all and the context-
  // parallel ring exchange are its point-to-point sends, which it does not model: those (and
  // every collective of a CPU host's MPI) wait a latency per step.
  if (!g.nccl || c == Collective::all_to_all || c == Collective::ring_exchange) {
    f.latency_s = f.steps * g.latency_s + in_node_latency_s;
    return f;
  }
  const TunerShape shape = tuner_shape(g);
  const double full_rate_s = f.edge_bytes / edge_rate(g, c, a, g.nic_alone_bytes_per_s, g.nic_alone_bytes_per_s) + f.in_node_s;
  // The bus bandwidth Simple reaches, against which LL's ceiling is set.
  const double busbw = full_rate_s > 0 ? ring_volume(c, d(g.size)) * bytes / full_rate_s : 0;
  Protocol best = Protocol::simple;
  double best_s = -1, best_fraction = 1, best_latency_s = 0;
  for (const Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    if (!protocol_applies(a, p, shape)) continue;
    double fraction = protocol_fraction(a, p, shape);
    if (p == Protocol::ll && busbw > 0) fraction = std::min(fraction, ll_busbw_ceiling_bytes_per_s(shape, g.ll_busbw_bytes_per_s) / busbw);
    if (fraction <= 0) continue;
    const double latency_s = nccl_latency_s(a, c, p, shape, bytes);
    const double t = full_rate_s / fraction + latency_s;
    if (best_s < 0 || t < best_s) best = p, best_s = t, best_fraction = fraction, best_latency_s = latency_s;
  }
  f.edge_bytes /= best_fraction;
  f.in_node_s /= best_fraction;
  f.latency_s = best_latency_s;
  f.protocol = best;
  return f;
}

// The time of flows `f` of algorithm `a` (one that applies) at the given NIC rates between
// nodes (a ring's, an all-to-all's).
double flows_s(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a, const CollectiveFlows& f, double nic_bytes_per_s,
               double all_to_all_nic_bytes_per_s) {
  const double n = d(g.size), k = d(g.per_node);
  double t = f.edge_bytes / edge_rate(g, c, a, nic_bytes_per_s, all_to_all_nic_bytes_per_s) + f.latency_s + f.in_node_s;
  if (c == Collective::all_to_all && g.crosses_nodes) t = std::max(t, (k - 1) / n * bytes / g.nvlink_bytes_per_s + f.latency_s);
  return t;
}

// collective_s at the given NIC rates between nodes.
double collective_at(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a, double nic_bytes_per_s,
                     double all_to_all_nic_bytes_per_s) {
  if (g.size <= 1 || bytes <= 0) return 0;
  if (!applies(g, c, a) || a == CollectiveAlgorithm::automatic) a = CollectiveAlgorithm::ring;
  return flows_s(g, c, bytes, a, flows_with_latency(g, c, bytes, a), nic_bytes_per_s, all_to_all_nic_bytes_per_s);
}

// The plan's algorithm where it applies, otherwise (and for `auto`) the one NCCL's tuner would
// pick, with its flows (which the NIC rates do not change: the protocol is the tuner's choice
// at the NIC's own rate). A collective that moves something between at least two members.
struct Chosen {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  CollectiveFlows flows;
};
Chosen choose(const GroupNetwork& g, Collective c, double bytes) {
  if (g.algorithm != CollectiveAlgorithm::automatic) {
    const CollectiveAlgorithm a = applies(g, c, g.algorithm) ? g.algorithm : CollectiveAlgorithm::ring;
    return {a, flows_with_latency(g, c, bytes, a)};
  }
  // NCCL's tuner knows the node and its NICs, not the fabric above them: it chooses at the
  // NIC's own rate, whatever an oversubscribed tier or hashing's collisions then leave.
  Chosen best{CollectiveAlgorithm::ring, flows_with_latency(g, c, bytes, CollectiveAlgorithm::ring)};
  double best_s = flows_s(g, c, bytes, best.algorithm, best.flows, g.nic_alone_bytes_per_s, g.nic_alone_bytes_per_s);
  for (const auto a : {CollectiveAlgorithm::nvls, CollectiveAlgorithm::tree, CollectiveAlgorithm::hierarchical}) {
    if (!applies(g, c, a)) continue;
    CollectiveFlows f = flows_with_latency(g, c, bytes, a);
    const double t = flows_s(g, c, bytes, a, f, g.nic_alone_bytes_per_s, g.nic_alone_bytes_per_s);
    if (t < best_s) best = {a, f}, best_s = t;
  }
  return best;
}

}  // namespace

CollectiveFlows collective_flows(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a) {
  return flows_with_latency(g, c, bytes, a);
}

double collective_s(const GroupNetwork& g, Collective c, double bytes, CollectiveAlgorithm a) {
  return collective_at(g, c, bytes, a, g.nic_bytes_per_s, g.all_to_all_nic_bytes_per_s);
}

CollectiveAlgorithm algorithm_for(const GroupNetwork& g, Collective c, double bytes) {
  if (g.algorithm != CollectiveAlgorithm::automatic) return applies(g, c, g.algorithm) ? g.algorithm : CollectiveAlgorithm::ring;
  if (g.size <= 1 || bytes <= 0) return CollectiveAlgorithm::ring;  // every algorithm takes no time
  return choose(g, c, bytes).algorithm;
}

double collective_s(const GroupNetwork& g, Collective c, double bytes) {
  // Nothing to move, or nobody to move it to: no algorithm to choose (collective_at's 0).
  if (g.size <= 1 || bytes <= 0) return 0;
  // The chosen algorithm's flows, timed at the rates the fabric leaves (issue 18: timing them
  // again from scratch was a fifth of the pricing).
  const Chosen chosen = choose(g, c, bytes);
  return flows_s(g, c, bytes, chosen.algorithm, chosen.flows, g.nic_bytes_per_s, g.all_to_all_nic_bytes_per_s);
}

const CollectivePrices::Priced& CollectivePrices::priced(const GroupNetwork& g, Collective c, double bytes) {
  for (const Priced& x : priced_) {
    if (x.group == &g && x.collective == c && x.bytes == bytes) return x;
  }
  // A step prices a few dozen distinct collectives (a layer's TP and EP ones, the DP buckets'
  // sizes); past 64 a linear search would cost more than it saves, and the last slot is
  // overwritten.
  Priced x{&g, c, bytes, 0, CollectiveAlgorithm::ring, {}};
  if (g.size > 1 && bytes > 0) {
    // As collective_s.
    const Chosen chosen = choose(g, c, bytes);
    x.algorithm = chosen.algorithm;
    x.flows = chosen.flows;
    x.seconds = flows_s(g, c, bytes, chosen.algorithm, chosen.flows, g.nic_bytes_per_s, g.all_to_all_nic_bytes_per_s);
  }
  if (priced_.size() < 64) priced_.push_back(x);
  else priced_.back() = x;
  return priced_.back();
}

double CollectivePrices::operator()(const GroupNetwork& g, Collective c, double bytes) { return priced(g, c, bytes).seconds; }

double CollectivePrices::at_nic_rate(const GroupNetwork& g, Collective c, double bytes, double nic_bytes_per_s) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const Priced& x = priced(g, c, bytes);
  return flows_s(g, c, bytes, x.algorithm, x.flows, nic_bytes_per_s, g.all_to_all_nic_bytes_per_s);
}
double all_reduce_s(const GroupNetwork& g, double bytes) { return collective_s(g, Collective::all_reduce, bytes); }
double reduce_scatter_s(const GroupNetwork& g, double bytes) { return collective_s(g, Collective::reduce_scatter, bytes); }
double all_gather_s(const GroupNetwork& g, double bytes) { return collective_s(g, Collective::all_gather, bytes); }
double all_to_all_s(const GroupNetwork& g, double bytes) { return collective_s(g, Collective::all_to_all, bytes); }

double ring_member_bytes_per_s(const GroupNetwork& g) { return ring_member_bytes_per_s(g, g.nic_bytes_per_s); }

double ring_member_bytes_per_s(const GroupNetwork& g, double nic_bytes_per_s) {
  // A ring between nodes with k members per node: NCCL's channels start on every member, so
  // each member's own NIC carries 1/k of the ring's traffic and the node's NICs work together
  // (nccl-tests: B200 4 nodes x 8, 381.8 GB/s busbw on 8 x 400G,
  // docs/reference/published-runs.md C2); NVLink caps the node's ring.
  return std::min(nic_bytes_per_s, g.nvlink_bytes_per_s / static_cast<double>(std::max<std::int64_t>(1, g.per_node)));
}

double p2p_s(const GroupNetwork& g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  return bytes / g.busbw_bytes_per_s + g.latency_s;
}

BoundaryLink boundary_link(const GroupNetwork& g, std::int64_t boundary) {
  const auto b = static_cast<std::size_t>(boundary);
  if (boundary >= 0 && b < g.edge_crosses_nodes.size() && g.edge_crosses_nodes[b] == 0) return {g.nvlink_bytes_per_s, g.nvlink_latency_s, true};
  if (g.edge_fractions.empty() || !g.crosses_nodes || boundary < 0 || b >= g.edge_fractions.size()) {
    return {g.busbw_bytes_per_s, g.latency_s, !g.crosses_nodes};
  }
  return {std::min(g.nvlink_bytes_per_s, g.nic_alone_bytes_per_s * g.edge_fractions[b]), g.latency_s, false};
}

double p2p_s(const GroupNetwork& g, double bytes, std::int64_t boundary) { return p2p_s(g, bytes, boundary, NicSharing{}); }

double p2p_s(const GroupNetwork& g, double bytes, std::int64_t boundary, const NicSharing& shared) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const BoundaryLink link = boundary < 0 ? BoundaryLink{g.busbw_bytes_per_s, g.latency_s, !g.crosses_nodes} : boundary_link(g, boundary);
  const double u = link.inside_node ? 0 : std::clamp(shared.busy_fraction, 0.0, 1.0);
  double t = bytes / link.bytes_per_s;
  if (u > 0) {
    const double nic = g.nic_alone_bytes_per_s;
    const double left = std::max(nic / 2, nic - shared.flow_bytes_per_s);
    t = (1 - u) * t + u * bytes / std::min(link.bytes_per_s, left);
  }
  return t + link.latency_s;
}

double nic_bytes_per_s_beside(const GroupNetwork& g, const NicSharing& shared) {
  if (!g.crosses_nodes || shared.flow_bytes_per_s <= 0) return g.nic_bytes_per_s;
  const double nic_bytes_per_s = g.nic_alone_bytes_per_s;
  const double left_bytes_per_s = std::max(nic_bytes_per_s / 2, nic_bytes_per_s - shared.flow_bytes_per_s);
  return std::min(g.nic_bytes_per_s, left_bytes_per_s);
}

}  // namespace meshwork::models
