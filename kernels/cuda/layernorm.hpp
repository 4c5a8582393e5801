#pragma once
// Layer normalisation (Ba, Kiros & Hinton 2016, eqs. 3-4) with a per-feature gain and bias, on
// the GPU: the maths of kernels/layernorm.hpp (two-pass variance, eps inside the root), fp32
// statistics, one warp per row.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// x, y: [rows, cols]; gamma, beta: [cols]. y = gamma * (x - mean) * rstd + beta per row, with
// rstd = 1 / sqrt(mean((x - mean)^2) + eps). mean, rstd: [rows] fp32, saved for backward.
template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, std::int64_t rows,
                       std::int64_t cols, float eps, cudaStream_t stream);

// dx: [rows, cols] from dy and what forward saved; dgamma = sum_rows dy * xhat and dbeta =
// sum_rows dy, [cols] fp32, overwritten, summed in a fixed order (column_partials.hpp).
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                        float* dgamma, float* dbeta, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
