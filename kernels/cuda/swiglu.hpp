#pragma once
// SwiGLU (Shazeer 2020, §2) on the GPU: the maths and the [gate | up] layout of
// kernels/swiglu.hpp, computed in fp32 for float and bf16 tensors.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// gate_up: [rows, 2 * cols], columns [0, cols) the gate and [cols, 2 * cols) the up
// projection of each row; y = silu(gate) * up: [rows, cols].
template <class T>
void swiglu_forward(const T* gate_up, T* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// dgate_up: [rows, 2 * cols] in the same gate | up layout, from dy: [rows, cols]. dgate_up may
// alias gate_up (each thread reads its gate and up before writing both).
template <class T>
void swiglu_backward(const T* dy, const T* gate_up, T* dgate_up, std::int64_t rows, std::int64_t cols,
                     cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
