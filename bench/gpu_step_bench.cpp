// The training step of one GPU (exec::cuda::CudaGpt) on a Llama-2-7B-shaped model, and its
// model FLOPs utilisation:
//
//   build/dev/bench/gpu_step_bench [--steps N] [--layers L] [--seq S]
//                                  [--attention automatic|materialised|flash_direct]
//                                  [--path model|trainer] [--precision bf16|fp8]
//
// --path model (the default) times CudaGpt, the whole model in one class; --path trainer the
// same model as `meshwork execute --backend cuda` runs it: the one Trainer playing the plan's
// Program on the CUDA backend's chunk (exec/cuda/cuda_chunk.hpp), untimed per instruction (the
// device runs ahead of the host, as `execute` does not: it waits for each to time it), the
// optimizer on the Trainer's flat buffers. The attention flag is CudaGpt's. --precision fp8
// (the Trainer path only) runs the plan at precision fp8: the layers' linear GEMMs in e4m3
// (CudaChunk::linear), its MFU against the H200's 1,979 TFLOP/s dense FP8 peak and its line
// RESULT gpu_trainer_step_fp8.
//
// Llama 2 7B (Touvron et al. 2023, arXiv:2307.09288, Table 1 and the released config.json):
// hidden 4096, 32 heads without GQA, SwiGLU FFN 11008, RMSNorm, vocab 32000, context 4096,
// untied embeddings, no biases; 4 of its 32 layers by default, micro-batch 1, synthetic tokens.
// RoPE as Llama runs it (an elementwise rotation of Q and K: its FLOPs are negligible and model
// FLOPs do not count them either).
//
// 2 warm-up steps, then N timed steps of forward_backward + optimizer_step, each between two
// cudaEvents on a synchronised device: the step's wall time on the GPU, host gaps included.
// Model FLOPs are models::step_flops (Korthikanti et al. 2022 eq. 7 generalised to SwiGLU and
// GQA: the full s x s attention matrix, no recomputation); MFU divides them by the step time
// and the H200's 989 TFLOP/s dense BF16 (NVIDIA H200 datasheet; plan/presets.cpp "h200-sxm").
// The last line, for scripts:  RESULT gpu_step mfu=<fraction> step_ms=<ms> tflops=<TFLOP/s>.
// Exits 1 with a message on any failure (no device included), 2 on a bad command line.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/gpt_cuda.hpp"
#include "exec/reference_step.hpp"
#include "exec/trainer.hpp"
#include "exec/cuda/streams.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "models/flops.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"

namespace {

using namespace meshwork;
using exec::cuda::AttentionPath;

constexpr std::int64_t kWarmupSteps = 2;
constexpr std::uint64_t kParamSeed = 1;
constexpr std::uint64_t kTokenSeed = 2;

struct Options {
  std::int64_t steps = 5;
  std::int64_t layers = 4;
  std::int64_t seq = 4096;
  AttentionPath attention = AttentionPath::automatic;
  bool trainer = false;
  bool fp8 = false;
};

class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

constexpr const char* kUsage =
    "usage: gpu_step_bench [--steps N] [--layers L] [--seq S] [--attention "
    "automatic|materialised|flash_direct] [--path model|trainer] [--precision bf16|fp8]\n";

std::int64_t positive(std::string_view flag, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v <= 0)
    throw UsageError(std::string(flag) + " takes a positive integer, not '" + text + "'");
  return v;
}

// nullopt for --help.
std::optional<Options> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") return std::nullopt;
    if (i + 1 >= argc) throw UsageError("unknown option or missing value: " + std::string(flag));
    const std::string value = argv[++i];
    if (flag == "--steps") {
      o.steps = positive(flag, value);
    } else if (flag == "--layers") {
      o.layers = positive(flag, value);
    } else if (flag == "--seq") {
      o.seq = positive(flag, value);
    } else if (flag == "--attention") {
      try {
        o.attention = exec::cuda::parse_attention_path(value);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    } else if (flag == "--path") {
      if (value != "model" && value != "trainer") throw UsageError("--path takes model or trainer, not '" + value + "'");
      o.trainer = value == "trainer";
    } else if (flag == "--precision") {
      if (value != "bf16" && value != "fp8") throw UsageError("--precision takes bf16 or fp8, not '" + value + "'");
      o.fp8 = value == "fp8";
    } else {
      throw UsageError("unknown option " + std::string(flag));
    }
  }
  if (o.fp8 && !o.trainer) throw UsageError("--precision fp8 runs on --path trainer only (CudaGpt computes in bf16)");
  return o;
}

