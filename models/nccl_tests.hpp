#pragma once
// Real collective measurements, read from nccl-tests' output (NVIDIA/nccl-tests, doc/PERFORMANCE.md
// for its columns), and what they say of a plan's fabric (`meshwork calibrate --nccl-tests`):
//  - parse_nccl_tests: the test blocks of one output (several per file, as `./all_reduce_perf`
//    and its siblings print them one after the other; header lines with or without their `#`);
//  - fit_latency_bandwidth: t(S) = a + S / B per block (Hockney 1994), least squares on the
//    relative error, the form the cost model's collectives take (models/comm: steps x latency
//    + bytes / rate);
//  - calibrate_from_nccl_tests: the plan's intra-node and NIC efficiencies for which the cost
//    model itself (models::collective_s, with the algorithm and protocol it would choose)
//    reproduces each block's largest measurement, and the model's error on every other size of
//    the block.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

struct NcclTestPoint {
  double bytes = 0;   // nccl-tests' "size": the whole buffer
  double time_s = 0;  // out of place
  double algbw_bytes_per_s = 0, busbw_bytes_per_s = 0;
};

struct NcclTestBlock {
  // all_reduce, all_gather, reduce_scatter, alltoall, sendrecv, broadcast, reduce: from the
  // block's "# Collective test starting: X_perf" line, or, without it, from the ratio of busbw to
  // algbw, the reduction and the root column (all_reduce 2(n-1)/n with a sum and root -1,
  // reduce_scatter (n-1)/n likewise). Empty when neither tells (an all_gather and an alltoall
  // print alike; a reduce names a root).
  std::string collective;
  std::string where;  // "file:line" of the block's table header
  std::int64_t ranks = 0;  // the "Rank N ... on HOST" lines
  std::int64_t nodes = 0;  // their distinct hosts
  std::vector<NcclTestPoint> points;
};

// Throws std::invalid_argument naming `name` and the line for a table row that does not read
// (a column that is not a number, too few columns) or an output with no table at all.
std::vector<NcclTestBlock> parse_nccl_tests(std::string_view text, const std::string& name);

struct LatencyBandwidth {
  double latency_s = 0;
  double algbw_bytes_per_s = 0;  // as S grows
  [[nodiscard]] double time_s(double bytes) const { return latency_s + bytes / algbw_bytes_per_s; }
};
// Throws std::invalid_argument with fewer than two different sizes above 0 bytes.
LatencyBandwidth fit_latency_bandwidth(const std::vector<NcclTestPoint>& points);

struct BlockCalibration {
  const NcclTestBlock* block = nullptr;
  LatencyBandwidth fit;
  // Which efficiency the block sets ("intra_node_efficiency" for a block inside one node,
  // "nic_efficiency" across nodes) and its value; empty with `why` when it sets none (an
  // unknown collective, sendrecv, or a model time that does not depend on it, as NVLink SHARP's
  // all-reduce does not on the ring's efficiency).
  std::string field;
  double efficiency = 0;
  std::string why;
  // The cost model with the plan as written (every field at the lowest any block gave) against
  // every size of a block it prices, whether or not the block set a field: the largest relative
  // error (|model - measured| / measured) and where.
  double max_error = 0;
  double max_error_bytes = 0;
  // The same with the block's own efficiency (what the latency and protocol model misses, apart
  // from the spread of efficiencies between blocks).
  double own_max_error = 0;
  double own_max_error_bytes = 0;
};

struct NcclCalibration {
  std::vector<BlockCalibration> blocks;
  // The plan with its GPU's calibration set: each field the lowest efficiency any block gave
  // (no collective the step runs is priced faster than it measured), and on a CPU host, with a
  // block inside one node that reaches 64 KiB or less, the node fabric's latency from its fit
  // (latency over the ring's steps). On a GPU, NCCL's tuner's latencies stand.
  plan::Plan plan;
};

// Throws std::invalid_argument when a block's ranks do not fit the plan's nodes (ranks not a
// multiple of nodes, or more ranks per node than the plan's gpus_per_node).
NcclCalibration calibrate_from_nccl_tests(const plan::Plan& plan, const std::vector<NcclTestBlock>& blocks);

}  // namespace meshwork::models
