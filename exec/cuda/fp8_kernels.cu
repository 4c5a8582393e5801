#include "exec/cuda/fp8_kernels.hpp"

#include <cfloat>
#include <string>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;  // the transposing cast's tile: 32 x 32 values through shared memory

unsigned blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

// The largest |x| of the block, folded into *amax by atomicMax on the float's bits: for
// non-negative floats (and NaN's positive patterns, above +inf) the bit patterns order as the
// values do.
__global__ void amax_kernel(const __nv_bfloat16* x, std::int64_t n, float* amax) {
  __shared__ float part[kThreads];
  float m = 0.0F;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = fabsf(__bfloat162float(x[i]));
    m = (v > m || v != v) ? v : m;  // NaN wins
  }
  part[threadIdx.x] = m;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) {
      const float o = part[threadIdx.x + s];
      if (o > part[threadIdx.x] || o != o) part[threadIdx.x] = o;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(fabsf(part[0])));
}

// The quantising factor from the amax: 448 / amax, 1 for an all-zero tensor (any factor gives
// zeros), NaN for a NaN amax. An amax below 448 / FLT_MAX (denormal inputs) would make the
// factor infinite and 0 x inf a NaN: the factor is held at FLT_MAX there, so those values cast
// to what they round to and the step stays finite. An infinite amax gives 0 (every finite value
// becomes 0, the infinite ones NaN): the loss check sees that step as bad, as it would in bf16.
__device__ __forceinline__ float quant_factor(float amax) {
  if (amax == 0.0F) return 1.0F;
  const float q = kE4m3Max / amax;
  return isinf(q) ? FLT_MAX : q;
}

// The dequantising factor is the quantising one's inverse, so that the two always agree
// (1 for zero, NaN for NaN, 1 / FLT_MAX where the factor was held).
__global__ void dequant_kernel(float* scales) { scales[kFp8DequantSlot] = 1.0F / quant_factor(scales[0]); }

__global__ void cast_kernel(const __nv_bfloat16* x, std::int64_t n, const float* scales, __nv_fp8_e4m3* out) {
  const float q = quant_factor(scales[0]);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = __nv_fp8_e4m3(__bfloat162float(x[i]) * q);  // the constructor rounds to nearest, saturating to +-448
  }
}

// One 32 x 32 tile of x through shared memory, so that both the reads of x's rows and the
// writes of out's rows (x's columns) are coalesced. Block: 32 x 8 threads.
__global__ void cast_transposed_kernel(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const float* scales, __nv_fp8_e4m3* out) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the column reads
  const float q = quant_factor(scales[0]);
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kTile, c0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  for (int i = static_cast<int>(threadIdx.y); i < kTile; i += static_cast<int>(blockDim.y)) {
    const std::int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = __bfloat162float(x[r * cols + c]);
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.y); i < kTile; i += static_cast<int>(blockDim.y)) {
    const std::int64_t c = c0 + i, r = r0 + threadIdx.x;  // out[c][r] = x[r][c]
    if (r < rows && c < cols) out[c * rows + r] = __nv_fp8_e4m3(tile[threadIdx.x][i] * q);
  }
}

}  // namespace

void quantize_e4m3(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, bool transpose, __nv_fp8_e4m3* out, float* scales, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  MESHWORK_CUDA_CHECK(cudaMemsetAsync(scales, 0, sizeof(float), stream));
  if (n == 0) {
    dequant_kernel<<<1, 1, 0, stream>>>(scales);
    MESHWORK_CUDA_CHECK(cudaGetLastError());
    return;
  }
  amax_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, scales);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  dequant_kernel<<<1, 1, 0, stream>>>(scales);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  if (!transpose) {
    cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, scales, out);
  } else {
    if ((rows + kTile - 1) / kTile > 65535) throw kernels::cuda::CudaError("quantize_e4m3: " + std::to_string(rows) + " rows to transpose, more than the grid's 65535 tiles of 32");
    const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
    cast_transposed_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(x, rows, cols, scales, out);
  }
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshwork::exec::cuda
