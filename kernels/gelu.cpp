#include "kernels/gelu.hpp"

#include <cmath>
#include <numbers>

namespace meshwork::kernels {
namespace {

// Hendrycks & Gimpel 2016 §2: gelu(z) ~= 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
template <class T>
constexpr T kSqrt2OverPi = std::numbers::sqrt2_v<T>* std::numbers::inv_sqrtpi_v<T>;
template <class T>
constexpr T kCubic = T(0.044715);

template <class T>
T gelu(T z) {
  return T(0.5) * z * (T(1) + std::tanh(kSqrt2OverPi<T> * (z + kCubic<T> * z * z * z)));
}

// d gelu / dz of the same approximation (not of the exact erf form), so that the gradient is
// that of the function forward computed.
template <class T>
T gelu_derivative(T z) {
  const T t = std::tanh(kSqrt2OverPi<T> * (z + kCubic<T> * z * z * z));
  const T dinner_dz = kSqrt2OverPi<T> * (T(1) + T(3) * kCubic<T> * z * z);
  return T(0.5) * (T(1) + t) + T(0.5) * z * (T(1) - t * t) * dinner_dz;
}

template <class T>
void check(std::string_view op, const Mat<T>& x, const Vec<T>& bias) {
  require(bias.size() == x.cols(), op,
          "bias has " + std::to_string(bias.size()) + " values for x " + shape_of(x));
}

}  // namespace

template <class T>
Mat<T> bias_gelu_forward(const Mat<T>& x, const Vec<T>& bias) {
  check("bias_gelu_forward", x, bias);
  Mat<T> y(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r)
    for (Index c = 0; c < x.cols(); ++c) y(r, c) = gelu(x(r, c) + bias(c));
  return y;
}

template <class T>
BiasGeluGrads<T> bias_gelu_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& bias) {
  constexpr std::string_view op = "bias_gelu_backward";
  check(op, x, bias);
  require(dy.rows() == x.rows() && dy.cols() == x.cols(), op,
          "dy " + shape_of(dy) + " does not match x " + shape_of(x));
  BiasGeluGrads<T> g;
  g.dx.resize(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r)
    for (Index c = 0; c < x.cols(); ++c) g.dx(r, c) = dy(r, c) * gelu_derivative(x(r, c) + bias(c));
  // The bias is broadcast over rows, so its gradient sums them.
  g.dbias = g.dx.colwise().sum().transpose();
  return g;
}

template Mat<float> bias_gelu_forward(const Mat<float>&, const Vec<float>&);
template Mat<double> bias_gelu_forward(const Mat<double>&, const Vec<double>&);
template BiasGeluGrads<float> bias_gelu_backward(const Mat<float>&, const Mat<float>&,
                                                 const Vec<float>&);
template BiasGeluGrads<double> bias_gelu_backward(const Mat<double>&, const Mat<double>&,
                                                  const Vec<double>&);

}  // namespace meshwork::kernels
