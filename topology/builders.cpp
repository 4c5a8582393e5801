#include "topology/builders.hpp"

#include <algorithm>
#include <limits>

#include "topology/fabric_share.hpp"

namespace meshwork::topology {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Builder {
  Topology t;
  std::int64_t counters[6] = {};

  VertexId add(VertexKind kind, std::int64_t node = -1, std::int64_t group = -1) {
    const auto v = boost::add_vertex(Vertex{kind, counters[static_cast<int>(kind)]++, node, group}, t.graph);
    return v;
  }
  void link(VertexId a, VertexId b, LinkTier tier, double gbytes_per_s, double latency_us) {
    boost::add_edge(a, b, Link{static_cast<std::int64_t>(boost::num_edges(t.graph)), tier, gbytes_per_s, latency_us}, t.graph);
  }
};

// GPUs of every node on an NVSwitch (or a full NVLink mesh), and the node's NICs; returns the
// NICs, node by node.
std::vector<VertexId> add_nodes(Builder& b, const plan::ClusterConfig& c, std::int64_t nodes) {
  std::vector<VertexId> nics;
  const double nvlink = c.intra_node.bandwidth_gbytes_per_s;
  const double nic_gbytes = c.nic_bandwidth_gbps / 8;
  for (std::int64_t n = 0; n < nodes; ++n) {
    std::vector<VertexId> gpus;
    for (std::int64_t g = 0; g < c.gpus_per_node; ++g) {
      gpus.push_back(b.add(VertexKind::gpu, n));
      b.t.gpus.push_back(gpus.back());
    }
    if (c.intra_node.kind == plan::IntraNodeKind::nvlink_mesh) {
      // Without switches each GPU splits its links over its peers.
      const double share = nvlink / static_cast<double>(std::max<std::int64_t>(1, c.gpus_per_node - 1));
      for (std::size_t i = 0; i < gpus.size(); ++i)
        for (std::size_t j = i + 1; j < gpus.size(); ++j) b.link(gpus[i], gpus[j], LinkTier::nvlink, share, c.intra_node.latency_us);
    } else {
      const auto sw = b.add(VertexKind::nvswitch, n);
      // GPU to GPU through the switch is one intra-node hop of latency_us: half on each link.
      for (auto g : gpus) b.link(g, sw, LinkTier::nvlink, nvlink, c.intra_node.latency_us / 2);
    }
    for (std::int64_t i = 0; i < c.nics_per_node; ++i) {
      const auto nic = b.add(VertexKind::nic, n);
      nics.push_back(nic);
      // GPU g uses NIC g * nics / gpus (one NIC per GPU on DGX; shared when fewer).
      for (std::int64_t g = 0; g < c.gpus_per_node; ++g) {
        if (g * c.nics_per_node / c.gpus_per_node == i) b.link(gpus[static_cast<std::size_t>(g)], nic, LinkTier::gpu_to_nic, nic_gbytes, 0.5);
      }
    }
  }
  return nics;
}

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

// A padding slot in a list of ports (a rail's last leaf not full).
constexpr VertexId kNoPort = std::numeric_limits<VertexId>::max();

// The switches of one fabric (one plane) over `ports`, the NICs in node order, each port of
// `port_gbytes` per direction. Returns an error when the fabric cannot hold them.
struct Fabric {
  Builder& b;
  const plan::ClusterConfig& c;
  const std::vector<VertexId>& ports;
  double port_gbytes;
  std::int64_t plane;

  double hop_us() const { return c.topology.link_latency_us; }
  std::int64_t radix() const { return c.topology.switch_radix; }
  VertexId add(VertexKind kind, std::int64_t group = -1) {
    const VertexId v = b.add(kind, -1, group);
    b.t.graph[v].plane = plane;
    return v;
  }

  // Leaf/spine: every leaf spreads its `up` links over all the spines, as few as hold them
  // (ceil(leaves * up / k)); with k leaves, one link from each leaf to each of `up` spines.
  std::string two_tier() {
    const PortSplit split = split_ports(radix(), c.topology.oversubscription);
    const std::int64_t down = split.down, up = split.up;
    const auto n = static_cast<std::int64_t>(ports.size());
    const std::int64_t leaves = ceil_div(n, down);
    if (leaves > radix()) {
      return std::to_string(n) + " NIC ports need " + std::to_string(leaves) + " leaves; a 2-tier tree of radix " +
             std::to_string(radix()) + " holds " + std::to_string(radix() * down) + " (use tiers: 3)";
    }
    const std::int64_t spines = ceil_div(leaves * up, radix());
    std::vector<VertexId> leaf, spine;
    for (std::int64_t i = 0; i < leaves; ++i) leaf.push_back(add(VertexKind::leaf, rail_of(i * down)));
    for (std::int64_t i = 0; i < spines; ++i) spine.push_back(add(VertexKind::spine));
    for (std::int64_t i = 0; i < n; ++i) {
      if (ports[at(i)] != kNoPort) b.link(ports[at(i)], leaf[at(i / down)], LinkTier::nic_to_leaf, port_gbytes, hop_us());
    }
    for (auto l : leaf)
      for (std::int64_t u = 0; u < up; ++u) b.link(l, spine[at(u % spines)], LinkTier::leaf_to_spine, port_gbytes, hop_us());
    return {};
  }

