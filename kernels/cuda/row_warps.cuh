#pragma once
// The "one warp per row" launch shape of the normalisation kernels: kRowWarps warps per block,
// warp w of block b owning row b * kRowWarps + w. A warp past the last row returns as a whole,
// so the full-mask shuffles of the warps that stay are safe.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/reduce.cuh"

namespace meshwork::kernels::cuda {

constexpr int kRowWarps = 4;
constexpr int kRowWarpThreads = kRowWarps * kWarpSize;

__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kRowWarps + static_cast<std::int64_t>(threadIdx.x) / kWarpSize;
}

__device__ __forceinline__ int warp_lane() { return static_cast<int>(threadIdx.x) % kWarpSize; }

inline std::int64_t row_warp_blocks(std::int64_t rows) { return (rows + kRowWarps - 1) / kRowWarps; }

}  // namespace meshwork::kernels::cuda
