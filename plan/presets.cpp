#include "plan/presets.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "plan/enums.hpp"

namespace meshwork::plan {
namespace {

// HBM capacities are what nvidia-smi reports (MiB / 1024), which is what allocations count
// against; marketing "80 GB" is 81,559 MiB on H100 SXM, 143,771 MiB on H200, 183,359 MiB on B200.
constexpr double kMiB = 1.0 / 1024.0;

GpuSpec gpu(std::string_view name, PeakTflops peak, double hbm_gib, double hbm_gbytes_per_s,
            double nvlink_gbytes_per_s, double tdp_watts) {
  return GpuSpec{std::string(name), peak, hbm_gib, hbm_gbytes_per_s, nvlink_gbytes_per_s, tdp_watts, {}};
}

std::vector<GpuPreset> make_gpu_presets() {
  return {
      // NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column: BF16/FP16 312, TF32 156,
      // FP32 19.5 TFLOP/s dense; 1,555 GB/s HBM2; NVLink 3 600 GB/s both ways; 400 W.
      {"a100-sxm-40gb",
       gpu("a100-sxm-40gb", {312, 312, 0, 156, 19.5}, 40960 * kMiB, 1555, 300, 400),
       "NVIDIA A100 datasheet (2021), SXM4 40GB"},
      // Same datasheet, 80GB column: 2,039 GB/s HBM2e. NAR21 and KOR22 ran on these (Selene).
      {"a100-sxm-80gb",
       gpu("a100-sxm-80gb", {312, 312, 0, 156, 19.5}, 81920 * kMiB, 2039, 300, 400),
       "NVIDIA A100 datasheet (2021), SXM4 80GB"},
      // NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16/FP16 989, FP8 1,979, TF32 495,
      // FP32 67 TFLOP/s dense; 3.35 TB/s HBM3; NVLink 4 900 GB/s both ways; 700 W.
      // 989 = 1830 MHz x 528 tensor cores x 1024 FLOP/clk (docs/reference/published-runs.md C3).
      {"h100-sxm", gpu("h100-sxm", {989, 989, 1979, 495, 67}, 81559 * kMiB, 3350, 450, 700),
       "NVIDIA H100 datasheet, SXM5 80GB"},
      // NVIDIA H200 datasheet, SXM: compute as H100; 141 GB HBM3e at 4.8 TB/s; 700 W.
      {"h200-sxm", gpu("h200-sxm", {989, 989, 1979, 495, 67}, 143771 * kMiB, 4800, 450, 700),
       "NVIDIA H200 datasheet, SXM 141GB"},
      // H800 SXM5: H100 compute with NVLink cut to 400 GB/s both ways (NVIDIA H800 product
      // brief); DeepSeek-V3 §3.2.2 measured 160 GB/s achievable NVLink and 50 GB/s IB.
      {"h800-sxm", gpu("h800-sxm", {989, 989, 1979, 495, 67}, 81559 * kMiB, 3350, 200, 700),
       "NVIDIA H800 product brief; DeepSeek-V3 report §3.2.2"},
      // HGX B200 (1,000 W): BF16 2,250, FP8 4,500 TFLOP/s dense; 180 GB HBM3e at 8 TB/s;
      // NVLink 5 1.8 TB/s both ways (docs/reference/published-runs.md C3: LOCK-B200, STAS). TF32 1,100, FP32 75
      // per GPU from the HGX B200 datasheet's 8-GPU totals.
      {"b200", gpu("b200", {2250, 2250, 4500, 1100, 75}, 183359 * kMiB, 8000, 900, 1000),
       "NVIDIA HGX B200 datasheet; glennklockwood.com B200 notes"},
      // The CPU executor's host: nominal, for a 2-core AVX2 machine: 2 cores x 2 FMA ports x
      // 8 fp32 lanes x 2 FLOP x 3.0 GHz = 192 GFLOP/s FP32; DDR4 dual channel ~20 GB/s.
      // `meshwork calibrate` measures the machine at hand and replaces these.
      {"cpu-host", gpu("cpu-host", {0, 0, 0, 0, 0.192}, 16, 20, 0, 0),
       "nominal 2-core AVX2 host (see presets.cpp); calibrate to measure"},
  };
}

ModelConfig dense(std::string_view name, std::int64_t layers, std::int64_t hidden,
                  std::int64_t heads, std::int64_t seq, std::int64_t vocab) {
  ModelConfig m;
  m.name = std::string(name);
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.seq_length = seq;
  m.vocab_size = vocab;
  return m;
}

// Llama-style: SwiGLU, RMSNorm, GQA, untied embeddings, no biases.
ModelConfig llama(std::string_view name, std::int64_t layers, std::int64_t hidden,
                  std::int64_t heads, std::int64_t kv_heads, std::int64_t ffn, std::int64_t seq,
                  std::int64_t vocab) {
  ModelConfig m = dense(name, layers, hidden, heads, seq, vocab);
  m.num_query_groups = kv_heads;
  m.ffn_hidden_size = ffn;
  m.activation = Activation::swiglu;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  // Llama 3, Mixtral and DeepSeek-V3 train without dropout (their config.json files:
  // attention_dropout 0.0 and no hidden dropout).
  m.hidden_dropout = 0;
  m.attention_dropout = 0;
  return m;
}

std::vector<ModelPreset> make_model_presets() {
  constexpr std::string_view kNar21 =
      "Narayanan et al. 2021 (arXiv:2104.04473) Table 1; seq 2048, vocab 51,200";
  std::vector<ModelPreset> out = {
      {"gpt3-175b", dense("gpt3-175b", 96, 12288, 96, 2048, 51200),
       "Brown et al. 2020 Table 2.1; vocab 50,257 padded to 51,200 as in Megatron-LM"},
      {"nar21-1.7b", dense("nar21-1.7b", 24, 2304, 24, 2048, 51200), kNar21},
      {"nar21-3.6b", dense("nar21-3.6b", 30, 3072, 32, 2048, 51200), kNar21},
      {"nar21-7.5b", dense("nar21-7.5b", 36, 4096, 32, 2048, 51200), kNar21},
      {"nar21-18.4b", dense("nar21-18.4b", 40, 6144, 48, 2048, 51200), kNar21},
      {"nar21-39.1b", dense("nar21-39.1b", 48, 8192, 64, 2048, 51200), kNar21},
      {"nar21-76.1b", dense("nar21-76.1b", 60, 10240, 80, 2048, 51200), kNar21},
      {"nar21-145.6b", dense("nar21-145.6b", 80, 12288, 96, 2048, 51200), kNar21},
      {"nar21-310.1b", dense("nar21-310.1b", 96, 16384, 128, 2048, 51200), kNar21},
      {"nar21-529.6b", dense("nar21-529.6b", 105, 20480, 128, 2048, 51200), kNar21},
      {"nar21-1t", dense("nar21-1t", 128, 25600, 160, 2048, 51200), kNar21},
      {"kor22-22b", dense("kor22-22b", 48, 6144, 64, 2048, 51200),
       "Korthikanti et al. 2022 (arXiv:2205.05198) Table 3"},
      // Llama 3 paper (arXiv:2407.21783) Table 3 and the released config.json files:
      // FFN 14,336 / 28,672 / 53,248, 8 KV heads, vocab 128,256, trained at 8K context.
      {"llama3-8b", llama("llama3-8b", 32, 4096, 32, 8, 14336, 8192, 128256),
       "Llama 3 (arXiv:2407.21783) Table 3; meta-llama/Meta-Llama-3-8B config.json"},
      {"llama3-70b", llama("llama3-70b", 80, 8192, 64, 8, 28672, 8192, 128256),
       "Llama 3 (arXiv:2407.21783) Table 3; meta-llama/Meta-Llama-3-70B config.json"},
      {"llama3-405b", llama("llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256),
       "Llama 3 (arXiv:2407.21783) Table 3; meta-llama/Llama-3.1-405B config.json"},
  };

  // Mixtral of Experts (arXiv:2401.04088) Table 1: 32 layers, dim 4096, 32 heads, 8 KV heads,
  // hidden 14,336 per expert, 8 experts, top-2, vocab 32,000, context 32K.
  ModelConfig mixtral = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32768, 32000);
  mixtral.moe.num_moe_experts = 8;
  mixtral.moe.moe_router_topk = 2;
  mixtral.moe.moe_ffn_hidden_size = 14336;
  out.push_back({"mixtral-8x7b", mixtral, "Jiang et al. 2024 (arXiv:2401.04088) Table 1"});

  // DeepSeek-V3 (arXiv:2412.19437) §4.2: 61 layers, hidden 7,168, 128 heads, MLA with query
  // rank 1,536, KV rank 512, head widths 128 + 64 rotary, values 128; 256 routed experts of
  // width 2,048 with 1 shared expert, top-8, the first 3 layers dense (FFN 18,432), vocab
  // 129,280, 4K pre-training context. The multi-token-prediction module is left out (the
  // paper's 671B total excludes it).
  ModelConfig dsv3 = llama("deepseek-v3-shaped", 61, 7168, 128, 128, 18432, 4096, 129280);
  dsv3.kv_channels = 128;
  dsv3.mla = MlaConfig{1536, 512, 128, 64, 128};
  dsv3.moe.num_moe_experts = 256;
  dsv3.moe.moe_router_topk = 8;
  dsv3.moe.moe_ffn_hidden_size = 2048;
  dsv3.moe.moe_shared_expert_intermediate_size = 2048;
  dsv3.moe.first_k_dense_layers = 3;
  out.push_back({"deepseek-v3-shaped", dsv3,
                 "DeepSeek-V3 (arXiv:2412.19437) §4.2 and its config.json; MTP module left out"});

  // Small enough for the CPU executor to run forward, backward and Adam in seconds.
  ModelConfig tiny = dense("tiny", 2, 64, 4, 32, 256);
  tiny.ffn_hidden_size = 256;
  out.push_back({"tiny", tiny, "meshwork: a 2-layer GPT for CPU runs and tests"});

  ModelConfig tiny_moe = llama("tiny-moe", 2, 64, 4, 2, 128, 32, 256);
  tiny_moe.moe.num_moe_experts = 4;
  tiny_moe.moe.moe_router_topk = 2;
  tiny_moe.moe.moe_ffn_hidden_size = 128;
  out.push_back({"tiny-moe", tiny_moe, "meshwork: a 2-layer 4-expert MoE for CPU runs and tests"});
  return out;
}

}  // namespace

std::span<const GpuPreset> gpu_presets() {
  static const std::vector<GpuPreset> presets = make_gpu_presets();
  return presets;
}

std::span<const ModelPreset> model_presets() {
  static const std::vector<ModelPreset> presets = make_model_presets();
  return presets;
}

const GpuPreset* find_gpu_preset(std::string_view key) {
  for (const auto& p : gpu_presets()) {
    if (enum_name_equal(p.key, key)) return &p;
  }
  return nullptr;
}

const ModelPreset* find_model_preset(std::string_view key) {
  for (const auto& p : model_presets()) {
    if (enum_name_equal(p.key, key)) return &p;
  }
  return nullptr;
}

GpuGeneration gpu_generation(const GpuSpec& gpu) {
  // "H100 SXM" as well as "h100-sxm": the prefix compared without case, in place (the
  // estimate asks several times a plan).
  const std::string_view name = gpu.name;
  const auto starts = [&](std::string_view prefix) {
    if (name.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) != prefix[i]) return false;
    }
    return true;
  };
  if (starts("a100")) return GpuGeneration::ampere;
  if (starts("h100") || starts("h200") || starts("h800")) return GpuGeneration::hopper;
  if (starts("b200")) return GpuGeneration::blackwell;
  return GpuGeneration::other;
}

bool has_tensor_peak(const GpuSpec& gpu) { return gpu.peak_tflops.bf16 > 0 || gpu.peak_tflops.fp16 > 0 || gpu.peak_tflops.fp8 > 0; }

}  // namespace meshwork::plan
