#include "topology/fabric_share.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace meshwork::topology {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }
constexpr double kInf = std::numeric_limits<double>::infinity();

// Streams leaving and entering each leaf (pod) and through each NIC port, and the flows they
// are made of (ECMP hashes each flow on its own).
struct Loads {
  std::vector<double> port_out, port_in, leaf_out, leaf_in, pod_out, pod_in;
  std::vector<double> leaf_flows_out, leaf_flows_in, pod_flows_out, pod_flows_in;

  explicit Loads(const PortGeometry& g)
      : port_out(at(g.ports)), port_in(at(g.ports)), leaf_out(at(g.leaves())), leaf_in(at(g.leaves())), pod_out(at(g.pods())),
        pod_in(at(g.pods())), leaf_flows_out(at(g.leaves())), leaf_flows_in(at(g.leaves())), pod_flows_out(at(g.pods())),
        pod_flows_in(at(g.pods())) {}

  // `amount` of one stream, in `flows` flows, from the port `from` to the port `to`.
  void add(const PortGeometry& g, std::int64_t from, std::int64_t to, double amount, double flows) {
    if (g.leaf_of(from) != g.leaf_of(to)) {
      leaf_out[at(g.leaf_of(from))] += amount;
      leaf_in[at(g.leaf_of(to))] += amount;
      leaf_flows_out[at(g.leaf_of(from))] += flows;
      leaf_flows_in[at(g.leaf_of(to))] += flows;
    }
    if (g.pod_ports > 0 && g.pod_of(from) != g.pod_of(to)) {
      pod_out[at(g.pod_of(from))] += amount;
      pod_in[at(g.pod_of(to))] += amount;
      pod_flows_out[at(g.pod_of(from))] += flows;
      pod_flows_in[at(g.pod_of(to))] += flows;
    }
  }
};

// The most flows on the busiest of `links` links when flows are hashed onto them uniformly
// and independently, `mean` per link: the load L at which links x P(X > L) falls below one,
// X ~ Poisson(mean), the usual estimate of the largest of `links` loads (the union bound's
// threshold; Raab and Steger 1998, "Balls into bins: a simple and tight analysis", give its
// asymptotics, mean + sqrt(2 mean ln links) for mean >> ln links). Never below the mean.
double busiest_link_flows(double mean, double links) {
  if (!(mean > 0) || !(links > 1) || !std::isfinite(mean)) return mean;
  auto pmf = [&](double k) { return std::exp(-mean + k * std::log(mean) - std::lgamma(k + 1)); };
  // P(X > level) from floor(mean) up, one term off per level; terms past `span` are below
  // double precision.
  double level = std::floor(mean);
  double tail = 0;
  const double span = 20 * std::sqrt(mean) + 60;
  for (double k = level + 1; k <= level + span; k += 1) tail += pmf(k);
  while (links * tail >= 1 && level < mean + span) {
    level += 1;
    tail -= pmf(level);
  }
  return std::max(mean, level);
}

// The least capacity / load over the slots with load.
template <class Capacity>
double least_share(const std::vector<double>& out, const std::vector<double>& in, Capacity capacity) {
  double share = kInf;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double load = std::max(out[i], in[i]);
    if (load > 1e-12) share = std::min(share, capacity(static_cast<std::int64_t>(i)) / load);
  }
  return share;
}

}  // namespace

PortSplit split_ports(std::int64_t radix, double oversubscription) {
  PortSplit s;
  s.down = static_cast<std::int64_t>(static_cast<double>(radix) * oversubscription / (1 + oversubscription));
  s.down = std::clamp<std::int64_t>(s.down, 1, std::max<std::int64_t>(1, radix - 1));
  s.up = std::max<std::int64_t>(1, radix - s.down);
  return s;
}

std::int64_t PortGeometry::port_of_gpu(std::int64_t gpu) const {
  const std::int64_t node = gpu / gpus_per_node;
  const std::int64_t nic = gpu % gpus_per_node * nics_per_node / gpus_per_node;
  return rail_ports > 0 ? nic * rail_ports + node : node * nics_per_node + nic;
}

std::int64_t PortGeometry::leaf_of(std::int64_t port) const {
  if (pod_ports <= 0) return port / leaf.down;
  const std::int64_t p = port / pod_ports;
  return p * ceil_div(pod_ports, leaf.down) + port % pod_ports / leaf.down;
}
std::int64_t PortGeometry::leaves() const {
  if (pod_ports <= 0) return ceil_div(ports, leaf.down);
  return (pods() - 1) * ceil_div(pod_ports, leaf.down) + leaves_in_pod(pods() - 1);
}
std::int64_t PortGeometry::pods() const { return pod_ports > 0 ? ceil_div(ports, pod_ports) : 1; }
std::int64_t PortGeometry::leaves_in_pod(std::int64_t p) const {
  return pod_ports > 0 ? ceil_div(std::min(pod_ports, ports - p * pod_ports), leaf.down) : leaves();
}
std::int64_t PortGeometry::spines_in_pod(std::int64_t p) const {
  return pod_mesh ? leaf.up : ceil_div(leaves_in_pod(p) * leaf.up, spine.down);
}
std::int64_t PortGeometry::pod_up_links(std::int64_t p) const {
  if (!pod_mesh) return spines_in_pod(p) * spine.up;
  return std::max<std::int64_t>(1, std::llround(static_cast<double>(leaves_in_pod(p) * leaf.up) / pod_oversubscription));
}
std::int64_t PortGeometry::spine_up_links(std::int64_t p, std::int64_t j) const {
  if (!pod_mesh) return spine.up;
  const std::int64_t spines = spines_in_pod(p), total = pod_up_links(p);
  return total / spines + (j < total % spines ? 1 : 0);
}

