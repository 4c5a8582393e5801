#pragma once
// --verify for a backend that is not the CPU's: the plan's first step recomputed on one CPU
// GptChunk in fp32 (the whole model, the whole global batch, every micro-batch of every
// data-parallel rank in turn, from the same seed and synthetic tokens), and the backend's
// loss and reduced gradients compared with it, tensor by tensor.

#include <functional>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::exec {

struct ReferenceCheck {
  double reference_loss = 0;
  double worst_relative_error = 0;  // over the loss and every gradient; NaN counts as worst
  std::string worst_tensor;         // a parameter's name, or "loss"
};

// `grad(name)` is the run's gradient of parameter `name` after the data-parallel mean, the
// whole tensor, row-major as Param::grad holds it. Each tensor's error is ||a - b|| / ||b||,
// with ||b|| floored at 1e-4 of the largest gradient's norm (as the CPU's --verify does) and,
// for a key bias, at its key weight's: the key bias's gradient is zero in exact arithmetic
// (softmax is invariant to q.b_k, the same for every key), so both runs hold rounding noise
// there (tests/exec/cuda_gpt_test.cpp bounds it the same way). Throws std::invalid_argument
// when a gradient has the wrong size.
[[nodiscard]] ReferenceCheck check_first_step(const plan::Plan& plan, double loss, const std::function<std::vector<float>(const std::string& name)>& grad);

}  // namespace meshwork::exec