// Llama 2 7B's shape (see the top of the file) with `layers` layers and `seq` tokens.
plan::ModelConfig llama2_7b_shape(std::int64_t layers, std::int64_t seq) {
  plan::ModelConfig m;
  m.name = "llama2-7b-shape";
  m.num_layers = layers;
  m.hidden_size = 4096;
  m.num_attention_heads = 32;
  m.num_query_groups = 32;  // 7B has no GQA (only 70B does)
  m.kv_channels = 4096 / 32;
  m.ffn_hidden_size = 11008;
  m.activation = plan::Activation::swiglu;
  m.normalization = plan::Normalization::rmsnorm;
  m.position_embedding_type = plan::PositionEmbedding::rope;
  m.seq_length = seq;
  m.vocab_size = 32000;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  return m;
}

// Throws without a device; prints the one used (device 0).
void print_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    throw std::runtime_error(
        std::string("no CUDA device") +
        (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : std::string()));
  }
  MESHWORK_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  MESHWORK_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (compute capability %d.%d, %.1f GiB, %d SMs)\n", prop.name, prop.major,
              prop.minor,
              static_cast<double>(prop.totalGlobalMem) / static_cast<double>(1ULL << 30),
              prop.multiProcessorCount);
}

exec::Batch synthetic_batch(const plan::ModelConfig& m) {
  exec::Batch b;
  b.samples = 1;  // micro-batch 1
  b.seq = m.seq_length;
  std::mt19937_64 g(kTokenSeed);
  std::uniform_int_distribution<std::int64_t> token(0, m.vocab_size - 1);
  for (std::int64_t i = 0; i < b.samples * b.seq; ++i) {
    b.ids.push_back(token(g));
    b.targets.push_back(token(g));
  }
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The same model through the Trainer and the CUDA backend, as a one-GPU plan.
int run_trainer(const Options& o, double flops_per_step, double peak_flops_per_s) {
  if (o.fp8) {
    const plan::GpuPreset* h200 = plan::find_gpu_preset("h200-sxm");
    if (h200 == nullptr) throw std::logic_error("no h200-sxm preset");
    peak_flops_per_s = h200->spec.peak_tflops.fp8 * 1e12;
  }
  const plan::ModelConfig m = llama2_7b_shape(o.layers, o.seq);
  char text[1024];
  std::snprintf(text, sizeof text,
                R"({"model": {"num_layers": %lld, "hidden_size": %lld, "num_attention_heads": %lld, "num_query_groups": %lld, "kv_channels": %lld,
                    "ffn_hidden_size": %lld, "activation": "swiglu", "normalization": "rmsnorm", "position_embedding_type": "rope", "seq_length": %lld,
                    "vocab_size": %lld, "untie_embeddings_and_output_weights": true, "add_bias_linear": false},
                    "training": {"global_batch_size": 1, "micro_batch_size": 1, "precision": "%s"},
                    "cluster": {"gpu": "h200-sxm", "num_gpus": 1, "gpus_per_node": 1}, "run": {"seed": 1}})",
                static_cast<long long>(m.num_layers), static_cast<long long>(m.hidden_size), static_cast<long long>(m.num_attention_heads),
                static_cast<long long>(m.num_query_groups), static_cast<long long>(m.kv_channels), static_cast<long long>(m.ffn_hidden_size),
                static_cast<long long>(m.seq_length), static_cast<long long>(m.vocab_size), o.fp8 ? "fp8" : "bf16");
  auto loaded = plan::load_plan_text(text, plan::Format::json);
  if (!loaded.ok()) throw std::logic_error("the benchmark's plan does not load: " + loaded.diagnostics.items().front().message);
  const auto built = std::chrono::steady_clock::now();
  exec::Trainer trainer(loaded.plan, exec::local_groups(), 0, nullptr, exec::cuda::make_cuda_backend(0));
  std::printf("Trainer on the CUDA backend: %lld instructions per step (built in %.1f s)\n",
              static_cast<long long>(trainer.program().classes.front().instrs.size()),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count());
  std::vector<double> step_ms;
  for (std::int64_t i = 1; i <= kWarmupSteps + o.steps; ++i) {
    trainer.backend().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = trainer.step(i, exec::ExecuteOptions{});
    trainer.backend().synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(loss)) throw std::runtime_error("step " + std::to_string(i) + ": loss is " + std::to_string(loss));
    std::printf("step %lld: %.2f ms, loss %.4f\n", static_cast<long long>(i), ms, loss);
    if (i > kWarmupSteps) step_ms.push_back(ms);
  }
  const double ms = median(step_ms);
  const double flops_per_s = flops_per_step / (ms / 1e3);
  const double mfu = flops_per_s / peak_flops_per_s;
  std::printf("TFLOP/s %.1f, MFU %.2f %% of %.0f TFLOP/s\n", flops_per_s / 1e12, 100 * mfu, peak_flops_per_s / 1e12);
  std::printf("RESULT gpu_trainer_step%s mfu=%.4f step_ms=%.3f tflops=%.2f\n", o.fp8 ? "_fp8" : "", mfu, ms, flops_per_s / 1e12);
  return 0;
}

