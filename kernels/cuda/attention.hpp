#pragma once
// Causal attention softmax(Q K^T / sqrt(d) + mask) V (Vaswani et al. 2017, eq. 1) on the GPU,
// computed directly (no tiling): the maths of kernels/attention.hpp for every (sequence, head)
// of a batch, saving only the per-row logsumexp as FlashAttention does (Dao et al. 2022).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// q, k, v, out: [batch_heads, seq, head_dim], one (sequence, head) after the other; row i of
// each attends to rows j <= i of the same (sequence, head). logsumexp: [batch_heads, seq] fp32,
// log sum_{j <= i} exp(q_i . k_j / sqrt(head_dim)). One block per query row, which keeps the
// row's seq scores in shared memory: seq is bounded by the device's shared memory per block
// (about 56 K keys on an H100/H200); longer rows throw std::invalid_argument.
template <class T>
void causal_attention_forward(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t batch_heads,
                              std::int64_t seq, std::int64_t head_dim, cudaStream_t stream);

// dq, dk, dv (shapes as q) from dout and what forward returned (out, logsumexp), as
// kernels/attention.cpp: P recomputed from logsumexp, D_i = rowsum(dout_i * out_i) (Dao et al.
// 2022, Appendix B.2), dS = P * (dP - D); masked pairs (j > i) are never read. Each dq row and
// each dk/dv row is written by one block, so there are no atomics and the result is
// deterministic.
template <class T>
void causal_attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out,
                               const float* logsumexp, T* dq, T* dk, T* dv, std::int64_t batch_heads,
                               std::int64_t seq, std::int64_t head_dim, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
