#include "topology/topology.hpp"

namespace meshwork::topology {

std::string_view to_string(VertexKind k) {
  switch (k) {
    case VertexKind::gpu: return "gpu";
    case VertexKind::nvswitch: return "nvswitch";
    case VertexKind::nic: return "nic";
    case VertexKind::leaf: return "leaf";
    case VertexKind::spine: return "spine";
    case VertexKind::core: return "core";
  }
  return "?";
}

int tier_of(VertexKind k) {
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

std::string_view to_string(LinkTier t) {
  switch (t) {
    case LinkTier::nvlink: return "nvlink";
    case LinkTier::gpu_to_nic: return "gpu_to_nic";
    case LinkTier::nic_to_leaf: return "nic_to_leaf";
    case LinkTier::leaf_to_spine: return "leaf_to_spine";
    case LinkTier::spine_to_core: return "spine_to_core";
  }
  return "?";
}

std::int64_t Topology::count(VertexKind k) const {
  std::int64_t n = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(graph))) n += graph[v].kind == k ? 1 : 0;
  return n;
}

std::int64_t Topology::count(LinkTier t) const {
  std::int64_t n = 0;
  for (auto e : boost::make_iterator_range(boost::edges(graph))) n += graph[e].tier == t ? 1 : 0;
  return n;
}

}  // namespace meshwork::topology
