#include "models/comm.hpp"

#include <algorithm>

namespace meshwork::models {

GroupNetwork group_network(const plan::Plan& p, const HardwareProfile& hw, plan::GroupKind group) {
  GroupNetwork g;
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  g.size = layout.group_size(group);
  const auto& c = p.cluster;
  // A collective runs at the pace of its slowest group: the groups cross nodes when any of
  // them has members on two nodes. Placement is regular, so the pattern of group offsets within
  // a node repeats early: the first 64 groups are looked at.
  if (g.size > 1 && c.gpus_per_node > 0) {
    const std::int64_t span = layout.group_span(group);
    const std::int64_t groups = std::min<std::int64_t>(layout.num_groups(group), 64);
    for (std::int64_t i = 0; i < groups && !g.crosses_nodes; ++i) {
      const std::int64_t first = layout.group_first(group, i);
      g.crosses_nodes = first / c.gpus_per_node != (first + span) / c.gpus_per_node;
    }
  }
  const double nvlink = c.intra_node.bandwidth_gbytes_per_s * 1e9 * hw.nvlink_efficiency;
  if (!g.crosses_nodes) {
    g.busbw_bytes_per_s = nvlink;
    g.latency_s = c.intra_node.latency_us * 1e-6;
    return g;
  }
  // Across nodes a ring is limited by each GPU's share of the node's NICs; above the leaf an
  // oversubscribed fabric divides it further.
  const double nic_per_gpu = static_cast<double>(c.nics_per_node) * c.nic_bandwidth_gbps * 1e9 / 8 /
                             static_cast<double>(std::max<std::int64_t>(1, c.gpus_per_node));
  g.busbw_bytes_per_s = std::min(nvlink, nic_per_gpu * hw.nic_efficiency / c.topology.oversubscription);
  // A message crosses up to 2 x tiers switch hops and two NICs (~1 us each, published-runs C1).
  g.latency_s = (2.0 * static_cast<double>(c.topology.tiers) * c.topology.link_latency_us + 2.0) * 1e-6;
  return g;
}

namespace {

double ring(const GroupNetwork& g, double bytes, double factor, double steps) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const double n = static_cast<double>(g.size);
  return factor * (n - 1) / n * bytes / g.busbw_bytes_per_s + steps * (n - 1) * g.latency_s;
}

}  // namespace

double all_reduce_s(const GroupNetwork& g, double bytes) { return ring(g, bytes, 2, 2); }
double reduce_scatter_s(const GroupNetwork& g, double bytes) { return ring(g, bytes, 1, 1); }
double all_gather_s(const GroupNetwork& g, double bytes) { return ring(g, bytes, 1, 1); }
double all_to_all_s(const GroupNetwork& g, double bytes) { return ring(g, bytes, 1, 1); }

double p2p_s(const GroupNetwork& g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  return bytes / g.busbw_bytes_per_s + g.latency_s;
}

}  // namespace meshwork::models
