#include "kernels/topk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
TopKSparse<T> topk_compress(std::span<const T> grad, std::span<T> error, std::size_t k) {
  constexpr std::string_view op = "topk_compress";
  require(error.size() == grad.size(), op,
          "error has " + std::to_string(error.size()) + " values for " +
              std::to_string(grad.size()) + " gradients");
  require(k <= grad.size(), op,
          "k = " + std::to_string(k) + " exceeds the " + std::to_string(grad.size()) + " values");
  // Error feedback (Lin et al. 2018, Algorithm 1 "local gradient accumulation"): error
  // temporarily holds the compensated gradient.
  for (std::size_t i = 0; i < grad.size(); ++i) error[i] = grad[i] + error[i];
  const auto magnitude = [&](std::size_t i) {
    return std::isnan(error[i]) ? std::numeric_limits<T>::infinity() : std::abs(error[i]);
  };
  // A strict total order (magnitude descending, then index ascending) makes the selection
  // independent of the selection algorithm, so a GPU radix select must agree with it.
  const auto before = [&](std::size_t a, std::size_t b) {
    const T ma = magnitude(a), mb = magnitude(b);
    return ma > mb || (ma == mb && a < b);
  };
  std::vector<std::size_t> order(grad.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                   before);
  order.resize(k);
  std::sort(order.begin(), order.end());

  TopKSparse<T> sparse;
  sparse.dense_size = grad.size();
  sparse.indices.reserve(k);
  sparse.values.reserve(k);
  for (const std::size_t i : order) {
    sparse.indices.push_back(static_cast<std::int64_t>(i));
    sparse.values.push_back(error[i]);
    error[i] = T(0);  // sent exactly, so nothing of it remains
  }
  return sparse;
}

template <class T>
void topk_densify(const TopKSparse<T>& sparse, std::span<T> out) {
  constexpr std::string_view op = "topk_densify";
  require(out.size() == sparse.dense_size, op,
          "out holds " + std::to_string(out.size()) + " values for dense_size " +
              std::to_string(sparse.dense_size));
  require(sparse.values.size() == sparse.indices.size(), op,
          std::to_string(sparse.values.size()) + " values for " +
              std::to_string(sparse.indices.size()) + " indices");
  std::fill(out.begin(), out.end(), T(0));
  for (std::size_t j = 0; j < sparse.indices.size(); ++j) {
    const std::int64_t i = sparse.indices[j];
    require(i >= 0 && static_cast<std::size_t>(i) < out.size(), op,
            "index " + std::to_string(i) + " outside [0, " + std::to_string(out.size()) + ")");
    out[static_cast<std::size_t>(i)] = sparse.values[j];
  }
}

template TopKSparse<float> topk_compress<float>(std::span<const float>, std::span<float>,
                                                std::size_t);
template TopKSparse<double> topk_compress<double>(std::span<const double>, std::span<double>,
                                                  std::size_t);
template void topk_densify<float>(const TopKSparse<float>&, std::span<float>);
template void topk_densify<double>(const TopKSparse<double>&, std::span<double>);

}  // namespace meshwork::kernels
