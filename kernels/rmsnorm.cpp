#include "kernels/rmsnorm.hpp"

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
RmsNormForward<T> rmsnorm_forward(const Mat<T>& x, const Vec<T>& gamma, T eps) {
  check_params("rmsnorm_forward", x, gamma);
  RmsNormForward<T> out;
  // Zhang & Sennrich 2019 eq. 4: RMS(a) = sqrt(mean(a^2)); eps inside the root as in their
  // reference code and in LLaMA, so an all-zero row gives zeros rather than NaN.
  out.rstd = (x.array().square().rowwise().mean() + eps).rsqrt().matrix();
  out.y = ((x.array().colwise() * out.rstd.array()).rowwise() * gamma.transpose().array()).matrix();
  return out;
}

template <class T>
RmsNormGrads<T> rmsnorm_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& gamma,
                                 const Vec<T>& rstd) {
  constexpr std::string_view op = "rmsnorm_backward";
  check_params(op, x, gamma);
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), op,
          "dy " + shape_of(dy) + " does not match x " + shape_of(x));
  require(rstd.size() == x.rows(), op,
          "saved rstd has " + std::to_string(rstd.size()) + " rows for x " + shape_of(x));
  const MatArray<T> xhat = x.array().colwise() * rstd.array();
  const MatArray<T> dxhat = dy.array().rowwise() * gamma.transpose().array();
  RmsNormGrads<T> g;
  g.dgamma = (dy.array() * xhat).colwise().sum().transpose().matrix();
  // Differentiating eq. 4 through the RMS (which depends on every x of the row):
  // dx = rstd * (dxhat - xhat * mean(dxhat * xhat)).
  const Vec<T> mean_dxhat_xhat = (dxhat * xhat).rowwise().mean().matrix();
  g.dx = ((dxhat - xhat.colwise() * mean_dxhat_xhat.array()).colwise() * rstd.array()).matrix();
  return g;
}

template RmsNormForward<float> rmsnorm_forward(const Mat<float>&, const Vec<float>&, float);
template RmsNormForward<double> rmsnorm_forward(const Mat<double>&, const Vec<double>&, double);
template RmsNormGrads<float> rmsnorm_backward(const Mat<float>&, const Mat<float>&,
                                              const Vec<float>&, const Vec<float>&);
template RmsNormGrads<double> rmsnorm_backward(const Mat<double>&, const Mat<double>&,
                                               const Vec<double>&, const Vec<double>&);

}  // namespace meshwork::kernels
