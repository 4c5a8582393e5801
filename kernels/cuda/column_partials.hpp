#pragma once
// Deterministic sums over rows of a per-column quantity (dbias, dgamma, dbeta), in two passes
// and without atomics: pass 1 (in the op's own kernel) tiles the matrix into 32-column by
// `rows_per_block`-row blocks and writes one float partial per (row block, column); pass 2
// (sum_column_partials) adds a column's partials in row-block order. The partition depends on
// the row count only, never on the device, so the result is the same bits on every GPU and run.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace meshwork::kernels::cuda {

// A pass-1 block is kColumnTile columns (one warp across them, coalesced) by kRowLanes threads
// down the rows; each thread walks its rows in order.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;

struct RowBlocks {
  std::int64_t count = 0;           // row blocks (pass-1 grid height), at most kMaxRowBlocks
  std::int64_t rows_per_block = 0;  // the last block may hold fewer
};

// At least 32 rows per block (so each of the 8 row lanes sums >= 4 values) and at most 1024
// blocks (the partial buffer stays <= 1024 * cols floats; a grid's y extent is <= 65535).
inline RowBlocks row_blocks_for(std::int64_t rows) {
  constexpr std::int64_t kMinRowsPerBlock = 32;
  constexpr std::int64_t kMaxRowBlocks = 1024;
  if (rows <= 0) return {};
  const std::int64_t wanted = std::min((rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock, kMaxRowBlocks);
  const std::int64_t per_block = (rows + wanted - 1) / wanted;
  return {(rows + per_block - 1) / per_block, per_block};
}

// out[c] = sum over b = 0, 1, ..., row_blocks - 1 of partials[b * cols + c], in that order, in
// float. partials and out are device pointers; out is overwritten.
void sum_column_partials(const float* partials, std::int64_t row_blocks, std::int64_t cols, float* out,
                         cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
