#pragma once
// The paths the simulator's flows take: for every flow type (a kind of collective group's ring
// edges, or a pipeline direction) and rank, the hops from the rank to its peer, as the plan's
// routing puts them on the fabric.
//
// An edge between two GPUs carries `cluster.topology.flows_per_peer` flows (NCCL's channels
// times its queue pairs per connection), each with an equal share of the edge's bytes:
// - d_mod_k: every flow of an edge takes the destination's path (InfiniBand's forwarding
//   tables hold one port per destination LID), so an edge is one path (one per plane below).
// - ecmp_hash: each flow is hashed onto one of the equal-cost paths on its own, as a switch
//   hashes each queue pair's packet headers (Llama 3's E-ECMP over 16 flows, arXiv:2407.21783
//   §3.3.1).
// - adaptive: each flow goes where the load is least: of a handful of candidate paths, the
//   one whose busiest link carries the fewest flows of this type placed so far. Flowlet
//   switching converges on that (CONGA, Alizadeh et al., SIGCOMM 2014; InfiniBand adaptive
//   routing, Spectrum-X), without the collisions of a blind hash.
// On a multi-plane fabric each NIC is a port per plane, which NCCL uses as so many NICs: an
// edge's flows go round the planes (flow f on plane f mod planes, at least one per plane) and
// are routed inside their plane as above, so an edge has its whole NIC, not one port's share.
// A route holds every flow's path one after the other; the simulator plays the edge as one
// flow of bytes / flows over that route, so that a link k of the paths share carries k shares:
// the same rates as k flows held to one pace (a ring's channels move in step).

#include <cstdint>
#include <vector>

#include "plan/plan.hpp"
#include "topology/router.hpp"
#include "topology/topology.hpp"

namespace meshwork::sim {

struct Route {
  std::vector<topology::Hop> hops;  // every flow's path, one after the other
  double latency_s = 0;             // of one path
  bool unreachable = false;         // no path left (a fault partitioned the pair)
};

struct FlowRoutes {
  std::vector<std::vector<Route>> route;  // per flow type, per rank (empty hops: no flow)
  // Per flow type: the flows each edge is split into, the divisor of its bytes (1 when every
  // flow of every edge of the type would take one path anyway: NVLink, one leaf, d_mod_k).
  std::vector<std::int32_t> flows_per_edge;
};

// `peer[t][r]`: whom rank r sends to in flow type t (-1, or r itself: no flow);
// `link_latency_s`: per topology link id. An unreachable pair has `unreachable` set (a fabric
// with faults applied) rather than throwing.
FlowRoutes route_flows(const topology::Topology& topo, const plan::TopologyConfig& config, const std::vector<std::vector<std::int64_t>>& peer,
                       const std::vector<double>& link_latency_s);

}  // namespace meshwork::sim
