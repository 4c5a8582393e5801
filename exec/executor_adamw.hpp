#pragma once
// The executor's optimizer settings, one set for every backend (the CPU trainer, the CUDA
// trainer and their references), so that runs of one plan on either take the same steps.

#include "kernels/adamw.hpp"

namespace meshwork::exec {

// AdamW as GPT-3 trained (Brown et al. 2020, Appendix B: beta2 0.95, weight decay 0.1), with a
// learning rate for a small model.
inline constexpr kernels::AdamWHyperparams kExecutorAdamW{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};

}  // namespace meshwork::exec
