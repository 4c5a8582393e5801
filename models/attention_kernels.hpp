#pragma once
// Fused attention kernels from their published microbenchmarks (docs/reference/attention): each
// pass's throughput against the sequence length, which a hardware profile keeps as a fraction of
// its generation's best GEMM (models/hardware.cpp).

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "models/hardware.hpp"

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

// One pass of a kernel on a GPU against the sequence length: (sequence length, FLOP/s) for each
// length at `head_dim`, shortest first; a repeated length is an error in `error`.
std::vector<std::pair<double, double>> attention_pass_points(const std::vector<AttentionMeasurement>& table, const std::string& gpu,
                                                             const std::string& kernel, std::int64_t head_dim, bool backward, std::string& error);

// A pass's pace as a fraction of `best_gemm_flops_per_s` against the sequence length s, on the
// curve max s / (s + half) (GemmCurve's, in the sequence length: a kernel's fixed work per block
// of queries, its prologue and last tiles, weighs less as its loop over the keys grows), fitted
// by models::fit_gemm_curve. Rows that give no length (seq_length 0, a stated maximum) give that
// pace flat, half 0; no row: {0, 0}.
AttentionPace fit_attention_pace(const std::vector<AttentionMeasurement>& table, const std::string& gpu, const std::string& kernel,
                                 std::int64_t head_dim, bool backward, double best_gemm_flops_per_s);

}  // namespace meshwork::models
