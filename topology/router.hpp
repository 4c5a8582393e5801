#pragma once
// Routes on demand, without an all-pairs table (at 131,072 GPUs one would not fit; see
// docs/reference/simgrid-3.32-notes.md). Every fabric the builders make is layered
// (GPU, then NVSwitch or NIC, leaf, spine, core: tier_of()), and every shortest path between
// two GPUs climbs to a turning switch and comes down (up*/down*, as in fat-tree routing since
// Leiserson 1985). So the shortest paths between two GPUs are found where their up-cones
// meet: the cone of a GPU holds about k^2/4 switches of a radix-k tree, whatever the cluster's
// size. The simulator (sim/) asks for a route per flow of a group it plays out; the analysis
// asks for hops, equal-cost path counts and bottlenecks. Links that are down (bandwidth 0) are
// not used, so a faulted copy of a topology routes around its faults.
//
// A Router reads the topology once, when made: make a new one after changing links (faults).
// Not thread-safe: a Router keeps scratch space; use one per thread.

#include <cstdint>
#include <utility>
#include <vector>

#include "topology/topology.hpp"

namespace meshwork::topology {

// One link crossed in one direction: the load slot is 2 * link + (forward ? 0 : 1), forward
// meaning from the lower vertex id to the higher (routing.hpp's convention).
struct Hop {
  std::int64_t link = 0;
  bool forward = true;
  [[nodiscard]] std::size_t slot() const { return static_cast<std::size_t>(2 * link + (forward ? 0 : 1)); }
};

struct PathInfo {
  std::int64_t hops = -1;            // -1: unreachable
  double paths = 0;                  // equal-cost shortest paths
  double bottleneck_gbytes_per_s = 0;  // the widest shortest path's slowest link
};

class Router {
 public:
  explicit Router(const Topology& t);

  [[nodiscard]] PathInfo info(std::int64_t src_gpu, std::int64_t dst_gpu);
  // One shortest path, chosen among the equal-cost ones by `flow_hash` with each path equally
  // likely (as ECMP hashing does per flow); empty when unreachable or src == dst.
  // `plane` (>= 0, on a multi-plane fabric): only the paths through that plane's switches, as a
  // NIC port on that plane sends (a path inside the node ignores it).
  [[nodiscard]] std::vector<Hop> route(std::int64_t src_gpu, std::int64_t dst_gpu, std::uint64_t flow_hash = 0, std::int64_t plane = -1);
  // Equal-cost path number `number` mod info(src, dst).paths (with `fraction`, number in [0, 1)
  // picks the path at that fraction of the range), each path having exactly one number.
  [[nodiscard]] std::vector<Hop> route_number(std::int64_t src_gpu, std::int64_t dst_gpu, double number, bool fraction = false, std::int64_t plane = -1);
  // The equal-cost paths through `plane` (all of them when plane < 0).
  [[nodiscard]] double paths_in_plane(std::int64_t src_gpu, std::int64_t dst_gpu, std::int64_t plane);
  // Destination-mod-k routing (Zahavi et al., "Optimized InfiniBand fat-tree routing for shift
  // all-to-all communication patterns", 2010; OpenSM's ftree): path number dst mod the path
  // count, so flows to consecutive destinations take different turning switches and a shift
  // pattern (every ring edge of a collective) does not collide on a full tree. Destinations
  // are numbered by Topology::port_order (leaf by leaf, as OpenSM numbers end ports), not by
  // GPU index, which on a rail-optimized fabric puts a rail's GPUs every gpus_per_node-th number.
  [[nodiscard]] std::vector<Hop> route_d_mod_k(std::int64_t src_gpu, std::int64_t dst_gpu, std::int64_t plane = -1);
  // Adds `amount` split evenly over all equal-cost paths into `loads` (2 slots per link).
  // Returns false when unreachable.
  bool spread(std::int64_t src_gpu, std::int64_t dst_gpu, double amount, std::vector<double>& loads);

  // Group queries: one source cone, many destinations.
  void set_source(std::int64_t src_gpu);
  [[nodiscard]] PathInfo info_from_source(std::int64_t dst_gpu);

 private:
  // The up-cone of a GPU, grown one level (tier) at a time; per-vertex arrays are sized to the
  // graph once and cleared through `vertices`.
  struct Cone {
    VertexId apex = 0;
    std::vector<VertexId> vertices;        // by level
    std::vector<std::size_t> level_start;  // level L is vertices[level_start[L], level_start[L+1])
    std::vector<std::int64_t> dist;        // -1 outside
    std::vector<double> paths;             // up-paths from the apex
    std::vector<double> width;             // the widest up-path's slowest link
    bool exhausted = false;
    void reset();
  };
  struct Meeting {
    std::int64_t hops = -1;                         // -1: unreachable
    std::vector<VertexId> at;                       // turning points of the shortest paths
    std::vector<Graph::edge_descriptor> direct;     // or direct GPU-GPU links
  };
  void start(Cone& c, VertexId apex);
  bool grow(Cone& c);
  static std::int64_t levels(const Cone& c);
  Meeting meet(std::int64_t dst_gpu);
  // Keeps the turning points of `plane` (none when plane < 0 or none is on it).
  void keep_plane(Meeting& m, std::int64_t plane) const;
  [[nodiscard]] PathInfo summarise(const Meeting& m) const;
  void descend(const Cone& c, VertexId top, double r, std::vector<std::pair<VertexId, Graph::edge_descriptor>>& out) const;
  // The path through turning point m.at[turn] whose up half is number r_src of the source's
  // up-paths to it and whose down half is number r_dst of the destination's.
  std::vector<Hop> path(const Meeting& m, std::size_t turn, double r_src, double r_dst);

  struct UpLink {
    VertexId to;
    Graph::edge_descriptor edge;
    double gbytes_per_s;
  };

  const Topology& t_;
  std::vector<UpLink> up_;             // up-links (to a higher tier, not down), by vertex
  std::vector<std::size_t> up_start_;  // vertex v's are up_[up_start_[v], up_start_[v+1])
  Cone src_, dst_;
  std::vector<double> scratch_;
  std::int64_t source_gpu_ = -1;
};

}  // namespace meshwork::topology
