#include "topology/fabric_share.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace meshwork::topology {
namespace {

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

// Loads' vectors, in one order (for copying a count sparse and back).
constexpr std::size_t kLoadFields = 10;
std::array<std::vector<double>*, kLoadFields> load_fields(Loads& l) {
  return {&l.port_out, &l.port_in, &l.leaf_out, &l.leaf_in, &l.pod_out, &l.pod_in, &l.leaf_flows_out, &l.leaf_flows_in, &l.pod_flows_out, &l.pod_flows_in};
}

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

double TierShares::least() const { return std::min({nic_gbytes_per_s, leaf_gbytes_per_s, pod_gbytes_per_s}); }

double TierShares::above_nic_fraction() const {
  const double above = std::min(leaf_gbytes_per_s, pod_gbytes_per_s);
  if (!std::isfinite(above) || !std::isfinite(nic_gbytes_per_s) || nic_gbytes_per_s <= 0) return 1;
  return std::min(1.0, above / nic_gbytes_per_s);
}

bool staggered_by_stage(plan::GroupKind kind) {
  switch (kind) {
    case plan::GroupKind::dp:
    case plan::GroupKind::expert_dp:
    case plan::GroupKind::dp_cp:
    case plan::GroupKind::dp_shard:
    case plan::GroupKind::dp_replica:
    case plan::GroupKind::expert_dp_shard:
    case plan::GroupKind::expert_dp_replica: return true;
    case plan::GroupKind::tp:
    case plan::GroupKind::cp:
    case plan::GroupKind::ep:
    case plan::GroupKind::pp: return false;
  }
  return false;
}

namespace {

TierShares count_tier_shares(const plan::ClusterConfig& c, const plan::RankLayout& layout, plan::GroupKind kind, Pattern pattern, bool per_edge) {
  TierShares s{kInf, kInf, kInf, {}, {}, {}};
  const auto geometry = port_geometry(c);
  // A mesh larger than the cluster (a plan validate refuses, which an estimate may still be
  // asked for) has ranks on no port: nothing to count.
  if (!geometry || layout.group_size(kind) <= 1 || layout.world_size() > c.num_gpus) return s;
  const PortGeometry& g = *geometry;
  const std::int64_t per_node = g.gpus_per_node;
  const bool by_stage = staggered_by_stage(kind) && layout.shape().pp > 1;
  // The groups of the kind, stage by stage where they are staggered (all in stage 0 otherwise).
  const std::int64_t stages = by_stage ? layout.shape().pp : 1;
  std::vector<std::vector<std::int64_t>> groups_of_stage(at(stages));
  for (std::int64_t index = 0; index < layout.num_groups(kind); ++index) {
    groups_of_stage[at(by_stage ? layout.coord(layout.group_first(kind, index)).pp : 0)].push_back(index);
  }
  // A ring's edges, group by group: (position, from port, to port, destination GPU) of those
  // between nodes.
  auto for_each_edge = [&](const std::vector<std::int64_t>& groups, auto&& edge) {
    for (const std::int64_t index : groups) {
      const auto members = layout.group(kind, index);
      // Members on the first member's node (members ascend), as ring_successor takes them.
      std::int64_t k = 0;
      while (at(k) < members.size() && members[at(k)] / per_node == members.front() / per_node) ++k;
      for (std::size_t i = 0; i < members.size(); ++i) {
        const std::int64_t next =
            pattern == Pattern::pipeline ? members[(i + 1) % members.size()] : plan::ring_successor(members, i, k, per_node);
        if (members[i] / per_node != next / per_node) edge(i, g.port_of_gpu(members[i]), g.port_of_gpu(next), next);
      }
    }
  };
  // Flows of one ring edge (of one pair of an all-to-all): the plan's flows per peer, at least
  // one per plane (sim/flow_routes: flow f goes on plane f mod planes).
  const auto& topo = c.topology;
  const std::int64_t planes = topo.kind == plan::TopologyKind::multi_plane ? std::max<std::int64_t>(1, topo.planes) : 1;
  const auto flows_per_stream = static_cast<double>(std::max({std::int64_t{1}, topo.flows_per_peer, planes}));
  // Destination-mod-k: each stream's load on each link above the leaves, its route known.
  std::optional<DestinationModK> d_mod_k;
  if (topo.routing == plan::Routing::d_mod_k && g.leaves() > 1) d_mod_k.emplace(g);
  // Every port (of each plane) runs at the NIC's rate over its planes, so the planes cancel:
  // each tier's capacity is counted in NICs.
  const double nic_gbytes = c.nic_bandwidth_gbps / 8;
  auto leaf_capacity = [&](std::int64_t) { return static_cast<double>(g.leaf.up) * nic_gbytes; };
  auto pod_capacity = [&](std::int64_t p) { return static_cast<double>(g.pod_up_links(p)) * nic_gbytes; };
  std::vector<double> link_load;
  double leaf_collisions = 1, pod_collisions = 1;
  // Where the kind is counted stage by stage, each stage's loads are kept (sparse) for the pairs
  // of stages that run at once (stage_pair_above_nic_fraction): up to 64 stages.
  const bool pairs = by_stage && pattern != Pattern::all_to_all && stages <= 64;
  using SparseLoads = std::array<std::vector<std::pair<std::size_t, double>>, kLoadFields + 1>;  // the last: link_load
  std::vector<SparseLoads> stage_loads;
  // What the leaf and pod tiers leave one ring edge (pipeline boundary) of the NIC's share
  // `here` gives, with the loads counted: its busiest link's streams under destination-mod-k,
  // otherwise the leaves' and pods' it crosses; 1 at most.
  auto edge_fraction = [&](const TierShares& here, const Loads& loads, std::int64_t from, std::int64_t to, std::int64_t dst) {
    if (!std::isfinite(here.nic_gbytes_per_s)) return 1.0;
    auto share = [](double capacity, double out, double in) { return capacity / std::max({out, in, 1e-12}); };
    if (d_mod_k) {
      double most = 0;
      const auto r = d_mod_k->route(from, to, static_cast<std::uint64_t>(g.destination_number(dst)));
      for (int h = 0; h < r.hops; ++h) most = std::max(most, link_load[r.slot[at(h)]]);
      return most > 1e-12 ? std::min(1.0, nic_gbytes / most / here.nic_gbytes_per_s) : 1.0;
    }
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
    return std::min(1.0, above / here.nic_gbytes_per_s);
  };

  // The shares the loads counted leave one stream (and link_load, under destination-mod-k);
  // ECMP's collisions kept in leaf_collisions and pod_collisions for edge_fraction.
  auto shares_of = [&](const Loads& loads) {
    TierShares here{kInf, kInf, kInf, {}, {}, {}};
    here.nic_gbytes_per_s = least_share(loads.port_out, loads.port_in, [&](std::int64_t) { return nic_gbytes; });
    here.leaf_gbytes_per_s = least_share(loads.leaf_out, loads.leaf_in, leaf_capacity);
    if (g.pod_ports > 0) here.pod_gbytes_per_s = least_share(loads.pod_out, loads.pod_in, pod_capacity);
    // ECMP hashing: each flow on a path of its own choosing, so a tier's busiest link carries
    // more than the mean, and a stream goes at the pace of its flow there (the simulator holds
    // an edge's flows to one pace): the tier's share times mean / busiest, the busiest taken
    // over all the tier's links (both ways, every plane) at the most loaded leaf's (pod's) mean.
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
      if (std::isfinite(here.leaf_gbytes_per_s)) here.leaf_gbytes_per_s *= leaf_collisions;
      if (g.pod_ports > 0) {
        pod_collisions = collisions(loads.pod_flows_out, loads.pod_flows_in, [&](std::int64_t p) { return g.pod_up_links(p); });
        if (std::isfinite(here.pod_gbytes_per_s)) here.pod_gbytes_per_s *= pod_collisions;
      }
    }
    // Destination-mod-k: each tier's busiest link, both ways, holds its streams to the NIC's
    // rate over their number (a link is one port of one plane; each stream has one flow on
    // each plane, so the planes cancel as above).
    if (d_mod_k) {
      auto busiest = [&](std::size_t begin, std::size_t end) {
        double most = 0;
        for (std::size_t slot = begin; slot < end; ++slot) most = std::max(most, link_load[slot]);
        return most > 1e-12 ? nic_gbytes / most : kInf;
      };
      here.leaf_gbytes_per_s = busiest(0, d_mod_k->leaf_slots());
      here.pod_gbytes_per_s = busiest(d_mod_k->leaf_slots(), d_mod_k->slots());
    }
    return here;
  };

