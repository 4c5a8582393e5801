#pragma once
// A tiled causal attention forward in the manner of FlashAttention (Dao et al. 2022,
// Algorithm 1): query tiles stay in shared memory while key/value tiles stream through it,
// with the online softmax rescaling the running output, so the [seq, seq] scores never exist.
// Same inputs, outputs and maths as causal_attention_forward (attention.hpp); backward is that
// file's causal_attention_backward, which needs only out and logsumexp.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// The largest head_dim the kernel's registers hold (4 output features per lane).
constexpr std::int64_t kFlashMaxHeadDim = 128;

// q, k, v, out: [batch_heads, seq, head_dim] with head_dim <= kFlashMaxHeadDim; logsumexp:
// [batch_heads, seq] fp32. Row i depends on q_i and on k_j, v_j for j <= i only.
template <class T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t batch_heads,
                             std::int64_t seq, std::int64_t head_dim, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
