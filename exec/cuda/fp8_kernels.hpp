#pragma once
// FP8 (e4m3) quantisation for the CUDA chunk's FP8 GEMMs, with per-tensor "current scaling"
// (Transformer Engine's Float8CurrentScaling recipe: each tensor scaled by its own amax at the
// time of the cast, rather than by a history of past amaxes as DelayedScaling does): the
// tensor's largest magnitude maps to e4m3's largest finite value, 448 (Micikevicius et al. 2022,
// "FP8 Formats for Deep Learning", Table 1), and the GEMM multiplies the scale back out
// (Gemm::matmul_fp8's a_scale and b_scale).
//
// Everything stays on the device and in stream order: the amax is reduced by atomicMax on the
// float's bits (non-negative floats order as their bit patterns), which no scheduling changes,
// so a cast is deterministic.

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::exec::cuda {

// e4m3's largest finite magnitude (Micikevicius et al. 2022, Table 1: S.1111.110 = 448).
inline constexpr float kE4m3Max = 448.0F;

// Where one cast keeps its two scalars: scales[0] the tensor's amax, scales[kFp8DequantSlot]
// the factor that turns the e4m3 values back into the tensor's (amax / 448; 1 for an all-zero
// tensor). The slots are 16 bytes apart, so that each is as aligned as its allocation (cuBLASLt
// wants 16-byte aligned scale pointers: exec/cuda/gemm.hpp). A caller allocates
// kFp8ScaleFloats floats.
inline constexpr int kFp8DequantSlot = 4;
inline constexpr int kFp8ScaleFloats = 8;

// out = e4m3(x * 448 / amax(x)), saturating (__NV_SATFINITE), x [rows, cols] row-major; out
// [rows, cols], or [cols, rows] (x's transpose) when `transpose`. A NaN in x makes the amax NaN
// and every output NaN: the loss check sees it. `scales` as above (overwritten).
void quantize_e4m3(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, bool transpose, __nv_fp8_e4m3* out, float* scales, cudaStream_t stream);

}  // namespace meshwork::exec::cuda
