#pragma once
// What a GPU generation achieves, as fractions of its datasheet figures: the calibration of
// the closed-form model, made once per generation from published measurements (never per
// case), each constant with its source. `meshwork calibrate` will measure them on the machine
// at hand.

#include <string_view>

#include "plan/plan.hpp"

namespace meshwork::models {

// One pass of a fused attention kernel: its pace, in the FLOPs the kernels' papers count, over
// the best GEMM's, at sequence length s (the keys a call runs over): max s / (s +
// half_seq_length). max 0: the kernel does not run on the generation.
struct AttentionPace {
  double max_over_gemm = 0;
  double half_seq_length = 0;
  [[nodiscard]] double at(double seq_length) const { return seq_length > 0 ? max_over_gemm * seq_length / (seq_length + half_seq_length) : max_over_gemm; }
};
// A kernel's forward and backward paces. Its backward does 2.5 times the forward's FLOPs (the
// scores recomputed: Dao 2023, arXiv:2307.08691 §4.1) where MFU counts twice.
struct AttentionKernelPaces {
  AttentionPace forward, backward;
};

struct HardwareProfile {
  std::string_view generation;
  bool calibrated = true;  // false: a GPU no generation's calibration covers (generic figures)
  // Largest-GEMM efficiency: achieved / dense peak.
  double gemm_max_efficiency = 0.8;
  // GEMM size (multiply-adds m*n*k) at which efficiency is half the maximum: small GEMMs
  // cannot fill the SMs.
  double gemm_half_macs = 1e9;
  // Achieved / datasheet HBM bandwidth for streaming (elementwise, norm, optimizer) kernels.
  double memory_efficiency = 0.8;
  // Elementwise and normalisation kernels where arithmetic, not memory, paces them (measured
  // CPUs); 0: memory_efficiency.
  double elementwise_efficiency = 0;
  double norm_efficiency = 0;
  // Measured on the executor's own kernels (plan::Calibration); 0: the roofline's.
  double attention_max_efficiency = 0;
  double attention_half_macs = 0;
  double loss_efficiency = 0;
  double embedding_efficiency = 0;
  double optimizer_efficiency = 0;
  // Fused attention kernels: each pass's pace as a fraction of the generation's best measured
  // GEMM, against the sequence length a call runs over, fitted on the microbenchmarks of
  // docs/reference/attention (models/attention_kernels.hpp). training.attention_kernel auto
  // takes auto_attention_kernel, the one Transformer Engine picks.
  AttentionKernelPaces flash2, flash3, cudnn;
  plan::AttentionKernel auto_attention_kernel = plan::AttentionKernel::flash2;
  // A pinned host-to-GPU copy (a micro-batch's load, OpKind::data), bytes/s: the GPU's PCIe link
  // per direction at the share a large copy achieves. 0: a CPU host, whose copy is a memcpy at
  // the streaming rate.
  double host_link_bytes_per_s = 0;
  // Fixed cost per kernel launch, seconds.
  double kernel_overhead_s = 0;
  // Bus bandwidth of large collectives over NVLink and over the NICs, / line rate.
  double nvlink_efficiency = 0.8;
  double nic_efficiency = 0.95;
  // NVLink SHARP all-reduce in an NVSwitch node: algbw / NVLink line rate (every GPU sends
  // and receives the buffer once; the switch reduces). 0: the generation has none.
  double nvls_efficiency = 0;
  // Collectives run on NCCL, priced with its tuner's latencies and protocols (models/nccl_tuner);
  // false: a CPU host's MPI, a fixed latency per ring step (plan cluster.intra_node.latency_us
  // inside a node, the fabric's hops between nodes).
  bool nccl = false;
  // NCCL's ceiling on the LL protocol's bus bandwidth in one node, bytes/s (tuning.cc llMaxBws,
  // by GPU generation).
  double ll_busbw_bytes_per_s = 0;
  // The SMs a collective holds while it runs, as a fraction of the GPU's (models/sm_share.hpp):
  // NCCL's channels, one CTA each, over the SM count; and Transformer Engine's userbuffers
  // reduce-scatter split with its GEMM (overlap.tp_comm: `num_sm` 16 by default, with the GEMM
  // given the rest, TransformerEngine transformer_engine/pytorch/module/base.py @d0067d0d,
  // lines 384-390). 0: nothing taken (a CPU host).
  double collective_sm_fraction = 0;
  double tp_overlap_sm_fraction = 0;
  // Power: idle fraction of TDP; host (CPUs, memory, NICs, switches, fans) per node at load,
  // watts; power-supply efficiency. The idle fraction is an assumption (about 70 W of an H100's
  // 700 W) and is charged for all time not spent computing, communication included, so the GPU
  // share is a lower bound; node totals are checked against metered H100 nodes
  // (tests/models/flops_memory_test.cpp). 0.94: an 80 PLUS Titanium supply at half load.
  double gpu_idle_fraction = 0.1;
  double host_watts_per_node = 3000;
  double psu_efficiency = 0.94;
};

HardwareProfile hardware_profile(const plan::GpuSpec& gpu);

// The fused attention kernel a plan runs: training.attention_kernel, auto resolved for the
// profile's generation.
plan::AttentionKernel attention_kernel(const HardwareProfile& hw, plan::AttentionKernel requested);
// That kernel's paces (HardwareProfile::flash2...); FlashAttention-2's for a kernel the
// generation does not run (plan::validate refuses such a plan).
const AttentionKernelPaces& attention_paces(const HardwareProfile& hw, plan::AttentionKernel requested);

// Efficiency of one GEMM of m*n*k multiply-adds.
double gemm_efficiency(const HardwareProfile& hw, double macs);
// A GPU's 16-bit tensor peak, TFLOP/s: BF16's, else FP16's, else half FP8's (every tensor-core
// generation doubles it); 0 for a device without one (a CPU host).
double sixteen_bit_peak_tflops(const plan::GpuSpec& gpu);

}  // namespace meshwork::models
