#pragma once
// Communication of a plan's parallel groups: which fabric a group's traffic crosses, its bus
// bandwidth, and the time of a collective of a given size. Sizes and bandwidths follow the
// nccl-tests conventions (doc/PERFORMANCE.md): for all-reduce busbw = algbw * 2(n-1)/n, for
// reduce-scatter, all-gather and all-to-all busbw = algbw * (n-1)/n, algbw = bytes / time.

#include <cstdint>

#include "models/hardware.hpp"
#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::models {

struct GroupNetwork {
  std::int64_t size = 1;
  bool crosses_nodes = false;
  double busbw_bytes_per_s = 0;  // what one rank sustains in a large collective
  double latency_s = 0;          // per ring step
};

GroupNetwork group_network(const plan::Plan& plan, const HardwareProfile& hw, plan::GroupKind group);

// Time of a collective over a buffer of `bytes` (the full buffer, as nccl-tests' "size").
double all_reduce_s(const GroupNetwork& g, double bytes);
double reduce_scatter_s(const GroupNetwork& g, double bytes);
double all_gather_s(const GroupNetwork& g, double bytes);
double all_to_all_s(const GroupNetwork& g, double bytes);
// One point-to-point transfer of `bytes` between pipeline neighbours.
double p2p_s(const GroupNetwork& g, double bytes);

}  // namespace meshwork::models
