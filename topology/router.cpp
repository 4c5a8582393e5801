#include "topology/router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshwork::topology {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// SplitMix64 (Steele, Lea and Flood 2014): spreads consecutive flow ids over 64 bits.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Router::Router(const Topology& t) : t_(t) {
  const auto n = boost::num_vertices(t.graph);
  // The up-links of every vertex, contiguous: climbing is all a query does.
  up_start_.assign(n + 1, 0);
  for (VertexId v = 0; v < n; ++v) {
    const int tier = tier_of(t.graph[v].kind);
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) {
      const VertexId w = boost::target(e, t.graph);
      if (t.graph[e].bandwidth_gbytes_per_s > 0 && tier_of(t.graph[w].kind) > tier) up_.push_back(UpLink{w, e, t.graph[e].bandwidth_gbytes_per_s});
    }
    up_start_[v + 1] = up_.size();
  }
  for (Cone* c : {&src_, &dst_}) {
    c->dist.assign(n, -1);
    c->paths.assign(n, 0);
    c->width.assign(n, 0);
  }
  scratch_.assign(n, 0);
}

void Router::Cone::reset() {
  for (auto v : vertices) {
    dist[v] = -1;
    paths[v] = 0;
    width[v] = 0;
  }
  vertices.clear();
  level_start.clear();
  exhausted = false;
}

void Router::start(Cone& c, VertexId apex) {
  c.reset();
  c.apex = apex;
  c.dist[apex] = 0;
  c.paths[apex] = 1;
  c.width[apex] = kInf;
  c.vertices.push_back(apex);
  c.level_start = {0, 1};
}

bool Router::grow(Cone& c) {
  if (c.exhausted) return false;
  const std::size_t begin = c.level_start[c.level_start.size() - 2], end = c.level_start.back();
  const auto level = static_cast<std::int64_t>(c.level_start.size() - 1);
  for (std::size_t i = begin; i < end; ++i) {
    const VertexId v = c.vertices[i];
    for (std::size_t k = up_start_[v]; k < up_start_[v + 1]; ++k) {
      const double bw = up_[k].gbytes_per_s;
      const VertexId w = up_[k].to;
      if (c.dist[w] < 0) {
        c.dist[w] = level;
        c.vertices.push_back(w);
      }
      if (c.dist[w] == level) {
        c.paths[w] += c.paths[v];
        c.width[w] = std::max(c.width[w], std::min(c.width[v], bw));
      }
    }
  }
  if (c.vertices.size() == end) {
    c.exhausted = true;
    return false;
  }
  c.level_start.push_back(c.vertices.size());
  return true;
}

std::int64_t Router::levels(const Cone& c) { return static_cast<std::int64_t>(c.level_start.size()) - 1; }

void Router::set_source(std::int64_t src_gpu) {
  if (src_gpu == source_gpu_) return;
  start(src_, t_.gpus[static_cast<std::size_t>(src_gpu)]);
  source_gpu_ = src_gpu;
}

// Climbs the destination's cone level by level until a level holds a switch of the source's
// cone: the turning points of the shortest paths. A NIC is never one (it does not switch
// between the GPUs behind it). Levels are tiers in a layered fabric, so the first such level
// gives the shortest paths.
Router::Meeting Router::meet(std::int64_t dst_gpu) {
  Meeting m;
  const VertexId s = src_.apex, d = t_.gpus[static_cast<std::size_t>(dst_gpu)];
  if (s == d) {
    m.hops = 0;
    return m;
  }
  // GPUs linked directly (an NVLink mesh without switches).
  for (auto e : boost::make_iterator_range(boost::out_edges(s, t_.graph))) {
    if (boost::target(e, t_.graph) == d && t_.graph[e].bandwidth_gbytes_per_s > 0) {
      m.hops = 1;
      m.direct.push_back(e);
    }
  }
  if (m.hops == 1) return m;
  start(dst_, d);
  for (std::int64_t level = 1;; ++level) {
    if (!grow(dst_)) return m;
    while (levels(src_) <= level && grow(src_)) {
    }
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = dst_.level_start[static_cast<std::size_t>(level)]; i < dst_.level_start[static_cast<std::size_t>(level) + 1]; ++i) {
      const VertexId x = dst_.vertices[i];
      if (src_.dist[x] < 0 || t_.graph[x].kind == VertexKind::nic) continue;
      const std::int64_t hops = src_.dist[x] + level;
      if (hops < best) {
        best = hops;
        m.at.clear();
      }
      if (hops == best) m.at.push_back(x);
    }
    if (!m.at.empty()) {
      m.hops = best;
      return m;
    }
  }
}

