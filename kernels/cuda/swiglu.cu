#include "kernels/cuda/swiglu.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

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

// bf16 with cols a multiple of 8 and 16-byte aligned tensors: one block per row, 16-byte
// vectors (8 elements) per access and no 64-bit division per element; the same arithmetic per
// element as the kernels above, so the same bits. The element-wise kernels ran at about a third
// of the H200's memory bandwidth (first GPU check, 2026-12-04).
constexpr int kVec = 8;

struct Vec8 {
  float v[kVec];
};

__device__ __forceinline__ Vec8 load8(const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Vec8 out;
#pragma unroll
  for (int e = 0; e < kVec / 2; ++e) {
    const float2 f = __bfloat1622float2(h[e]);
    out.v[2 * e] = f.x;
    out.v[2 * e + 1] = f.y;
  }
  return out;
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const Vec8& in) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < kVec / 2; ++e) h[e] = __floats2bfloat162_rn(in.v[2 * e], in.v[2 * e + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__global__ void forward_rows_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* y, std::int64_t cols) {
  const std::int64_t r = blockIdx.x;
  const __nv_bfloat16* gate_row = gate_up + r * 2 * cols;
  for (std::int64_t c = static_cast<std::int64_t>(threadIdx.x) * kVec; c < cols; c += static_cast<std::int64_t>(blockDim.x) * kVec) {
    const Vec8 gate = load8(gate_row + c), up = load8(gate_row + cols + c);
    Vec8 out;
#pragma unroll
    for (int e = 0; e < kVec; ++e) out.v[e] = gate.v[e] * sigmoid(gate.v[e]) * up.v[e];
    store8(y + r * cols + c, out);
  }
}

__global__ void backward_rows_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* gate_up, __nv_bfloat16* dgate_up, std::int64_t cols) {
  const std::int64_t r = blockIdx.x;
  for (std::int64_t c = static_cast<std::int64_t>(threadIdx.x) * kVec; c < cols; c += static_cast<std::int64_t>(blockDim.x) * kVec) {
    const std::int64_t gate_at = r * 2 * cols + c, up_at = gate_at + cols;
    const Vec8 gate = load8(gate_up + gate_at), up = load8(gate_up + up_at), g = load8(dy + r * cols + c);
    Vec8 dgate, dup;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float sg = sigmoid(gate.v[e]);
      dgate.v[e] = g.v[e] * up.v[e] * (sg + gate.v[e] * sg * (1.0f - sg));
      dup.v[e] = g.v[e] * gate.v[e] * sg;
    }
    store8(dgate_up + gate_at, dgate);
    store8(dgate_up + up_at, dup);
  }
}

template <class T>
bool row_vectors(std::int64_t rows, std::int64_t cols, std::initializer_list<const void*> pointers) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return false;
  } else {
    if (cols % kVec != 0 || rows > 0x7fffffff) return false;
    for (const void* p : pointers)
      if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    return true;
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
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (row_vectors<T>(rows, cols, {gate_up, y})) {
      forward_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(gate_up, y, cols);
      MESHWORK_CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
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
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (row_vectors<T>(rows, cols, {dy, gate_up, dgate_up})) {
      backward_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dy, gate_up, dgate_up, cols);
      MESHWORK_CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
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