std::optional<PortGeometry> port_geometry(const plan::ClusterConfig& c) {
  const auto& t = c.topology;
  const std::int64_t nodes = c.num_nodes();
  if (t.kind == plan::TopologyKind::single_node || nodes <= 1 || c.nics_per_node <= 0 || c.gpus_per_node <= 0 || t.switch_radix < 4) {
    return std::nullopt;
  }
  PortGeometry g;
  g.gpus_per_node = c.gpus_per_node;
  g.nics_per_node = c.nics_per_node;
  g.leaf = split_ports(t.switch_radix, t.oversubscription);
  g.ports = nodes * c.nics_per_node;
  if (t.kind == plan::TopologyKind::rail_optimized) {
    // Each rail padded to whole leaves, so that a leaf holds one rail (topology/builders.cpp).
    g.rail_ports = ceil_div(nodes, g.leaf.down) * g.leaf.down;
    g.ports = c.nics_per_node * g.rail_ports;
  }
  if (t.tiers >= 3) {
    // Pods of pod_gpus with pod_oversubscription above them, or Al-Fares' pods of k/2 leaves
    // under k/2 spines with k/2 up-links each (Al-Fares et al. 2008, §3).
    if (t.pod_gpus > 0) {
      g.pod_ports = std::max<std::int64_t>(1, t.pod_gpus / c.gpus_per_node * c.nics_per_node);
      g.pod_mesh = true;
      g.pod_oversubscription = std::max(1e-9, t.pod_oversubscription);
    } else {
      g.pod_ports = t.switch_radix / 2 * g.leaf.down;
      g.spine = {t.switch_radix / 2, t.switch_radix / 2};
    }
  }
  return g;
}

double TierShares::least() const { return std::min({nic_gbytes_per_s, leaf_gbytes_per_s, pod_gbytes_per_s}); }

double TierShares::above_nic_fraction() const {
  const double above = std::min(leaf_gbytes_per_s, pod_gbytes_per_s);
  if (!std::isfinite(above) || !std::isfinite(nic_gbytes_per_s) || nic_gbytes_per_s <= 0) return 1;
  return std::min(1.0, above / nic_gbytes_per_s);
}