PathInfo Router::summarise(const Meeting& m) const {
  PathInfo p;
  p.hops = m.hops;
  if (m.hops == 0) {
    p.paths = 1;
    p.bottleneck_gbytes_per_s = kInf;
  }
  for (auto e : m.direct) {
    p.paths += 1;
    p.bottleneck_gbytes_per_s = std::max(p.bottleneck_gbytes_per_s, t_.graph[e].bandwidth_gbytes_per_s);
  }
  for (auto x : m.at) {
    p.paths += src_.paths[x] * dst_.paths[x];
    p.bottleneck_gbytes_per_s = std::max(p.bottleneck_gbytes_per_s, std::min(src_.width[x], dst_.width[x]));
  }
  return p;
}

PathInfo Router::info_from_source(std::int64_t dst_gpu) { return summarise(meet(dst_gpu)); }

PathInfo Router::info(std::int64_t src_gpu, std::int64_t dst_gpu) {
  set_source(src_gpu);
  return info_from_source(dst_gpu);
}

// Unranks path number `r` (0 <= r < c.paths[top]) of the up-paths from the cone's apex to
// `top`, appending its links from `top` downwards: each path has exactly one number, so a
// uniform r picks every path with the same probability.
void Router::descend(const Cone& c, VertexId top, double r, std::vector<std::pair<VertexId, Graph::edge_descriptor>>& out) const {
  VertexId v = top;
  while (v != c.apex) {
    const int tier = tier_of(t_.graph[v].kind);
    bool moved = false;
    double last_weight = 0;
    VertexId last_y = v;
    Graph::edge_descriptor last_e{};
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t_.graph))) {
      const VertexId y = boost::target(e, t_.graph);
      if (t_.graph[e].bandwidth_gbytes_per_s <= 0 || tier_of(t_.graph[y].kind) >= tier || c.dist[y] != c.dist[v] - 1) continue;
      last_weight = c.paths[y];
      last_y = y;
      last_e = e;
      if (r < c.paths[y]) {
        out.emplace_back(v, e);
        v = y;
        moved = true;
        break;
      }
      r -= c.paths[y];
    }
    if (!moved) {
      // Rounding left r at the top of the range: the last candidate.
      if (last_y == v) return;
      out.emplace_back(v, last_e);
      r = std::max(0.0, last_weight - 1);
      v = last_y;
    }
  }
}

std::vector<Hop> Router::route(std::int64_t src_gpu, std::int64_t dst_gpu, std::uint64_t flow_hash, std::int64_t plane) {
  return route_number(src_gpu, dst_gpu, static_cast<double>(mix(flow_hash) >> 11) * 0x1.0p-53, true, plane);
}

void Router::keep_plane(Meeting& m, std::int64_t plane) const {
  if (plane < 0) return;
  const auto on = [&](VertexId x) { return t_.graph[x].plane == plane; };
  if (std::none_of(m.at.begin(), m.at.end(), on)) return;  // a path inside the node, or no such plane
  m.at.erase(std::remove_if(m.at.begin(), m.at.end(), [&](VertexId x) { return !on(x); }), m.at.end());
}

double Router::paths_in_plane(std::int64_t src_gpu, std::int64_t dst_gpu, std::int64_t plane) {
  set_source(src_gpu);
  Meeting m = meet(dst_gpu);
  keep_plane(m, plane);
  return summarise(m).paths;
}

std::vector<Hop> Router::route_number(std::int64_t src_gpu, std::int64_t dst_gpu, double number, bool fraction, std::int64_t plane) {
  set_source(src_gpu);
  Meeting m = meet(dst_gpu);
  keep_plane(m, plane);
  if (m.hops <= 0) return {};
  if (!m.direct.empty()) {
    const auto n = static_cast<double>(m.direct.size());
    return path(m, 0, fraction ? number * n : std::fmod(std::floor(number), n), 0);
  }
  // Path number r: its turning point, then its up and down halves.
  double total = 0;
  for (auto x : m.at) total += src_.paths[x] * dst_.paths[x];
  double r = fraction ? std::floor(number * total) : std::fmod(std::floor(number), total);
  std::size_t xi = m.at.size() - 1;
  for (std::size_t i = 0; i < m.at.size(); ++i) {
    const double n = src_.paths[m.at[i]] * dst_.paths[m.at[i]];
    if (r < n) {
      xi = i;
      break;
    }
    r -= n;
  }
  const VertexId x = m.at[xi];
  r = std::min(r, src_.paths[x] * dst_.paths[x] - 1);
  const double r_src = std::floor(r / dst_.paths[x]);
  return path(m, xi, r_src, r - r_src * dst_.paths[x]);
}