int run(const Options& o) {
  print_device();
  const plan::ModelConfig m = llama2_7b_shape(o.layers, o.seq);

  plan::Plan p;  // only what step_flops reads: the model and the tokens per step
  p.model = m;
  p.training.micro_batch_size = 1;
  p.training.global_batch_size = 1;
  p.parallelism.data_parallel_size = 1;
  const double flops_per_step = models::step_flops(p).model;
  const plan::GpuPreset* h200 = plan::find_gpu_preset("h200-sxm");
  if (h200 == nullptr) throw std::logic_error("no h200-sxm preset");
  const double peak_flops_per_s = h200->spec.peak_tflops.bf16 * 1e12;
  if (o.trainer) return run_trainer(o, flops_per_step, peak_flops_per_s);

  const auto built = std::chrono::steady_clock::now();
  const kernels::AdamWHyperparams hp{.lr = 3e-4,
                                     .beta1 = 0.9,
                                     .beta2 = 0.95,
                                     .eps = 1e-5,
                                     .weight_decay = 0.1};  // Llama 2 §2.2, 7B
  exec::cuda::CudaGpt gpt(m, kParamSeed, hp, true, o.attention);
  double params = 0;
  for (const auto& s : gpt.specs())
    params += static_cast<double>(s.rows) * static_cast<double>(s.cols);
  std::printf(
      "model: %lld layers, hidden %lld, %lld heads, ffn %lld, seq %lld, vocab %lld: %.3f B "
      "parameters (built in %.1f s)\n",
      static_cast<long long>(m.num_layers), static_cast<long long>(m.hidden_size),
      static_cast<long long>(m.num_attention_heads), static_cast<long long>(m.ffn_hidden_size),
      static_cast<long long>(m.seq_length), static_cast<long long>(m.vocab_size), params / 1e9,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count());

  const exec::Batch batch = synthetic_batch(m);
  exec::cuda::Event start(true), stop(true);
  std::int64_t step = 0;
  auto timed_step = [&]() {
    MESHWORK_CUDA_CHECK(cudaDeviceSynchronize());
    start.record(nullptr);
    const double loss = gpt.forward_backward(batch, 1.0);
    gpt.optimizer_step(++step);
    MESHWORK_CUDA_CHECK(cudaDeviceSynchronize());
    stop.record(nullptr);
    stop.synchronize();
    if (!std::isfinite(loss))
      throw std::runtime_error("step " + std::to_string(step) + ": loss is " +
                               std::to_string(loss));
    const double ms = exec::cuda::elapsed_ms(start, stop);
    std::printf("step %lld: %.2f ms, loss %.4f\n", static_cast<long long>(step), ms, loss);
    return ms;
  };
  for (std::int64_t i = 0; i < kWarmupSteps; ++i) (void)timed_step();
  std::printf("attention path: %s\n", exec::cuda::attention_path_name(gpt.attention_path()));
  const auto before = gpt.op_ms();
  std::vector<double> step_ms;
  for (std::int64_t i = 0; i < o.steps; ++i) step_ms.push_back(timed_step());
  const auto after = gpt.op_ms();

  const double ms = median(step_ms);
  const double flops_per_s = flops_per_step / (ms / 1e3);
  const double mfu = flops_per_s / peak_flops_per_s;
  std::printf("\n%-14s %10s\n", "op", "ms/step");
  double ops_ms = 0;
  for (const auto& [name, total] : after) {
    const auto b = before.find(name);
    const double per_step =
        (total - (b == before.end() ? 0.0 : b->second)) / static_cast<double>(o.steps);
    ops_ms += per_step;
    std::printf("%-14s %10.2f\n", name.c_str(), per_step);
  }
  std::printf("%-14s %10.2f\n", "(ops summed)", ops_ms);
  std::printf("%-14s %10.2f  (median of %lld)\n", "step", ms, static_cast<long long>(o.steps));
  std::printf("model FLOPs/step %.4g (models::step_flops: KOR22 eq. 7, full attention matrix)\n",
              flops_per_step);
  std::printf("TFLOP/s %.1f, MFU %.2f %% of %.0f TFLOP/s\n", flops_per_s / 1e12, 100 * mfu,
              peak_flops_per_s / 1e12);
  std::printf("RESULT gpu_step mfu=%.4f step_ms=%.3f tflops=%.2f\n", mfu, ms, flops_per_s / 1e12);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> o = parse(argc, argv);
    if (!o) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(*o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gpu_step_bench: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_step_bench: %s\n", e.what());
    return 1;
  }
}
