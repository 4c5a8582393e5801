#pragma once
// Pass 1 of column_partials.hpp, inside an op's kernel launched as a grid of
// (ceil(cols / kColumnTile), row_blocks.count) blocks of (kColumnTile, kRowLanes) threads.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/column_partials.hpp"

namespace meshwork::kernels::cuda {

// Adds the kRowLanes per-thread sums of a column tile in row-lane order and writes the block's
// partial for each column. `scratch` is a __shared__ float[kRowLanes][kColumnTile + 1] (padded
// against bank conflicts). Every thread of the block must call it: it synchronises the block.
__device__ inline void store_column_partial(float thread_sum, float (*scratch)[kColumnTile + 1],
                                            float* partials, std::int64_t cols) {
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  scratch[ty][tx] = thread_sum;
  __syncthreads();
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + tx;
  if (ty == 0 && col < cols) {
    float sum = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) sum += scratch[lane][tx];
    partials[static_cast<std::int64_t>(blockIdx.y) * cols + col] = sum;
  }
  __syncthreads();  // scratch may be reused by the caller
}

}  // namespace meshwork::kernels::cuda
