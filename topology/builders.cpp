#include "topology/builders.hpp"

#include <algorithm>

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
      for (auto g : gpus) b.link(g, sw, LinkTier::nvlink, nvlink, c.intra_node.latency_us);
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

// Leaf ports split by the leaf's oversubscription (down / up).
void leaf_ports(std::int64_t radix, double oversubscription, std::int64_t& down, std::int64_t& up) {
  down = static_cast<std::int64_t>(static_cast<double>(radix) * oversubscription / (1 + oversubscription));
  down = std::clamp<std::int64_t>(down, 1, radix - 1);
  up = radix - down;
}

}  // namespace

BuildResult build(const plan::ClusterConfig& c) {
  BuildResult out;
  Builder b;
  const std::int64_t nodes = c.num_nodes();
  b.t.gpus_per_node = c.gpus_per_node;
  b.t.nodes = nodes;
  const auto& topo = c.topology;
  const double nic_gbytes = c.nic_bandwidth_gbps / 8;
  const double hop_us = topo.link_latency_us;
  const std::int64_t k = topo.switch_radix;

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
  std::int64_t down = 0, up = 0;
  leaf_ports(k, topo.oversubscription, down, up);
  const std::vector<VertexId> nics = add_nodes(b, c, nodes);
  const std::int64_t n_nic = static_cast<std::int64_t>(nics.size());

  switch (topo.kind) {
    case plan::TopologyKind::fat_tree: {
      if (topo.tiers <= 2) {
        // Leaf/spine: every leaf has one link to each of `up` spines; a spine's k ports take k leaves.
        const std::int64_t leaves = ceil_div(n_nic, down);
        if (leaves > k) {
          out.error = std::to_string(n_nic) + " NICs need " + std::to_string(leaves) + " leaves; a 2-tier tree of radix " +
                      std::to_string(k) + " holds " + std::to_string(k * down) + " NICs (use tiers: 3)";
          return out;
        }
        std::vector<VertexId> leaf, spine;
        for (std::int64_t i = 0; i < leaves; ++i) leaf.push_back(b.add(VertexKind::leaf));
        for (std::int64_t i = 0; i < up; ++i) spine.push_back(b.add(VertexKind::spine));
        for (std::int64_t i = 0; i < n_nic; ++i) b.link(nics[static_cast<std::size_t>(i)], leaf[static_cast<std::size_t>(i / down)], LinkTier::nic_to_leaf, nic_gbytes, hop_us);
        for (auto l : leaf)
          for (auto s : spine) b.link(l, s, LinkTier::leaf_to_spine, nic_gbytes, hop_us);
        b.t.kind = "fat_tree (2 tiers)";
      } else {
        // Al-Fares k-ary fat tree: pods of k/2 edge (leaf) and `up` aggregation (spine)
        // switches, each edge linked to every aggregation switch of its pod, each aggregation
        // switch with k/2 up-links to the core.
        const std::int64_t half = k / 2;
        const std::int64_t per_pod = half * down;
        const std::int64_t pods = ceil_div(n_nic, per_pod);
        if (pods > k) {
          out.error = std::to_string(n_nic) + " NICs need " + std::to_string(pods) + " pods; a 3-tier tree of radix " +
                      std::to_string(k) + " holds " + std::to_string(k * per_pod) + " NICs";
          return out;
        }
        // Core switches for the pods built: their aggregation up-links over radix-k cores
        // ((k/2)^2 for a full tree of k pods).
        const std::int64_t cores = ceil_div(pods * up * half, k);
        std::vector<VertexId> core;
        for (std::int64_t i = 0; i < cores; ++i) core.push_back(b.add(VertexKind::core));
        std::int64_t next_core = 0;
        for (std::int64_t p = 0; p < pods; ++p) {
          std::vector<VertexId> edge, agg;
          for (std::int64_t i = 0; i < half; ++i) edge.push_back(b.add(VertexKind::leaf, -1, p));
          for (std::int64_t i = 0; i < up; ++i) agg.push_back(b.add(VertexKind::spine, -1, p));
          for (auto e : edge)
            for (auto a : agg) b.link(e, a, LinkTier::leaf_to_spine, nic_gbytes, hop_us);
          for (std::int64_t j = 0; j < up; ++j)
            for (std::int64_t i = 0; i < half; ++i) {
              b.link(agg[static_cast<std::size_t>(j)], core[static_cast<std::size_t>(next_core++ % cores)], LinkTier::spine_to_core, nic_gbytes, hop_us);
            }
          for (std::int64_t i = 0; i < per_pod; ++i) {
            const std::int64_t nic = p * per_pod + i;
            if (nic < n_nic) b.link(nics[static_cast<std::size_t>(nic)], edge[static_cast<std::size_t>(i / down)], LinkTier::nic_to_leaf, nic_gbytes, hop_us);
          }
        }
        b.t.kind = "fat_tree (3 tiers)";
      }
      break;
    }
    case plan::TopologyKind::rail_optimized: {
      // Rail r holds NIC r of every node: ceil(nodes / down) leaves per rail; each leaf's `up`
      // links spread round-robin over the spines that join the rails.
      const std::int64_t rails = c.nics_per_node;
      const std::int64_t per_rail = ceil_div(nodes, down);
      const std::int64_t uplinks = rails * per_rail * up;
      const std::int64_t spines = ceil_div(uplinks, k);
      std::vector<VertexId> spine;
      for (std::int64_t i = 0; i < spines; ++i) spine.push_back(b.add(VertexKind::spine));
      std::int64_t next = 0;
      for (std::int64_t r = 0; r < rails; ++r) {
        std::vector<VertexId> leaf;
        for (std::int64_t i = 0; i < per_rail; ++i) leaf.push_back(b.add(VertexKind::leaf, -1, r));
        for (std::int64_t n = 0; n < nodes; ++n) {
          b.link(nics[static_cast<std::size_t>(n * rails + r)], leaf[static_cast<std::size_t>(n / down)], LinkTier::nic_to_leaf, nic_gbytes, hop_us);
        }
        for (auto l : leaf)
          for (std::int64_t u = 0; u < up; ++u) b.link(l, spine[static_cast<std::size_t>(next++ % spines)], LinkTier::leaf_to_spine, nic_gbytes, hop_us);
      }
      b.t.kind = "rail_optimized";
      break;
    }
    default:
      out.error = "topology " + std::string(plan::to_string(topo.kind)) + " is not built yet (fat_tree, rail_optimized, single_node are)";
      return out;
  }
  out.topology = std::move(b.t);
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
