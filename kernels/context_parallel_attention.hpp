#pragma once
// Causal attention under context parallelism (ring attention: Liu et al. 2023, "Ring Attention
// with Blockwise Transformers", §3; Megatron-core's context parallelism). Each member of a CP
// group holds a share of every sequence; its queries attend to the key/value blocks of every
// member, visited one block at a time in ring order and merged with the online softmax
// (Milakov & Gimelshein 2018; FlashAttention's rescaling, Dao et al. 2022 Algorithm 1), so no
// member ever holds a whole sequence's scores. The causal mask compares global positions: a
// query at position p sees keys at positions <= p, whoever holds them.
//
// Megatron's causal load balancing: the sequence is cut into 2 * CP chunks and member r holds
// chunks r and 2 * CP - 1 - r, so that every member has as many unmasked scores to compute
// (an early chunk with little history paired with a late one with much).
//
// Layout as kernels/multi_head_attention.hpp: rows are the tokens of `samples` sequences one
// after the other, columns the heads side by side. A block's rows are its own positions'
// tokens of each sample: [samples * positions.size(), heads * head_dim].

#include <span>
#include <vector>

#include "kernels/multi_head_attention.hpp"

namespace meshwork::kernels {

// The global positions member `rank` of a CP group of `cp` holds, in the order its rows are
// laid out: with `load_balance`, chunk rank then chunk 2 cp - 1 - rank, of seq / (2 cp)
// positions each; without, the contiguous chunk rank of seq / cp. Throws
// std::invalid_argument unless the chunks divide seq and 0 <= rank < cp.
std::vector<Index> context_parallel_positions(Index seq, Index cp, Index rank, bool load_balance = true);

template <class T>
struct BlockwiseAttentionGrads {
  Mat<T> dq;                // as q
  std::vector<Mat<T>> dk;   // per block, as that block's k
  std::vector<Mat<T>> dv;   // per block, as that block's v
};

// q: [samples * q_pos.size(), heads * head_dim], row s * q_pos.size() + i at position q_pos[i];
// k[b], v[b]: block b, [samples * k_pos[b].size(), heads * head_dim]. Blocks are merged in
// the order given (the ring's: this member's own first). Returns the output and the per-row,
// per-head logsumexp over every visible key, as multi_head_causal_attention_forward does.
template <class T>
MultiHeadAttentionForward<T> blockwise_causal_attention_forward(const Mat<T>& q, std::span<const Index> q_pos, std::span<const Mat<T>> k,
                                                                std::span<const Mat<T>> v, std::span<const std::vector<Index>> k_pos, Index num_heads);

// The gradients: of q, and of each block's k and v (this member's contribution; the block's
// owner sums those of every member).
template <class T>
BlockwiseAttentionGrads<T> blockwise_causal_attention_backward(const Mat<T>& dout, const Mat<T>& q, std::span<const Index> q_pos, std::span<const Mat<T>> k,
                                                               std::span<const Mat<T>> v, std::span<const std::vector<Index>> k_pos, const Mat<T>& out,
                                                               const Mat<T>& logsumexp, Index num_heads);

}  // namespace meshwork::kernels
