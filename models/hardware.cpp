#include "models/hardware.hpp"

#include <string>

#include "models/gemm_fit.hpp"
#include "plan/presets.hpp"

namespace meshwork::models {
namespace {

// Fraction of the best isolated matmul that a training step's GEMMs reach (shapes, layouts,
// allocator and launch effects): 0.68 / 0.869 on Ampere, the one calibrated figure.
constexpr double kInTrainingGemmFraction = 0.68 / (271.2 / 312);

// A GPU's PCIe x16 link, bytes/s per direction: 16 lanes of 16 GT/s (Gen4) or 32 GT/s (Gen5)
// with 128b/130b encoding (the datasheets' "PCIe Gen4: 64GB/s", "Gen5: 128GB/s" count both
// ways). A large pinned host-to-device copy gets 0.80 of it: an A100 SXM4 measured 25.13 GB/s
// at 512 MiB to 1 GiB (NVIDIA/nvbandwidth#42, host_to_device_memcpy; cuda-samples' bandwidthTest
// gave 26.2 on an A100 PCIe, jdh4/della-gpu-A100 @ab11e227), of 31.5.
constexpr double kPcieGen4Bytes = 16 * 16e9 * 128 / 130 / 8;
constexpr double kPcieGen5Bytes = 2 * kPcieGen4Bytes;
constexpr double kHostCopyFraction = 25.13e9 / kPcieGen4Bytes;

// Fused attention kernels' paces, each pass in its own FLOPs, over the best measured BF16 matmul
// of their generation (271.2 TFLOP/s on A100, 794.5 on H100; docs/reference/published-runs.md
// C3), against the sequence length: models::fit_attention_pace on docs/reference/attention (head
// dimension 128), which AttentionKernels.TheProfilesCarryTheFitsOfTheirTables recomputes. H100
// (Shah et al. 2024, FlashAttention-3, §4.1, 512 to 16K tokens; at 16K, forward and backward
// TFLOP/s): FlashAttention-2 370 and 322, cuDNN 595 and 516, FlashAttention-3 648 and 561; each
// pass within 5% of its curve at every length measured.
constexpr AttentionKernelPaces kHopperFlash2{{0.47451572508378675, 103.65858666617989}, {0.41420439236087997, 273.6898683454688}};
constexpr AttentionKernelPaces kHopperCudnn{{0.781847600479152, 110.8670691354218}, {0.6822256616156166, 375.5065697507297}};
constexpr AttentionKernelPaces kHopperFlash3{{0.8427262877875177, 208.98399683809117}, {0.744606300440249, 427.15316577835125}};
// FlashAttention-2 on A100: its stated 73% forward and 63% backward of 312 TFLOP/s (Dao 2023
// §4.1), given without a length, as the maxima; the lengths at half of them are FlashAttention-2's
// on H100 (the same kernel; no A100 figure against the length among our sources).
constexpr AttentionKernelPaces kAmpereFlash2{{0.8398230088495575, kHopperFlash2.forward.half_seq_length},
                                             {0.7247787610619469, kHopperFlash2.backward.half_seq_length}};

// Transformer Engine's choice when both FlashAttention and its cuDNN FusedAttention can run:
// FusedAttention on Hopper and later ("Disabling FlashAttention to give FusedAttention
// preference on Hopper+ for performance reasons", get_attention_backend in
// transformer_engine/pytorch/attention/dot_product_attention/utils.py, NVIDIA/TransformerEngine
// @a0b36d0c), FlashAttention before.
void set_attention_kernels(HardwareProfile& hw, plan::GpuGeneration generation) {
  using plan::AttentionKernel;
  switch (generation) {
    case plan::GpuGeneration::hopper:
      hw.flash2 = kHopperFlash2;
      hw.flash3 = kHopperFlash3;
      hw.cudnn = kHopperCudnn;
      hw.auto_attention_kernel = AttentionKernel::cudnn;
      return;
    case plan::GpuGeneration::blackwell:
      // No Blackwell attention microbenchmark among our sources: Hopper's paces over the best
      // GEMM (FlashAttention-3 does not run here).
      hw.flash2 = kHopperFlash2;
      hw.cudnn = kHopperCudnn;
      hw.auto_attention_kernel = AttentionKernel::cudnn;
      return;
    case plan::GpuGeneration::ampere:
    case plan::GpuGeneration::other:
      break;
  }
  if (hw.generation == "cpu") {
    // A CPU host runs the executor's own attention (kernels/attention.cpp), which no table
    // measures: until `meshwork calibrate` does, both passes at the pace every GPU's flash
    // attention had before the kernels' tables (0.8 of a GEMM of its size, FlashAttention-2 on
    // A100 as Dao 2023 §4.1 rounds it, its backward counted as MFU counts it), flat.
    hw.flash2 = {{0.8, 0}, {0.8 * 1.25, 0}};
    hw.cudnn = hw.flash2;
    return;
  }
  // cuDNN's fused attention on A100 is measured by none of our sources: FlashAttention-2's pace.
  // A GPU no generation covers takes Ampere's, as its other figures.
  hw.flash2 = kAmpereFlash2;
  hw.cudnn = kAmpereFlash2;
  hw.auto_attention_kernel = AttentionKernel::flash2;
}

}  // namespace

HardwareProfile hardware_profile(const plan::GpuSpec& gpu) {
  HardwareProfile hw;
  const plan::GpuGeneration generation = plan::gpu_generation(gpu);
  if (generation == plan::GpuGeneration::ampere) {
    hw.generation = "ampere";
    // In training, GEMMs reach less than the best isolated matmul (271.2 of 312 TFLOP/s,
    // docs/reference/published-runs.md C3): 0.68 of peak, calibrated once on Ampere against NAR21 Table 1 and
    // KOR22 Tables 3-4 (a 22B layer's forward in 7.7 ms) with every other constant fixed; see
    // bench/RESULTS.md. Small GEMMs lose half their efficiency near 1e8 multiply-adds.
    hw.gemm_max_efficiency = kInTrainingGemmFraction * 271.2 / 312;
    hw.gemm_half_macs = 1e8;
    // Streaming kernels: ~1.7 of A100-80GB's 2.04 TB/s (STREAM-like copy, as microbenchmarked
    // by Jia et al. 2018-style studies; an assumption within 10%).
    hw.memory_efficiency = 0.85;
    hw.kernel_overhead_s = 0;
    // 8xA100 all-reduce: 232.5 GB/s busbw of 300 GB/s NVLink (nccl-tests#175).
    hw.nvlink_efficiency = 232.5 / 300;
    // NCCL on a DGX with 8 NICs runs a collective on 16 channels, 16 SMs (the maintainer,
    // NVIDIA/nccl#689), of A100's 108 (A100 whitepaper, Figure 6); userbuffers take 16 too.
    hw.collective_sm_fraction = 16.0 / 108;
    hw.tp_overlap_sm_fraction = 16.0 / 108;
    // HDR 200G ring all-reduce ~24 GB/s per NIC of 25 (nccl-tests#160, #252).
    hw.nic_efficiency = 24.0 / 25;
    // DGX A100: 6.5 kW maximum with 8 x 400 W GPUs (NVIDIA DGX A100 datasheet).
    hw.host_watts_per_node = 6500 * 0.94 - 8 * 400;
    // NCCL's LL ceiling in one Ampere node, 87.7 GB/s (NVIDIA/nccl src/graph/tuning.cc llMaxBws).
    hw.nccl = true;
    hw.ll_busbw_bytes_per_s = 87.7e9;
    hw.host_link_bytes_per_s = kPcieGen4Bytes * kHostCopyFraction;
  } else if (generation == plan::GpuGeneration::hopper) {
    hw.generation = "hopper";
    // Best measured BF16 matmul 794.5 of 989 TFLOP/s (docs/reference/published-runs.md C3,
    // STAS), times the in-training fraction found on Ampere (no Hopper BF16 run is in a
    // calibration set, so that factor is still Ampere's: issue 20). Half of it at 2.58e9
    // multiply-adds: models::fit_gemm_half_macs on XLA's measured H100 80GB HBM3 table (125
    // shapes from 256^3 to 4096^3, docs/reference/gemm) with that best as the asymptote; a GEMM
    // of less work takes about 2 half / (peak best) = 6.5 us whatever its size. H200 and H800
    // have the same SMs and clocks. GemmFit.TheProfilesCarryTheFitsOfTheirTables refits it.
    hw.gemm_max_efficiency = kInTrainingGemmFraction * 794.5 / 989;
    hw.gemm_half_macs = 2583745024.8566313;
    hw.memory_efficiency = 0.85;
    hw.kernel_overhead_s = 0;
    // 8xH100 ring all-reduce ~370 GB/s busbw of 450 (nccl#1455, NVIDIA's figure).
    hw.nvlink_efficiency = 370.0 / 450;
    // 16 channels over 8 NICs (NVIDIA/nccl#689; an H800 node logs "16 coll channels",
    // NVIDIA/nccl#892) of H100 SXM's 132 SMs (H100 whitepaper: 66 TPCs of 2 SMs).
    hw.collective_sm_fraction = 16.0 / 132;
    hw.tp_overlap_sm_fraction = 16.0 / 132;
    // NDR 400G: 46-48 GB/s busbw per NIC of 50 (nccl-tests#290).
    hw.nic_efficiency = 47.0 / 50;
    // 8xH100 NVLS all-reduce ~480 GB/s busbw, algbw ~275 GB/s of 450 (nccl-tests#212, the
    // maintainer; 476 GB/s in #290).
    hw.nvls_efficiency = 275.0 / 450;
    // Host share at training load, from a meter: an 8 x H100 HGX node training Llama 2 13B with
    // its GPUs near full utilization peaked at 8.48 kW at the wall (Latif et al. 2024,
    // arXiv:2412.08602; IEEE Access 13:61740), so the host draws 8.48 kW x PSU efficiency less
    // 8 GPUs at TDP. The DGX H100 datasheet's 10.2 kW is the provisioning maximum, and the sum
    // of the parts' maxima (2 x Xeon 8480C at 350 W, fans at 1.1 kW, ...) is 3.2 kW: in
    // training the CPUs and fans run well below theirs.
    hw.host_watts_per_node = 8480 * 0.94 - 8 * 700;
    // NCCL's LL ceiling in one Hopper node, 141 GB/s (NVIDIA/nccl src/graph/tuning.cc llMaxBws).
    hw.nccl = true;
    hw.ll_busbw_bytes_per_s = 141e9;
    // H100 SXM: PCIe Gen5 x16 ("PCIe Gen5: 128GB/s" both ways, NVIDIA H100 datasheet), at
    // Ampere's measured share: no copy-engine measurement of an H100's host copies is among our
    // sources (nvbandwidth#24 reports 35.2 GB/s for its SM-driven copy on one cluster).
    hw.host_link_bytes_per_s = kPcieGen5Bytes * kHostCopyFraction;
  } else if (generation == plan::GpuGeneration::blackwell) {
    hw.generation = "blackwell";
    // Best measured BF16 matmul 1,745 of 2,250 TFLOP/s (docs/reference/published-runs.md C3, STAS), times the
    // in-training fraction found on Ampere. Half of it at 5.57e9 multiply-adds, fitted as
    // Hopper's on XLA's measured sm_100 table (docs/reference/gemm; B200 or GB200, the table
    // does not say: its 4096^3 reaches 1,417 TFLOP/s, below either's best): 6.4 us for a small
    // GEMM. GemmFit.TheProfilesCarryTheFitsOfTheirTables refits it.
    hw.gemm_max_efficiency = kInTrainingGemmFraction * 1745.0 / 2250;
    hw.gemm_half_macs = 5573907112.681333;
    hw.memory_efficiency = 0.85;
    hw.kernel_overhead_s = 0;
    // 8xB200 ring all-reduce ~680 GB/s busbw of 900 (docs/reference/published-runs.md C2, STAS).
    hw.nvlink_efficiency = 680.0 / 900;
    hw.nic_efficiency = 47.0 / 50;
    // 8xB200 NVLS all-reduce 838.0 GB/s busbw = algbw x 2(n-1)/n, so algbw 478.9 of 900
    // (docs/reference/published-runs.md C2, STAS).
    hw.nvls_efficiency = 838.0 / 1.75 / 900;
    // No B200 SM count among our sources: Hopper's fractions (16 of 132 SMs).
    hw.collective_sm_fraction = 16.0 / 132;
    hw.tp_overlap_sm_fraction = 16.0 / 132;
    // DGX B200: 14.3 kW maximum (NVIDIA DGX B200 datasheet) with 8 x 1,000 W GPUs.
    hw.host_watts_per_node = 14300 * 0.94 - 8 * 1000;
    // NCCL's LL ceiling in one Blackwell node, 282 GB/s (NVIDIA/nccl src/graph/tuning.cc llMaxBws).
    hw.nccl = true;
    hw.ll_busbw_bytes_per_s = 282e9;
    // HGX B200 on x86 hosts runs its host link as PCIe Gen5 x16 (an MLPerf system description:
    // mlcommons/inference_results_v6.0, closed/Nebius/systems/nebius_b200_n1.json; NVIDIA's
    // preliminary table said Gen6), at Ampere's measured share as Hopper.
    hw.host_link_bytes_per_s = kPcieGen5Bytes * kHostCopyFraction;
  } else if (plan::has_tensor_peak(gpu)) {
    // A GPU no calibration covers (a custom spec, another vendor): Ampere's fractions of its
    // own datasheet figures, and the estimate says so in its notes. Any 16- or 8-bit tensor
    // peak makes it a GPU; the GEMM size at half efficiency scales with its 16-bit peak (half
    // the FP8 one where it gives only that, as every tensor-core generation doubles it).
    hw.generation = "generic";
    hw.calibrated = false;
    hw.gemm_max_efficiency = kInTrainingGemmFraction * 271.2 / 312;
    hw.gemm_half_macs = 1e8 * sixteen_bit_peak_tflops(gpu) / 312;
    hw.memory_efficiency = 0.85;
    hw.kernel_overhead_s = 0;
    hw.nvlink_efficiency = 232.5 / 300;
    hw.nic_efficiency = 0.94;
    hw.collective_sm_fraction = 16.0 / 108;
    hw.tp_overlap_sm_fraction = 16.0 / 108;
    hw.host_watts_per_node = 3000;
    hw.nccl = true;
    hw.ll_busbw_bytes_per_s = 87.7e9;  // Ampere's, as its other figures
    hw.host_link_bytes_per_s = kPcieGen4Bytes * kHostCopyFraction;
  } else {
    hw.generation = "cpu";
    // A CPU host: GEMMs from Eigen reach about half of the FMA peak; no calibration yet.
    hw.gemm_max_efficiency = 0.5;
    hw.gemm_half_macs = 1e6;
    hw.memory_efficiency = 0.6;
    hw.kernel_overhead_s = 1e-6;
    hw.nvlink_efficiency = 0.5;
    hw.nic_efficiency = 0.8;
    hw.gpu_idle_fraction = 0.3;
    hw.host_watts_per_node = 0;
  }
  set_attention_kernels(hw, generation);
  // Measured on the machine at hand (`meshwork calibrate`): what it measured replaces the
  // generation's figures.
  const auto& c = gpu.calibration;
  if (c.gemm_max_efficiency > 0) hw.gemm_max_efficiency = c.gemm_max_efficiency;
  if (c.gemm_half_macs > 0) hw.gemm_half_macs = c.gemm_half_macs;
  if (c.memory_efficiency > 0) hw.memory_efficiency = c.memory_efficiency;
  if (c.elementwise_efficiency > 0) hw.elementwise_efficiency = c.elementwise_efficiency;
  if (c.norm_efficiency > 0) hw.norm_efficiency = c.norm_efficiency;
  if (c.attention_max_efficiency > 0) hw.attention_max_efficiency = c.attention_max_efficiency;
  if (c.attention_half_macs > 0) hw.attention_half_macs = c.attention_half_macs;
  if (c.loss_efficiency > 0) hw.loss_efficiency = c.loss_efficiency;
  if (c.embedding_efficiency > 0) hw.embedding_efficiency = c.embedding_efficiency;
  if (c.optimizer_efficiency > 0) hw.optimizer_efficiency = c.optimizer_efficiency;
  if (c.kernel_overhead_us > 0) hw.kernel_overhead_s = c.kernel_overhead_us * 1e-6;
  if (c.intra_node_efficiency > 0) hw.nvlink_efficiency = c.intra_node_efficiency;
  if (c.nic_efficiency > 0) hw.nic_efficiency = c.nic_efficiency;
  if (c.collective_sm_fraction >= 0) hw.collective_sm_fraction = c.collective_sm_fraction;
  // A figure measured on the machine makes the profile "measured"; the SMs a collective holds
  // are a setting of the communication library (NCCL's channels), not such a measurement.
  plan::Calibration measured = c;
  measured.collective_sm_fraction = plan::Calibration{}.collective_sm_fraction;
  if (measured != plan::Calibration{}) {
    hw.generation = "measured";
    hw.calibrated = true;
  }
  return hw;
}

plan::AttentionKernel attention_kernel(const HardwareProfile& hw, plan::AttentionKernel requested) {
  return requested == plan::AttentionKernel::automatic ? hw.auto_attention_kernel : requested;
}

const AttentionKernelPaces& attention_paces(const HardwareProfile& hw, plan::AttentionKernel requested) {
  const AttentionKernelPaces* paces = &hw.flash2;
  switch (attention_kernel(hw, requested)) {
    case plan::AttentionKernel::flash2: paces = &hw.flash2; break;
    case plan::AttentionKernel::flash3: paces = &hw.flash3; break;
    case plan::AttentionKernel::cudnn: paces = &hw.cudnn; break;
    case plan::AttentionKernel::automatic: break;
  }
  return paces->forward.max_over_gemm > 0 ? *paces : hw.flash2;
}

double sixteen_bit_peak_tflops(const plan::GpuSpec& gpu) {
  return gpu.peak_tflops.bf16 > 0 ? gpu.peak_tflops.bf16 : gpu.peak_tflops.fp16 > 0 ? gpu.peak_tflops.fp16 : gpu.peak_tflops.fp8 / 2;
}

double gemm_efficiency(const HardwareProfile& hw, double macs) { return GemmCurve{hw.gemm_max_efficiency, hw.gemm_half_macs}.efficiency(macs); }

}  // namespace meshwork::models
