#include "kernels/adamw.hpp"

#include <cmath>
#include <string>

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
void adamw_step(std::span<T> params, std::span<const T> grads, std::span<T> exp_avg,
                std::span<T> exp_avg_sq, std::int64_t step, const AdamWHyperparams& hp) {
  constexpr std::string_view op = "adamw_step";
  const std::string n = std::to_string(params.size());
  require(grads.size() == params.size(), op,
          std::to_string(grads.size()) + " grads for " + n + " params");
  require(exp_avg.size() == params.size(), op,
          std::to_string(exp_avg.size()) + " exp_avg for " + n + " params");
  require(exp_avg_sq.size() == params.size(), op,
          std::to_string(exp_avg_sq.size()) + " exp_avg_sq for " + n + " params");
  require(step >= 1, op, "step is 1-based, got " + std::to_string(step));
  require(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, op,
          "beta1 and beta2 must lie in [0, 1), got " + std::to_string(hp.beta1) + ", " +
              std::to_string(hp.beta2));
  // Kingma & Ba 2015, Algorithm 1: m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t) undo
  // the bias of moments initialised at zero. Computed in double: beta2^t for t ~ 1e5 steps.
  const double t = static_cast<double>(step);
  const T correction1 = static_cast<T>(1.0 - std::pow(hp.beta1, t));
  const T correction2 = static_cast<T>(1.0 - std::pow(hp.beta2, t));
  const T beta1 = static_cast<T>(hp.beta1);
  const T beta2 = static_cast<T>(hp.beta2);
  const T lr = static_cast<T>(hp.lr);
  const T eps = static_cast<T>(hp.eps);
  const T decay = static_cast<T>(hp.weight_decay);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const T g = grads[i];
    exp_avg[i] = beta1 * exp_avg[i] + (T(1) - beta1) * g;
    exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (T(1) - beta2) * g * g;
    const T m_hat = exp_avg[i] / correction1;
    const T v_hat = exp_avg_sq[i] / correction2;
    // Loshchilov & Hutter 2019, Algorithm 2, line 12, with alpha = 1 and schedule multiplier
    // eta_t = lr (as PyTorch's AdamW and Megatron-LM): the decay lambda * theta_{t-1} uses the
    // parameter before this step and never enters m or v, so it is not rescaled by 1/sqrt(v).
    params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + decay * params[i]);
  }
}

template void adamw_step<float>(std::span<float>, std::span<const float>, std::span<float>,
                                std::span<float>, std::int64_t, const AdamWHyperparams&);
template void adamw_step<double>(std::span<double>, std::span<const double>, std::span<double>,
                                 std::span<double>, std::int64_t, const AdamWHyperparams&);

}  // namespace meshwork::kernels
