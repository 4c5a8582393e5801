#pragma once
// Bias add fused with GeLU in its tanh approximation (Hendrycks & Gimpel 2016, §2), the form
// GPT-2 and Megatron-LM's bias_gelu use after the first MLP projection.

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
struct BiasGeluGrads {
  Mat<T> dx;     // [tokens, features]
  Vec<T> dbias;  // [features]
};

// y = gelu(x + bias), bias one value per column. Nothing is saved: backward recomputes from x
// and bias, as Megatron's fused kernel does, trading a tanh for activation memory.
template <class T>
Mat<T> bias_gelu_forward(const Mat<T>& x, const Vec<T>& bias);

template <class T>
BiasGeluGrads<T> bias_gelu_backward(const Mat<T>& dy, const Mat<T>& x, const Vec<T>& bias);

}  // namespace meshwork::kernels
