#include "kernels/cuda/topk.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// |x| as an order-preserving key: for non-negative IEEE floats the bit patterns order as the
// values do. NaN maps to +inf's pattern, as kernels/topk.cpp ranks NaN as infinity; -0 and +0
// both map to 0.
__device__ __forceinline__ std::uint32_t magnitude_key(float x) {
  return isnan(x) ? 0x7f800000U : (__float_as_uint(x) & 0x7fffffffU);
}

// Error feedback (Lin et al. 2018, Algorithm 1): error becomes the compensated gradient; each
// value's key and its index are the radix sort's input.
template <class T>
__global__ void compensate_kernel(const T* grad, float* error, std::uint32_t* keys, std::int64_t* order,
                                  std::int64_t count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float c = to_float(grad[i]) + error[i];
    error[i] = c;
    keys[i] = magnitude_key(c);
    order[i] = i;
  }
}

// The k selected indices (distinct, ascending) send their compensated value and leave zero in
// the error: sent exactly, nothing of them remains.
__global__ void gather_kernel(const std::int64_t* selected, float* error, std::int64_t* indices, float* values,
                              std::int64_t k) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const std::int64_t i = selected[j];
    indices[j] = i;
    values[j] = error[i];
    error[i] = 0.0f;
  }
}

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

}  // namespace

template <class T>
void topk_compress(const T* grad, float* error, std::int64_t* indices, float* values, std::int64_t count,
                   std::int64_t k, cudaStream_t stream) {
  constexpr std::string_view op = "topk_compress";
  require(count >= 0 && k >= 0, op, "negative count " + std::to_string(count) + " or k " + std::to_string(k));
  require(k <= count, op, "k = " + std::to_string(k) + " exceeds the " + std::to_string(count) + " values");
  if (count == 0) return;
  require_pointer(grad, op, "grad");
  require_pointer(error, op, "error");
  if (k > 0) {
    require_pointer(indices, op, "indices");
    require_pointer(values, op, "values");
  }
  const auto n = static_cast<std::size_t>(count);
  StreamBuffer<std::uint32_t> keys(n, stream), sorted_keys(n, stream);
  StreamBuffer<std::int64_t> order(n, stream), sorted_order(n, stream);
  compensate_kernel<<<blocks_for(count), kThreads, 0, stream>>>(grad, error, keys.data(), order.data(), count);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  if (k == 0) return;
  // CUB's radix sort is stable (cub/device/device_radix_sort.cuh, "Stability"), and its
  // descending order keeps equal keys in input order: magnitude descending, then index
  // ascending, the strict total order of kernels/topk.cpp. Its first k are the selection.
  std::size_t sort_bytes = 0;
  MESHWORK_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, sort_bytes, keys.data(), sorted_keys.data(),
                                                                order.data(), sorted_order.data(), count, 0, 32,
                                                                stream));
  // The selected indices in ascending order: a sort of k non-negative int64 keys, into `order`
  // (free again once the pair sort has read it).
  std::size_t index_sort_bytes = 0;
  MESHWORK_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, index_sort_bytes, sorted_order.data(), order.data(), k,
                                                     0, 64, stream));
  StreamBuffer<unsigned char> scratch(std::max(sort_bytes, index_sort_bytes), stream);
  MESHWORK_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(scratch.data(), sort_bytes, keys.data(),
                                                                sorted_keys.data(), order.data(), sorted_order.data(),
                                                                count, 0, 32, stream));
  MESHWORK_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(scratch.data(), index_sort_bytes, sorted_order.data(),
                                                     order.data(), k, 0, 64, stream));
  gather_kernel<<<blocks_for(k), kThreads, 0, stream>>>(order.data(), error, indices, values, k);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void topk_compress<float>(const float*, float*, std::int64_t*, float*, std::int64_t, std::int64_t,
                                   cudaStream_t);
template void topk_compress<__nv_bfloat16>(const __nv_bfloat16*, float*, std::int64_t*, float*, std::int64_t,
                                           std::int64_t, cudaStream_t);

}  // namespace meshwork::kernels::cuda
