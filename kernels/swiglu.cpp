#include "kernels/swiglu.hpp"

#include <cmath>

namespace meshwork::kernels {
namespace {

template <class T>
T sigmoid(T z) {
  // exp(-z) overflows to inf for very negative z and 1 / inf = 0: no NaN from range alone.
  return T(1) / (T(1) + std::exp(-z));
}

template <class T>
Index ffn_width(std::string_view op, const Mat<T>& gate_up) {
  require(gate_up.cols() % 2 == 0, op,
          "gate_up " + shape_of(gate_up) + " needs an even number of columns (gate | up)");
  return gate_up.cols() / 2;
}

}  // namespace

template <class T>
Mat<T> swiglu_forward(const Mat<T>& gate_up) {
  const Index ffn = ffn_width("swiglu_forward", gate_up);
  Mat<T> y(gate_up.rows(), ffn);
  for (Index r = 0; r < gate_up.rows(); ++r) {
    for (Index c = 0; c < ffn; ++c) {
      // Swish with beta = 1 (SiLU, Elfwing et al. 2018), as Shazeer 2020 §2 defines SwiGLU.
      const T gate = gate_up(r, c);
      y(r, c) = gate * sigmoid(gate) * gate_up(r, ffn + c);
    }
  }
  return y;
}

template <class T>
Mat<T> swiglu_backward(const Mat<T>& dy, const Mat<T>& gate_up) {
  constexpr std::string_view op = "swiglu_backward";
  const Index ffn = ffn_width(op, gate_up);
  require(dy.rows() == gate_up.rows() && dy.cols() == ffn, op,
          "dy " + shape_of(dy) + " does not match gate_up " + shape_of(gate_up) + " (expected " +
              shape_of(gate_up.rows(), ffn) + ")");
  Mat<T> d(gate_up.rows(), gate_up.cols());
  for (Index r = 0; r < gate_up.rows(); ++r) {
    for (Index c = 0; c < ffn; ++c) {
      const T gate = gate_up(r, c);
      const T up = gate_up(r, ffn + c);
      const T s = sigmoid(gate);
      // d silu(g)/dg = s + g s (1 - s).
      d(r, c) = dy(r, c) * up * (s + gate * s * (T(1) - s));
      d(r, ffn + c) = dy(r, c) * gate * s;
    }
  }
  return d;
}

template Mat<float> swiglu_forward(const Mat<float>&);
template Mat<double> swiglu_forward(const Mat<double>&);
template Mat<float> swiglu_backward(const Mat<float>&, const Mat<float>&);
template Mat<double> swiglu_backward(const Mat<double>&, const Mat<double>&);

}  // namespace meshwork::kernels