  // Three tiers: pods of leaves and spines under a core. The k-ary fat tree of Al-Fares et al.
  // (2008, §3) has pods of k/2 leaves, each linked to the pod's k/2 spines, and each spine with
  // k/2 up-links; `pod_gpus` sets the pod's size instead, non-blocking inside (leaf
  // oversubscription aside: every leaf linked to each of its pod's leaf-up-link spines, which
  // may then have more ports than the radix, see PortGeometry::pod_mesh) and
  // `pod_oversubscription` to 1 towards the core, as the Llama 3 cluster's 3,072-GPU pods with
  // 1:7 above them (Llama 3 paper, arXiv:2407.21783, §3.3.1).
  std::string three_tier() {
    const std::int64_t k = radix();
    // The port counts the closed form of the fabric's shares uses (topology/fabric_share).
    const PortGeometry g = *port_geometry(c);
    const std::int64_t down = g.leaf.down, up = g.leaf.up;
    const std::int64_t per_pod = g.pod_ports;
    const auto n = static_cast<std::int64_t>(ports.size());
    const std::int64_t pods = ceil_div(n, per_pod);
    if (pods > k) {
      return std::to_string(n) + " NICs need " + std::to_string(pods) + " pods; a 3-tier tree of radix " + std::to_string(k) +
             " holds " + std::to_string(k * per_pod) + " NICs";
    }
    // The last pod may be partly filled: only the leaves and spines its NICs need.
    auto leaves_in = [&](std::int64_t p) { return g.leaves_in_pod(p); };
    auto spines_in = [&](std::int64_t p) { return g.spines_in_pod(p); };
    // Core switches for the pods built: their spines' up-links over radix-k cores ((k/2)^2
    // for a full k-ary tree).
    std::int64_t uplinks = 0;
    for (std::int64_t p = 0; p < pods; ++p) uplinks += g.pod_up_links(p);
    const std::int64_t cores = std::max<std::int64_t>(1, ceil_div(uplinks, k));
    std::vector<VertexId> core;
    for (std::int64_t i = 0; i < cores; ++i) core.push_back(add(VertexKind::core));
    std::int64_t next_core = 0;
    for (std::int64_t p = 0; p < pods; ++p) {
      const std::int64_t leaves = leaves_in(p), spines = spines_in(p);
      std::vector<VertexId> edge, agg;
      for (std::int64_t i = 0; i < leaves; ++i) edge.push_back(add(VertexKind::leaf, rail_ports > 0 ? rail_of(p * per_pod + i * down) : p));
      for (std::int64_t i = 0; i < spines; ++i) agg.push_back(add(VertexKind::spine, p));
      // Leaf i's up-links round-robin over the pod's spines: one to each in the k-ary tree.
      for (std::int64_t i = 0; i < leaves; ++i)
        for (std::int64_t u = 0; u < up; ++u) b.link(edge[at(i)], agg[at((i * up + u) % spines)], LinkTier::leaf_to_spine, port_gbytes, hop_us());
      for (std::int64_t j = 0; j < spines; ++j)
        for (std::int64_t u = 0; u < g.spine_up_links(p, j); ++u) b.link(agg[at(j)], core[at(next_core++ % cores)], LinkTier::spine_to_core, port_gbytes, hop_us());
      for (std::int64_t i = 0; i < per_pod; ++i) {
        const std::int64_t nic = p * per_pod + i;
        if (nic < n && ports[at(nic)] != kNoPort) b.link(ports[at(nic)], edge[at(i / down)], LinkTier::nic_to_leaf, port_gbytes, hop_us());
      }
    }
    return {};
  }

  // The rail (NIC index within its node) of the port at `position`, when the ports are in
  // rail order; -1 otherwise.
  std::int64_t rail_of(std::int64_t position) const {
    return rail_ports > 0 ? position / rail_ports : -1;
  }
  std::int64_t rail_ports = 0;  // ports per rail, padded, when ports are in rail order
};

// Rail-optimized: NIC r of every node on rail r's leaves (NVIDIA DGX SuperPOD reference
// architecture), so a ring of same-index GPUs across nodes stays on one leaf. The ports are
// put in rail order, each rail padded to whole leaves, and the tree above is the same
// leaf/spine or 3-tier tree as a fat tree's.
std::vector<VertexId> rail_order(const std::vector<VertexId>& nics, std::int64_t rails, std::int64_t down, std::int64_t& per_rail) {
  const auto nodes = static_cast<std::int64_t>(nics.size()) / rails;
  per_rail = ceil_div(nodes, down) * down;
  std::vector<VertexId> ports(at(rails * per_rail), kNoPort);
  for (std::int64_t r = 0; r < rails; ++r)
    for (std::int64_t n = 0; n < nodes; ++n) ports[at(r * per_rail + n)] = nics[at(n * rails + r)];
  return ports;
}

}  // namespace

