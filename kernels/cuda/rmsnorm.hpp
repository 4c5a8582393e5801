#pragma once
// Root-mean-square normalisation (Zhang & Sennrich 2019, eq. 4) on the GPU: the maths of
// kernels/rmsnorm.hpp (eps inside the root), fp32 statistics, one warp per row.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// x, y: [rows, cols]; gamma: [cols]. y = gamma * x * rstd, rstd = 1 / sqrt(mean(x^2) + eps):
// [rows] fp32, saved for backward.
template <class T>
void rmsnorm_forward(const T* x, const T* gamma, T* y, float* rstd, std::int64_t rows, std::int64_t cols, float eps,
                     cudaStream_t stream);

// dx: [rows, cols]; dgamma = sum_rows dy * x * rstd: [cols] fp32, overwritten, summed in a
// fixed order (column_partials.hpp). dx may alias dy.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* gamma, const float* rstd, T* dx, float* dgamma,
                      std::int64_t rows, std::int64_t cols, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