  for (std::int64_t stage = 0; stage < stages; ++stage) {
    const auto& groups = groups_of_stage[at(stage)];
    Loads loads(g);
    if (d_mod_k) link_load.assign(d_mod_k->slots(), 0.0);
    auto route = [&](std::int64_t from, std::int64_t to, std::int64_t dst, double amount) {
      if (!d_mod_k) return;
      const auto r = d_mod_k->route(from, to, static_cast<std::uint64_t>(g.destination_number(dst)));
      for (int h = 0; h < r.hops; ++h) link_load[r.slot[at(h)]] += amount;
    };
    if (pattern != Pattern::all_to_all) {
      for_each_edge(groups, [&](std::size_t, std::int64_t from, std::int64_t to, std::int64_t dst) {
        loads.port_out[at(from)] += 1;
        loads.port_in[at(to)] += 1;
        loads.add(g, from, to, 1, flows_per_stream);
        route(from, to, dst, 1);
      });
    } else {
      // All-to-all: a member's stream to the other nodes, split evenly over their members.
      for (const std::int64_t index : groups) {
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
            route(from, to, b, 1.0 / static_cast<double>(off_node));
          }
        }
      }
    }
    const TierShares here = shares_of(loads);
    if (pairs) {
      SparseLoads& kept = stage_loads.emplace_back();
      const auto fields = load_fields(loads);
      for (std::size_t f = 0; f <= kLoadFields; ++f) {
        const std::vector<double>& dense = f < kLoadFields ? *fields[f] : link_load;
        for (std::size_t i = 0; i < dense.size(); ++i) {
          if (dense[i] != 0) kept[f].emplace_back(i, dense[i]);
        }
      }
    }
    if (by_stage) s.stage_above_nic_fraction.push_back(here.above_nic_fraction());
    s.nic_gbytes_per_s = std::min(s.nic_gbytes_per_s, here.nic_gbytes_per_s);
    s.leaf_gbytes_per_s = std::min(s.leaf_gbytes_per_s, here.leaf_gbytes_per_s);
    s.pod_gbytes_per_s = std::min(s.pod_gbytes_per_s, here.pod_gbytes_per_s);
    if (by_stage || !per_edge || pattern == Pattern::all_to_all || !std::isfinite(here.nic_gbytes_per_s)) continue;