TierShares tier_shares(const plan::ClusterConfig& c, const plan::RankLayout& layout, plan::GroupKind kind, Pattern pattern, bool per_edge) {
  TierShares s{kInf, kInf, kInf, {}};
  const auto geometry = port_geometry(c);
  if (!geometry || layout.group_size(kind) <= 1) return s;
  const PortGeometry& g = *geometry;
  const std::int64_t per_node = g.gpus_per_node;
  // A ring's edges, group by group: (position, from port, to port) of those between nodes.
  auto for_each_edge = [&](auto&& edge) {
    for (std::int64_t index = 0; index < layout.num_groups(kind); ++index) {
      const auto members = layout.group(kind, index);
      // Members on the first member's node (members ascend), as ring_successor takes them.
      std::int64_t k = 0;
      while (at(k) < members.size() && members[at(k)] / per_node == members.front() / per_node) ++k;
      for (std::size_t i = 0; i < members.size(); ++i) {
        const std::int64_t next =
            pattern == Pattern::pipeline ? members[(i + 1) % members.size()] : plan::ring_successor(members, i, k, per_node);
        if (members[i] / per_node != next / per_node) edge(i, g.port_of_gpu(members[i]), g.port_of_gpu(next));
      }
    }
  };
  // Flows of one ring edge (of one pair of an all-to-all): the plan's flows per peer, at least
  // one per plane (sim/flow_routes: flow f goes on plane f mod planes).
  const auto& topo = c.topology;
  const std::int64_t planes = topo.kind == plan::TopologyKind::multi_plane ? std::max<std::int64_t>(1, topo.planes) : 1;
  const auto flows_per_stream = static_cast<double>(std::max({std::int64_t{1}, topo.flows_per_peer, planes}));
  Loads loads(g);
  if (pattern != Pattern::all_to_all) {
    for_each_edge([&](std::size_t, std::int64_t from, std::int64_t to) {
      loads.port_out[at(from)] += 1;
      loads.port_in[at(to)] += 1;
      loads.add(g, from, to, 1, flows_per_stream);
    });
  } else {
    // All-to-all: a member's stream to the other nodes, split evenly over their members.
    for (std::int64_t index = 0; index < layout.num_groups(kind); ++index) {
      const auto members = layout.group(kind, index);
      for (const std::int64_t a : members) {
        std::int64_t off_node = 0;
        for (const std::int64_t b : members) off_node += b / per_node != a / per_node;
        if (off_node == 0) continue;
        const std::int64_t from = g.port_of_gpu(a);
        loads.port_out[at(from)] += 1;
        for (const std::int64_t b : members) {
          if (b / per_node == a / per_node) continue;
          const std::int64_t to = g.port_of_gpu(b);
          loads.port_in[at(to)] += 1.0 / static_cast<double>(off_node);
          loads.add(g, from, to, 1.0 / static_cast<double>(off_node), flows_per_stream);
        }
      }
    }
  }
  // Every port (of each plane) runs at the NIC's rate over its planes, so the planes cancel:
  // each tier's capacity is counted in NICs.
  const double nic_gbytes = c.nic_bandwidth_gbps / 8;
  auto leaf_capacity = [&](std::int64_t) { return static_cast<double>(g.leaf.up) * nic_gbytes; };
  auto pod_capacity = [&](std::int64_t p) { return static_cast<double>(g.pod_up_links(p)) * nic_gbytes; };
  s.nic_gbytes_per_s = least_share(loads.port_out, loads.port_in, [&](std::int64_t) { return nic_gbytes; });
  s.leaf_gbytes_per_s = least_share(loads.leaf_out, loads.leaf_in, leaf_capacity);
  if (g.pod_ports > 0) s.pod_gbytes_per_s = least_share(loads.pod_out, loads.pod_in, pod_capacity);
  // ECMP hashing: each flow on a path of its own choosing, so a tier's busiest link carries
  // more than the mean, and a stream goes at the pace of its flow there (the simulator holds an
  // edge's flows to one pace): the tier's share times mean / busiest, the busiest taken over
  // all the tier's links (both ways, every plane) at the most loaded leaf's (pod's) mean.
  double leaf_collisions = 1, pod_collisions = 1;
  if (topo.routing == plan::Routing::ecmp_hash) {
    auto collisions = [&](const std::vector<double>& out, const std::vector<double>& in, auto links_of) {
      double worst = 0;
      std::int64_t total_links = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t links = links_of(static_cast<std::int64_t>(i)) * planes;
        total_links += 2 * links;
        worst = std::max(worst, std::max(out[i], in[i]) / static_cast<double>(links));
      }
      return worst > 0 ? worst / busiest_link_flows(worst, static_cast<double>(total_links)) : 1.0;
    };
    leaf_collisions = collisions(loads.leaf_flows_out, loads.leaf_flows_in, [&](std::int64_t) { return g.leaf.up; });
    if (std::isfinite(s.leaf_gbytes_per_s)) s.leaf_gbytes_per_s *= leaf_collisions;
    if (g.pod_ports > 0) {
      pod_collisions = collisions(loads.pod_flows_out, loads.pod_flows_in, [&](std::int64_t p) { return g.pod_up_links(p); });
      if (std::isfinite(s.pod_gbytes_per_s)) s.pod_gbytes_per_s *= pod_collisions;
    }
  }
  if (per_edge && pattern != Pattern::all_to_all && std::isfinite(s.nic_gbytes_per_s)) {
    s.edge_above_nic_fraction.assign(at(layout.group_size(kind)), 1.0);
    auto share = [](double capacity, double out, double in) { return capacity / std::max({out, in, 1e-12}); };
    for_each_edge([&](std::size_t i, std::int64_t from, std::int64_t to) {
      double above = kInf;
      for (const std::int64_t leaf : {g.leaf_of(from), g.leaf_of(to)}) {
        if (g.leaf_of(from) != g.leaf_of(to)) {
          above = std::min(above, leaf_collisions * share(leaf_capacity(leaf), loads.leaf_out[at(leaf)], loads.leaf_in[at(leaf)]));
        }
      }
      for (const std::int64_t pod : {g.pod_of(from), g.pod_of(to)}) {
        if (g.pod_ports > 0 && g.pod_of(from) != g.pod_of(to)) {
          above = std::min(above, pod_collisions * share(pod_capacity(pod), loads.pod_out[at(pod)], loads.pod_in[at(pod)]));
        }
      }
      double& f = s.edge_above_nic_fraction[i];
      f = std::min(f, above / s.nic_gbytes_per_s);
    });
  }
  return s;
}

bool tiers_can_slow(const plan::ClusterConfig& c) {
  return has_oversubscribed_tier(c) || (port_geometry(c) && c.topology.routing == plan::Routing::ecmp_hash);
}

bool has_oversubscribed_tier(const plan::ClusterConfig& c) {
  const auto g = port_geometry(c);
  if (!g) return false;
  if (g->leaf.down > g->leaf.up) return true;
  if (g->pod_ports <= 0) return false;
  for (std::int64_t p = 0; p < g->pods(); ++p) {
    if (g->pod_up_links(p) < g->leaves_in_pod(p) * g->leaf.up) return true;
  }
  return false;
}

}  // namespace meshwork::topology
