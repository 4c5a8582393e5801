#include "kernels/layernorm.hpp"

namespace meshwork::kernels {
namespace {

template <class T>
void check_params(std::string_view op, const Mat<T>& x, const Vec<T>& gamma) {
  require(x.cols() > 0, op, "x " + shape_of(x) + " has no features");
  require(gamma.size() == x.cols(), op,
          "gamma has " + std::to_string(gamma.size()) + " values for x " + shape_of(x));
}

}  // namespace

template <class T>
LayerNormForward<T> layernorm_forward(const Mat<T>& x, const Vec<T>& gamma, const Vec<T>& beta,
                                      T eps) {
  constexpr std::string_view op = "layernorm_forward";
  check_params(op, x, gamma);
  require(beta.size() == x.cols(), op,
          "beta has " + std::to_string(beta.size()) + " values for x " + shape_of(x));
  const T features = static_cast<T>(x.cols());
  LayerNormForward<T> out;
  out.mean = x.rowwise().mean();
  // Two passes (mean, then the mean of squared deviations) rather than E[x^2] - E[x]^2, which
  // cancels catastrophically in float when |mean| >> std.
  const MatArray<T> centered = (x.colwise() - out.mean).array();
  const Vec<T> variance = centered.square().rowwise().sum().matrix() / features;
  out.rstd = (variance.array() + eps).rsqrt().matrix();
  // Ba et al. 2016 eqs. 3-4 with the Transformer's per-feature gain and bias.
  const MatArray<T> xhat = centered.colwise() * out.rstd.array();
  const MatArray<T> scaled = xhat.rowwise() * gamma.transpose().array();
  out.y = (scaled.rowwise() + beta.transpose().array()).matrix();
  return out;
}

template <class T>
LayerNormGrads<T> layernorm_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& gamma,
                                     const Vec<T>& mean, const Vec<T>& rstd) {
  constexpr std::string_view op = "layernorm_backward";
  check_params(op, x, gamma);
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), op,
          "dy " + shape_of(dy) + " does not match x " + shape_of(x));
  require(mean.size() == x.rows() && rstd.size() == x.rows(), op,
          "saved mean/rstd have " + std::to_string(mean.size()) + "/" +
              std::to_string(rstd.size()) + " rows for x " + shape_of(x));
  const MatArray<T> xhat = (x.colwise() - mean).array().colwise() * rstd.array();
  const MatArray<T> dxhat = dy.array().rowwise() * gamma.transpose().array();
  LayerNormGrads<T> g;
  g.dgamma = (dy.array() * xhat).colwise().sum().transpose().matrix();
  g.dbeta = dy.colwise().sum().transpose();
  // Differentiating eqs. 3-4 through the mean and the variance (both depend on every x of the row):
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
  const Vec<T> mean_dxhat = dxhat.rowwise().mean().matrix();
  const Vec<T> mean_dxhat_xhat = (dxhat * xhat).rowwise().mean().matrix();
  const MatArray<T> centred_dxhat = dxhat.colwise() - mean_dxhat.array();
  const MatArray<T> projected = centred_dxhat - xhat.colwise() * mean_dxhat_xhat.array();
  g.dx = (projected.colwise() * rstd.array()).matrix();
  return g;
}

template LayerNormForward<float> layernorm_forward(const Mat<float>&, const Vec<float>&,
                                                   const Vec<float>&, float);
template LayerNormForward<double> layernorm_forward(const Mat<double>&, const Vec<double>&,
                                                    const Vec<double>&, double);
template LayerNormGrads<float> layernorm_backward(const Mat<float>&, const Mat<float>&,
                                                  const Vec<float>&, const Vec<float>&,
                                                  const Vec<float>&);
template LayerNormGrads<double> layernorm_backward(const Mat<double>&, const Mat<double>&,
                                                   const Vec<double>&, const Vec<double>&,
                                                   const Vec<double>&);

}  // namespace meshwork::kernels
