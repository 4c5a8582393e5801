#include "exec/calibrate.hpp"

#include <algorithm>
#include <numeric>
#include <chrono>
#include <cmath>

#include "exec/executor_adamw.hpp"
#include "exec/gpt_detail.hpp"
#include "kernels/adamw.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/multi_head_attention.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/tensor.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "models/compute_time.hpp"
#include "models/gemm_fit.hpp"
#include "models/op_table.hpp"
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

// Every rank times `body` at once, and the slowest rank's time is the one kept: a synchronous
// step goes at its slowest rank's pace (on a shared or virtual machine, cores under load are
// not equally fast).
template <class Body>
double slowest_seconds_per_call(Group& world, Body body, double min_s = 0.02, int repeats = 5) {
  world.all_reduce_sum(std::span<double>());  // start together
  std::array<float, 1> t{static_cast<float>(seconds_per_call(body, min_s, repeats))};
  world.all_reduce_max(t);
  return t[0];
}

}  // namespace

CalibrationRun calibrate(Group& world, const plan::GpuSpec& spec, plan::Precision precision, double intra_node_gbytes_per_s,
                         const std::function<void(const std::string&)>& progress, const plan::Plan* plan) {
  CalibrationRun out;
  out.ranks = world.size();
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  // The bytes per activation element the cost model counts; the executor computes in fp32
  // whatever the plan's precision, and what it measures is expressed in the model's bytes so
  // that the model prices it back exactly.
  const double act_word = models::activation_bytes(precision);
  // GEMMs: a fixed grid from a transformer's small to mid shapes (tokens x hidden x hidden).
  say("GEMMs on a fixed grid of shapes");
  const std::int64_t sizes[][3] = {{32, 32, 32},   {64, 64, 64},    {128, 64, 64},   {128, 128, 128}, {256, 64, 256},
                                   {256, 256, 64}, {256, 256, 256}, {512, 256, 256}, {512, 512, 512}, {1024, 512, 256}};
  std::vector<std::pair<double, double>> fit;
  const double peak = plan::peak_tflops(spec, precision) * 1e12;
  for (const auto& s : sizes) {
    // The three forms a layer runs (exec/gpt.cpp): forward y = x W, backward's input
    // gradient dx = dy W^T and its weight gradient dW += x^T dy, each timed on the shape.
    const Mat a = Mat::Random(s[0], s[2]), b = Mat::Random(s[2], s[1]), b_t = b.transpose(), a_t = a.transpose();
    Mat c = Mat::Zero(s[0], s[1]);
    const double macs = static_cast<double>(s[0] * s[1] * s[2]);
    double total_s = 0;
    for (const double t : {slowest_seconds_per_call(world, [&] { c = a * b; }), slowest_seconds_per_call(world, [&] { c.noalias() = a * b_t.transpose(); }),
                           slowest_seconds_per_call(world, [&] { c.noalias() += a_t.transpose() * b; })}) {
      total_s += t;
      if (peak > 0) fit.emplace_back(macs, 2 * macs / t / peak);
    }
    out.gemm.push_back({s[0], s[1], s[2], 3 * 2 * macs / total_s});
  }
  // models::fit_gemm_curve weighs each point's residual by its size (since 2026-12-06; before,
  // unweighted, the smallest GEMMs' noise decided the asymptote).
  const models::GemmCurve gemm = models::fit_gemm_curve(fit);
  out.calibration.gemm_max_efficiency = std::min(1.0, gemm.max_efficiency);
  out.calibration.gemm_half_macs = gemm.half_macs;
  // Memory: STREAM triad a = b + s c over arrays well past the caches.
  say("memory bandwidth (STREAM triad)");
  {
    const std::size_t n = std::size_t{4} << 20;
    std::vector<float> x(n, 1.0F), y(n, 2.0F), z(n, 0.0F);
    const double t = slowest_seconds_per_call(world, [&] {
      for (std::size_t i = 0; i < n; ++i) z[i] = x[i] + 3.0F * y[i];
    });
    out.stream_bytes_per_s = 3.0 * static_cast<double>(n) * sizeof(float) / t;
  }
  // STREAM paces what only moves memory; the elementwise and normalisation kernels the
  // executor runs (kernels/) are timed with the bytes the cost model counts for them (each
  // input read once, each output written once, a backward pass twice its forward's, as
  // models/op_table's `elementwise` counts): on a CPU the GeLU's tanh and the norms'
  // reductions set their pace, not memory. On a grid of square shapes from in-cache (64 x 64,
  // 16 KiB) to past the L2 (512 x 512, 1 MiB) with each shape counted once (the harmonic mean
  // of their rates): per byte the two ends differ by 1.8x here (bench/RESULTS.md).
  say("the executor's streaming kernels (GeLU, layernorm, residual add)");
  {
    const bool swiglu = plan != nullptr && plan->model.activation == plan::Activation::swiglu;
    double act_s_per_byte = 0, residual_s_per_byte = 0, norm_s_per_byte = 0;
    const Index sides[] = {64, 128, 256, 512};
    for (const Index side : sides) {
      const Index rows = side, cols = side;
      const double elements = static_cast<double>(rows * cols), word = act_word;
      const Mat x = Mat::Random(rows, cols), dy = Mat::Random(rows, cols);
      const kernels::Vec<float> bias = kernels::Vec<float>::Random(cols), gamma = kernels::Vec<float>::Ones(cols), beta = kernels::Vec<float>::Zero(cols);
      // Seconds per byte of the activation (GeLU or SwiGLU), the residual add and the
      // layernorm, each forward and backward, in bytes as op_table counts them.
      auto per_byte = [&](double moved_fwd, auto fwd, auto bwd) {
        const double t = slowest_seconds_per_call(world, fwd, 0.01, 3) + slowest_seconds_per_call(world, bwd, 0.01, 3);
        return t / (3 * moved_fwd) / static_cast<double>(std::size(sides));
      };
      const Mat gate_up = Mat::Random(rows, 2 * cols);
      act_s_per_byte += swiglu ? per_byte(
                                     3 * elements * word, [&] { volatile float keep = kernels::swiglu_forward<float>(gate_up)(0, 0); (void)keep; },
                                     [&] { volatile float keep = kernels::swiglu_backward<float>(dy, gate_up)(0, 0); (void)keep; })
                               : per_byte(
                                     2 * elements * word, [&] { volatile float keep = kernels::bias_gelu_forward<float>(x, bias)(0, 0); (void)keep; },
                                     [&] { volatile float keep = kernels::bias_gelu_backward<float>(dy, x, bias).dx(0, 0); (void)keep; });
      residual_s_per_byte += per_byte(
          3 * elements * word, [&] { Mat y = x + dy; volatile float keep = y(0, 0); (void)keep; },
          [&] { Mat y = x + dy; Mat z = y + x; volatile float keep = z(0, 0); (void)keep; });
      const auto ln = kernels::layernorm_forward<float>(x, gamma, beta, 1e-5F);
      norm_s_per_byte += per_byte(
          2 * elements * word, [&] { volatile float keep = kernels::layernorm_forward<float>(x, gamma, beta, 1e-5F).y(0, 0); (void)keep; },
          [&] { volatile float keep = kernels::layernorm_backward<float>(dy, x, gamma, ln.mean, ln.rstd).dx(0, 0); (void)keep; });
    }
    const double act = 1 / act_s_per_byte, residual = 1 / residual_s_per_byte, norm = 1 / norm_s_per_byte;
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
  // The executor's other kernels, each on a fixed grid of shapes (never the plan's own), timed
  // as exec/gpt.cpp runs them and expressed as the cost model counts them (models/op_table):
  // on a CPU the exp of every score and logit, the embedding's row gathers and scatters and
  // Adam's square roots set their pace, not a datasheet's roofline.
  const double nominal_bytes_per_s = spec.hbm_gbytes_per_s * 1e9;
  say("the executor's attention, loss, embedding and optimizer");
  {
    // Attention: causal, unfused (kernels/multi_head_attention), micro-batch 2; fitted as the
    // GEMMs are against the op's multiply-adds, forward and backward (twice the forward's
    // FLOPs in op_table) as two points of the same curve.
    const std::int64_t grid[][3] = {{32, 2, 32}, {64, 4, 32}, {128, 4, 64}, {128, 8, 32}, {256, 4, 64}};  // seq, heads, head dim
    std::vector<std::pair<double, double>> att_fit;
    // Against the peak the cost model prices the attention at (plan::attention_peak_tflops: the
    // BF16 one in an FP8 plan without fp8_attention), so that it prices the measurement back.
    plan::TrainingConfig training;
    if (plan != nullptr) training = plan->training;
    training.precision = precision;
    const double attention_peak = plan::attention_peak_tflops(spec, training) * 1e12;
    for (const auto& g : grid) {
      const Index seq = g[0], heads = g[1], hd = g[2], tokens = 2 * seq;
      const Mat q = Mat::Random(tokens, heads * hd), k = Mat::Random(tokens, heads * hd), v = Mat::Random(tokens, heads * hd), dout = Mat::Random(tokens, heads * hd);
      const auto fwd = kernels::multi_head_causal_attention_forward<float>(q, k, v, heads, seq);
      // op_table: 2 x tokens x seq x heads x (d_qk + d_v) FLOPs forward.
      const double flops = 2.0 * static_cast<double>(tokens * seq * heads * 2 * hd);
      const double t_fwd = slowest_seconds_per_call(world, [&] { volatile float keep = kernels::multi_head_causal_attention_forward<float>(q, k, v, heads, seq).out(0, 0); (void)keep; }, 0.01, 3);
      const double t_bwd = slowest_seconds_per_call(world, [&] { volatile float keep = kernels::multi_head_causal_attention_backward<float>(dout, q, k, v, fwd.out, fwd.logsumexp, heads, seq).dq(0, 0); (void)keep; }, 0.01, 3);
      if (attention_peak > 0) {
        att_fit.emplace_back(flops / 2, flops / t_fwd / attention_peak);
        att_fit.emplace_back(flops, 2 * flops / t_bwd / attention_peak);
      }
    }
    if (!att_fit.empty()) {
      const models::GemmCurve attention = models::fit_gemm_curve(att_fit);
      out.calibration.attention_max_efficiency = std::min(1.0, attention.max_efficiency);
      out.calibration.attention_half_macs = attention.half_macs;
    }
    // Each kind's rate over its grid, each shape counted once (the harmonic mean of their
    // rates), so that no one shape (in cache or out of it) decides alone.
    auto rate = [&](auto&& shapes, auto&& bytes_and_seconds) {
      double seconds_per_byte = 0, count = 0;
      for (const auto& shape : shapes) {
        const auto [b, t] = bytes_and_seconds(shape);
        seconds_per_byte += t / b;
        ++count;
      }
      return nominal_bytes_per_s > 0 && seconds_per_byte > 0 ? count / seconds_per_byte / nominal_bytes_per_s : 0.0;
    };
    // Softmax cross-entropy over vocabulary-parallel logits (tokens, local vocabulary): the
    // row maxima, the partial sums and the loss with its gradient; op_table counts 4 x tokens
    // x vocab x (3 forward + 2 backward) bytes.
    const std::int64_t loss_grid[][2] = {{64, 512}, {256, 1024}, {512, 4096}};
    out.calibration.loss_efficiency = rate(loss_grid, [&](const auto& g) {
      const Index tokens = g[0], vocab = g[1];
      const Mat logits = Mat::Random(tokens, vocab);
      std::vector<std::int64_t> targets(static_cast<std::size_t>(tokens));
      for (Index i = 0; i < tokens; ++i) targets[static_cast<std::size_t>(i)] = (i * 7919) % vocab;
      const double t = slowest_seconds_per_call(world, [&] {
        const auto max = kernels::vocab_parallel_local_max<float>(logits);
        const auto sums = kernels::vocab_parallel_partial_sums<float>(logits, max, targets, 0);
        auto ce = kernels::vocab_parallel_loss_and_grad<float>(logits, max, sums, targets, 0);
        ce.dlogits *= 0.5F;  // the micro-batch's share, as exec/gpt.cpp scales it
        volatile float keep = ce.dlogits(0, 0);
        (void)keep;
      }, 0.01, 3);
      return std::pair{4.0 * static_cast<double>(tokens * vocab) * 5, t};
    });
    // The word and position embeddings (tokens, hidden, vocabulary), forward and the
    // gradient's accumulation; op_table counts e x tokens x hidden x 2 bytes each way.
    const std::int64_t emb_grid[][3] = {{128, 64, 1024}, {256, 128, 4096}, {1024, 256, 8192}};
    out.calibration.embedding_efficiency = rate(emb_grid, [&](const auto& g) {
      const Index tokens = g[0], hidden = g[1], vocab = g[2], seq = std::min<Index>(tokens, 128);
      const Mat table = Mat::Random(vocab, hidden), pos = Mat::Random(seq, hidden), dy = Mat::Random(tokens, hidden);
      Mat table_grad = Mat::Zero(vocab, hidden), pos_grad = Mat::Zero(seq, hidden);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens));
      for (Index i = 0; i < tokens; ++i) ids[static_cast<std::size_t>(i)] = (i * 7919) % vocab;
      std::vector<Index> positions(static_cast<std::size_t>(seq));
      std::iota(positions.begin(), positions.end(), Index{0});
      const double t = slowest_seconds_per_call(world, [&] {
        Mat x = kernels::vocab_parallel_embedding_forward<float>(table, ids, 0);
        detail::add_positions(x, pos, positions);
        detail::accumulate_position_grad(pos_grad, dy, positions);
        kernels::vocab_parallel_embedding_accumulate_grad<float>(table_grad, dy, ids, 0);
        volatile float keep = x(0, 0);
        (void)keep;
      }, 0.01, 3);
      return std::pair{act_word * static_cast<double>(tokens * hidden) * 2 * 2, t};
    });
    // AdamW over parameter shards (the executor's hyperparameters): the fused kernel's
    // models::kAdamBytesPerParam bytes per parameter (fp32: no master copy after it).
    const std::size_t opt_grid[] = {std::size_t{16} << 10, std::size_t{128} << 10, std::size_t{1} << 20};
    std::int64_t adam_step = 0;
    out.calibration.optimizer_efficiency = rate(opt_grid, [&](std::size_t n) {
      std::vector<float> params(n, 0.5F), grads(n, 1e-3F), m(n, 0.0F), v(n, 0.0F);
      const double t = slowest_seconds_per_call(world, [&] { kernels::adamw_step<float>(params, grads, m, v, ++adam_step, kExecutorAdamW); }, 0.01, 3);
      return std::pair{models::kAdamBytesPerParam * static_cast<double>(n), t};
    });
  }
  // A small op's fixed cost: bias + GeLU on one row, less its bytes at the streaming rate.
  say("the fixed cost of an op");
  {
    const Mat x = Mat::Random(1, 16);
    const kernels::Vec<float> bias = kernels::Vec<float>::Zero(16);
    const double t = slowest_seconds_per_call(world, [&] {
      volatile float keep = kernels::bias_gelu_forward<float>(x, bias)(0, 0);  // keeps the call
      (void)keep;
    });
    out.op_overhead_s = std::max(0.0, t - 2 * 16 * sizeof(float) / std::max(1.0, out.stream_bytes_per_s));
    out.calibration.kernel_overhead_us = out.op_overhead_s * 1e6;
  }
  // Collectives over every rank, 4 KiB to 16 MiB: the all-reduce (tensor and data
  // parallelism), and the reduce-scatter and all-gather (ZeRO's data parallelism), as the
  // executor calls them. Sizes and bus bandwidths as nccl-tests' (doc/PERFORMANCE.md): the
  // size is the full buffer; busbw = algbw x 2(n-1)/n for the all-reduce, x (n-1)/n for the
  // other two.
  if (world.size() > 1) {
    say("collective bus bandwidth over " + std::to_string(world.size()) + " ranks");
    const double n = world.size();
    const auto members = static_cast<std::size_t>(world.size());
    auto sweep = [&](std::vector<CollectivePoint>& into, double bus_factor, auto call) {
      for (std::size_t bytes = 4096; bytes <= (std::size_t{16} << 20); bytes *= 4) {
        // The full buffer is `members` equal parts (a reduce-scatter's input, an all-gather's
        // output): a little under `bytes` when the ranks do not divide it.
        std::vector<float> part(bytes / sizeof(float) / members, 1.0F), buf(part.size() * members, 1.0F);
        // Collectives must be called as often on every rank: the count comes from a first
        // call's time, the largest over the ranks.
        auto t0 = Clock::now();
        call(buf, part);
        std::array<float, 1> calls{static_cast<float>(std::ceil(0.02 / std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count())))};
        world.all_reduce_max(calls);
        const auto iterations = static_cast<std::int64_t>(std::min(1e5, static_cast<double>(calls[0])));
        std::vector<double> samples;
        for (int r = 0; r < 3; ++r) {
          t0 = Clock::now();
          for (std::int64_t i = 0; i < iterations; ++i) call(buf, part);
          samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(iterations));
        }
        std::sort(samples.begin(), samples.end());
        // The ranks' mean of their medians.
        std::array<double, 1> total{samples[1]};
        world.all_reduce_sum(std::span<double>(total));
        const double mean_t = total[0] / n;
        const double full_bytes = static_cast<double>(buf.size() * sizeof(float));
        const double algbw = full_bytes / mean_t;
        into.push_back({full_bytes, mean_t, algbw, algbw * bus_factor});
      }
    };
    sweep(out.all_reduce, 2 * (n - 1) / n, [&](std::vector<float>& buf, std::vector<float>&) { world.all_reduce_sum(std::span<float>(buf)); });
    sweep(out.reduce_scatter, (n - 1) / n, [&](std::vector<float>& buf, std::vector<float>& part) { world.reduce_scatter_sum(buf, part); });
    sweep(out.all_gather, (n - 1) / n, [&](std::vector<float>& buf, std::vector<float>& part) { world.all_gather(part, buf); });
    // One efficiency prices every collective in the node (models/comm): the lowest bus
    // bandwidth of the three at the largest size, so that no collective the step runs is
    // priced faster than it measured.
    if (intra_node_gbytes_per_s > 0) {
      const double busbw = std::min({out.all_reduce.back().busbw_bytes_per_s, out.reduce_scatter.back().busbw_bytes_per_s, out.all_gather.back().busbw_bytes_per_s});
      out.calibration.intra_node_efficiency = busbw / (intra_node_gbytes_per_s * 1e9);
    }
  }
  return out;
}

}  // namespace meshwork::exec
