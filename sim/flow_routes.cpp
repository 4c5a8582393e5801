#include "sim/flow_routes.hpp"

#include <algorithm>
#include <limits>

namespace meshwork::sim {
namespace {

// Candidate paths an adaptive flow chooses among: all of them up to this many (a 2-tier tree
// of radix 64 has 32 spines above a leaf pair), a hashed sample of this many beyond (3 tiers),
// to keep routing linear in the ranks.
constexpr int kAdaptiveCandidates = 64;

std::uint64_t flow_hash(std::int64_t a, std::int64_t b, std::int64_t flow, int candidate) {
  // Flow 0's is the hash one flow per edge always had, so that flows_per_peer 1 routes as before.
  return static_cast<std::uint64_t>(a) * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(b) + static_cast<std::uint64_t>(flow) * 0xbf58476d1ce4e5b9ULL +
         static_cast<std::uint64_t>(candidate) * 0x94d049bb133111ebULL;
}

}  // namespace

FlowRoutes route_flows(const topology::Topology& topo, const plan::TopologyConfig& config, const std::vector<std::vector<std::int64_t>>& peer,
                       const std::vector<double>& link_latency_s) {
  FlowRoutes out;
  topology::Router router(topo);
  // A multi-plane NIC is a port per plane, and NCCL spreads its channels over the ports as over
  // NICs: an edge's flows go round the planes, at least one on each.
  const std::int64_t planes = config.kind == plan::TopologyKind::multi_plane ? std::max<std::int64_t>(1, config.planes) : 1;
  const std::int64_t per_plane = config.routing == plan::Routing::d_mod_k ? 1 : (std::max<std::int64_t>(1, config.flows_per_peer) + planes - 1) / planes;
  const std::int64_t k = per_plane * planes;
  out.route.resize(peer.size());
  out.flows_per_edge.assign(peer.size(), 1);
  std::vector<double> load;  // adaptive: flows of this type placed on each directed link slot
  for (std::size_t t = 0; t < peer.size(); ++t) {
    const auto ranks = peer[t].size();
    auto& routes = out.route[t];
    routes.assign(ranks, Route{});
    if (config.routing == plan::Routing::adaptive) load.assign(2 * static_cast<std::size_t>(boost::num_edges(topo.graph)), 0.0);
    bool alike = true;  // every edge's flows on one path
    std::vector<topology::Hop> path;
    for (std::size_t ai = 0; ai < ranks; ++ai) {
      const auto a = static_cast<std::int64_t>(ai);
      const std::int64_t b = peer[t][ai];
      if (b < 0 || b == a) continue;
      Route& mine = routes[ai];
      for (std::int64_t f = 0; f < k; ++f) {
        const std::int64_t plane = planes > 1 ? f % planes : -1;
        switch (config.routing) {
          case plan::Routing::d_mod_k: path = router.route_d_mod_k(a, b, plane); break;
          case plan::Routing::ecmp_hash: path = router.route(a, b, flow_hash(a, b, f, 0), plane); break;
          case plan::Routing::adaptive: {
            // Every equal-cost path when there are few, else a hashed sample of them.
            const double paths = router.paths_in_plane(a, b, plane);
            path.clear();
            if (paths < 1) break;
            const bool all = paths <= kAdaptiveCandidates;
            const int candidates = all ? static_cast<int>(paths) : kAdaptiveCandidates;
            double best = std::numeric_limits<double>::infinity();
            for (int c = 0; c < candidates; ++c) {
              // Paths in turn from one the flow's hash picks, so that ties do not all fall on path 0.
              auto candidate = all ? router.route_number(a, b, static_cast<double>((flow_hash(a, b, f, 0) % static_cast<std::uint64_t>(paths)) + static_cast<std::uint64_t>(c)), false, plane)
                                   : router.route(a, b, flow_hash(a, b, f, c), plane);
              double worst = 0;
              for (const auto& h : candidate) worst = std::max(worst, load[h.slot()]);
              if (worst < best) {
                best = worst;
                path = std::move(candidate);
              }
            }
            for (const auto& h : path) load[h.slot()] += 1;
            break;
          }
        }
        if (path.empty()) {
          mine.unreachable = true;
          mine.hops.clear();
          break;
        }
        if (f == 0) {
          for (const auto& h : path) mine.latency_s += link_latency_s[static_cast<std::size_t>(h.link)];
        } else if (alike && !std::equal(path.begin(), path.end(), mine.hops.begin(), mine.hops.begin() + static_cast<std::ptrdiff_t>(path.size()),
                                        [](const topology::Hop& x, const topology::Hop& y) { return x.link == y.link && x.forward == y.forward; })) {
          alike = false;
        }
        mine.hops.insert(mine.hops.end(), path.begin(), path.end());
      }
    }
    if (k > 1 && alike) {
      // One path per edge: keep it once, with all the edge's bytes.
      for (auto& r : routes) r.hops.resize(r.hops.size() / static_cast<std::size_t>(k));
    } else {
      out.flows_per_edge[t] = static_cast<std::int32_t>(k);
    }
  }
  return out;
}

}  // namespace meshwork::sim
