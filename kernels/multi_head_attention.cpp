#include "kernels/multi_head_attention.hpp"

namespace meshwork::kernels {
namespace {

// The head dimension, after checking that the layout divides evenly.
template <class T>
Index head_dim(std::string_view op, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
               Index num_heads, Index seq_len) {
  require(num_heads > 0, op, "num_heads must be positive, got " + std::to_string(num_heads));
  require(seq_len > 0, op, "seq_len must be positive, got " + std::to_string(seq_len));
  require(q.rows() % seq_len == 0, op,
          "q " + shape_of(q) + " has a token count not divisible by seq_len " +
              std::to_string(seq_len));
  require(q.cols() > 0 && q.cols() % num_heads == 0, op,
          "q " + shape_of(q) + " has a column count not divisible by num_heads " +
              std::to_string(num_heads));
  for (const Mat<T>* m : {&k, &v})
    require(m->rows() == q.rows() && m->cols() == q.cols(), op,
            "k and v must match q " + shape_of(q) + ", got " + shape_of(*m));
  return q.cols() / num_heads;
}

}  // namespace

template <class T>
MultiHeadAttentionForward<T> multi_head_causal_attention_forward(const Mat<T>& q, const Mat<T>& k,
                                                                 const Mat<T>& v, Index num_heads,
                                                                 Index seq_len) {
  const Index d = head_dim("multi_head_causal_attention_forward", q, k, v, num_heads, seq_len);
  MultiHeadAttentionForward<T> f;
  f.out.resize(q.rows(), q.cols());
  f.logsumexp.resize(q.rows(), num_heads);
  for (Index row0 = 0; row0 < q.rows(); row0 += seq_len) {
    for (Index h = 0; h < num_heads; ++h) {
      const auto block = [&](const Mat<T>& m) -> Mat<T> {
        return m.block(row0, h * d, seq_len, d);
      };
      const AttentionForward<T> one = causal_attention_forward<T>(block(q), block(k), block(v));
      f.out.block(row0, h * d, seq_len, d) = one.out;
      f.logsumexp.block(row0, h, seq_len, 1) = one.logsumexp;
    }
  }
  return f;
}

template <class T>
AttentionGrads<T> multi_head_causal_attention_backward(const Mat<T>& dout, const Mat<T>& q,
                                                       const Mat<T>& k, const Mat<T>& v,
                                                       const Mat<T>& out, const Mat<T>& logsumexp,
                                                       Index num_heads, Index seq_len) {
  constexpr std::string_view op = "multi_head_causal_attention_backward";
  const Index d = head_dim(op, q, k, v, num_heads, seq_len);
  require(dout.rows() == q.rows() && dout.cols() == q.cols() && out.rows() == q.rows() &&
              out.cols() == q.cols(),
          op,
          "dout " + shape_of(dout) + " and out " + shape_of(out) + " must match q " + shape_of(q));
  require(logsumexp.rows() == q.rows() && logsumexp.cols() == num_heads, op,
          "logsumexp " + shape_of(logsumexp) + " must be " + shape_of(q.rows(), num_heads));
  AttentionGrads<T> g{Mat<T>(q.rows(), q.cols()), Mat<T>(k.rows(), k.cols()),
                      Mat<T>(v.rows(), v.cols())};
  for (Index row0 = 0; row0 < q.rows(); row0 += seq_len) {
    for (Index h = 0; h < num_heads; ++h) {
      const auto block = [&](const Mat<T>& m) -> Mat<T> {
        return m.block(row0, h * d, seq_len, d);
      };
      const Vec<T> lse = logsumexp.block(row0, h, seq_len, 1);
      const AttentionGrads<T> one =
          causal_attention_backward<T>(block(dout), block(q), block(k), block(v), block(out), lse);
      g.dq.block(row0, h * d, seq_len, d) = one.dq;
      g.dk.block(row0, h * d, seq_len, d) = one.dk;
      g.dv.block(row0, h * d, seq_len, d) = one.dv;
    }
  }
  return g;
}

template MultiHeadAttentionForward<float> multi_head_causal_attention_forward(const Mat<float>&,
                                                                              const Mat<float>&,
                                                                              const Mat<float>&,
                                                                              Index, Index);
template MultiHeadAttentionForward<double> multi_head_causal_attention_forward(const Mat<double>&,
                                                                               const Mat<double>&,
                                                                               const Mat<double>&,
                                                                               Index, Index);
template AttentionGrads<float> multi_head_causal_attention_backward(
    const Mat<float>&, const Mat<float>&, const Mat<float>&, const Mat<float>&, const Mat<float>&,
    const Mat<float>&, Index, Index);
template AttentionGrads<double> multi_head_causal_attention_backward(
    const Mat<double>&, const Mat<double>&, const Mat<double>&, const Mat<double>&,
    const Mat<double>&, const Mat<double>&, Index, Index);

}  // namespace meshwork::kernels
