#pragma once
// The plan: plain value types for every section of a plan file (docs/DESIGN.md, "The plan file").
// No engine header is reachable from here. Field names follow Megatron-core; what each field
// means, its unit, default and aliases are described once, in schema.hpp.
//
// A loaded Plan is resolved: presets expanded, defaults filled, derived sizes (data-parallel
// size, query groups, FFN width...) computed, so that consumers read plain numbers. A field
// documented as "derived" holds 0 only before resolve().

#include <cstdint>
#include <string>
#include <vector>

#include "plan/enums.hpp"

namespace meshwork::plan {

inline constexpr std::int64_t kSchemaVersion = 1;

struct MoeConfig {
  std::int64_t num_moe_experts = 0;  // 0: a dense model
  std::int64_t moe_router_topk = 2;
  std::int64_t moe_ffn_hidden_size = 0;                   // derived: ffn_hidden_size
  std::int64_t moe_shared_expert_intermediate_size = 0;  // 0: no shared expert
  std::int64_t first_k_dense_layers = 0;                  // DeepSeek's first_k_dense_replace
  double capacity_factor = 0.0;                           // 0: dropless
  double routing_imbalance = 1.0;  // hottest expert's load over the mean

  bool operator==(const MoeConfig&) const = default;
};

// Multi-head latent attention (DeepSeek-V2/V3): keys and values through a low-rank latent.
// Active when kv_lora_rank > 0. Names as Megatron-core's MLATransformerConfig.
struct MlaConfig {
  std::int64_t q_lora_rank = 0;  // 0: queries projected directly
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_head_dim = 128;
  std::int64_t qk_pos_emb_head_dim = 64;
  std::int64_t v_head_dim = 128;

  [[nodiscard]] bool enabled() const { return kv_lora_rank > 0; }
  bool operator==(const MlaConfig&) const = default;
};

struct ModelConfig {
  std::string name;  // the preset or HF model it came from, informative
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_query_groups = 0;  // derived: num_attention_heads (no GQA)
  std::int64_t kv_channels = 0;       // derived: hidden_size / num_attention_heads
  std::int64_t ffn_hidden_size = 0;   // derived: 4 * hidden_size
  Activation activation = Activation::gelu;
  Normalization normalization = Normalization::layernorm;
  PositionEmbedding position_embedding_type = PositionEmbedding::learned_absolute;
  std::int64_t seq_length = 0;
  std::int64_t vocab_size = 0;
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;
  // Dropout probabilities; Megatron-LM's defaults (--hidden-dropout, --attention-dropout: 0.1).
  // A dropout stores a 1-byte mask per element for the backward (KOR22 §4.1); 0 stores none.
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  MlaConfig mla;
  MoeConfig moe;

  [[nodiscard]] bool is_moe() const { return moe.num_moe_experts > 0; }
  bool operator==(const ModelConfig&) const = default;
};

// What Adam keeps per parameter it owns, beside the model's weights and gradients (Megatron's
// --use-precision-aware-optimizer with --exp-avg-dtype, --exp-avg-sq-dtype, --main-params-dtype;
// Apex's DistributedFusedAdam dtype and store_params). The defaults are mixed precision's fp32
// copy and fp32 moments (12 bytes).
struct OptimizerStates {
  Precision exp_avg = Precision::fp32;     // Adam's first moment m
  Precision exp_avg_sq = Precision::fp32;  // Adam's second moment v
  MasterWeights master_weights = MasterWeights::fp32;

