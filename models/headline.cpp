#include "models/headline.hpp"

namespace meshwork::models {

void set_headline_figures(report::Report& r, const plan::Plan& plan, double step_s, const StepFlops& flops, double peak_flops_per_gpu) {
  const auto gpus = static_cast<double>(plan.cluster.num_gpus);
  const double tokens = static_cast<double>(plan.training.global_batch_size) * static_cast<double>(plan.model.seq_length);
  r.step_time_s = step_s;
  const bool timed = step_s > 0 && gpus > 0;
  r.model_tflops_per_gpu = timed ? flops.model / step_s / gpus / 1e12 : 0;
  r.hardware_tflops_per_gpu = timed ? flops.hardware / step_s / gpus / 1e12 : 0;
  r.mfu = peak_flops_per_gpu > 0 ? r.model_tflops_per_gpu * 1e12 / peak_flops_per_gpu : 0;
  r.hfu = peak_flops_per_gpu > 0 ? r.hardware_tflops_per_gpu * 1e12 / peak_flops_per_gpu : 0;
  r.tokens_per_s = step_s > 0 ? tokens / step_s : 0;
  r.time_to_train_s = plan.training.tokens > 0 && r.tokens_per_s > 0 ? plan.training.tokens / r.tokens_per_s : 0;
}

}  // namespace meshwork::models
