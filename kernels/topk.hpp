#pragma once
// Top-k gradient sparsification with error feedback (Aji & Heafield 2017; Lin et al. 2018,
// "Deep Gradient Compression"): send only the k largest-magnitude entries of grad + error and
// keep the rest locally as the next step's error, so small updates accumulate until they are
// large enough to be sent.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace meshwork::kernels {

template <class T>
struct TopKSparse {
  std::vector<std::int64_t> indices;  // ascending
  std::vector<T> values;              // values[j] belongs at indices[j]
  std::size_t dense_size = 0;
};

// compensated = grad + error; keeps the k entries of largest |compensated| (ties go to the
// lower index; NaN counts as larger than any number, so it is sent rather than hidden in the
// error) and sets error = compensated with those entries zeroed. Throws if k > grad.size().
// Call as topk_compress<float>(...) when passing std::vector.
template <class T>
TopKSparse<T> topk_compress(std::span<const T> grad, std::span<T> error, std::size_t k);

// out = zeros with sparse.values at sparse.indices; out must hold sparse.dense_size values.
template <class T>
void topk_densify(const TopKSparse<T>& sparse, std::span<T> out);

}  // namespace meshwork::kernels
