#include "topology/faults.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace meshwork::topology {
namespace {

int tier_rank(VertexKind k) {
  switch (k) {
    case VertexKind::gpu: return 0;
    case VertexKind::nvswitch: return 1;
    case VertexKind::nic: return 1;
    case VertexKind::leaf: return 2;
    case VertexKind::spine: return 3;
    case VertexKind::core: return 4;
  }
  return 5;
}

// Per member of a group, from its first member: equal-cost paths and the slowest link on
// the best of them (widest shortest path).
struct Reach {
  std::vector<double> paths;
  std::vector<double> width;
  std::vector<std::int64_t> dist;
};

Reach reach(const Topology& t, VertexId source) {
  const auto n = boost::num_vertices(t.graph);
  Reach r{std::vector<double>(n, 0), std::vector<double>(n, 0), std::vector<std::int64_t>(n, -1)};
  std::queue<VertexId> q;
  r.dist[source] = 0;
  r.paths[source] = 1;
  r.width[source] = std::numeric_limits<double>::infinity();
  q.push(source);
  while (!q.empty()) {
    const VertexId v = q.front();
    q.pop();
    if (v != source && t.graph[v].kind == VertexKind::gpu) continue;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) {
      const double bw = t.graph[e].bandwidth_gbytes_per_s;
      if (bw <= 0) continue;
      const VertexId w = boost::target(e, t.graph);
      if (r.dist[w] < 0) {
        r.dist[w] = r.dist[v] + 1;
        q.push(w);
      }
      if (r.dist[w] == r.dist[v] + 1) {
        r.paths[w] += r.paths[v];
        r.width[w] = std::max(r.width[w], std::min(r.width[v], bw));
      }
    }
  }
  return r;
}

}  // namespace

std::string vertex_name(const Topology& t, VertexId v) {
  const auto& x = t.graph[v];
  return std::string(to_string(x.kind)) + std::to_string(x.index);
}

std::optional<std::string> apply_fault(Topology& t, const Fault& fault) {
  const double factor = fault.kind == FaultKind::down ? 0.0 : fault.bandwidth_factor;
  bool found = false;
  // A node: every link of its GPUs, NICs and NVSwitch.
  if (fault.target.rfind("node", 0) == 0) {
    const std::string index = fault.target.substr(4);
    for (auto v : boost::make_iterator_range(boost::vertices(t.graph))) {
      if (t.graph[v].node >= 0 && std::to_string(t.graph[v].node) == index) {
        found = true;
        for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) t.graph[e].bandwidth_gbytes_per_s *= factor;
      }
    }
  } else {
    for (auto v : boost::make_iterator_range(boost::vertices(t.graph))) {
      if (vertex_name(t, v) == fault.target) {
        found = true;
        for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) t.graph[e].bandwidth_gbytes_per_s *= factor;
      }
    }
    if (!found) {
      for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
        VertexId a = boost::source(e, t.graph), b = boost::target(e, t.graph);
        if (tier_rank(t.graph[a].kind) > tier_rank(t.graph[b].kind)) std::swap(a, b);
        if (vertex_name(t, a) + "-" + vertex_name(t, b) == fault.target) {
          found = true;
          t.graph[e].bandwidth_gbytes_per_s *= factor;
          break;  // one cable of possibly several parallel ones
        }
      }
    }
  }
  if (!found) return "no GPU, node, NIC, switch or link is named \"" + fault.target + "\"";
  return std::nullopt;
}

std::vector<GroupImpact> fault_impact(const Topology& before, const Topology& after, const plan::RankLayout& layout) {
  std::vector<GroupImpact> out;
  for (auto kind : plan::kAllGroupKinds) {
    if (layout.group_size(kind) <= 1) continue;
    for (std::int64_t g = 0; g < layout.num_groups(kind); ++g) {
      const auto members = layout.group(kind, g);
      const VertexId s0 = before.gpus[static_cast<std::size_t>(members.front())];
      const Reach b = reach(before, s0), a = reach(after, s0);
      GroupImpact impact{kind, g, 0, 0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), false};
      for (std::size_t i = 1; i < members.size(); ++i) {
        const VertexId v = before.gpus[static_cast<std::size_t>(members[i])];
        impact.paths_before += b.paths[v];
        impact.paths_after += a.paths[v];
        impact.bottleneck_before = std::min(impact.bottleneck_before, b.width[v]);
        impact.bottleneck_after = std::min(impact.bottleneck_after, a.dist[v] < 0 ? 0.0 : a.width[v]);
        if (a.dist[v] < 0) impact.disconnected = true;
      }
      if (impact.disconnected || impact.paths_after != impact.paths_before || impact.bottleneck_after < impact.bottleneck_before) {
        out.push_back(impact);
      }
    }
  }
  return out;
}

}  // namespace meshwork::topology
