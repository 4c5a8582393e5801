#include "topology/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "topology/fabric_share.hpp"
#include "topology/router.hpp"

namespace meshwork::topology {

BillOfMaterials bill_of_materials(const Topology& t) {
  BillOfMaterials bom;
  for (auto v : boost::make_iterator_range(boost::vertices(t.graph))) {
    const auto kind = t.graph[v].kind;
    if (kind == VertexKind::leaf || kind == VertexKind::spine || kind == VertexKind::core || kind == VertexKind::nvswitch) {
      ++bom.switches[std::string(to_string(kind))];
    }
  }
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
    const auto tier = t.graph[e].tier;
    ++bom.links[std::string(to_string(tier))];
    if (tier == LinkTier::nic_to_leaf || tier == LinkTier::leaf_to_spine || tier == LinkTier::spine_to_core) ++bom.cables;
  }
  bom.transceivers = 2 * bom.cables;
  return bom;
}

double bisection_gbytes_per_s(const Topology& t) {
  std::map<LinkTier, double> capacity;
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) capacity[t.graph[e].tier] += t.graph[e].bandwidth_gbytes_per_s;
  if (t.nodes <= 1) {
    // One node: half the GPUs talk to the other half through the NVSwitch.
    return capacity[LinkTier::nvlink] / 2;
  }
  double best = std::numeric_limits<double>::infinity();
  for (LinkTier tier : {LinkTier::nic_to_leaf, LinkTier::leaf_to_spine, LinkTier::spine_to_core}) {
    if (capacity.count(tier)) best = std::min(best, capacity[tier] / 2);
  }
  return std::isfinite(best) ? best : 0;
}

std::int64_t diameter_hops(const Topology& t) {
  Router router(t);
  std::int64_t worst = 0;
  const auto n = static_cast<std::int64_t>(t.gpus.size());
  for (std::int64_t from : {std::int64_t{0}, n - 1}) {
    if (from < 0) continue;
    router.set_source(from);
    for (std::int64_t g = 0; g < n; ++g) worst = std::max(worst, router.info_from_source(g).hops);
  }
  return worst;
}

GroupPath group_path(const Topology& t, const plan::RankLayout& layout, plan::GroupKind group, std::int64_t index) {
  Router router(t);
  return group_path(router, layout, group, index);
}

GroupPath group_path(Router& router, const plan::RankLayout& layout, plan::GroupKind group, std::int64_t index) {
  GroupPath out;
  if (layout.group_size(group) <= 1) return out;
  const auto members = layout.group(group, index);
  router.set_source(members.front());
  for (std::size_t i = 1; i < members.size(); ++i) {
    const PathInfo p = router.info_from_source(members[i]);
    if (p.hops < 0) {
      out.disconnected = true;
      continue;
    }
    if (p.hops > out.hops || (p.hops == out.hops && p.bottleneck_gbytes_per_s < out.bottleneck_gbytes_per_s)) {
      out.hops = p.hops;
      out.bottleneck_gbytes_per_s = p.bottleneck_gbytes_per_s;
    }
  }
  return out;
}

double ring_share_gbytes_per_s(const Topology& t, const plan::RankLayout& layout, plan::GroupKind group, plan::Routing routing) {
  if (layout.group_size(group) <= 1) return 0;
  Router router(t);
  std::vector<double> load(2 * boost::num_edges(t.graph), 0.0);
  std::vector<double> capacity(load.size(), 0.0);
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
    const auto id = static_cast<std::size_t>(t.graph[e].id);
    capacity[2 * id] = capacity[2 * id + 1] = t.graph[e].bandwidth_gbytes_per_s;
  }
  const std::int64_t per_node = std::max<std::int64_t>(t.gpus_per_node, 1);
  std::int64_t planes = 1;
  for (auto v : boost::make_iterator_range(boost::vertices(t.graph))) planes = std::max(planes, t.graph[v].plane + 1);
  auto add = [&](std::int64_t from, std::int64_t to) {
    if (routing != plan::Routing::d_mod_k) {
      router.spread(from, to, 1.0, load);
      return;
    }
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      for (const Hop& h : router.route_d_mod_k(from, to, planes > 1 ? plane : -1)) load[h.slot()] += 1.0 / static_cast<double>(planes);
    }
  };
  // One stage at a time for the kinds the schedule staggers (topology/fabric_share.hpp).
  const std::int64_t stages = staggered_by_stage(group) ? layout.shape().pp : 1;
  double share = std::numeric_limits<double>::infinity();
  for (std::int64_t stage = 0; stage < stages; ++stage) {
    std::fill(load.begin(), load.end(), 0.0);
    for (std::int64_t g = 0; g < layout.num_groups(group); ++g) {
      if (stages > 1 && layout.coord(layout.group_first(group, g)).pp != stage) continue;
      const auto members = layout.group(group, g);
      // Members per node: those on the first member's node (members ascend).
      std::int64_t k = 0;
      while (static_cast<std::size_t>(k) < members.size() && members[static_cast<std::size_t>(k)] / per_node == members.front() / per_node) ++k;
      for (std::size_t i = 0; i < members.size(); ++i) {
        const std::int64_t next = plan::ring_successor(members, i, k, per_node);
        if (next != members[i]) add(members[i], next);
      }
    }
    for (std::size_t slot = 0; slot < load.size(); ++slot) {
      if (load[slot] > 1e-12 && capacity[slot] > 0) share = std::min(share, capacity[slot] / load[slot]);
    }
  }
  return std::isfinite(share) ? share : 0;
}

}  // namespace meshwork::topology
