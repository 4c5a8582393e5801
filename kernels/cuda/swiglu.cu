#include "kernels/cuda/swiglu.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"

namespace meshwork::kernels::cuda {
namespace {

// exp(-z) overflows to inf for very negative z and 1 / inf = 0: no NaN from range alone.
__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// One thread per output element (r, c): gate at gate_up[r, c], up at gate_up[r, cols + c].
template <class T>
__global__ void forward_kernel(const T* gate_up, T* y, std::int64_t n, std::int64_t cols) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t r = i / cols, c = i % cols;
    const float gate = to_float(gate_up[r * 2 * cols + c]);
    const float up = to_float(gate_up[r * 2 * cols + cols + c]);
    // Swish with beta = 1 (SiLU, Elfwing et al. 2018), as Shazeer 2020 §2 defines SwiGLU.
    y[i] = from_float<T>(gate * sigmoid(gate) * up);
  }
}

template <class T>
__global__ void backward_kernel(const T* dy, const T* gate_up, T* dgate_up, std::int64_t n, std::int64_t cols) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t r = i / cols, c = i % cols;
    const std::int64_t gate_at = r * 2 * cols + c, up_at = gate_at + cols;
    const float gate = to_float(gate_up[gate_at]);
    const float up = to_float(gate_up[up_at]);
    const float g = to_float(dy[i]);
    const float s = sigmoid(gate);
    // d silu(g)/dg = s + g s (1 - s), as kernels/swiglu.cpp.
    dgate_up[gate_at] = from_float<T>(g * up * (s + gate * s * (1.0f - s)));
    dgate_up[up_at] = from_float<T>(g * gate * s);
  }
}

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
}

}  // namespace

template <class T>
void swiglu_forward(const T* gate_up, T* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  constexpr std::string_view op = "swiglu_forward";
  require(rows >= 0 && cols >= 0, op, "negative shape " + shape_of(rows, cols));
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  require_pointer(gate_up, op, "gate_up");
  require_pointer(y, op, "y");
  forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate_up, y, n, cols);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void swiglu_backward(const T* dy, const T* gate_up, T* dgate_up, std::int64_t rows, std::int64_t cols,
                     cudaStream_t stream) {
  constexpr std::string_view op = "swiglu_backward";
  require(rows >= 0 && cols >= 0, op, "negative shape " + shape_of(rows, cols));
  const std::int64_t n = rows * cols;
  if (n == 0) return;
  require_pointer(dy, op, "dy");
  require_pointer(gate_up, op, "gate_up");
  require_pointer(dgate_up, op, "dgate_up");
  backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, gate_up, dgate_up, n, cols);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void swiglu_forward<float>(const float*, float*, std::int64_t, std::int64_t, cudaStream_t);
template void swiglu_forward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, std::int64_t, std::int64_t,
                                            cudaStream_t);
template void swiglu_backward<float>(const float*, const float*, float*, std::int64_t, std::int64_t, cudaStream_t);
template void swiglu_backward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                             std::int64_t, std::int64_t, cudaStream_t);

}  // namespace meshwork::kernels::cuda
