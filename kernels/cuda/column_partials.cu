#include "kernels/cuda/column_partials.hpp"

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per column, adding its partials in row-block order: coalesced across columns.
__global__ void sum_column_partials_kernel(const float* partials, std::int64_t row_blocks, std::int64_t cols,
                                           float* out) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (col >= cols) return;
  float sum = 0.0f;
  for (std::int64_t b = 0; b < row_blocks; ++b) sum += partials[b * cols + col];
  out[col] = sum;
}

}  // namespace

void sum_column_partials(const float* partials, std::int64_t row_blocks, std::int64_t cols, float* out,
                         cudaStream_t stream) {
  constexpr std::string_view op = "sum_column_partials";
  require(row_blocks >= 0 && cols >= 0, op, "negative shape " + shape_of(row_blocks, cols));
  if (cols == 0) return;
  require_pointer(out, op, "out");
  if (row_blocks == 0) {  // no rows: every column sums to zero
    MESHWORK_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(cols) * sizeof(float), stream));
    return;
  }
  require_pointer(partials, op, "partials");
  const std::int64_t blocks = (cols + kThreads - 1) / kThreads;
  require_grid_fits(blocks, op, "cols " + std::to_string(cols));
  sum_column_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(partials, row_blocks, cols, out);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshwork::kernels::cuda
