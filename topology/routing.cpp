#include "topology/routing.hpp"

#include <algorithm>
#include <queue>
#include <random>

namespace meshwork::topology {
namespace {

// Breadth-first distances and shortest-path counts from `source`; GPUs other than the source
// are reached but not passed through.
struct Bfs {
  std::vector<std::int64_t> dist;
  std::vector<double> paths;
};

Bfs bfs(const Topology& t, VertexId source) {
  const auto n = boost::num_vertices(t.graph);
  Bfs b{std::vector<std::int64_t>(n, -1), std::vector<double>(n, 0)};
  std::queue<VertexId> q;
  b.dist[source] = 0;
  b.paths[source] = 1;
  q.push(source);
  while (!q.empty()) {
    const VertexId v = q.front();
    q.pop();
    if (v != source && t.graph[v].kind == VertexKind::gpu) continue;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) {
      if (t.graph[e].bandwidth_gbytes_per_s <= 0) continue;  // a link that is down
      const VertexId w = boost::target(e, t.graph);
      if (b.dist[w] < 0) {
        b.dist[w] = b.dist[v] + 1;
        q.push(w);
      }
      if (b.dist[w] == b.dist[v] + 1) b.paths[w] += b.paths[v];
    }
  }
  return b;
}

std::size_t slot(const Topology& t, const Graph::edge_descriptor& e, VertexId from) {
  const VertexId a = boost::source(e, t.graph), b = boost::target(e, t.graph);
  const VertexId low = std::min(a, b);
  return static_cast<std::size_t>(2 * t.graph[e].id + (from == low ? 0 : 1));
}

}  // namespace

double equal_cost_paths(const Topology& t, std::int64_t src_gpu, std::int64_t dst_gpu) {
  const Bfs b = bfs(t, t.gpus[static_cast<std::size_t>(src_gpu)]);
  return b.paths[t.gpus[static_cast<std::size_t>(dst_gpu)]];
}

std::vector<double> link_loads(const Topology& t, const std::vector<Flow>& flows, Spreading spreading, std::uint64_t seed) {
  std::vector<double> loads(2 * boost::num_edges(t.graph), 0.0);
  std::mt19937_64 rng(seed);
  for (const auto& f : flows) {
    if (f.src_gpu == f.dst_gpu || f.gbytes_per_s <= 0) continue;
    const VertexId s = t.gpus[static_cast<std::size_t>(f.src_gpu)];
    const VertexId d = t.gpus[static_cast<std::size_t>(f.dst_gpu)];
    const Bfs from = bfs(t, s);
    const Bfs to = bfs(t, d);
    const std::int64_t length = from.dist[d];
    if (length <= 0) continue;  // unreachable: the caller reports it
    auto on_path = [&](VertexId u, VertexId w) {
      return from.dist[u] >= 0 && to.dist[w] >= 0 && from.dist[u] + 1 + to.dist[w] == length &&
             (u == s || t.graph[u].kind != VertexKind::gpu);
    };
    if (spreading == Spreading::even) {
      // Each shortest path carries an equal share: an edge u->w carries the share of the
      // paths through it, paths_s(u) * paths_d(w) / paths_s(d).
      for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
        if (t.graph[e].bandwidth_gbytes_per_s <= 0) continue;
        for (int dir = 0; dir < 2; ++dir) {
          const VertexId u = dir == 0 ? boost::source(e, t.graph) : boost::target(e, t.graph);
          const VertexId w = dir == 0 ? boost::target(e, t.graph) : boost::source(e, t.graph);
          if (on_path(u, w)) loads[slot(t, e, u)] += f.gbytes_per_s * from.paths[u] * to.paths[w] / from.paths[d];
        }
      }
    } else {
      // Hashed: at every hop one of the equal-cost next hops, as a switch's ECMP hash would.
      VertexId u = s;
      while (u != d) {
        std::vector<Graph::edge_descriptor> next;
        for (auto e : boost::make_iterator_range(boost::out_edges(u, t.graph))) {
          if (t.graph[e].bandwidth_gbytes_per_s > 0 && on_path(u, boost::target(e, t.graph))) next.push_back(e);
        }
        if (next.empty()) break;
        const auto e = next[std::uniform_int_distribution<std::size_t>(0, next.size() - 1)(rng)];
        loads[slot(t, e, u)] += f.gbytes_per_s;
        u = boost::target(e, t.graph);
      }
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
