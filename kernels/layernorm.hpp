#pragma once
// Layer normalisation over the features of each row (Ba, Kiros & Hinton 2016, eqs. 3-4), with a
// learned gain gamma and bias beta per feature as in the Transformer's LayerNorm.

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
struct LayerNormForward {
  Mat<T> y;     // [tokens, features]
  Vec<T> mean;  // [tokens]: saved for backward
  Vec<T> rstd;  // [tokens]: 1 / sqrt(variance + eps), saved for backward
};

template <class T>
struct LayerNormGrads {
  Mat<T> dx;      // [tokens, features]
  Vec<T> dgamma;  // [features]
  Vec<T> dbeta;   // [features]
};

// y = gamma * (x - mean) * rstd + beta, per row; gamma and beta hold one value per column.
template <class T>
LayerNormForward<T> layernorm_forward(const Mat<T>& x, const Vec<T>& gamma, const Vec<T>& beta,
                                      T eps);

// Gradients of every input from dL/dy and what forward saved (mean, rstd).
template <class T>
LayerNormGrads<T> layernorm_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& gamma,
                                     const Vec<T>& mean, const Vec<T>& rstd);

}  // namespace meshwork::kernels
