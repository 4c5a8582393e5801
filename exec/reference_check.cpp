#include "exec/reference_check.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "exec/gpt.hpp"
#include "exec/synthetic_batch.hpp"
#include "plan/derived.hpp"

namespace meshwork::exec {

ReferenceCheck check_first_step(const plan::Plan& plan, double loss, const std::function<std::vector<float>(const std::string& name)>& grad) {
  const auto& m = plan.model;
  const std::int64_t microbatches = plan::derive(plan).micro_batches_per_step;
  const std::int64_t dp = plan.parallelism.data_parallel_size;
  if (microbatches < 1 || dp < 1) throw std::invalid_argument("--verify: the plan has no micro-batches per step (training.global_batch_size, micro_batch_size)");
  LocalGroup tp("tp");
  GptChunk cpu(m, 0, m.num_layers, true, true, static_cast<std::uint64_t>(plan.run.seed), TensorParallel{&tp, false});
  // Every micro-batch of the global batch, in the order the single-rank CPU run takes them,
  // each scaled by 1 / (micro-batches * DP): the mean the distributed run's gradients hold.
  const std::int64_t total = microbatches * dp;
  for (std::int64_t d = 0; d < dp; ++d) {
    for (std::int64_t k = 0; k < microbatches; ++k) {
      const Batch b = synthetic_batch(plan, microbatches, d, 1, k);
      (void)cpu.forward(0, b, Mat(), 1.0 / static_cast<double>(total));
      (void)cpu.backward(0, Mat());
    }
  }
  ReferenceCheck out;
  out.reference_loss = cpu.loss_sum() / static_cast<double>(total);
  out.worst_relative_error = std::abs(loss - out.reference_loss) / std::max(1e-30, std::abs(out.reference_loss));
  out.worst_tensor = "loss";

  auto norm = [](const float* x, Index n) {
    double s = 0;
    for (Index i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return std::sqrt(s);
  };
  double largest = 0;
  for (auto& p : cpu.params()) largest = std::max(largest, norm(p.grad.data(), p.grad.size()));
  for (auto& p : cpu.params()) {
    const std::vector<float> a = grad(p.spec.name);
    const Index n = p.grad.size();
    if (static_cast<Index>(a.size()) != n) {
      throw std::invalid_argument("--verify: the run's gradient of " + p.spec.name + " has " + std::to_string(a.size()) + " elements, the reference's " +
                                  std::to_string(n));
    }
    double floor = 1e-4 * largest;
    if (p.spec.name.ends_with(".k.bias")) {
      const Param* w = cpu.find(p.spec.name.substr(0, p.spec.name.size() - 4) + "weight");
      if (w != nullptr) floor = std::max(floor, norm(w->grad.data(), w->grad.size()));
    }
    double diff = 0;
    for (Index i = 0; i < n; ++i) {
      const double d = static_cast<double>(a[static_cast<std::size_t>(i)]) - p.grad.data()[i];
      diff += d * d;
    }
    const double b = std::max(norm(p.grad.data(), n), floor);
    const double err = b > 0 ? std::sqrt(diff) / b : std::sqrt(diff);
    if (!std::isnan(out.worst_relative_error) && !(err <= out.worst_relative_error)) {  // NaN is worst, and stays
      out.worst_relative_error = err;
      out.worst_tensor = p.spec.name;
    }
  }
  return out;
}

}  // namespace meshwork::exec
