#include "exec/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/swiglu.hpp"
#include "models/op_table.hpp"
#include "kernels/tensor.hpp"
#include "plan/validate.hpp"

namespace meshwork::exec {

namespace {

using Clock = std::chrono::steady_clock;
using Mat = kernels::Mat<float>;
using kernels::Index;

// The median of repeated timings of `body`, each repetition at least `min_s` long.
template <class Body>
double seconds_per_call(Body body, double min_s = 0.02, int repeats = 5) {
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    std::int64_t calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      body();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < min_s);
    samples.push_back(elapsed / static_cast<double>(calls));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

std::pair<double, double> fit_gemm_efficiency(const std::vector<std::pair<double, double>>& points) {
  // y = a + b x with x = 1/macs, y = 1/eff: E = 1/a, H = b/a.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const auto n = static_cast<double>(points.size());
  for (const auto& [macs, eff] : points) {
    const double x = 1 / macs, y = 1 / eff;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double denom = n * sxx - sx * sx;
  const double b = denom != 0 ? (n * sxy - sx * sy) / denom : 0;
  const double a = (sy - b * sx) / n;
  if (!(a > 0)) return {points.empty() ? 0 : points.back().second, 0};
  return {1 / a, std::max(0.0, b / a)};
}

CalibrationRun calibrate(Group& world, const plan::GpuSpec& spec, plan::Precision precision, double intra_node_gbytes_per_s,
                         const std::function<void(const std::string&)>& progress, const plan::Plan* plan) {
  CalibrationRun out;
  out.ranks = world.size();
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  // GEMMs: a fixed grid from a transformer's small to mid shapes (tokens x hidden x hidden).
  say("GEMMs on a fixed grid of shapes");
  const std::int64_t sizes[][3] = {{32, 32, 32},   {64, 64, 64},    {128, 64, 64},   {128, 128, 128}, {256, 64, 256},
                                   {256, 256, 64}, {256, 256, 256}, {512, 256, 256}, {512, 512, 512}, {1024, 512, 256}};
  std::vector<std::pair<double, double>> fit;
  const double peak = plan::peak_tflops(spec, precision) * 1e12;
  for (const auto& s : sizes) {
    const Mat a = Mat::Random(s[0], s[2]), b = Mat::Random(s[2], s[1]);
    Mat c(s[0], s[1]);
    world.all_reduce_sum(std::span<double>());  // start together
    const double t = seconds_per_call([&] { c.noalias() = a * b; });
    const double macs = static_cast<double>(s[0] * s[1] * s[2]);
    out.gemm.push_back({s[0], s[1], s[2], 2 * macs / t});
    if (peak > 0) fit.emplace_back(macs, 2 * macs / t / peak);
  }
  const auto [e, h] = fit_gemm_efficiency(fit);
  out.calibration.gemm_max_efficiency = std::min(1.0, e);
  out.calibration.gemm_half_macs = h;
  // Memory: STREAM triad a = b + s c over arrays well past the caches.
  say("memory bandwidth (STREAM triad)");
  {
    const std::size_t n = std::size_t{4} << 20;
    std::vector<float> x(n, 1.0F), y(n, 2.0F), z(n, 0.0F);
    world.all_reduce_sum(std::span<double>());
    const double t = seconds_per_call([&] {
      for (std::size_t i = 0; i < n; ++i) z[i] = x[i] + 3.0F * y[i];
    });
    out.stream_bytes_per_s = 3.0 * static_cast<double>(n) * sizeof(float) / t;
  }
  // STREAM paces what only moves memory (the optimizer, embeddings, the attention's score
  // passes); the elementwise and normalisation kernels the executor runs (kernels/) are timed
  // with the bytes the cost model counts for them (each input read once, each output written
  // once, a backward pass twice its forward's, as models/op_table's `elementwise` counts): on
  // a CPU the GeLU's tanh and the norms' reductions set their pace, not memory.
  say("the executor's streaming kernels (GeLU, layernorm, residual add)");
  {
    const Index rows = 256, cols = 256;
    const double elements = static_cast<double>(rows * cols), word = sizeof(float);
    const Mat x = Mat::Random(rows, cols), dy = Mat::Random(rows, cols);
    const kernels::Vec<float> bias = kernels::Vec<float>::Random(cols), gamma = kernels::Vec<float>::Ones(cols), beta = kernels::Vec<float>::Zero(cols);
    // Rates of the activation (GeLU or SwiGLU), the residual add and the layernorm, each
    // forward and backward, in bytes as op_table counts them.
    auto rate = [&](double moved_fwd, auto fwd, auto bwd) {
      world.all_reduce_sum(std::span<double>());
      const double t = seconds_per_call(fwd, 0.01, 3) + seconds_per_call(bwd, 0.01, 3);
      return 3 * moved_fwd / t;
    };
    const bool swiglu = plan != nullptr && plan->model.activation == plan::Activation::swiglu;
    const Mat gate_up = Mat::Random(rows, 2 * cols);
    const double act = swiglu ? rate(
                                    3 * elements * word, [&] { volatile float keep = kernels::swiglu_forward<float>(gate_up)(0, 0); (void)keep; },
                                    [&] { volatile float keep = kernels::swiglu_backward<float>(dy, gate_up)(0, 0); (void)keep; })
                              : rate(
                                    2 * elements * word, [&] { volatile float keep = kernels::bias_gelu_forward<float>(x, bias)(0, 0); (void)keep; },
                                    [&] { volatile float keep = kernels::bias_gelu_backward<float>(dy, x, bias).dx(0, 0); (void)keep; });
    const double residual = rate(
        3 * elements * word, [&] { Mat y = x + dy; volatile float keep = y(0, 0); (void)keep; },
        [&] { Mat y = x + dy; Mat z = y + x; volatile float keep = z(0, 0); (void)keep; });
    const auto ln = kernels::layernorm_forward<float>(x, gamma, beta, 1e-5F);
    const double norm = rate(
        2 * elements * word, [&] { volatile float keep = kernels::layernorm_forward<float>(x, gamma, beta, 1e-5F).y(0, 0); (void)keep; },
        [&] { volatile float keep = kernels::layernorm_backward<float>(dy, x, gamma, ln.mean, ln.rstd).dx(0, 0); (void)keep; });
    // One efficiency prices every elementwise op: the activation's and the residuals' rates
    // are combined in the proportion of their bytes in a layer of the plan's model (op_table),
    // so that memory-bound adds are not priced at the activation's arithmetic-bound rate.
    double act_bytes = 2, residual_bytes = 3;  // without a plan: one of each per element
    if (plan != nullptr) {
      act_bytes = residual_bytes = 0;
      for (const auto& op : models::layer_ops(*plan, false)) {
        if (op.kind != models::OpKind::elementwise) continue;
        (op.name.find("residual") != std::string::npos ? residual_bytes : act_bytes) += op.bytes;
      }
    }
    const double elementwise = (act_bytes + residual_bytes) / (act_bytes / act + residual_bytes / residual);
    out.kernel_bytes_per_s = elementwise;
    if (spec.hbm_gbytes_per_s > 0) {
      const double nominal = spec.hbm_gbytes_per_s * 1e9;
      out.calibration.memory_efficiency = out.stream_bytes_per_s / nominal;
      out.calibration.elementwise_efficiency = elementwise / nominal;
      out.calibration.norm_efficiency = norm / nominal;
    }
  }
  // A small op's fixed cost: bias + GeLU on one row, less its bytes at the streaming rate.
  say("the fixed cost of an op");
  {
    const Mat x = Mat::Random(1, 16);
    const kernels::Vec<float> bias = kernels::Vec<float>::Zero(16);
    const double t = seconds_per_call([&] {
      volatile float keep = kernels::bias_gelu_forward<float>(x, bias)(0, 0);  // keeps the call
      (void)keep;
    });
    out.op_overhead_s = std::max(0.0, t - 2 * 16 * sizeof(float) / std::max(1.0, out.stream_bytes_per_s));
    out.calibration.kernel_overhead_us = out.op_overhead_s * 1e6;
  }
  // Collectives: all-reduce over every rank, 4 KiB to 16 MiB.
  if (world.size() > 1) {
    say("all-reduce bus bandwidth over " + std::to_string(world.size()) + " ranks");
    const double n = world.size();
    for (std::size_t bytes = 4096; bytes <= (std::size_t{16} << 20); bytes *= 4) {
      std::vector<float> buf(bytes / sizeof(float), 1.0F);
      // Collectives must be called as often on every rank: the count comes from a first
      // call's time, the largest over the ranks.
      auto t0 = Clock::now();
      world.all_reduce_sum(std::span<float>(buf));
      std::array<double, 1> calls{std::ceil(0.02 / std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count()))};
      world.all_reduce_sum(std::span<double>(calls));
      const auto iterations = static_cast<std::int64_t>(std::min(1e5, calls[0]));
      std::vector<double> samples;
      for (int r = 0; r < 3; ++r) {
        t0 = Clock::now();
        for (std::int64_t i = 0; i < iterations; ++i) world.all_reduce_sum(std::span<float>(buf));
        samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(iterations));
      }
      std::sort(samples.begin(), samples.end());
      // The ranks' mean of their medians.
      std::array<double, 1> total{samples[1]};
      world.all_reduce_sum(std::span<double>(total));
      const double mean_t = total[0] / n;
      const double algbw = static_cast<double>(bytes) / mean_t;
      out.all_reduce.push_back({static_cast<double>(bytes), mean_t, algbw, algbw * 2 * (n - 1) / n});
    }
    if (intra_node_gbytes_per_s > 0) out.calibration.intra_node_efficiency = out.all_reduce.back().busbw_bytes_per_s / (intra_node_gbytes_per_s * 1e9);
  }
  return out;
}

}  // namespace meshwork::exec
