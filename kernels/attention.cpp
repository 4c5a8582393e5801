#include "kernels/attention.hpp"

#include <cmath>

namespace meshwork::kernels {
namespace {

template <class T>
void check_qkv(std::string_view op, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v) {
  require(q.cols() > 0, op, "q " + shape_of(q) + " has no head dimension");
  require(k.rows() == q.rows() && k.cols() == q.cols(), op,
          "k " + shape_of(k) + " does not match q " + shape_of(q));
  require(v.rows() == q.rows(), op,
          "v " + shape_of(v) + " has a different sequence length than q " + shape_of(q));
}

// Vaswani et al. 2017 eq. 1: scores scaled by 1/sqrt(d_k) so their variance does not grow
// with the head dimension.
template <class T>
Mat<T> scaled_scores(const Mat<T>& q, const Mat<T>& k) {
  return (q * k.transpose()) / std::sqrt(static_cast<T>(q.cols()));
}

// P_ij = exp(S_ij - lse_i) for j <= i and 0 above the diagonal: the causal mask (-inf before
// the softmax) is applied by never touching the masked entries, so no inf - inf arises.
template <class T>
Mat<T> causal_probabilities(const Mat<T>& scores, const Vec<T>& logsumexp) {
  Mat<T> p = Mat<T>::Zero(scores.rows(), scores.cols());
  for (Index i = 0; i < scores.rows(); ++i)
    for (Index j = 0; j <= i; ++j) p(i, j) = std::exp(scores(i, j) - logsumexp(i));
  return p;
}

}  // namespace

template <class T>
AttentionForward<T> causal_attention_forward(const Mat<T>& q, const Mat<T>& k, const Mat<T>& v) {
  check_qkv("causal_attention_forward", q, k, v);
  const Mat<T> s = scaled_scores(q, k);
  AttentionForward<T> f;
  f.logsumexp.resize(q.rows());
  for (Index i = 0; i < q.rows(); ++i) {
    // Subtracting the row maximum keeps exp() in range (the "safe softmax" FlashAttention's
    // online softmax also uses); a NaN score makes the maximum, and so the row, NaN.
    const auto row = s.row(i).head(i + 1);
    const T row_max = row.template maxCoeff<Eigen::PropagateNaN>();
    f.logsumexp(i) = row_max + std::log((row.array() - row_max).exp().sum());
  }
  f.out = causal_probabilities(s, f.logsumexp) * v;
  return f;
}

template <class T>
AttentionGrads<T> causal_attention_backward(const Mat<T>& dout, const Mat<T>& q, const Mat<T>& k,
                                            const Mat<T>& v, const Mat<T>& out,
                                            const Vec<T>& logsumexp) {
  constexpr std::string_view op = "causal_attention_backward";
  check_qkv(op, q, k, v);
  require(dout.rows() == v.rows() && dout.cols() == v.cols(), op,
          "dout " + shape_of(dout) + " does not match v " + shape_of(v));
  require(out.rows() == v.rows() && out.cols() == v.cols(), op,
          "out " + shape_of(out) + " does not match v " + shape_of(v));
  require(logsumexp.size() == q.rows(), op,
          "logsumexp has " + std::to_string(logsumexp.size()) + " rows for q " + shape_of(q));
  const T scale = T(1) / std::sqrt(static_cast<T>(q.cols()));
  const Mat<T> p = causal_probabilities(scaled_scores(q, k), logsumexp);
  AttentionGrads<T> g;
  g.dv = p.transpose() * dout;
  const Mat<T> dp = dout * v.transpose();
  // Dao et al. 2022, Appendix B.2: the softmax Jacobian-vector product needs
  // D_i = sum_j P_ij dP_ij, which equals rowsum(dO_i * O_i) and so needs no second pass over P.
  const Vec<T> d = (dout.array() * out.array()).rowwise().sum().matrix();
  // dS = P * (dP - D); masked entries have P = 0 and so get no gradient.
  const Mat<T> ds = (p.array() * (dp.colwise() - d).array()).matrix();
  g.dq = ds * k * scale;
  g.dk = ds.transpose() * q * scale;
  return g;
}

template AttentionForward<float> causal_attention_forward(const Mat<float>&, const Mat<float>&,
                                                          const Mat<float>&);
template AttentionForward<double> causal_attention_forward(const Mat<double>&, const Mat<double>&,
                                                           const Mat<double>&);
template AttentionGrads<float> causal_attention_backward(const Mat<float>&, const Mat<float>&,
                                                         const Mat<float>&, const Mat<float>&,
                                                         const Mat<float>&, const Vec<float>&);
template AttentionGrads<double> causal_attention_backward(const Mat<double>&, const Mat<double>&,
                                                          const Mat<double>&, const Mat<double>&,
                                                          const Mat<double>&, const Vec<double>&);

}  // namespace meshwork::kernels
