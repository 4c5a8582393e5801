#include "kernels/cuda/layernorm.hpp"

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
__global__ void forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                               std::int64_t rows, std::int64_t cols, float eps) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const T* xr = x + row * cols;
  const auto features = static_cast<float>(cols);
  float sum = 0.0f;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) sum += to_float(xr[c]);
  const float mu = warp_sum(sum) / features;
  // Two passes (mean, then the mean of squared deviations) rather than E[x^2] - E[x]^2, which
  // cancels catastrophically when |mean| >> std, as kernels/layernorm.cpp.
  float squares = 0.0f;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) {
    const float d = to_float(xr[c]) - mu;
    squares += d * d;
  }
  const float rs = rsqrtf(warp_sum(squares) / features + eps);
  // Ba et al. 2016 eqs. 3-4 with the Transformer's per-feature gain and bias.
  T* yr = y + row * cols;
  for (std::int64_t c = lane; c < cols; c += kWarpSize)
    yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * to_float(gamma[c]) + to_float(beta[c]));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma: the
// derivative through the row's mean and variance, as kernels/layernorm.cpp.
template <class T>
__global__ void dx_kernel(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                          std::int64_t rows, std::int64_t cols) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float mu = mean[row], rs = rstd[row];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) {
    const float dxhat = to_float(dyr[c]) * to_float(gamma[c]);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * (to_float(xr[c]) - mu) * rs;
  }
  const auto features = static_cast<float>(cols);
  const float mean_dxhat = warp_sum(sum_dxhat) / features;
  const float mean_dxhat_xhat = warp_sum(sum_dxhat_xhat) / features;
  T* dxr = dx + row * cols;
  for (std::int64_t c = lane; c < cols; c += kWarpSize) {
    const float dxhat = to_float(dyr[c]) * to_float(gamma[c]);
    const float xhat = (to_float(xr[c]) - mu) * rs;
    dxr[c] = from_float<T>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// Pass 1 of dgamma = sum_rows dy * xhat and dbeta = sum_rows dy (column_partials.hpp).
template <class T>
__global__ void gamma_beta_partials_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                           float* dgamma_partials, float* dbeta_partials, std::int64_t rows,
                                           std::int64_t cols, std::int64_t rows_per_block) {
  __shared__ float scratch[kRowLanes][kColumnTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_block;
  const std::int64_t row_end = rows < row_begin + rows_per_block ? rows : row_begin + rows_per_block;
  float sum_gamma = 0.0f, sum_beta = 0.0f;
  if (col < cols) {
    for (std::int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const std::int64_t i = r * cols + col;
      const float g = to_float(dy[i]);
      sum_gamma += g * (to_float(x[i]) - mean[r]) * rstd[r];
      sum_beta += g;
    }
  }
  store_column_partial(sum_gamma, scratch, dgamma_partials, cols);
  store_column_partial(sum_beta, scratch, dbeta_partials, cols);
}

}  // namespace

template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, std::int64_t rows,
                       std::int64_t cols, float eps, cudaStream_t stream) {
  constexpr std::string_view op = "layernorm_forward";
  check_row_norm_shape(op, rows, cols);
  if (rows == 0) return;
  for (const auto& [p, name] : {std::pair<const void*, const char*>{x, "x"}, {gamma, "gamma"}, {beta, "beta"},
                                {y, "y"}, {mean, "mean"}, {rstd, "rstd"}})
    require_pointer(p, op, name);
  forward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(
      x, gamma, beta, y, mean, rstd, rows, cols, eps);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                        float* dgamma, float* dbeta, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr std::string_view op = "layernorm_backward";
  check_row_norm_shape(op, rows, cols);
  require_pointer(dgamma, op, "dgamma");
  require_pointer(dbeta, op, "dbeta");
  if (rows == 0) {  // empty sums
    sum_column_partials(nullptr, 0, cols, dgamma, stream);
    sum_column_partials(nullptr, 0, cols, dbeta, stream);
    return;
  }
  for (const auto& [p, name] : {std::pair<const void*, const char*>{dy, "dy"}, {x, "x"}, {gamma, "gamma"},
                                {mean, "mean"}, {rstd, "rstd"}, {dx, "dx"}})
    require_pointer(p, op, name);
  // The parameter gradients read dy before dx is written, so dx may alias dy.
  const RowBlocks blocks = row_blocks_for(rows);
  StreamBuffer<float> partials(static_cast<std::size_t>(2 * blocks.count * cols), stream);
  float* dgamma_partials = partials.data();
  float* dbeta_partials = partials.data() + blocks.count * cols;
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile), static_cast<unsigned>(blocks.count));
  gamma_beta_partials_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(
      dy, x, mean, rstd, dgamma_partials, dbeta_partials, rows, cols, blocks.rows_per_block);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  sum_column_partials(dgamma_partials, blocks.count, cols, dgamma, stream);
  sum_column_partials(dbeta_partials, blocks.count, cols, dbeta, stream);
  dx_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(dy, x, gamma, mean, rstd,
                                                                                         dx, rows, cols);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                                \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, float*, float*, std::int64_t, std::int64_t, \
                                     float, cudaStream_t);                                                     \
  template void layernorm_backward<T>(const T*, const T*, const T*, const float*, const float*, T*, float*,    \
                                      float*, std::int64_t, std::int64_t, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
