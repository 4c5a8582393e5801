#pragma once
// The shape check shared by the row normalisations (layernorm, RMSnorm): rows of `cols`
// features, one warp per row, parameter gradients in column tiles.

#include <cstdint>
#include <string_view>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/row_warps.cuh"

namespace meshwork::kernels::cuda {

inline void check_row_norm_shape(std::string_view op, std::int64_t rows, std::int64_t cols) {
  require(rows >= 0, op, "negative shape " + shape_of(rows, cols));
  require(cols > 0, op, "x " + shape_of(rows, cols) + " has no features");
  require_grid_fits(row_warp_blocks(rows), op, "x " + shape_of(rows, cols));
  require_grid_fits((cols + kColumnTile - 1) / kColumnTile, op, "x " + shape_of(rows, cols));
}

}  // namespace meshwork::kernels::cuda
