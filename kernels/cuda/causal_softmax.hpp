#pragma once
// The scaled causal softmax between the two batched GEMMs of attention's fast path (the
// backend computes S = Q K^T and O = P V with cuBLAS): P = softmax(scale * S) over j <= i of
// each row i, with the causal mask of kernels/attention.hpp (Vaswani et al. 2017, eq. 1).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// scores, probs: `batch` matrices [seq, seq], one after the other. Row i of each:
// probs_ij = exp(scale s_ij - m_i) / sum_{k <= i} exp(scale s_ik - m_i) for j <= i, with m_i the
// row's maximum (NaN if any visible score is NaN), and exactly 0 for j > i: the masked scores
// never reach the output (the bf16 row kernels load those that share a 16-byte vector with
// visible ones, and drop them). probs may alias scores.
//
// block_rows > 0 (a divisor of seq): the causal GEMMs of exec/cuda/materialised_attention
// compute row i only to the end of its block of block_rows rows, so the scores past it are not
// there. The kernels never read a masked score, and write row i's zeros only to that block's
// end (at least: a 16-byte vector may carry a few more); the columns past it are left as they
// were. 0: the whole row is written.
template <class T>
void causal_softmax_forward(const T* scores, T* probs, std::int64_t batch, std::int64_t seq, float scale,
                            cudaStream_t stream, std::int64_t block_rows = 0);

// dscores_ij = scale * P_ij * (dP_ij - sum_{k <= i} dP_ik P_ik) for j <= i and exactly 0 for
// j > i (the masked dP, which no output depends on, never reach it). dscores may alias dprobs.
// block_rows as for the forward.
template <class T>
void causal_softmax_backward(const T* dprobs, const T* probs, T* dscores, std::int64_t batch, std::int64_t seq,
                             float scale, cudaStream_t stream, std::int64_t block_rows = 0);

}  // namespace meshwork::kernels::cuda
