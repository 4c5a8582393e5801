#pragma once
// Bias add fused with GeLU, tanh approximation (Hendrycks & Gimpel 2016, §2), on the GPU: the
// maths of kernels/gelu.hpp, computed in fp32 for float and bf16 tensors.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// y = gelu(x + bias), bias one value per column (nullptr: no bias). x, y: [rows, cols]; y may
// alias x.
template <class T>
void bias_gelu_forward(const T* x, const T* bias, T* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// dx = dy * gelu'(x + bias) (the derivative of the same tanh form); dbias (nullable, [cols],
// overwritten) = the column sums of dx, in fp32 before dx is rounded to T, summed in a fixed
// order (column_partials.hpp). dx may alias dy.
template <class T>
void bias_gelu_backward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, std::int64_t rows,
                        std::int64_t cols, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
