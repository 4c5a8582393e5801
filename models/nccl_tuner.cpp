#include "models/nccl_tuner.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace meshwork::models {
namespace {

using plan::CollectiveAlgorithm;

// NVIDIA/nccl src/graph/tuning.cc @5067397c, ncclTunerConstantsDefaults, in microseconds, per
// protocol {LL, LL128, Simple}.
using PerProtocol = std::array<double, 3>;
constexpr PerProtocol kRingBaseUs{6.6, 14.0, 8.4};
constexpr PerProtocol kTreeBaseUs{6.8, 14.0, 8.4};
constexpr PerProtocol kRingNvlinkUs{0.6, 1.9, 3.4};
constexpr PerProtocol kTreeNvlinkUs{0.6, 1.25, 4.0};
constexpr PerProtocol kRingPciUs{1.0, 2.5, 5.7};
constexpr PerProtocol kTreePciUs{1.0, 1.9, 4.0};
constexpr PerProtocol kRingNetUs{2.7, 4.0, 14.0};
constexpr PerProtocol kTreeNetUs{5.0, 8.5, 14.0};
constexpr double kNvlsNvlinkUs = 25;  // NVLS runs Simple only
// getNetOverhead: an x86 Intel host's 1 us per ring step between nodes, three times that for
// Simple; a ring's steps inside a node cost at least that once it spans nodes.
constexpr double kNetOverheadUs = 1.0;
// ncclTopoGetAlgoTime: "plateau effect of ring", Simple all-reduce between nodes on Ampere and
// later, once the buffer holds 64 bytes per channel and rank; 16 channels, as NCCL runs on a DGX
// with 8 NICs (the maintainer, NVIDIA/nccl#689; the SM share of models/hardware.cpp counts them too).
constexpr double kRingPlateau = 1.4;
constexpr double kPlateauBytesPerChannelAndRank = 64;
constexpr double kChannels = 16;
// llMaxBws between nodes, an Intel host's row: two nodes, more than two (GB/s of busbw).
constexpr double kLlTwoNodesGbps = 39.0;
constexpr double kLlManyNodesGbps = 20.4;

double of(const PerProtocol& row, Protocol p) { return row[static_cast<std::size_t>(p)]; }
double d(std::int64_t v) { return static_cast<double>(v); }
// NCCL's log2i: the floor of log2.
double log2_floor(std::int64_t v) { return v <= 1 ? 0.0 : std::floor(std::log2(d(v))); }

double ring_latency_us(Collective c, Protocol p, const TunerShape& s, double bytes) {
  const std::int64_t n = s.ranks, nodes = std::max<std::int64_t>(1, s.nodes);
  if (c == Collective::broadcast) {
    // Broadcast (and Reduce) run on the ring only, nRanks steps of one latency each: the node's
    // link inside a node, the network's across nodes, Simple's at the tree's row ("some chunk
    // latency", tuning.cc @5067397c, ncclTopoTuneModel's branch for them). NCCL charges one
    // step instead when every channel runs the same ring graph (sameChannels), which depends on
    // the machine's topology search; the model takes the general case.
    const PerProtocol& ring_row = nodes == 1 ? (s.nvlink ? kRingNvlinkUs : kRingPciUs) : kRingNetUs;
    const PerProtocol& tree_row = nodes == 1 ? (s.nvlink ? kTreeNvlinkUs : kTreePciUs) : kTreeNetUs;
    const double step = p == Protocol::simple ? of(tree_row, p) : of(ring_row, p);
    return of(kRingBaseUs, p) + d(n) * step;
  }
  const bool all_reduce = c == Collective::all_reduce;
  const double steps = all_reduce ? 2.0 * d(n - 1) : d(n - 1);
  const double inter_steps = nodes == 1 ? 0 : all_reduce ? 2.0 * d(nodes - 1) : d(nodes - 1);
  double intra = of(s.nvlink ? kRingNvlinkUs : kRingPciUs, p);
  if (nodes > 1) intra = std::max(intra, kNetOverheadUs * (p == Protocol::simple ? 3 : 1));
  // With one rank per node every step is exposed: NCCL charges the tree's network latency.
  const bool one_per_node = n == nodes;
  const double inter = of(one_per_node ? kTreeNetUs : kRingNetUs, p);
  double us = of(kRingBaseUs, p) + (steps - inter_steps) * intra + inter_steps * inter;
  if (all_reduce && nodes > 1 && p == Protocol::simple && bytes / (kChannels * d(n)) >= kPlateauBytesPerChannelAndRank) us *= kRingPlateau;
  return us;
}

}  // namespace

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::ll: return "LL";
    case Protocol::ll128: return "LL128";
    case Protocol::simple: return "Simple";
  }
  return "?";
}

bool protocol_applies(CollectiveAlgorithm a, Protocol p, const TunerShape& s) {
  if (a == CollectiveAlgorithm::nvls) return p == Protocol::simple;
  if (p == Protocol::ll128) return s.nvlink;
  return true;
}

double nccl_latency_s(CollectiveAlgorithm a, Collective c, Protocol p, const TunerShape& s, double bytes) {
  if (s.ranks <= 1) return 0;
  const std::int64_t nodes = std::max<std::int64_t>(1, s.nodes);
  double us = 0;
  switch (a) {
    case CollectiveAlgorithm::automatic:
    case CollectiveAlgorithm::ring: us = ring_latency_us(c, p, s, bytes); break;
    case CollectiveAlgorithm::tree: {
      const double per_node = d(s.ranks / nodes);  // NCCL's nRanks / nNodes, in integers
      us = of(kTreeBaseUs, p) + 2 * ((per_node - 1) * of(s.nvlink ? kTreeNvlinkUs : kTreePciUs, p) + log2_floor(nodes) * of(kTreeNetUs, p));
      break;
    }
    case CollectiveAlgorithm::nvls: us = kNvlsNvlinkUs; break;
    case CollectiveAlgorithm::hierarchical: {
      const std::int64_t per_node = std::max<std::int64_t>(1, s.ranks / nodes);
      const TunerShape node{per_node, 1, s.nvlink}, across{nodes, nodes, s.nvlink};
      const double in_node_calls = c == Collective::all_reduce ? 2 : 1;
      // The call between nodes moves 1/per_node of the buffer.
      return in_node_calls * (per_node > 1 ? ring_latency_us(Collective::reduce_scatter, p, node, bytes) : 0) * 1e-6 +
             (nodes > 1 ? ring_latency_us(c, p, across, bytes / d(per_node)) : 0) * 1e-6;
    }
  }
  return us * 1e-6;
}

double protocol_fraction(CollectiveAlgorithm a, Protocol p, const TunerShape& s) {
  switch (p) {
    case Protocol::simple: return 1;
    case Protocol::ll: return a == CollectiveAlgorithm::tree ? 1 / 3.8 : 0.5;
    case Protocol::ll128:
      if (a == CollectiveAlgorithm::tree) return s.nodes <= 1 ? 7.0 / 9 : 120.0 / 128;
      return 0.92;  // NCCL's figure for a ring ("120.0/128.0" beside it)
  }
  return 1;
}

double ll_busbw_ceiling_bytes_per_s(const TunerShape& s, double in_node_ll_busbw_bytes_per_s) {
  if (s.nodes <= 1) return in_node_ll_busbw_bytes_per_s;
  return (s.nodes == 2 ? kLlTwoNodesGbps : kLlManyNodesGbps) * 1e9;
}

}  // namespace meshwork::models
