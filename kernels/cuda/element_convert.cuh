#pragma once
// Loads and stores of the element types the kernels are instantiated for. Kernels compute in
// fp32: a bf16 value widens exactly (its 8-bit significand fits fp32's 24), and a result is
// rounded to bf16 once, to nearest even (__float2bfloat16), when it is stored.

#include <cuda_bf16.h>

namespace meshwork::kernels::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);  // round to nearest even; NaN stays NaN
}

}  // namespace meshwork::kernels::cuda
