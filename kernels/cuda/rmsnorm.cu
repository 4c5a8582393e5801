#include "kernels/cuda/rmsnorm.hpp"

#include <string>
#include <utility>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/row_warps.cuh"
#include "kernels/cuda/row_norm_shape.cuh"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

template <class T>
__global__ void forward_kernel(const T* x, const T* gamma, T* y, float* rstd, std::int64_t rows, std::int64_t cols,
                               float eps) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const T* xr = x + row * cols;
  float squares = 0.0f;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) {
    const float v = to_float(xr[c]);
    squares += v * v;
  }
  // Zhang & Sennrich 2019 eq. 4: RMS(a) = sqrt(mean(a^2)); eps inside the root, as
  // kernels/rmsnorm.cpp, so an all-zero row gives zeros rather than NaN.
  const float rs = rsqrtf(warp_sum(squares) / static_cast<float>(cols) + eps);
  T* yr = y + row * cols;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) yr[c] = from_float<T>(to_float(xr[c]) * rs * to_float(gamma[c]));
  if (lane == 0) rstd[row] = rs;
}

// dx = rstd * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dy * gamma, xhat = x * rstd: the
// derivative through the row's RMS, as kernels/rmsnorm.cpp.
template <class T>
__global__ void dx_kernel(const T* dy, const T* x, const T* gamma, const float* rstd, T* dx, std::int64_t rows,
                          std::int64_t cols) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float rs = rstd[row];
  float sum_dxhat_xhat = 0.0f;
  for (std::int64_t c = lane; c < cols; c += kWarpSize)
    sum_dxhat_xhat += to_float(dyr[c]) * to_float(gamma[c]) * to_float(xr[c]) * rs;
  const float mean_dxhat_xhat = warp_sum(sum_dxhat_xhat) / static_cast<float>(cols);
  T* dxr = dx + row * cols;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) {
    const float dxhat = to_float(dyr[c]) * to_float(gamma[c]);
    const float xhat = to_float(xr[c]) * rs;
    dxr[c] = from_float<T>(rs * (dxhat - xhat * mean_dxhat_xhat));
  }
}

// Pass 1 of dgamma = sum_rows dy * xhat (column_partials.hpp).
template <class T>
__global__ void gamma_partials_kernel(const T* dy, const T* x, const float* rstd, float* partials, std::int64_t rows,
                                      std::int64_t cols, std::int64_t rows_per_block) {
  __shared__ float scratch[kRowLanes][kColumnTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_block;
  const std::int64_t row_end = rows < row_begin + rows_per_block ? rows : row_begin + rows_per_block;
  float sum = 0.0f;
  if (col < cols) {
    for (std::int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const std::int64_t i = r * cols + col;
      sum += to_float(dy[i]) * to_float(x[i]) * rstd[r];
    }
  }
  store_column_partial(sum, scratch, partials, cols);
}

}  // namespace

template <class T>
void rmsnorm_forward(const T* x, const T* gamma, T* y, float* rstd, std::int64_t rows, std::int64_t cols, float eps,
                     cudaStream_t stream) {
  constexpr std::string_view op = "rmsnorm_forward";
  check_row_norm_shape(op, rows, cols);
  if (rows == 0) return;
  for (const auto& [p, name] :
       {std::pair<const void*, const char*>{x, "x"}, {gamma, "gamma"}, {y, "y"}, {rstd, "rstd"}})
    require_pointer(p, op, name);
  forward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(x, gamma, y, rstd,
                                                                                              rows, cols, eps);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* gamma, const float* rstd, T* dx, float* dgamma,
                      std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr std::string_view op = "rmsnorm_backward";
  check_row_norm_shape(op, rows, cols);
  require_pointer(dgamma, op, "dgamma");
  if (rows == 0) {  // an empty sum
    sum_column_partials(nullptr, 0, cols, dgamma, stream);
    return;
  }
  for (const auto& [p, name] :
       {std::pair<const void*, const char*>{dy, "dy"}, {x, "x"}, {gamma, "gamma"}, {rstd, "rstd"}, {dx, "dx"}})
    require_pointer(p, op, name);
  // dgamma reads dy before dx is written, so dx may alias dy.
  const RowBlocks blocks = row_blocks_for(rows);
  StreamBuffer<float> partials(static_cast<std::size_t>(blocks.count * cols), stream);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile), static_cast<unsigned>(blocks.count));
  gamma_partials_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(dy, x, rstd, partials.data(), rows, cols,
                                                                           blocks.rows_per_block);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  sum_column_partials(partials.data(), blocks.count, cols, dgamma, stream);
  dx_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(dy, x, gamma, rstd, dx,
                                                                                         rows, cols);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                                 \
  template void rmsnorm_forward<T>(const T*, const T*, T*, float*, std::int64_t, std::int64_t, float, cudaStream_t); \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const float*, T*, float*, std::int64_t,        \
                                    std::int64_t, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
