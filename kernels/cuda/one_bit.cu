#include "kernels/cuda/one_bit.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// The compress grid depends on count only (never on the device), so the order of the
// double-precision sum, and so its bits, is fixed by the input size.
constexpr std::int64_t kMaxBlocks = 1024;

__device__ __forceinline__ bool sign_bit(float x) { return (__float_as_uint(x) >> 31) != 0U; }

// compensated = grad + error, kept in error; each warp's 32 sign bits are one __ballot_sync,
// written as the low or high half of a 64-bit word (little-endian: 32-bit word 2w is the low
// half of word w, values 64w .. 64w + 31). Threads walk the padded range [0, 64 * words) so
// that the padding bits are written as 0; the loop bound is a multiple of 32 and the stride a
// multiple of the block, so whole warps enter each iteration. Each block writes the double
// sum of its |compensated| to partials[blockIdx.x].
template <class T>
__global__ void compensate_kernel(const T* grad, float* error, std::uint32_t* sign_halves, double* partials,
                                  std::int64_t count, std::int64_t padded) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  double abs_sum = 0.0;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kThreads; base < padded; base += stride) {
    const std::int64_t i = base + threadIdx.x;
    bool negative = false;
    if (i < count) {
      // Error feedback (Seide et al. 2014; Tang et al. 2021, Algorithm 1).
      const float c = to_float(grad[i]) + error[i];
      error[i] = c;
      abs_sum += fabs(static_cast<double>(c));
      negative = sign_bit(c);
    }
    const unsigned bits = __ballot_sync(kFullWarp, negative);
    if (lane == 0 && i < padded) sign_halves[i / kWarpSize] = bits;  // i is a multiple of 32 here
  }
  abs_sum = block_sum(abs_sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = abs_sum;
}

// One block: the partials in a fixed order, then the L1 scale ||x||_1 / d of Karimireddy et
// al. 2019 (EF-SignSGD, Algorithm 1), rounded once to fp32 as kernels/one_bit.cpp rounds it.
__global__ void scale_kernel(const double* partials, std::int64_t blocks, std::int64_t count, float* scale) {
  double sum = 0.0;
  for (std::int64_t b = threadIdx.x; b < blocks; b += kThreads) sum += partials[b];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *scale = static_cast<float>(sum / static_cast<double>(count));
}

// error = compensated - (+-scale), the residual the next step adds back.
__global__ void residual_kernel(float* error, const float* scale, std::int64_t count) {
  const float s = *scale;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float c = error[i];
    error[i] = c - (sign_bit(c) ? -s : s);
  }
}

template <class T>
__global__ void decompress_kernel(const std::uint64_t* sign_bits, const float* scale, T* out, std::int64_t count) {
  const float s = *scale;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const bool negative = ((sign_bits[i / 64] >> (i % 64)) & 1U) != 0U;
    out[i] = from_float<T>(negative ? -s : s);
  }
}

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

}  // namespace

template <class T>
void one_bit_compress(const T* grad, float* error, std::uint64_t* sign_bits, float* scale, std::int64_t count,
                      cudaStream_t stream) {
  constexpr std::string_view op = "one_bit_compress";
  require(count >= 0, op, "negative count " + std::to_string(count));
  require_pointer(scale, op, "scale");
  if (count == 0) {  // as the CPU: an empty gradient has scale 0
    MESHWORK_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), stream));
    return;
  }
  require_pointer(grad, op, "grad");
  require_pointer(error, op, "error");
  require_pointer(sign_bits, op, "sign_bits");
  const std::int64_t padded = 64 * one_bit_words(count);
  const unsigned blocks = blocks_for(padded);
  StreamBuffer<double> partials(blocks, stream);
  compensate_kernel<<<blocks, kThreads, 0, stream>>>(grad, error, reinterpret_cast<std::uint32_t*>(sign_bits),
                                                     partials.data(), count, padded);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  scale_kernel<<<1, kThreads, 0, stream>>>(partials.data(), blocks, count, scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  residual_kernel<<<blocks_for(count), kThreads, 0, stream>>>(error, scale, count);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void one_bit_decompress(const std::uint64_t* sign_bits, const float* scale, T* out, std::int64_t count,
                        cudaStream_t stream) {
  constexpr std::string_view op = "one_bit_decompress";
  require(count >= 0, op, "negative count " + std::to_string(count));
  if (count == 0) return;
  require_pointer(sign_bits, op, "sign_bits");
  require_pointer(scale, op, "scale");
  require_pointer(out, op, "out");
  decompress_kernel<<<blocks_for(count), kThreads, 0, stream>>>(sign_bits, scale, out, count);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                          \
  template void one_bit_compress<T>(const T*, float*, std::uint64_t*, float*, std::int64_t, cudaStream_t); \
  template void one_bit_decompress<T>(const std::uint64_t*, const float*, T*, std::int64_t, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
