#include "topology/faults.hpp"

#include <algorithm>
#include <limits>

#include "topology/router.hpp"

namespace meshwork::topology {

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
        if (tier_of(t.graph[a].kind) > tier_of(t.graph[b].kind)) std::swap(a, b);
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
  Router b(before), a(after);
  for (auto kind : plan::kAllGroupKinds) {
    if (!layout.distinct(kind)) continue;
    for (std::int64_t g = 0; g < layout.num_groups(kind); ++g) {
      const auto members = layout.group(kind, g);
      b.set_source(members.front());
      a.set_source(members.front());
      GroupImpact impact{kind, g, 0, 0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), false};
      for (std::size_t i = 1; i < members.size(); ++i) {
        const PathInfo pb = b.info_from_source(members[i]), pa = a.info_from_source(members[i]);
        impact.paths_before += pb.paths;
        impact.paths_after += pa.paths;
        impact.bottleneck_before = std::min(impact.bottleneck_before, pb.bottleneck_gbytes_per_s);
        impact.bottleneck_after = std::min(impact.bottleneck_after, pa.hops < 0 ? 0.0 : pa.bottleneck_gbytes_per_s);
        if (pa.hops < 0) impact.disconnected = true;
      }
      if (impact.disconnected || impact.paths_after != impact.paths_before || impact.bottleneck_after < impact.bottleneck_before) {
        out.push_back(impact);
      }
    }
  }
  return out;
}

}  // namespace meshwork::topology
