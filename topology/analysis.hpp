#pragma once
// What a topology offers: its bill of materials, bisection bandwidth, and, for each parallel
// group of a plan, the hops and bottleneck bandwidth between its members.

#include <cstdint>
#include <map>
#include <string>

#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"
#include "topology/topology.hpp"

namespace meshwork::topology {

struct BillOfMaterials {
  std::map<std::string, std::int64_t> switches;  // by kind: leaf, spine, core, nvswitch
  std::map<std::string, std::int64_t> links;     // by tier
  std::int64_t cables = 0;        // scale-out links (NIC-leaf and above)
  std::int64_t transceivers = 0;  // two per scale-out cable (optical links assumed)
};

BillOfMaterials bill_of_materials(const Topology& t);

// Bisection bandwidth of the scale-out fabric, GB/s one way: for these trees, the smallest
// tier's aggregate up-link capacity over two (at the NICs, half the NICs' bandwidth).
double bisection_gbytes_per_s(const Topology& t);

// The most hops between two GPUs: the larger eccentricity of the first and the last GPU (the
// diameter of these fabrics, which look the same from every node but a partly filled last
// pod or leaf). One route query per GPU, twice.
std::int64_t diameter_hops(const Topology& t);

struct GroupPath {
  std::int64_t hops = 0;                 // links from the group's first member to its farthest
  double bottleneck_gbytes_per_s = 0;   // the slowest link on the widest such path
  bool disconnected = false;            // a member cannot be reached
};

class Router;

// The shortest path from the first member of `group`'s group `index` to its farthest member.
GroupPath group_path(const Topology& t, const plan::RankLayout& layout, plan::GroupKind group, std::int64_t index = 0);
// The same with a router kept across calls (every group of a plan: one router).
GroupPath group_path(Router& router, const plan::RankLayout& layout, plan::GroupKind group, std::int64_t index = 0);

// The rate one ring edge of `group`'s kind gets when every group of that kind runs its ring at
// once (a collective of the whole step's kind), each edge spread evenly over its equal-cost
// paths (the steady state ECMP hashing of many flows, or adaptive routing, tends to): the
// least over the links of capacity / edges crossing, GB/s one way. Rings as
// plan::ring_successor lays them; data parallelism's one pipeline stage at a time
// (staggered_by_stage in fabric_share.hpp). An oversubscribed tier or pod shows here, not in
// GroupPath's bottleneck (one path alone). 0 when the kind has one member per group.
// With `routing` d_mod_k each edge takes Router::route_d_mod_k's path instead (one flow on
// each plane of a multi-plane fabric), so destination-mod-k's collisions show; ecmp_hash and
// adaptive spread evenly.
double ring_share_gbytes_per_s(const Topology& t, const plan::RankLayout& layout, plan::GroupKind group,
                               plan::Routing routing = plan::Routing::adaptive);

}  // namespace meshwork::topology