  // Megatron-core's classic optimizer (fp32 copy and moments) rather than Transformer Engine's
  // FusedAdam with master_weights, or Apex's, which read 16-bit gradients and write the model's
  // weights themselves (megatron/core/optimizer/distrib_optimizer.py @23e00ed0, the grad handed
  // over without an fp32 copy when use_precision_aware_optimizer).
  [[nodiscard]] bool classic() const { return *this == OptimizerStates{}; }
  bool operator==(const OptimizerStates&) const = default;
};

struct TrainingConfig {
  std::int64_t global_batch_size = 0;
  std::int64_t micro_batch_size = 1;
  Precision precision = Precision::bf16;
  Recompute recompute = Recompute::none;
  // With full recomputation (Megatron's --recompute-method, --recompute-num-layers): uniform
  // checkpoints the input of every group of recompute_num_layers layers and recomputes all of
  // them; block recomputes only the first recompute_num_layers layers of each model chunk.
  RecomputeMethod recompute_method = RecomputeMethod::uniform;
  std::int64_t recompute_num_layers = 1;
  bool flash_attention = true;
  // With flash_attention: which fused kernel; auto, the generation's default (models/hardware.cpp).
  AttentionKernel attention_kernel = AttentionKernel::automatic;
  // With precision fp8: the attention's matmuls in FP8 too (Transformer Engine's recipe
  // fp8_dpa, False by default: FP8 training runs the attention in BF16).
  bool fp8_attention = false;
  // Gradient clipping by the global norm (Megatron's --clip-grad, 1.0 by default): every step
  // computes the norm and scales the gradients by min(1, clip_grad / norm); 0: neither.
  double clip_grad = 1.0;
  // Gradients kept and reduced in bf16 rather than fp32 (Megatron's --grad-reduce-in-bf16; NeMo
  // 1.x's distributed_fused_adam with grad_sync_dtype: bf16): half the gradient buffer and half
  // the data-parallel reduction's bytes. bf16 and fp8 training only.
  bool grad_reduce_in_bf16 = false;
  OptimizerStates optimizer_states;
  // How each micro-batch reaches the first and last stages' GPUs (models::batch_tensors), and
  // whether the batch carries the b x 1 x s x s causal mask Megatron's dataloader builds
  // (--no-create-attention-mask-in-dataloader turns it off; fused attention kernels ignore it).
  DataLoading data_loading = DataLoading::tp_broadcast;
  bool attention_mask_in_batch = true;
  double tokens = 0;  // tokens to train on, for time to train; 0: not given
  AttentionFlops attention_flops = AttentionFlops::full;  // MFU's convention

  bool operator==(const TrainingConfig&) const = default;
};

struct OverlapConfig {
  bool grad_reduce = true;
  bool param_gather = true;
  bool tp_comm = false;
  bool p2p = true;

  bool operator==(const OverlapConfig&) const = default;
};

struct ParallelismConfig {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t data_parallel_size = 0;  // derived: num_gpus / (tp * cp * pp)
  std::int64_t context_parallel_size = 1;
  std::int64_t expert_model_parallel_size = 1;
  std::int64_t virtual_pipeline_model_parallel_size = 1;
  std::int64_t decoder_first_pipeline_num_layers = 0;  // 0: layers split evenly
  std::int64_t decoder_last_pipeline_num_layers = 0;
  // Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
  // the embedding (the loss) counts as one layer when the layers are split over the chunks.
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  // Megatron's --pipeline-model-parallel-layout ("Et*3|(tt|)*29,m|L"); empty: none.
  std::string pipeline_model_parallel_layout;
  bool sequence_parallel = false;
  bool context_parallel_load_balance = true;
  // p2p: the ring of Transformer Engine's ring attention, each step's exchange under the
  // previous block's attention; all_gather: K and V gathered before the attention, which waits.
  CpCommType context_parallel_comm_type = CpCommType::p2p;
  std::int64_t zero_stage = 1;
  // Megatron-core's --num-distributed-optimizer-instances: ZeRO shards within each of this
  // many blocks of the data-parallel group (hybrid sharding), whose reduced shards are then
  // all-reduced across the blocks. 1: one instance, sharded over all of DP x CP.
  std::int64_t num_distributed_optimizer_instances = 1;
  PipelineSchedule pipeline_schedule = PipelineSchedule::one_f_one_b;
  std::string order = "tp-cp-ep-dp-pp";
  OverlapConfig overlap;
  GradientCompression gradient_compression = GradientCompression::none;
  double topk_ratio = 0.01;  // top-k compression: the fraction of gradient values sent

  bool operator==(const ParallelismConfig&) const = default;
};

struct PeakTflops {
  double bf16 = 0;
  double fp16 = 0;
  double fp8 = 0;   // 0: no FP8 tensor cores
  double tf32 = 0;
  double fp32 = 0;

  bool operator==(const PeakTflops&) const = default;
};

// Efficiencies measured on the machine at hand by `meshwork calibrate`; 0: the GPU
// generation's calibration (models/hardware.cpp).
struct Calibration {
  double gemm_max_efficiency = 0;  // achieved / peak for the largest GEMMs
  double gemm_half_macs = 0;       // GEMM size (multiply-adds) at half that efficiency
  double memory_efficiency = 0;    // streaming kernels: achieved / memory bandwidth
  // Elementwise (activation, bias, residual) and normalisation kernels, where their arithmetic
  // rather than memory sets the pace (CPUs); 0: as memory_efficiency.
  double elementwise_efficiency = 0;
  double norm_efficiency = 0;
  // What the executor's own kernels measure where a datasheet roofline misses them (CPUs):
  // unfused attention fitted like GEMMs (achieved / peak FLOP/s against the op's size), and
  // the loss, the embedding and the optimizer as achieved bytes/s (as the cost model counts
  // their bytes) over memory bandwidth; 0: the roofline's.
  double attention_max_efficiency = 0;
  double attention_half_macs = 0;
  double loss_efficiency = 0;
  double embedding_efficiency = 0;
  double optimizer_efficiency = 0;
  double kernel_overhead_us = 0;   // fixed cost per kernel or op
  double intra_node_efficiency = 0;  // collectives' bus bandwidth in a node / its fabric's
  double nic_efficiency = 0;
  // The fraction of the SMs one NCCL collective holds while it runs, which the compute beside
  // it loses (models/sm_share.hpp): its channels over the SM count, 0 for copy-engine
  // collectives; negative (unlike the fields above, where 0 means it): the generation's.
  double collective_sm_fraction = -1;

