#pragma once
// Causal attention over every (sequence, head) of a batch laid out as the QKV projection
// writes it: rows are the tokens of `num_sequences` sequences one after the other
// ([num_sequences * seq_len] rows), columns are the heads side by side ([heads * head_dim],
// head h in columns [h * head_dim, (h + 1) * head_dim)). Each (sequence, head) is one call of
// causal_attention_forward/backward; tokens of different sequences never attend to each other.

#include "kernels/attention.hpp"

namespace meshwork::kernels {

template <class T>
struct MultiHeadAttentionForward {
  Mat<T> out;        // [tokens, heads * head_dim]
  Mat<T> logsumexp;  // [tokens, heads]: per token and head, saved for backward
};

// q, k, v: [tokens, num_heads * head_dim] with tokens = num_sequences * seq_len.
template <class T>
MultiHeadAttentionForward<T> multi_head_causal_attention_forward(const Mat<T>& q, const Mat<T>& k,
                                                                 const Mat<T>& v, Index num_heads,
                                                                 Index seq_len);

// Gradients in the same layout as q, k, v.
template <class T>
AttentionGrads<T> multi_head_causal_attention_backward(const Mat<T>& dout, const Mat<T>& q,
                                                       const Mat<T>& k, const Mat<T>& v,
                                                       const Mat<T>& out, const Mat<T>& logsumexp,
                                                       Index num_heads, Index seq_len);

}  // namespace meshwork::kernels
