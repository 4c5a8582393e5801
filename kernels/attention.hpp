#pragma once
// The core of causal self-attention for one (sequence, head): softmax(Q K^T / sqrt(d) + mask) V
// (Vaswani et al. 2017, eq. 1) with the decoder's causal mask. Like FlashAttention (Dao et al.
// 2022), forward saves only the per-row logsumexp and backward recomputes the probabilities,
// so a CUDA kernel of either kind can be tested against these.

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
struct AttentionForward {
  Mat<T> out;        // [seq, head_dim_v]
  Vec<T> logsumexp;  // [seq]: log sum_{j <= i} exp(q_i . k_j / sqrt(d)), saved for backward
};

template <class T>
struct AttentionGrads {
  Mat<T> dq;  // shapes as q, k, v
  Mat<T> dk;
  Mat<T> dv;
};

// q, k: [seq, head_dim]; v: [seq, head_dim_v]. Row i attends to rows j <= i.
template <class T>
AttentionForward<T> causal_attention_forward(const Mat<T>& q, const Mat<T>& k, const Mat<T>& v);

// dout: [seq, head_dim_v]; out and logsumexp: what forward returned.
template <class T>
AttentionGrads<T> causal_attention_backward(const Mat<T>& dout, const Mat<T>& q, const Mat<T>& k,
                                            const Mat<T>& v, const Mat<T>& out,
                                            const Vec<T>& logsumexp);

}  // namespace meshwork::kernels
