#pragma once
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", §2): silu(x W) * (x V). The caller
// computes both projections as one GEMM into [tokens, 2 * ffn]; this op applies the gate.

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

// gate_up: [tokens, 2 * ffn]; columns [0, ffn) are the gate (x W, through silu), columns
// [ffn, 2 * ffn) are the up projection (x V), the order of Megatron-LM's torch.chunk(x, 2).
// Returns silu(gate) * up: [tokens, ffn].
template <class T>
Mat<T> swiglu_forward(const Mat<T>& gate_up);

// The gradient of gate_up, [tokens, 2 * ffn] in the same gate|up layout, from dy [tokens, ffn].
// Recomputes silu from gate_up; forward saves nothing else.
template <class T>
Mat<T> swiglu_backward(const Mat<T>& dy, const Mat<T>& gate_up);

}  // namespace meshwork::kernels
