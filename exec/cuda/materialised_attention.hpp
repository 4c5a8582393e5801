#pragma once
// Causal attention with the [seq, seq] probabilities in memory, for long sequences where
// cuBLAS's batched GEMMs outrun the direct kernels: S = Q K^T and O = P V as bf16 strided-batched
// GEMMs (Gemm::matmul_batched, fp32 accumulation), between them
// kernels::cuda::causal_softmax_forward (P = softmax(scale * S) with the causal mask; Vaswani
// et al. 2017, eq. 1). Backward (the chain rule through the same three steps, as Megatron-LM's
// unfused "core attention" does): dP = dO V^T, dV = P^T dO, dS = causal_softmax_backward(P, dP),
// dQ = dS K, dK = dS^T Q.
//
// The scale 1/sqrt(head_dim) is applied inside the softmax kernels, not by the GEMMs: S holds the
// raw products q_i . k_j, and causal_softmax_backward's dS is the gradient with respect to those
// raw products (it already carries the scale), so dQ and dK take it with alpha = 1.
//
// Precision: S, P, dP and dS are bf16 (the softmax kernels read and write one type); the softmax
// itself and the GEMMs accumulate in fp32.
//
// The causal mask in the products: with row_blocks = b > 1 the sequence is cut into b blocks of
// t = seq / b rows, and each product runs per block over what the mask leaves: query block i
// against keys [0, (i + 1) t) (S, dP, O, dQ), key block j against queries [j t, seq) (dV, dK).
// That is (b + 1) / 2b of the whole products' work (56% for b = 8) and of their traffic through
// S, P, dP and dS; the rest of the [seq, seq] tensors is never written nor read. Inside the
// diagonal blocks the masked entries are computed, and P and dS are exactly 0 there (the
// softmax kernels write zeros to each block's end), so O, dV, dQ and dK get nothing from them.
// With b = 1 the whole products run.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/gemm.hpp"

namespace meshwork::exec::cuda {

// Bytes of one [batch_heads, seq, seq] bf16 probability (or score-gradient) tensor.
[[nodiscard]] std::size_t materialised_attention_probs_bytes(std::int64_t batch_heads,
                                                             std::int64_t seq);

// The row blocks the backend uses for `seq`: the most, up to kMostCausalRowBlocks, halving
// while the blocks keep at least kLeastCausalBlockRows rows, a multiple of 8 (1: seq does not
// divide so). Chosen, not measured: blocks of 256 rows or more (512 at seq 4,096) keep each
// product of a long sequence with 32 heads big enough to fill an H200, and 8 blocks leave 56% of
// the work where 16 would leave 53%.
inline constexpr std::int64_t kMostCausalRowBlocks = 8;
inline constexpr std::int64_t kLeastCausalBlockRows = 256;
[[nodiscard]] std::int64_t causal_row_blocks(std::int64_t seq);

// q, k, v, out: [batch_heads, seq, head_dim], one (sequence, head) after the other (with GQA,
// k and v already expanded to one copy per query head). probs: [batch_heads, seq, seq], written
// here (each row to its block's end) and kept by the caller for backward.
void materialised_attention_forward(Gemm& gemm, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                    const __nv_bfloat16* v, __nv_bfloat16* probs,
                                    __nv_bfloat16* out, std::int64_t batch_heads, std::int64_t seq,
                                    std::int64_t head_dim, cudaStream_t stream,
                                    std::int64_t row_blocks = 1);

// dq, dk, dv (shapes as q) from dout and forward's probs; scratch: [batch_heads, seq, seq], its
// contents overwritten (dP, then dS in place). Per (sequence, head): dk and dv of that head's
// own copy of the keys and values; the caller sums a GQA group's heads. row_blocks as for the
// forward (the same number: probs is read where the forward wrote it).
void materialised_attention_backward(Gemm& gemm, const __nv_bfloat16* dout, const __nv_bfloat16* q,
                                     const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     const __nv_bfloat16* probs, __nv_bfloat16* scratch,
                                     __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                     std::int64_t batch_heads, std::int64_t seq,
                                     std::int64_t head_dim, cudaStream_t stream,
                                     std::int64_t row_blocks = 1);

}  // namespace meshwork::exec::cuda
