#include "sim/failure_target.hpp"

#include <algorithm>
#include <string_view>

#include "topology/faults.hpp"

namespace meshwork::sim {
namespace {

// The number after `prefix` ("gpu12" -> 12), or -1 when the target is not prefix + digits.
std::int64_t index_after(const std::string& target, std::string_view prefix) {
  if (target.rfind(prefix, 0) != 0 || target.size() == prefix.size()) return -1;
  std::int64_t v = 0;
  for (char ch : target.substr(prefix.size())) {
    if (ch < '0' || ch > '9' || v > (std::int64_t{1} << 40)) return -1;
    v = v * 10 + (ch - '0');
  }
  return v;
}

}  // namespace

FailureTarget resolve_failure_target(const std::string& target, const topology::Topology& topo, std::int64_t world, std::int64_t gpus_per_node) {
  FailureTarget out;
  out.rank.assign(static_cast<std::size_t>(world), false);
  if (const auto g = index_after(target, "gpu"); g >= 0) {
    if (g >= world) out.error = "gpu" + std::to_string(g) + " is outside the plan's " + std::to_string(world) + " GPUs";
    else out.rank[static_cast<std::size_t>(g)] = true;
    return out;
  }
  if (const auto n = index_after(target, "node"); n >= 0) {
    const std::int64_t per = std::max<std::int64_t>(gpus_per_node, 1);
    if (n * per >= world) out.error = "node" + std::to_string(n) + " is outside the plan's nodes";
    for (std::int64_t r = n * per; r < std::min(world, (n + 1) * per); ++r) out.rank[static_cast<std::size_t>(r)] = true;
    return out;
  }
  // A link (either end first) or a switch or NIC (every link of it).
  topology::Topology after = topo;
  bool named = !topology::apply_fault(after, {topology::FaultKind::down, target, 0});
  if (const auto dash = target.find('-'); !named && dash != std::string::npos) {
    named = !topology::apply_fault(after, {topology::FaultKind::down, target.substr(dash + 1) + "-" + target.substr(0, dash), 0});
  }
  if (!named) {
    out.error = "no GPU (gpuN), node (nodeN), switch, NIC or link (as `meshwork topology` names them) is named \"" + target + "\"";
    return out;
  }
  std::vector<double> before(boost::num_edges(topo.graph), 0.0);
  for (auto e : boost::make_iterator_range(boost::edges(topo.graph))) before[static_cast<std::size_t>(topo.graph[e].id)] = topo.graph[e].bandwidth_gbytes_per_s;
  for (auto e : boost::make_iterator_range(boost::edges(after.graph))) {
    const auto& l = after.graph[e];
    if (l.bandwidth_gbytes_per_s <= 0 && before[static_cast<std::size_t>(l.id)] > 0) out.links.push_back(l.id);
  }
  if (out.links.empty()) {
    out.error = "\"" + target + "\" is already down";
    return out;
  }
  out.after = std::make_unique<topology::Topology>(std::move(after));
  return out;
}

}  // namespace meshwork::sim