    // Per edge (one stage: the kinds counted stage by stage have no per-edge figures).
    s.edge_above_nic_fraction.assign(at(layout.group_size(kind)), 1.0);
    for_each_edge(groups, [&](std::size_t i, std::int64_t from, std::int64_t to, std::int64_t dst) {
      double& f = s.edge_above_nic_fraction[i];
      f = std::min(f, edge_fraction(here, loads, from, to, dst));
    });
  }
  if (pairs) {
    // Stages k and j running at once: what stage k's rings get among both stages', for the
    // pairs whose traffic meets on a NIC port, a leaf's or a pod's up-links, or a link; every
    // other pair leaves each stage its share alone.
    const auto P = static_cast<std::size_t>(stages);
    s.stage_pair_above_nic_fraction.assign(P * P, 1.0);
    for (std::size_t k = 0; k < P; ++k) {
      for (std::size_t j = 0; j < P; ++j) s.stage_pair_above_nic_fraction[k * P + j] = s.stage_above_nic_fraction[k];
    }
    Loads both(g);
    const auto fields = load_fields(both);
    if (d_mod_k) link_load.assign(d_mod_k->slots(), 0.0);
    std::vector<char> meet(P * P, 0);
    std::vector<std::uint64_t> owners;
    for (std::size_t f = 0; f <= kLoadFields; ++f) {
      // Under destination-mod-k a stream's share above the NICs is its links' (shares_of), so
      // stages that share a leaf or a pod but no link do not meet there.
      if (d_mod_k && f >= 2 && f < kLoadFields) continue;
      owners.assign(f < kLoadFields ? fields[f]->size() : link_load.size(), 0);
      for (std::size_t k = 0; k < P; ++k) {
        for (const auto& [i, load] : stage_loads[k][f]) owners[i] |= std::uint64_t{1} << k;
      }
      for (const std::uint64_t o : owners) {
        if ((o & (o - 1)) == 0) continue;  // one stage at most
        for (std::size_t k = 0; k < P; ++k) {
          if (!(o >> k & 1)) continue;
          for (std::size_t j = k + 1; j < P; ++j) meet[k * P + j] |= static_cast<char>(o >> j & 1);
        }
      }
    }
    auto fill = [&](std::size_t k, double sign) {
      for (std::size_t f = 0; f <= kLoadFields; ++f) {
        std::vector<double>& dense = f < kLoadFields ? *fields[f] : link_load;
        for (const auto& [i, load] : stage_loads[k][f]) dense[i] = sign > 0 ? dense[i] + load : 0.0;
      }
    };
    for (std::size_t k = 0; k < P; ++k) {
      for (std::size_t j = k + 1; j < P; ++j) {
        if (!meet[k * P + j]) continue;
        fill(k, 1);
        fill(j, 1);
        const TierShares here = shares_of(both);
        for (const auto& [a, b] : {std::pair{k, j}, std::pair{j, k}}) {
          double least = s.stage_above_nic_fraction[a];
          for_each_edge(groups_of_stage[a], [&](std::size_t, std::int64_t from, std::int64_t to, std::int64_t dst) {
            least = std::min(least, edge_fraction(here, both, from, to, dst));
          });
          s.stage_pair_above_nic_fraction[a * P + b] = least;
        }
        fill(k, 0);
        fill(j, 0);
      }
    }
  }
  return s;
}

