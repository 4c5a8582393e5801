#include "topology/fabric_share.hpp"

// Where each NIC port sits in the fabric (PortGeometry) and destination-mod-k's routes in closed
// form (DestinationModK): topology/fabric_share.hpp says what each means.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace meshwork::topology {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

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

std::int64_t PortGeometry::destination_number(std::int64_t gpu) const {
  if (rail_ports <= 0) return gpu;
  // GPU l of a node uses NIC l * nics / gpus (port_of_gpu): NIC i serves GPUs
  // ceil(i * gpus / nics) onwards, at most ceil(gpus / nics) of them.
  const std::int64_t local = gpu % gpus_per_node;
  const std::int64_t nic = local * nics_per_node / gpus_per_node;
  const std::int64_t first = ceil_div(nic * gpus_per_node, nics_per_node);
  return port_of_gpu(gpu) * ceil_div(gpus_per_node, nics_per_node) + local - first;
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
std::int64_t PortGeometry::two_tier_spines() const { return std::max<std::int64_t>(1, ceil_div(leaves() * leaf.up, std::max<std::int64_t>(1, radix))); }
std::int64_t PortGeometry::cores() const {
  std::int64_t links = 0;
  for (std::int64_t p = 0; p < pods(); ++p) links += pod_up_links(p);
  return std::max<std::int64_t>(1, ceil_div(links, std::max<std::int64_t>(1, radix)));
}

DestinationModK::DestinationModK(const PortGeometry& g) : g_(g), up_(g.leaf.up) {
  if (g.pod_ports <= 0) {
    spines_ = g.two_tier_spines();
    return;
  }
  cores_ = g.cores();
  leaves_per_pod_ = ceil_div(g.pod_ports, g.leaf.down);
  std::int64_t x = 0;
  for (std::int64_t p = 0; p < g.pods(); ++p) {
    Pod pod;
    pod.spines = g.spines_in_pod(p);
    pod.first_link = x;
    bool every_spine = true;
    for (std::int64_t j = 0; j < pod.spines; ++j) {
      pod.spine_first.push_back(x);
      pod.spine_links.push_back(g.spine_up_links(p, j));
      every_spine = every_spine && pod.spine_links.back() > 0;
      x += pod.spine_links.back();
    }
    pod.links = x - pod.first_link;
    pod.every_core = pod.links >= cores_;
    pod.regular = pod.every_core && every_spine;
    pods_.push_back(std::move(pod));
  }
  pod_links_ = x;
}

std::size_t DestinationModK::leaf_slots() const { return at(2 * g_.leaves() * up_); }
std::size_t DestinationModK::slots() const { return leaf_slots() + at(2 * pod_links_); }
std::size_t DestinationModK::leaf_slot(std::int64_t leaf, std::int64_t u, bool down) const { return at(2 * (leaf * up_ + u) + (down ? 1 : 0)); }
std::size_t DestinationModK::pod_slot(std::int64_t x, bool down) const { return leaf_slots() + at(2 * x + (down ? 1 : 0)); }

DestinationModK::Route DestinationModK::route(std::int64_t from, std::int64_t to, std::uint64_t dst) const {
  Route r;
  auto link = [&](std::size_t slot) { r.slot[at(r.hops++)] = slot; };
  const std::int64_t l = g_.leaf_of(from), m = g_.leaf_of(to);
  if (l == m) return r;
  const auto d = static_cast<std::int64_t>(dst % (std::uint64_t{1} << 62));
  if (g_.pod_ports <= 0) {
    const std::int64_t u = d % up_;
    link(leaf_slot(l, u, false));
    link(leaf_slot(m, down_link(u % spines_, 0, spines_, d), true));
    return r;
  }
  const std::int64_t p = g_.pod_of(from), q = g_.pod_of(to);
  const std::int64_t i = l - p * leaves_per_pod_, k = m - q * leaves_per_pod_;
  const Pod& src = pods_[at(p)];
  if (p == q) {
    const std::int64_t spine = (i * up_ + d % up_) % src.spines;
    link(leaf_slot(l, d % up_, false));
    link(leaf_slot(m, down_link(spine, k, src.spines, d), true));
    return r;
  }
  const Pod& dst_pod = pods_[at(q)];
  std::int64_t u = 0, x = 0;
  if (src.regular && dst_pod.every_core) {
    u = d % up_;
    const std::int64_t a = (i * up_ + u) % src.spines;
    x = src.spine_first[at(a)] + d / up_ % src.spine_links[at(a)];
  } else if (!irregular_climb(src, dst_pod, i, d, u, x)) {
    return r;  // no core joins the two pods (the builders do not make such a fabric)
  }
  link(leaf_slot(l, u, false));
  link(pod_slot(x, false));
  // Down from core x mod cores to the destination pod: its links to that core in the order
  // dealt, number d mod their count; then from that spine to the leaf.
  const std::int64_t core = x % cores_, end = dst_pod.first_link + dst_pod.links;
  const std::int64_t first = dst_pod.first_link + ((core - dst_pod.first_link) % cores_ + cores_) % cores_;
  if (first >= end) return r;
  const std::int64_t down = first + d % ((end - 1 - first) / cores_ + 1) * cores_;
  const auto owner = std::upper_bound(dst_pod.spine_first.begin(), dst_pod.spine_first.end(), down) - dst_pod.spine_first.begin() - 1;
  link(pod_slot(down, true));
  link(leaf_slot(m, down_link(owner, k, dst_pod.spines, d), true));
  return r;
}

std::int64_t DestinationModK::down_link(std::int64_t spine, std::int64_t k, std::int64_t spines, std::int64_t d) const {
  const std::int64_t first = ((spine - k * up_) % spines + spines) % spines;
  return first + d / spines % ((up_ - 1 - first) / spines + 1) * spines;
}

bool DestinationModK::reaches(const Pod& pod, std::int64_t core) const {
  if (pod.every_core) return true;
  return ((core - pod.first_link) % cores_ + cores_) % cores_ < pod.links;
}

bool DestinationModK::irregular_climb(const Pod& src, const Pod& dst, std::int64_t i, std::int64_t d, std::int64_t& u, std::int64_t& x) const {
  auto spine_leads = [&](std::int64_t a) {
    for (std::int64_t n = 0; n < src.spine_links[at(a)]; ++n) {
      if (reaches(dst, (src.spine_first[at(a)] + n) % cores_)) return true;
    }
    return false;
  };
  std::vector<std::int64_t> choices;
  for (std::int64_t v = 0; v < up_; ++v) {
    if (spine_leads((i * up_ + v) % src.spines)) choices.push_back(v);
  }
  if (choices.empty()) return false;
  const auto w = static_cast<std::int64_t>(choices.size());
  u = choices[at(d % w)];
  const std::int64_t a = (i * up_ + u) % src.spines;
  std::vector<std::int64_t> links;
  for (std::int64_t n = 0; n < src.spine_links[at(a)]; ++n) {
    const std::int64_t link = src.spine_first[at(a)] + n;
    if (reaches(dst, link % cores_)) links.push_back(link);
  }
  x = links[at(d / w % static_cast<std::int64_t>(links.size()))];
  return true;
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
  g.radix = t.switch_radix;
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

}  // namespace meshwork::topology
