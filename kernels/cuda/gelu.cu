#include "kernels/cuda/gelu.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

// Hendrycks & Gimpel 2016 §2: gelu(z) ~= 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// Evaluated through 0.5 (1 + tanh(u)) = sigmoid(2u), which is the same function without the
// cancellation of 1 + tanh(u) where tanh(u) is near -1: there fp32's tanh, one ulp of 1 off,
// left a small gelu(z) 0.6% off (z near -4: BiasGelu [1, 1] on the first GPU
// check, 2026-12-04). kernels/gelu.cpp writes the tanh form, exact in the
// double it is checked in.
__device__ __forceinline__ float gelu_inner(float z) { return kSqrt2OverPi * (z + kCubic * z * z * z); }

__device__ __forceinline__ float gelu(float z) { return z / (1.0f + expf(-2.0f * gelu_inner(z))); }

// d gelu / dz of the same approximation: 0.5 (1 + t) + 0.5 z (1 - t^2) u' with t = tanh(u), which
// is s + 2 z s (1 - s) u' for s = sigmoid(2u); 1 - s is sigmoid(-2u), computed as such (no
// cancellation on either tail, and no inf / inf where exp overflows).
__device__ __forceinline__ float gelu_derivative(float z) {
  const float u = gelu_inner(z);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  const float s_neg = 1.0f / (1.0f + expf(2.0f * u));
  const float dinner_dz = kSqrt2OverPi * (1.0f + 3.0f * kCubic * z * z);
  return s + 2.0f * z * s * s_neg * dinner_dz;
}

template <class T>
__device__ __forceinline__ float bias_at(const T* bias, std::int64_t col) {
  return bias == nullptr ? 0.0f : to_float(bias[col]);
}

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this

template <class T>
__global__ void forward_kernel(const T* x, const T* bias, T* y, std::int64_t n, std::int64_t cols) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_float<T>(gelu(to_float(x[i]) + bias_at(bias, i % cols)));
}

// A (kColumnTile x kRowLanes) block covers 32 columns of rows [row_begin, row_end); it writes
// dx and, when partials is non-null, the block's fp32 column sums of dx.
template <class T>
__global__ void backward_kernel(const T* dy, const T* x, const T* bias, T* dx, float* partials,
                                std::int64_t rows, std::int64_t cols, std::int64_t rows_per_block) {
  __shared__ float scratch[kRowLanes][kColumnTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_block;
  const std::int64_t row_end = rows < row_begin + rows_per_block ? rows : row_begin + rows_per_block;
  float sum = 0.0f;
  if (col < cols) {
    const float b = bias_at(bias, col);
    for (std::int64_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const std::int64_t i = r * cols + col;
      const float g = to_float(dy[i]) * gelu_derivative(to_float(x[i]) + b);
      dx[i] = from_float<T>(g);
      sum += g;
    }
  }
  if (partials != nullptr) store_column_partial(sum, scratch, partials, cols);  // block-uniform branch
}

void check_shape(std::string_view op, std::int64_t rows, std::int64_t cols) {
  require(rows >= 0 && cols >= 0, op, "negative shape " + shape_of(rows, cols));
}

}  // namespace

template <class T>
void bias_gelu_forward(const T* x, const T* bias, T* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr std::string_view op = "bias_gelu_forward";
  check_shape(op, rows, cols);
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  require_pointer(x, op, "x");
  require_pointer(y, op, "y");
  const auto blocks = static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
  forward_kernel<<<blocks, kThreads, 0, stream>>>(x, bias, y, n, cols);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void bias_gelu_backward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, std::int64_t rows,
                        std::int64_t cols, cudaStream_t stream) {
  constexpr std::string_view op = "bias_gelu_backward";
  check_shape(op, rows, cols);
  if (cols == 0) return;
  if (rows == 0) {  // no rows: dbias is an empty sum
    if (dbias != nullptr) sum_column_partials(nullptr, 0, cols, dbias, stream);
    return;
  }
  require_pointer(dy, op, "dy");
  require_pointer(x, op, "x");
  require_pointer(dx, op, "dx");
  const RowBlocks blocks = row_blocks_for(rows);
  const std::int64_t column_tiles = (cols + kColumnTile - 1) / kColumnTile;
  require_grid_fits(column_tiles, op, "x " + shape_of(rows, cols));
  StreamBuffer<float> partials(dbias == nullptr ? 0 : static_cast<std::size_t>(blocks.count * cols), stream);
  const dim3 grid(static_cast<unsigned>(column_tiles), static_cast<unsigned>(blocks.count));
  backward_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(dy, x, bias, dx, partials.data(), rows, cols,
                                                                     blocks.rows_per_block);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  if (dbias != nullptr) sum_column_partials(partials.data(), blocks.count, cols, dbias, stream);
}

#define MESHWORK_INSTANTIATE(T)                                                                          \
  template void bias_gelu_forward<T>(const T*, const T*, T*, std::int64_t, std::int64_t, cudaStream_t); \
  template void bias_gelu_backward<T>(const T*, const T*, const T*, T*, float*, std::int64_t, std::int64_t, \
                                      cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