// What tier_shares answers depends on these alone.
struct SharesKey {
  plan::ClusterConfig cluster;
  plan::MeshShape shape;
  plan::DimOrder order;
  plan::GroupKind kind;
  Pattern pattern;
  bool per_edge;
  bool operator==(const SharesKey& o) const {
    const auto& a = cluster.topology;
    const auto& b = o.cluster.topology;
    return cluster.num_gpus == o.cluster.num_gpus && cluster.gpus_per_node == o.cluster.gpus_per_node &&
           cluster.nics_per_node == o.cluster.nics_per_node && cluster.nic_bandwidth_gbps == o.cluster.nic_bandwidth_gbps && a.kind == b.kind &&
           a.tiers == b.tiers && a.switch_radix == b.switch_radix && a.oversubscription == b.oversubscription && a.pod_gpus == b.pod_gpus &&
           a.pod_oversubscription == b.pod_oversubscription && a.planes == b.planes && a.routing == b.routing &&
           a.flows_per_peer == b.flows_per_peer && shape.tp == o.shape.tp && shape.cp == o.shape.cp && shape.ep == o.shape.ep &&
           shape.dp == o.shape.dp && shape.pp == o.shape.pp && shape.instances == o.shape.instances && order == o.order && kind == o.kind &&
           pattern == o.pattern && per_edge == o.per_edge;
  }
};

}  // namespace

TierShares tier_shares(const plan::ClusterConfig& c, const plan::RankLayout& layout, plan::GroupKind kind, Pattern pattern, bool per_edge) {
  // The count walks every edge of the kind (a few microseconds per thousand GPUs): the last
  // few answers are kept per thread, for an estimate's repeated groups and a sweep's repeated
  // meshes on one cluster.
  constexpr std::size_t kKept = 16;
  thread_local std::vector<std::pair<SharesKey, TierShares>> kept;
  SharesKey key{c, layout.shape(), layout.order(), kind, pattern, per_edge};
  for (const auto& [k, shares] : kept) {
    if (k == key) return shares;
  }
  TierShares s = count_tier_shares(c, layout, kind, pattern, per_edge);
  if (kept.size() >= kKept) kept.erase(kept.begin());
  kept.emplace_back(std::move(key), s);
  return s;
}

bool tiers_can_slow(const plan::ClusterConfig& c) {
  if (has_oversubscribed_tier(c)) return true;
  const auto g = port_geometry(c);
  return g && (c.topology.routing == plan::Routing::ecmp_hash || (c.topology.routing == plan::Routing::d_mod_k && g->leaves() > 1));
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
