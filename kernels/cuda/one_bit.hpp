#pragma once
// 1-bit compression with error feedback (Seide et al. 2014; Tang et al. 2021, Algorithm 1) on
// the GPU, with the conventions of kernels/one_bit.hpp: bit i % 64 of word i / 64 is the sign
// bit of compensated value i (1 = negative, -0 negative), the scale is mean |compensated|, and
// error = compensated - decompressed. The error buffer is fp32 whatever the gradient type, so
// what bf16 could not hold is not lost from the feedback.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// 64-bit words needed for count sign bits.
constexpr std::int64_t one_bit_words(std::int64_t count) { return (count + 63) / 64; }

// grad: [count] (T widened exactly to fp32); error: [count] fp32, zeros on the first step,
// updated in place; sign_bits: [one_bit_words(count)], overwritten, unused high bits of the
// last word 0; scale: one fp32 on the device. scale = (float)(sum_i |compensated_i| / count),
// the sum taken in double in a fixed order (per-thread strides, then fixed trees), so it is
// the same bits on every run; it differs from the CPU's sequential double sum by at most
// ~count * 2^-53 relative, far below fp32's 2^-24 rounding step, so the fp32 scale equals the
// CPU's unless the exact mean lies within that distance of a rounding boundary. A NaN makes the
// scale NaN.
template <class T>
void one_bit_compress(const T* grad, float* error, std::uint64_t* sign_bits, float* scale, std::int64_t count,
                      cudaStream_t stream);

// out[i] = -scale if sign bit i is set, else +scale (rounded to T); out: [count].
template <class T>
void one_bit_decompress(const std::uint64_t* sign_bits, const float* scale, T* out, std::int64_t count,
                        cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