  bool operator==(const Calibration&) const = default;
};

struct GpuSpec {
  std::string name;
  PeakTflops peak_tflops;  // dense (no sparsity) tensor-core peaks
  double hbm_gib = 0;
  double hbm_gbytes_per_s = 0;
  double nvlink_gbytes_per_s = 0;  // per direction, per GPU
  double tdp_watts = 0;
  Calibration calibration;

  bool operator==(const GpuSpec&) const = default;
};

struct IntraNodeConfig {
  IntraNodeKind kind = IntraNodeKind::nvswitch;
  double bandwidth_gbytes_per_s = 0;  // derived: the GPU's NVLink bandwidth
  double latency_us = 2.0;

  bool operator==(const IntraNodeConfig&) const = default;
};

struct TopologyConfig {
  TopologyKind kind = TopologyKind::fat_tree;
  std::int64_t tiers = 2;
  std::int64_t switch_radix = 64;
  double oversubscription = 1.0;
  double link_latency_us = 1.0;
  std::int64_t planes = 2;             // multi_plane: parallel fabrics, one NIC port on each
  std::int64_t pod_gpus = 0;           // 3-tier fat tree: GPUs per pod (0: Al-Fares pods of k/2 leaves)
  double pod_oversubscription = 1.0;   // pods: a pod's down-links over its up-links to the core
  Routing routing = Routing::d_mod_k;  // how a flow picks one of its equal-cost paths
  // Flows between two GPUs, each hashed onto its own path (ecmp_hash) or placed (adaptive):
  // NCCL's ring channels per NIC (2: its channel duplication) x NCCL_IB_QPS_PER_CONNECTION (1).
  std::int64_t flows_per_peer = 2;
  // Seconds from a link or switch failing until its traffic takes other paths; < 0: the
  // routing's own (adaptive: 0, ecmp_hash: 1, d_mod_k: OpenSM's 10 s sweep; effective_reroute_s below).
  double reroute_s = -1;

  // reroute_s, or the routing's own when it is negative:
  // - adaptive: 0. The switch moves packets off a dead port by itself, in microseconds
  //   (InfiniBand adaptive routing, Spectrum-X): nothing a step would see.
  // - d_mod_k: 10 s. OpenSM's default sweep_interval (opensm(8), "-s, --sweep"): new routes are
  //   computed and uploaded at the subnet manager's next heavy sweep.
  // - ecmp_hash: 1 s. An assumption, not a measurement: BFD's detection time (RFC 5880 §6.8.4:
  //   the multiplier times the interval, commonly 3 x 300 ms) before the path leaves the ECMP
  //   group. Set reroute_s for a fabric whose figure is known.
  [[nodiscard]] double effective_reroute_s() const {
    if (reroute_s >= 0) return reroute_s;
    switch (routing) {
      case Routing::adaptive: return 0;
      case Routing::ecmp_hash: return 1;
      case Routing::d_mod_k: break;
    }
    return 10;
  }

  bool operator==(const TopologyConfig&) const = default;
};

struct ClusterConfig {
  GpuSpec gpu;
  std::int64_t num_gpus = 0;  // derived from the mesh when data_parallel_size is given
  std::int64_t gpus_per_node = 8;
  IntraNodeConfig intra_node;
  std::int64_t nics_per_node = 8;
  double nic_bandwidth_gbps = 400;
  TopologyConfig topology;
  CollectiveAlgorithm collective_algorithm = CollectiveAlgorithm::automatic;  // as NCCL_ALGO
  // The share of each GPU's memory a plan should leave free for what the memory model does
  // not count: the caching allocator's fragmentation, transient workspaces (models/memory.hpp).
  double memory_headroom_fraction = 0.05;

