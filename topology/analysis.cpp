#include "topology/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

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

GroupPath group_path(const Topology& t, const plan::RankLayout& layout, plan::GroupKind group, std::int64_t index) {
  GroupPath out;
  if (layout.group_size(group) <= 1 || t.gpus.empty()) return out;
  const auto members = layout.group(group, index);
  // The search stops once every member is reached: a group inside a node never leaves it.
  std::vector<char> wanted(boost::num_vertices(t.graph), 0);
  for (auto m : members) wanted[t.gpus[static_cast<std::size_t>(m)]] = 1;
  std::size_t left = members.size() - 1;
  const auto n = boost::num_vertices(t.graph);
  std::vector<std::int64_t> dist(n, -1);
  std::vector<double> slowest(n, std::numeric_limits<double>::infinity());
  std::queue<VertexId> q;
  const VertexId source = t.gpus[static_cast<std::size_t>(members.front())];
  dist[source] = 0;
  q.push(source);
  while (!q.empty() && left > 0) {
    const VertexId v = q.front();
    q.pop();
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) {
      const VertexId w = boost::target(e, t.graph);
      if (dist[w] >= 0 || t.graph[e].bandwidth_gbytes_per_s <= 0) continue;
      // Paths run GPU to GPU through switches and NICs, never through another GPU.
      if (t.graph[w].kind == VertexKind::gpu && w != source) {
        dist[w] = dist[v] + 1;
        slowest[w] = std::min(slowest[v], t.graph[e].bandwidth_gbytes_per_s);
        if (wanted[w] && left > 0) --left;
        continue;
      }
      dist[w] = dist[v] + 1;
      slowest[w] = std::min(slowest[v], t.graph[e].bandwidth_gbytes_per_s);
      q.push(w);
    }
  }
  for (auto m : members) {
    const VertexId v = t.gpus[static_cast<std::size_t>(m)];
    if (v == source || dist[v] < 0) continue;
    if (dist[v] > out.hops || (dist[v] == out.hops && slowest[v] < out.bottleneck_gbytes_per_s)) {
      out.hops = dist[v];
      out.bottleneck_gbytes_per_s = slowest[v];
    }
  }
  return out;
}

}  // namespace meshwork::topology
