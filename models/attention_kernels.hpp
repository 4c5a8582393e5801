#pragma once
// Fused attention kernels from their published microbenchmarks (docs/reference/attention): the
// throughput of a kernel's forward and backward passes together, which a hardware profile keeps
// as a fraction of its generation's best GEMM (models/hardware.cpp).

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "models/gemm_fit.hpp"

namespace meshwork::models {

// One measured pass of an attention kernel: `flops_per_s` counts the FLOPs as the kernels'
// papers do, 4 s^2 d per head for the forward (two matmuls) and 2.5 times that for the backward
// (five: the scores recomputed, dV, dP, dQ, dK; Dao 2023, arXiv:2307.08691 §4.1).
struct AttentionMeasurement {
  std::string gpu;     // a GPU preset's key ("h100-sxm")
  std::string kernel;  // a training.attention_kernel name (flash2, flash3, cudnn)
  bool backward = false;
  std::int64_t seq_length = 0;  // 0: a figure its source states without the length
  std::int64_t head_dim = 0;
  double flops_per_s = 0;
};

// Reads a table: lines `gpu,kernel,pass,seq_length,head_dim,tflops_per_s`, pass forward or
// backward (comments, blank lines and a `gpu,` header skipped). On a missing file or any
// malformed line, returns nothing and says what in `error`, a line each; else `error` is empty.
std::vector<AttentionMeasurement> read_attention_table(const std::filesystem::path& file, std::string& error);

// The pace of one forward and backward, in the FLOPs MFU counts (the backward as twice the
// forward, 3 F in all) per second of the two passes' time, F / fwd + 2.5 F / bwd.
double pass_pair_flops_per_s(double forward_flops_per_s, double backward_flops_per_s);

// A kernel's pace on a GPU against the sequence length: (sequence length, pass-pair pace) for
// each length at `head_dim` that has both passes, shortest first.
std::vector<std::pair<double, double>> attention_paces(const std::vector<AttentionMeasurement>& table, const std::string& gpu,
                                                       const std::string& kernel, std::int64_t head_dim);

// A kernel's pace as a fraction of `best_gemm_flops_per_s` against the sequence length s, on
// the curve max s / (s + half) (GemmCurve's, in the sequence length: a kernel's fixed work per
// block of queries, the prologue and the last tiles, weighs less as its loop over the keys
// grows), fitted by models::fit_gemm_curve. A table whose rows give no length (seq_length 0, a
// stated maximum) gives that pace flat, half 0; no row: {0, 0}.
GemmCurve fit_attention_pace(const std::vector<AttentionMeasurement>& table, const std::string& gpu, const std::string& kernel,
                             std::int64_t head_dim, double best_gemm_flops_per_s);

}  // namespace meshwork::models