std::vector<Hop> Router::route_d_mod_k(std::int64_t src_gpu, std::int64_t dst_gpu, std::int64_t plane) {
  set_source(src_gpu);
  Meeting m = meet(dst_gpu);
  keep_plane(m, plane);
  std::vector<Hop> hops;
  if (m.hops <= 0) return hops;
  // Destinations numbered as a subnet manager numbers end ports, leaf by leaf (on a
  // rail-optimized fabric, rail by rail: Topology::port_order).
  const auto dst = static_cast<std::uint64_t>(t_.port_order.empty() ? dst_gpu : t_.port_order[static_cast<std::size_t>(dst_gpu)]);
  auto add = [&](VertexId from, Graph::edge_descriptor e) {
    const VertexId a = boost::source(e, t_.graph), b = boost::target(e, t_.graph);
    const VertexId to = a == from ? b : a;
    hops.push_back(Hop{t_.graph[e].id, from < to});
    return to;
  };
  if (!m.direct.empty()) {
    add(src_.apex, m.direct[dst % m.direct.size()]);
    return hops;
  }
  // Which vertices of the source's cone lead up to a turning point (scratch_ > 0).
  const std::int64_t top = src_.dist[m.at.front()];
  for (auto x : m.at) scratch_[x] = 1;
  for (std::int64_t level = top - 1; level >= 0; --level) {
    for (std::size_t i = src_.level_start[static_cast<std::size_t>(level)]; i < src_.level_start[static_cast<std::size_t>(level) + 1]; ++i) {
      const VertexId v = src_.vertices[i];
      for (std::size_t k = up_start_[v]; k < up_start_[v + 1]; ++k) {
        if (src_.dist[up_[k].to] == level + 1 && scratch_[up_[k].to] > 0) scratch_[v] = 1;
      }
    }
  }
  // Up, one digit of the destination per level: the up-link number (dst / w_1 ... w_(l-1))
  // mod w_l among the w_l that lead on (Zahavi et al.'s destination-mod-k).
  std::uint64_t divisor = 1;
  VertexId v = src_.apex;
  std::vector<std::size_t> choices;
  for (std::int64_t level = 1; level <= top; ++level) {
    choices.clear();
    for (std::size_t k = up_start_[v]; k < up_start_[v + 1]; ++k) {
      if (src_.dist[up_[k].to] == level && scratch_[up_[k].to] > 0) choices.push_back(k);
    }
    if (choices.empty()) break;
    const auto& pick = up_[choices[(dst / divisor) % choices.size()]];
    divisor *= choices.size();
    v = add(v, pick.edge);
  }
  for (auto u : src_.vertices) scratch_[u] = 0;
  // Down to the destination (unique in a tree); among parallel links, by the destination too,
  // so flows to a leaf's different GPUs take different links.
  while (v != dst_.apex) {
    choices.clear();
    std::vector<Graph::edge_descriptor> down;
    const int tier = tier_of(t_.graph[v].kind);
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t_.graph))) {
      const VertexId y = boost::target(e, t_.graph);
      if (t_.graph[e].bandwidth_gbytes_per_s > 0 && tier_of(t_.graph[y].kind) < tier && dst_.dist[y] == dst_.dist[v] - 1) down.push_back(e);
    }
    if (down.empty()) return {};
    // Parallel links from a spine to the destination's leaf: the next digit of the destination
    // after the one that picks the spine, dst / (the spines the leaf reaches), as the leaf's
    // up-links are dealt over them. By dst alone, destinations that share a spine (dst and
    // dst + spines, for a leaf of 2 x spines up-links) took the same link: half of a leaf's
    // down-links idle (issue 21). A core's links down to a pod keep dst mod their count, as
    // the closed form takes them (DestinationModK::route).
    std::uint64_t digit = dst;
    const VertexId below = boost::target(down.front(), t_.graph);
    if (down.size() > 1 && t_.graph[below].kind == VertexKind::leaf &&
        std::all_of(down.begin(), down.end(), [&](const auto& e) { return boost::target(e, t_.graph) == below; })) {
      std::vector<VertexId> above;
      for (std::size_t k = up_start_[below]; k < up_start_[below + 1]; ++k) above.push_back(up_[k].to);
      std::sort(above.begin(), above.end());
      digit = dst / static_cast<std::uint64_t>(std::unique(above.begin(), above.end()) - above.begin());
    }
    v = add(v, down[digit % down.size()]);
  }
  return hops;
}

