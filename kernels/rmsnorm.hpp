#pragma once
// Root-mean-square normalisation (Zhang & Sennrich 2019, eq. 4): LayerNorm without re-centring
// and without a bias, as in LLaMA-style decoders.

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
struct RmsNormForward {
  Mat<T> y;     // [tokens, features]
  Vec<T> rstd;  // [tokens]: 1 / sqrt(mean(x^2) + eps), saved for backward
};

template <class T>
struct RmsNormGrads {
  Mat<T> dx;      // [tokens, features]
  Vec<T> dgamma;  // [features]
};

// y = gamma * x * rstd, per row.
template <class T>
RmsNormForward<T> rmsnorm_forward(const Mat<T>& x, const Vec<T>& gamma, T eps);

template <class T>
RmsNormGrads<T> rmsnorm_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& gamma,
                                 const Vec<T>& rstd);

}  // namespace meshwork::kernels