  [[nodiscard]] std::int64_t num_nodes() const {
    return gpus_per_node > 0 ? num_gpus / gpus_per_node : 0;
  }
  bool operator==(const ClusterConfig&) const = default;
};

// Mean time between failures per component, in hours of one component; 0: never fails.
struct MtbfHours {
  double gpu = 0;
  double hbm = 0;
  double nic = 0;
  double link = 0;
  double network_switch = 0;
  double node = 0;
  double software = 0;

  bool operator==(const MtbfHours&) const = default;
};

// Interruptions of the whole job per 1,000 node-days, by the failing component's class.
struct NodeDayRates {
  double gpu = 0, hbm = 0, nic = 0, link = 0, network_switch = 0, node = 0, software = 0;

  bool operator==(const NodeDayRates&) const = default;
};

struct FailureEvent {
  double at_s = 0;
  FailureEventKind kind = FailureEventKind::gpu_down;
  std::string target;  // a GPU or node index, or a link or switch name

  bool operator==(const FailureEvent&) const = default;
};

struct Straggler {
  std::int64_t rank = 0;
  double slowdown = 1.0;

  bool operator==(const Straggler&) const = default;
};

struct DegradedLink {
  std::string target;
  double bandwidth_factor = 1.0;

  bool operator==(const DegradedLink&) const = default;
};

struct FailureConfig {
  // Rates of a published fleet (sim/reliability.cpp derives them); mtbf_hours fields that are
  // given override the preset's.
  FailurePreset preset = FailurePreset::none;
  MtbfHours mtbf_hours;
  // The same classes as fleets often count them: interruptions per 1,000 node-days (added to
  // the MTBF's rates).
  NodeDayRates per_1000_node_days;
  FailureDistribution distribution = FailureDistribution::exponential;
  double weibull_shape = 0.7;  // Schroeder & Gibson (DSN 2006): time between failures, shape 0.7-0.8
  std::vector<FailureEvent> events;
  std::vector<Straggler> stragglers;
  std::vector<DegradedLink> degraded_links;
  double sdc_per_gpu_hour = 0;
  double sdc_check_s = 3600;   // checksum comparison (or loss-spike check) interval
  double detection_s = 60;
  double restart_s = 600;
  double repair_s = 86400;     // a failed node back in the pool (a hot spare again)
  double requeue_s = 0;        // replacement nodes from the scheduler, when no hot spare is left
  // Slowdowns that do not stop the job, over the run: arrivals, how long one lasts, how bad.
  double straggler_per_gpu_day = 0;
  double straggler_slowdown = 1.1;
  double straggler_s = 7200;
  double degradation_per_link_day = 0;
  double degraded_bandwidth_factor = 0.5;
  double degradation_s = 14400;

  bool operator==(const FailureConfig&) const = default;
};

// A checkpoint interval: `auto` (Young/Daly optimum) or a fixed duration.
struct CheckpointInterval {
  bool automatic = true;
  double seconds = 0;  // used when not automatic

  bool operator==(const CheckpointInterval& o) const {
    return automatic == o.automatic && (automatic || seconds == o.seconds);
  }
};

struct CheckpointConfig {
  CheckpointInterval interval;
  double write_gbytes_per_s = 273;  // NAR21 §5.10: 273 GB/s on Selene (40% of peak write)
  double read_gbytes_per_s = 1000;  // NAR21 §5.10: 1 TB/s read, the filesystem maximum
  CheckpointMode mode = CheckpointMode::async;
  std::vector<CheckpointTier> tiers = {CheckpointTier::persistent};
  // Device-to-host copy rate per GPU: the stall of an asynchronous or in-memory checkpoint
  // (PCIe 4.0 x16: 32 GB/s per direction, about 25 achieved).
  double snapshot_gbytes_per_s = 25;
  // Each node's link to the storage, Gbit/s; 0: its scale-out NICs carry the checkpoint
  // (nics_per_node x nic_bandwidth_gbps), as on fabrics without a separate storage network.
  double storage_link_gbps_per_node = 0;
  std::int64_t spares = 0;
  FailureResponse on_failure = FailureResponse::restart;

  bool operator==(const CheckpointConfig&) const = default;
};

struct RunConfig {
  double horizon_s = 30 * 86400.0;
  std::int64_t seed = 1;
  std::int64_t trials = 100;

  bool operator==(const RunConfig&) const = default;
};

struct Plan {
  std::int64_t schema_version = kSchemaVersion;
  std::string name;
  std::string description;
  ModelConfig model;
  TrainingConfig training;
  ParallelismConfig parallelism;
  ClusterConfig cluster;
  FailureConfig failures;
  CheckpointConfig checkpoint;
  RunConfig run;

  bool operator==(const Plan&) const = default;
};

}  // namespace meshwork::plan
