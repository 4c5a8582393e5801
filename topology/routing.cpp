#include "topology/routing.hpp"

#include <algorithm>
#include <random>

#include "topology/router.hpp"

namespace meshwork::topology {

double equal_cost_paths(const Topology& t, std::int64_t src_gpu, std::int64_t dst_gpu) {
  Router router(t);
  return router.info(src_gpu, dst_gpu).paths;
}

std::vector<double> link_loads(const Topology& t, const std::vector<Flow>& flows, Spreading spreading, std::uint64_t seed) {
  std::vector<double> loads(2 * boost::num_edges(t.graph), 0.0);
  Router router(t);
  std::mt19937_64 rng(seed);
  for (const auto& f : flows) {
    if (f.src_gpu == f.dst_gpu || f.gbytes_per_s <= 0) continue;
    if (spreading == Spreading::even) {
      router.spread(f.src_gpu, f.dst_gpu, f.gbytes_per_s, loads);  // unreachable: the caller reports it
    } else {
      // Hashed: one of the equal-cost paths per flow, as a switch's ECMP hash picks one.
      for (const Hop& h : router.route(f.src_gpu, f.dst_gpu, rng())) loads[h.slot()] += f.gbytes_per_s;
    }
  }
  return loads;
}

double max_utilisation(const Topology& t, const std::vector<double>& loads) {
  double worst = 0;
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
    const double cap = t.graph[e].bandwidth_gbytes_per_s;
    if (cap <= 0) continue;
    const auto i = static_cast<std::size_t>(2 * t.graph[e].id);
    worst = std::max({worst, loads[i] / cap, loads[i + 1] / cap});
  }
  return worst;
}

}  // namespace meshwork::topology