std::vector<Hop> Router::path(const Meeting& m, std::size_t turn, double r_src, double r_dst) {
  std::vector<Hop> hops;
  auto hop = [&](VertexId from, Graph::edge_descriptor e) {
    const VertexId a = boost::source(e, t_.graph), b = boost::target(e, t_.graph);
    const VertexId to = a == from ? b : a;
    hops.push_back(Hop{t_.graph[e].id, from < to});
  };
  if (!m.direct.empty()) {
    hop(src_.apex, m.direct[std::min(m.direct.size() - 1, static_cast<std::size_t>(r_src))]);
    return hops;
  }
  const VertexId x = m.at[turn];
  // Up from the source: unranked from the turning point down, then reversed.
  std::vector<std::pair<VertexId, Graph::edge_descriptor>> up, down;
  descend(src_, x, r_src, up);
  for (auto it = up.rbegin(); it != up.rend(); ++it) {
    const VertexId a = boost::source(it->second, t_.graph), b = boost::target(it->second, t_.graph);
    hop(a == it->first ? b : a, it->second);  // travelled towards it->first
  }
  descend(dst_, x, r_dst, down);
  for (const auto& [from, e] : down) hop(from, e);
  return hops;
}

bool Router::spread(std::int64_t src_gpu, std::int64_t dst_gpu, double amount, std::vector<double>& loads) {
  set_source(src_gpu);
  const Meeting m = meet(dst_gpu);
  if (m.hops < 0) return false;
  if (m.hops == 0) return true;
  auto add = [&](VertexId from, Graph::edge_descriptor e, double value) {
    const VertexId a = boost::source(e, t_.graph), b = boost::target(e, t_.graph);
    const VertexId to = a == from ? b : a;
    loads[Hop{t_.graph[e].id, from < to}.slot()] += value;
  };
  if (!m.direct.empty()) {
    for (auto e : m.direct) add(src_.apex, e, amount / static_cast<double>(m.direct.size()));
    return true;
  }
  double total = 0;
  for (auto x : m.at) total += src_.paths[x] * dst_.paths[x];
  // One side at a time: `near` is the cone whose links are loaded, `far` the other. Below a
  // turning point x, a vertex v of `near` continues to the far end in cont(v) ways (cont(x) =
  // far.paths[x], summed upwards), and the link v -> w carries near.paths[v] * cont(w) of the
  // `total` paths.
  for (int side = 0; side < 2; ++side) {
    const Cone& near = side == 0 ? src_ : dst_;
    const Cone& far = side == 0 ? dst_ : src_;
    for (auto x : m.at) scratch_[x] = far.paths[x];
    const std::int64_t top = near.dist[m.at.front()];
    for (std::int64_t level = top - 1; level >= 0; --level) {
      for (std::size_t i = near.level_start[static_cast<std::size_t>(level)]; i < near.level_start[static_cast<std::size_t>(level) + 1]; ++i) {
        const VertexId v = near.vertices[i];
        for (std::size_t k = up_start_[v]; k < up_start_[v + 1]; ++k) {
          const VertexId w = up_[k].to;
          const auto e = up_[k].edge;
          if (near.dist[w] != level + 1 || scratch_[w] <= 0) continue;
          scratch_[v] += scratch_[w];
          const double share = amount * near.paths[v] * scratch_[w] / total;
          // Source side: travelled up, v -> w; destination side: travelled down, w -> v.
          if (side == 0) add(v, e, share);
          else add(w, e, share);
        }
      }
    }
    for (auto v : near.vertices) scratch_[v] = 0;
    for (auto x : m.at) scratch_[x] = 0;
  }
  return true;
}

}  // namespace meshwork::topology