BuildResult build(const plan::ClusterConfig& c) {
  BuildResult out;
  Builder b;
  const std::int64_t nodes = c.num_nodes();
  b.t.gpus_per_node = c.gpus_per_node;
  b.t.nodes = nodes;
  const auto& topo = c.topology;

  if (topo.kind == plan::TopologyKind::single_node || nodes <= 1) {
    if (nodes > 1) {
      out.error = "topology single_node holds one node, the plan has " + std::to_string(nodes);
      return out;
    }
    add_nodes(b, plan::ClusterConfig{c.gpu, c.num_gpus, c.gpus_per_node, c.intra_node, 0, c.nic_bandwidth_gbps, c.topology}, 1);
    b.t.kind = "single_node";
    out.topology = std::move(b.t);
    return out;
  }
  if (c.nics_per_node <= 0) {
    out.error = "a multi-node fabric needs NICs (cluster.nics_per_node)";
    return out;
  }
  if (topo.switch_radix < 4 || topo.switch_radix % 2 != 0) {
    out.error = "switch_radix " + std::to_string(topo.switch_radix) + ": a fat tree needs an even radix of at least 4";
    return out;
  }
  const std::vector<VertexId> nics = add_nodes(b, c, nodes);
  const double nic_gbytes = c.nic_bandwidth_gbps / 8;
  const std::string tiers = topo.tiers <= 2 ? "2 tiers" : (topo.pod_gpus > 0 ? "3 tiers, pods of " + std::to_string(topo.pod_gpus) + " GPUs" : "3 tiers");
  switch (topo.kind) {
    case plan::TopologyKind::fat_tree: {
      Fabric f{b, c, nics, nic_gbytes, -1};
      out.error = topo.tiers <= 2 ? f.two_tier() : f.three_tier();
      b.t.kind = "fat_tree (" + tiers + ")";
      break;
    }
    case plan::TopologyKind::multi_plane: {
      // Every NIC has one port on each plane, a fat tree of its own (Alibaba HPN, SIGCOMM
      // 2024, §5: dual-plane, each 400G NIC as two 200G ports on two ToRs of two planes).
      const std::int64_t planes = std::max<std::int64_t>(1, topo.planes);
      for (std::int64_t p = 0; p < planes && out.error.empty(); ++p) {
        Fabric f{b, c, nics, nic_gbytes / static_cast<double>(planes), p};
        out.error = topo.tiers <= 2 ? f.two_tier() : f.three_tier();
      }
      b.t.kind = "multi_plane (" + std::to_string(planes) + " planes, " + tiers + ")";
      break;
    }
    case plan::TopologyKind::rail_optimized: {
      std::int64_t per_rail = 0;
      const std::vector<VertexId> ports = rail_order(nics, c.nics_per_node, split_ports(topo.switch_radix, topo.oversubscription).down, per_rail);
      Fabric f{b, c, ports, nic_gbytes, -1};
      f.rail_ports = per_rail;
      // Destination-mod-k numbers each GPU by its place on its rail (Topology::port_order).
      if (const auto g = port_geometry(c)) {
        for (std::int64_t gpu = 0; gpu < static_cast<std::int64_t>(b.t.gpus.size()); ++gpu) b.t.port_order.push_back(g->destination_number(gpu));
      }
      out.error = topo.tiers <= 2 ? f.two_tier() : f.three_tier();
      b.t.kind = "rail_optimized (" + tiers + ")";
      break;
    }
    case plan::TopologyKind::single_node: break;
  }
  if (out.error.empty()) out.topology = std::move(b.t);
  return out;
}

Topology build_k_ary_fat_tree(std::int64_t k, double link_gbytes_per_s, double latency_us) {
  plan::ClusterConfig c;
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  c.num_gpus = k * k * k / 4;
  c.nic_bandwidth_gbps = link_gbytes_per_s * 8;
  c.intra_node.bandwidth_gbytes_per_s = link_gbytes_per_s;
  c.intra_node.kind = plan::IntraNodeKind::nvlink_mesh;  // one GPU per host: no NVSwitch vertex
  c.topology = {plan::TopologyKind::fat_tree, 3, k, 1.0, latency_us};
  return *build(c).topology;
}

}  // namespace meshwork::topology
