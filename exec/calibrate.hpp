#pragma once
// Measures the machine at hand for the cost models (`meshwork calibrate`): GEMM efficiency on
// a fixed grid of shapes (never the scenario's own) in the three forms a layer runs, streaming
// memory bandwidth, the executor's own kernels (activation, norm, attention, loss, embedding,
// optimizer) on fixed grids, the fixed cost of a small op, and collective bus bandwidth and
// latency by message size with nccl-tests' definitions (doc/PERFORMANCE.md: algbw = S / t,
// all-reduce busbw = algbw x 2(n-1)/n, reduce-scatter and all-gather algbw x (n-1)/n). Every
// rank measures at once, as they compute at once in a run, and compute figures are the
// slowest rank's, as a synchronous step goes at its pace.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/group.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
};
struct CollectivePoint {
  double bytes = 0, seconds = 0, algbw_bytes_per_s = 0, busbw_bytes_per_s = 0;
};

struct CalibrationRun {
  std::vector<GemmPoint> gemm;
  double stream_bytes_per_s = 0;  // STREAM triad (McCalpin 1995), bytes read and written
  double kernel_bytes_per_s = 0;  // the executor's streaming kernels, as the cost model counts their bytes
  double op_overhead_s = 0;       // a tiny elementwise op, beyond its bytes
  std::vector<CollectivePoint> all_reduce, reduce_scatter, all_gather;  // empty in a group of one
  int ranks = 1;
  plan::Calibration calibration;  // fitted against the GPU spec's peak and bandwidths
};

// `plan`, when given, weighs the elementwise kernels as its model's layers mix them, and decides
// the peak the attention is measured against (plan::attention_peak_tflops: BF16's in an FP8 plan
// without fp8_attention; turning fp8_attention on afterwards prices that measurement at the FP8
// peak, as changing the precision does the GEMMs').
// `spec` gives the nominal peak (fp32 for CPUs) and bandwidths the efficiencies are taken
// against; `intra_node_gbytes_per_s` the node fabric's. `progress` gets a line per phase.
CalibrationRun calibrate(Group& world, const plan::GpuSpec& spec, plan::Precision precision, double intra_node_gbytes_per_s,
                         const std::function<void(const std::string&)>& progress, const plan::Plan* plan = nullptr);

}  // namespace meshwork::exec
