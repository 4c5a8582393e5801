#pragma once
// The latency and protocol part of NCCL's own cost model: what NCCL's tuner charges a
// collective before its bytes move, and what each of its protocols keeps of a link's rate
// (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, at 5067397c;
// the constants are NVIDIA's, measured on their systems: docs/efficiency-constants.md).
//
// NCCL moves a collective's data with one of three protocols (src/device/prims_*.h):
//  - LL: 8-byte lines of 4 data bytes and a 4-byte flag, no fence: the lowest latency, half
//    the bandwidth (and at most a ceiling per GPU generation in one node, per CPU between);
//  - LL128: 128-byte lines of 120 data bytes and a flag, over NVLink only;
//  - Simple: whole buffers with a fence and a flag per chunk: the link's full rate, the most
//    latency.
// The tuner prices each algorithm and protocol as a latency plus bytes over a bandwidth and
// runs the fastest, so small collectives run LL, mid-sized LL128 and large ones Simple
// (nccl-tests: the DGX all-reduce takes 13 us at 8 B against a ring step's 3.4 us of Simple).
#include <cstdint>

#include "models/program.hpp"
#include "plan/enums.hpp"

namespace meshwork::models {

enum class Protocol { ll, ll128, simple };
const char* protocol_name(Protocol p);

// Where a group's ring steps run: NVLink (NVSwitch or an NVLink mesh), PCIe, or between nodes.
struct TunerShape {
  std::int64_t ranks = 1;
  std::int64_t nodes = 1;
  bool nvlink = true;  // the node's GPUs talk over NVLink (LL128 needs it, NCCL's typeIntra <= NVB)
};

// Whether NCCL runs `p` for algorithm `a` on this shape (NVLS runs Simple only; LL128 needs
// NVLink inside the node).
bool protocol_applies(plan::CollectiveAlgorithm a, Protocol p, const TunerShape& s);

// NCCL's latency of one collective, seconds: the algorithm's base latency plus its steps'
// hardware latencies (a ring's steps inside nodes at NVLink's or PCIe's, its steps between
// nodes at the network's; a tree's up and down its chain and across log2 of the nodes;
// NVLink SHARP's switch). The hierarchical algorithm (not one of NCCL's: in-node
// reduce-scatter, a ring between nodes, in-node all-gather) is the sum of its three calls.
// `bytes`: the collective's buffer, for the ring's plateau factor, which NCCL applies to a Simple
// all-reduce between nodes from 64 bytes per channel and rank (16 channels, as on a DGX with 8
// NICs: NVIDIA/nccl#689); left out, the buffer is taken to be past it.
double nccl_latency_s(plan::CollectiveAlgorithm a, Collective c, Protocol p, const TunerShape& s, double bytes = 1e300);

// Of the rate Simple reaches, the fraction protocol `p` keeps for algorithm `a`: LL one half
// on a ring (1/3.8 on a tree), LL128 0.92 on a ring (on a tree 7/9 inside a node, 120/128
// between nodes).
double protocol_fraction(plan::CollectiveAlgorithm a, Protocol p, const TunerShape& s);

// LL's ceiling on a group's bus bandwidth, bytes/s: in one node the GPU generation's
// (`in_node_ll_busbw_bytes_per_s`, HardwareProfile), between nodes the host CPU's (an Intel
// host's: 39 GB/s for two nodes, 20.4 GB/s for more).
double ll_busbw_ceiling_bytes_per_s(const TunerShape& s, double in_node_ll_busbw_bytes_per_s);

}  // namespace meshwork::models
