#pragma once
// Warp and block reductions in a fixed order (xor butterflies, then warp 0 over the warps'
// results), so a kernel's result depends only on its launch shape, never on scheduling: the
// same inputs and shapes give the same bits on every run. No atomics.

#include <cuda_runtime.h>

#include <cmath>

namespace meshwork::kernels::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffU;

struct SumOp {
  template <class V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};

// max that propagates NaN (fmaxf drops it): a NaN score must reach the softmax's output, as
// Eigen's maxCoeff<PropagateNaN> makes it in the CPU references.
__device__ __forceinline__ float nan_max(float a, float b) { return (isnan(a) || a > b) ? a : b; }

struct NanMaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return nan_max(a, b); }
};

// The reduction of v over the 32 lanes, returned to every lane. Every lane of the warp must
// call it (full mask). a + b == b + a in IEEE arithmetic, so every lane gets the same bits.
template <class V, class Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

template <class V>
__device__ __forceinline__ V warp_sum(V v) {
  return warp_reduce(v, SumOp{});
}

// The reduction of v over the block, returned to every thread. blockDim.x must be a multiple
// of 32 (at most 1024) and blockDim.y == blockDim.z == 1; every thread must call it, and it
// synchronises the block (so it cannot sit in divergent code).
template <class V, class Op>
__device__ V block_reduce(V v, Op op, V identity) {
  __shared__ V warp_results[kWarpSize];
  __shared__ V result;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // every thread has read the previous call's `result`
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x) / kWarpSize;
    V w = lane < warps ? warp_results[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

template <class V>
__device__ V block_sum(V v) {
  return block_reduce(v, SumOp{}, V(0));
}

__device__ inline float block_nan_max(float v) { return block_reduce(v, NanMaxOp{}, -INFINITY); }

}  // namespace meshwork::kernels::cuda
