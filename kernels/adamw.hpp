#pragma once
// One AdamW step (Loshchilov & Hutter 2019, Algorithm 2: Adam of Kingma & Ba 2015,
// Algorithm 1, with weight decay decoupled from the gradient) over flat parameter spans, the
// layout of a ZeRO or distributed-optimizer shard.

#include <cstdint>
#include <span>

namespace meshwork::kernels {

struct AdamWHyperparams {
  double lr = 1e-3;  // learning rate: the step size applied to both the Adam update and the decay
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;          // added to sqrt(v_hat), in gradient units
  double weight_decay = 0.0;  // fraction of the parameter removed per unit of lr
};

// Updates params, exp_avg (m) and exp_avg_sq (v) in place from grads. step is 1-based (the
// count of steps including this one) and drives the bias correction. All spans must have the
// same length. A std::vector converts to std::span but does not deduce T: call as
// adamw_step<float>(...).
template <class T>
void adamw_step(std::span<T> params, std::span<const T> grads, std::span<T> exp_avg,
                std::span<T> exp_avg_sq, std::int64_t step, const AdamWHyperparams& hp);

}  // namespace meshwork::kernels
