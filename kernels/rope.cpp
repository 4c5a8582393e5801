#include "kernels/rope.hpp"

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace meshwork::kernels {

template <class T>
void rope_apply(Mat<T>& x, Index heads, Index head_dim, Index seq, bool inverse, double base) {
  if (seq <= 0) throw std::invalid_argument("rope_apply: the sequence length must be positive");
  std::vector<Index> positions(static_cast<std::size_t>(seq));
  std::iota(positions.begin(), positions.end(), Index{0});
  rope_apply(x, heads, head_dim, std::span<const Index>(positions), inverse, base);
}

template <class T>
void rope_apply(Mat<T>& x, Index heads, Index head_dim, std::span<const Index> positions, bool inverse, double base) {
  require(head_dim % 2 == 0, "rope_apply", "head width " + std::to_string(head_dim) + " is odd (RoPE turns dimensions in pairs)");
  require(x.cols() == heads * head_dim, "rope_apply", "x " + shape_of(x) + " is not [rows, " + std::to_string(heads) + " heads x " + std::to_string(head_dim) + "]");
  require(!positions.empty(), "rope_apply", "no positions");
  const auto seq = static_cast<Index>(positions.size());
  const Index half = head_dim / 2;
  std::vector<double> theta(static_cast<std::size_t>(half));
  for (Index i = 0; i < half; ++i) theta[static_cast<std::size_t>(i)] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  const double sign = inverse ? -1.0 : 1.0;
  for (Index r = 0; r < x.rows(); ++r) {
    const auto p = static_cast<double>(positions[static_cast<std::size_t>(r % seq)]);
    for (Index i = 0; i < half; ++i) {
      const double a = sign * p * theta[static_cast<std::size_t>(i)];
      const double c = std::cos(a), s = std::sin(a);
      for (Index h = 0; h < heads; ++h) {
        T& lo = x(r, h * head_dim + i);
        T& hi = x(r, h * head_dim + i + half);
        const double l = static_cast<double>(lo), u = static_cast<double>(hi);
        lo = static_cast<T>(l * c - u * s);
        hi = static_cast<T>(u * c + l * s);
      }
    }
  }
}

template void rope_apply(Mat<float>&, Index, Index, Index, bool, double);
template void rope_apply(Mat<double>&, Index, Index, Index, bool, double);
template void rope_apply(Mat<float>&, Index, Index, std::span<const Index>, bool, double);
template void rope_apply(Mat<double>&, Index, Index, std::span<const Index>, bool, double);

}  // namespace meshwork::kernels
