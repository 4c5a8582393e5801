#include "plan/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "plan/presets.hpp"
#include "plan/rank_layout.hpp"
#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

class Validator {
 public:
  explicit Validator(const Plan& plan) : plan_(plan), m_(plan.model), p_(plan.parallelism), c_(plan.cluster) {}

  Diagnostics run() {
    check_field_ranges(plan_, d_);
    if (plan_.schema_version != kSchemaVersion) {
      d_.error("schema_version", "this meshwork reads schema version " + str(kSchemaVersion) + ", not " +
                                     str(plan_.schema_version));
    }
    check_model();
    const bool mesh_ok = check_mesh();
    check_attention();
    pipeline_chunks(plan_, &d_);
    check_batch();
    check_sequence();
    check_moe();
    if (mesh_ok) check_sharding();
    check_schedule();
    check_recompute();
    check_cluster(mesh_ok);
    check_failures();
    check_checkpoint();
    return std::move(d_);
  }

 private:
  void check_model() {
    if (m_.num_query_groups > 0 && m_.num_attention_heads % m_.num_query_groups != 0) {
      d_.error("model.num_query_groups", str(m_.num_query_groups) + " does not divide num_attention_heads " +
                                             str(m_.num_attention_heads));
    }
    // RoPE turns a head's dimensions in pairs (Su et al. 2021, eq. 34; Megatron's rotary
    // embedding asserts the same).
    if (m_.position_embedding_type == PositionEmbedding::rope && m_.kv_channels > 0 && m_.kv_channels % 2 != 0) {
      d_.error("model.kv_channels", str(m_.kv_channels) + " is odd: RoPE rotates each head's dimensions in pairs");
    }
  }

  // The mesh against the GPU count; true when the rank layout can be built.
  bool check_mesh() {
    bool ok = true;
    std::string error;
    if (!parse_order(p_.order, error)) {
      d_.error("parallelism.order", error);
      ok = false;
    }
    auto mp = checked_mul(p_.tensor_model_parallel_size, p_.context_parallel_size);
    if (mp) mp = checked_mul(*mp, p_.pipeline_model_parallel_size);
    if (!mp || *mp <= 0) return false;
    // Out-of-bounds sizes are reported by the field checks; the layout is not built from them.
    const auto in_bounds = [](std::int64_t v, double max) { return v >= 0 && static_cast<double>(v) <= max; };
    if (!in_bounds(c_.num_gpus, kMaxGpus) || !in_bounds(p_.data_parallel_size, kMaxGpus) ||
        !in_bounds(*mp, kMaxGpus) || !in_bounds(p_.expert_model_parallel_size, kMaxParallel)) {
      return false;
    }
    const std::string mp_text = "TP " + str(p_.tensor_model_parallel_size) + " x CP " +
                                str(p_.context_parallel_size) + " x PP " + str(p_.pipeline_model_parallel_size);
    if (c_.num_gpus == 0 && p_.data_parallel_size == 0) {
      d_.error("cluster.num_gpus", "required field is missing (or give parallelism.data_parallel_size)");
      return false;
    }
    if (p_.data_parallel_size == 0) {
      d_.error("cluster.num_gpus", str(c_.num_gpus) + " GPUs do not divide into model-parallel groups of " + mp_text + " = " +
                                       str(*mp) + " GPUs each");
      return false;
    }
    const auto world = checked_mul(*mp, p_.data_parallel_size);
    if (!world || *world != c_.num_gpus) {
      d_.error("parallelism.data_parallel_size",
               mp_text + " x DP " + str(p_.data_parallel_size) + " = " + (world ? str(*world) : "too many") +
                   " GPUs, but cluster.num_gpus is " + str(c_.num_gpus));
      return false;
    }
    if (p_.expert_model_parallel_size > 1) {
      // Megatron-core's RankGenerator: "The ep and dp must be adjacent in order", and it does
      // not combine expert with context parallelism.
      const auto ep_at = p_.order.find("ep");
      const auto dp_at = p_.order.find("dp");
      if (ep_at != std::string::npos && dp_at != std::string::npos && ep_at + 3 != dp_at && dp_at + 3 != ep_at) {
        d_.error("parallelism.order", "ep and dp must be adjacent (expert parallelism is carved out of data parallelism)");
        ok = false;
      }
      if (p_.context_parallel_size > 1) {
        d_.error("parallelism.expert_model_parallel_size",
                 "expert parallelism with context_parallel_size > 1 is not supported (as in Megatron-core's RankGenerator)");
        ok = false;
      }
    }
    if (p_.expert_model_parallel_size > 0 && p_.data_parallel_size % p_.expert_model_parallel_size != 0) {
      d_.error("parallelism.expert_model_parallel_size",
               str(p_.expert_model_parallel_size) + " does not divide data_parallel_size " +
                   str(p_.data_parallel_size) + " (expert parallelism is carved out of data parallelism)");
      ok = false;
    }
    return ok && p_.tensor_model_parallel_size > 0 && p_.context_parallel_size > 0 &&
           p_.pipeline_model_parallel_size > 0 && p_.expert_model_parallel_size > 0;
  }

  void check_attention() {
    const std::int64_t tp = p_.tensor_model_parallel_size;
    if (tp <= 0) return;
    if (m_.num_attention_heads > 0 && m_.num_attention_heads % tp != 0) {
      d_.error("parallelism.tensor_model_parallel_size",
               str(tp) + " does not divide num_attention_heads " + str(m_.num_attention_heads));
    }
    if (m_.num_query_groups > 0 && m_.num_query_groups != m_.num_attention_heads && m_.num_query_groups % tp != 0) {
      d_.error("parallelism.tensor_model_parallel_size",
               str(tp) + " does not divide num_query_groups " + str(m_.num_query_groups) +
                   " (each TP rank needs whole key/value heads)");
    }
    if (p_.sequence_parallel && tp == 1) {
      d_.warning("parallelism.sequence_parallel", "has no effect with tensor_model_parallel_size 1");
    }
    // Column-parallel linears split their output width over TP (Megatron's divide() asserts).
    auto width_divides = [&](const char* path, const char* name, std::int64_t width) {
      if (width > 0 && width % tp != 0) {
        d_.error(path, std::string(name) + " " + str(width) + " does not divide by tensor_model_parallel_size " + str(tp));
      }
    };
    width_divides("model.ffn_hidden_size", "ffn_hidden_size", m_.ffn_hidden_size);
    if (m_.is_moe()) {
      width_divides("model.moe.moe_ffn_hidden_size", "moe_ffn_hidden_size", m_.moe.moe_ffn_hidden_size);
      width_divides("model.moe.moe_shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                    m_.moe.moe_shared_expert_intermediate_size);
      if (tp > 1 && !p_.sequence_parallel) {
        d_.error("parallelism.sequence_parallel", "MoE with tensor parallelism needs sequence_parallel: true (Megatron-core requires it)");
      }
    }
    // Sequence parallelism splits each CP rank's tokens over TP.
    if (p_.sequence_parallel && tp > 1 && m_.seq_length > 0 && p_.context_parallel_size > 0 &&
        (m_.seq_length % p_.context_parallel_size != 0 || (m_.seq_length / p_.context_parallel_size) % tp != 0)) {
      d_.error("parallelism.sequence_parallel", "seq_length " + str(m_.seq_length) + " / CP " + str(p_.context_parallel_size) +
                                                    " does not divide by tensor_model_parallel_size " + str(tp));
    }
  }

  void check_batch() {
    const auto& t = plan_.training;
    if (p_.data_parallel_size <= 0 || t.micro_batch_size <= 0 || t.global_batch_size <= 0) return;
    const auto per_step = checked_mul(t.micro_batch_size, p_.data_parallel_size);
    if (!per_step || t.global_batch_size % *per_step != 0) {
      d_.error("training.global_batch_size",
               str(t.global_batch_size) + " is not a multiple of micro_batch_size " + str(t.micro_batch_size) +
                   " x data_parallel_size " + str(p_.data_parallel_size));
      return;
    }
    const std::int64_t micro_batches = t.global_batch_size / *per_step;
    const std::int64_t pp = p_.pipeline_model_parallel_size;
    if (p_.pipeline_schedule == PipelineSchedule::interleaved && pp > 1) {
      // Megatron-LM's interleaved schedule runs the micro-batches in groups of PP through each
      // model chunk in turn (microbatch_group_size_per_vp_stage, PP by default): it needs at
      // least PP of them, and a whole number of groups. Megatron-core raises a RuntimeError when
      // the last group would hold between 1 and PP - 1 (forward_backward_pipelining_with_
      // interleaving, megatron/core/pipeline_parallel/schedules.py @d98e8a6, and
      // ModelParallelConfig's default); before core 0.7 it asserted a multiple of PP. The
      // schedules (models/schedules.cpp) build whole groups.
      if (micro_batches < pp) {
        d_.error("training.global_batch_size", str(micro_batches) + " micro-batches per step; the interleaved schedule needs at least PP = " + str(pp));
        return;
      }
      if (micro_batches % pp != 0) {
        d_.error("training.global_batch_size", str(micro_batches) + " micro-batches per step is not a multiple of PP = " + str(pp) +
                                                   ": the interleaved schedule runs them in groups of PP (Megatron-LM rejects a last group of " +
                                                   str(micro_batches % pp) + ")");
        return;
      }
    }
    if (pp > 1 && micro_batches < pp) {
      d_.warning("training.global_batch_size",
                 str(micro_batches) + " micro-batches per step is fewer than the " +
                     str(p_.pipeline_model_parallel_size) + " pipeline stages: the pipeline never fills");
    }
  }

  void check_sequence() {
    const std::int64_t cp = p_.context_parallel_size;
    if (cp <= 1 || m_.seq_length <= 0) return;
    const std::int64_t chunks = p_.context_parallel_load_balance ? 2 * cp : cp;
    if (m_.seq_length % chunks != 0) {
      d_.error("parallelism.context_parallel_size",
               "seq_length " + str(m_.seq_length) + " does not divide into " + str(chunks) +
                   (p_.context_parallel_load_balance ? " chunks (2 x CP for load-balanced causal attention)"
                                                      : " chunks"));
    }
  }

  // Distributed-optimizer instances (hybrid sharding) as Megatron-core forms them: blocks of
  // consecutive members of the DP x CP group (and of expert-DP), under a sharded optimizer.
  void check_sharding() {
    const std::int64_t n = p_.num_distributed_optimizer_instances;
    if (n <= 1) return;
    const char* field = "parallelism.num_distributed_optimizer_instances";
    if (p_.zero_stage < 1) d_.error(field, str(n) + " instances need a sharded optimizer (zero_stage 1-3), as Megatron's --use-distributed-optimizer");
    if (p_.gradient_compression != GradientCompression::none) d_.error(field, "several instances with gradient_compression are not modelled");
    const RankLayout layout = RankLayout::from_plan(p_);
    std::string why;
    for (const GroupKind whole : {GroupKind::dp_cp, GroupKind::expert_dp}) {
      if (whole == GroupKind::expert_dp && p_.expert_model_parallel_size <= 1) continue;
      if (!layout.instance_split(whole, why)) d_.error(field, str(n) + " " + why);
      else if (layout.group_size(whole) == n) d_.warning(field, str(n) + " instances of one rank each: the optimizer is not sharded (as zero_stage 0, with the all-reduce in two parts)");
    }
  }

  void check_moe() {
    const auto& moe = m_.moe;
    const std::int64_t ep = p_.expert_model_parallel_size;
    if (!m_.is_moe()) {
      if (ep > 1) d_.error("parallelism.expert_model_parallel_size", str(ep) + " needs a MoE model (model.moe.num_moe_experts)");
      return;
    }
    if (ep > 0 && moe.num_moe_experts % ep != 0) {
      d_.error("parallelism.expert_model_parallel_size",
               str(ep) + " does not divide num_moe_experts " + str(moe.num_moe_experts));
    }
    if (moe.moe_router_topk > moe.num_moe_experts) {
      d_.error("model.moe.moe_router_topk", str(moe.moe_router_topk) + " is more than num_moe_experts " +
                                                str(moe.num_moe_experts));
    }
    if (m_.num_layers > 0 && moe.first_k_dense_layers >= m_.num_layers) {
      d_.error("model.moe.first_k_dense_layers", str(moe.first_k_dense_layers) +
                                                     " leaves no MoE layer among num_layers " + str(m_.num_layers));
    }
  }

  void check_recompute() {
    const auto& t = plan_.training;
    if (t.recompute != Recompute::full &&
        (t.recompute_method != RecomputeMethod::uniform || t.recompute_num_layers != 1)) {
      d_.warning("training.recompute_method",
                 "recompute_method and recompute_num_layers apply to recompute: full only (as Megatron's "
                 "--recompute-granularity full); with " + std::string(to_string(t.recompute)) + " they do nothing");
    }
    if (t.recompute == Recompute::full && t.recompute_method == RecomputeMethod::uniform && t.recompute_num_layers < 1) {
      d_.error("training.recompute_num_layers", "recompute_method uniform needs groups of 1 or more layers");
    }
  }

  void check_schedule() {
    const std::int64_t vpp = p_.virtual_pipeline_model_parallel_size;
    const bool interleaved = p_.pipeline_schedule == PipelineSchedule::interleaved;
    if (vpp > 1 && !interleaved) {
      d_.error("parallelism.virtual_pipeline_model_parallel_size",
               str(vpp) + " model chunks need pipeline_schedule: interleaved, not " +
                   std::string(to_string(p_.pipeline_schedule)));
    }
    if (interleaved && p_.pipeline_model_parallel_size < 2) {
      d_.error("parallelism.pipeline_schedule", "interleaved needs pipeline_model_parallel_size of 2 or more");
    } else if (interleaved && vpp < 2) {
      d_.error("parallelism.pipeline_schedule",
               "interleaved needs virtual_pipeline_model_parallel_size of 2 or more (with 1 it is 1f1b)");
    }
  }

  void check_cluster(bool mesh_ok) {
    if (c_.gpus_per_node > 0 && c_.num_gpus > 0 && c_.num_gpus % c_.gpus_per_node != 0) {
      d_.error("cluster.num_gpus", str(c_.num_gpus) + " is not a whole number of " + str(c_.gpus_per_node) +
                                       "-GPU nodes (cluster.gpus_per_node)");
      mesh_ok = false;
    }
    if (c_.gpus_per_node > 1 && !(c_.intra_node.bandwidth_gbytes_per_s > 0)) {
      d_.error("cluster.intra_node.bandwidth_gbytes_per_s",
               "GPUs in a node need a fabric: the GPU has no NVLink figure, so give the bandwidth or intra_node.kind (pcie, shared_memory)");
    }
    // NVLink SHARP reduces in the NVSwitch (NVIDIA Hopper architecture whitepaper, "NVLink
    // SHARP"): no switch, no NVLS.
    if (c_.collective_algorithm == CollectiveAlgorithm::nvls && c_.gpus_per_node > 1 && c_.intra_node.kind != IntraNodeKind::nvswitch) {
      d_.error("cluster.collective_algorithm", "nvls reduces inside an NVSwitch: cluster.intra_node.kind is " + std::string(to_string(c_.intra_node.kind)));
    }
    // The fastest NIC shipping is 800 Gb/s (NVIDIA ConnectX-8 SuperNIC datasheet, 2024), and the
    // next generation is 1.6 Tb/s (IEEE 802.3dj, 1.6 Tb/s Ethernet): a figure past that is most
    // often GB/s written for Gb/s ("400GB/s" is 3,200 Gb/s).
    if (c_.nic_bandwidth_gbps > 1600) {
      d_.warning("cluster.nic_bandwidth_gbps", num(c_.nic_bandwidth_gbps) + " Gb/s per NIC is more than any NIC gives (800 Gb/s ships, "
                                               "1.6 Tb/s is the next generation); network rates are bits: \"400G\" or \"400Gb/s\" is 400, \"400GB/s\" is 3,200");
    }
    if (c_.num_nodes() > 1 && c_.nics_per_node == 0) {
      d_.error("cluster.nics_per_node", "a job on " + str(c_.num_nodes()) + " nodes needs NICs");
    }
    const double peak = peak_tflops(c_.gpu, plan_.training.precision);
    if (peak <= 0) {
      d_.error("training.precision", (c_.gpu.name.empty() ? std::string("the GPU") : c_.gpu.name) + " has no " + std::string(to_string(plan_.training.precision)) +
                                         " peak (cluster.gpu.peak_tflops)");
    }
    if (plan_.training.precision == Precision::fp8 && !plan_.training.fp8_attention && peak > 0 && c_.gpu.peak_tflops.bf16 <= 0) {
      d_.warning("cluster.gpu.peak_tflops.bf16", "FP8 training runs the attention (training.fp8_attention is off), the LM head and the MoE router in BF16, "
                                                 "but the GPU gives no BF16 peak: the attention is priced at the FP8 peak, the head and the router at "
                                                 "the fp16 peak or half the FP8 peak");
    }
    if (plan_.training.grad_reduce_in_bf16 && plan_.training.precision != Precision::bf16 && plan_.training.precision != Precision::fp8) {
      d_.error("training.grad_reduce_in_bf16", std::string("gradients reduced in bf16 need bf16 or fp8 training, not ") + std::string(to_string(plan_.training.precision)) +
                                                   (plan_.training.precision == Precision::fp16 ? " (its gradients are already 16-bit)" : " (it keeps every value in fp32)"));
    }
    if (const MasterWeights mw = plan_.training.optimizer_states.master_weights; mw != MasterWeights::fp32) {
      if (plan_.training.precision == Precision::fp32) {
        d_.error("training.optimizer_states.master_weights", "fp32 training updates its fp32 weights and keeps no master copy: must be fp32, not " + std::string(to_string(mw)));
      } else if (mw == MasterWeights::remainders && plan_.training.precision == Precision::fp16) {
        d_.error("training.optimizer_states.master_weights", "remainders complete bf16 weights to fp32 (bf16 or fp8 training), not fp16 weights");
      }
    }
    if (plan_.training.fp8_attention && plan_.training.precision != Precision::fp8) {
      d_.warning("training.fp8_attention", "has no effect unless training.precision is fp8");
    }
    check_attention_kernel();
    check_batch_mask();
    if (mesh_ok && c_.gpus_per_node > 0) check_tp_in_node();
    check_fabric();
  }

  // What the scale-out fabric can hold, in closed form (topology/builders.cpp builds it): a
  // leaf splits its radix k into down and up ports by the oversubscription; a 2-tier tree holds
  // k leaves, a 3-tier (Al-Fares) tree k pods of k/2 leaves, or k pods of pod_gpus; every plane
  // of a multi-plane fabric holds one port of each NIC.
  void check_fabric() {
    const auto& t = c_.topology;
    const std::int64_t nodes = c_.num_nodes();
    if (t.kind == TopologyKind::single_node) {
      if (nodes > 1) d_.error("cluster.topology.kind", "single_node holds one node; the plan has " + str(nodes));
      return;
    }
    if (t.kind == TopologyKind::multi_plane && t.planes < 2) {
      d_.error("cluster.topology.planes", "a multi_plane fabric needs at least 2 planes (one plane is kind: fat_tree)");
    }
    // A rail-optimized fabric is a fat tree over the NICs in rail order.
    const bool tree = t.kind != TopologyKind::single_node;
    if (t.pod_gpus > 0) {
      if (!tree || t.tiers != 3) {
        d_.error("cluster.topology.pod_gpus", "pods are the middle tier of a 3-tier tree (tiers: 3)");
        return;
      }
      if (c_.gpus_per_node > 0 && t.pod_gpus % c_.gpus_per_node != 0) {
        d_.error("cluster.topology.pod_gpus", str(t.pod_gpus) + " is not a multiple of gpus_per_node " + str(c_.gpus_per_node));
        return;
      }
    }
    if (nodes <= 1 || t.switch_radix < 2 || t.oversubscription < 1 || c_.nics_per_node <= 0) return;
    if (t.switch_radix % 2 != 0) {
      d_.error("cluster.topology.switch_radix", str(t.switch_radix) + " is odd; a fat tree splits each switch's ports in halves");
      return;
    }
    const double k = static_cast<double>(t.switch_radix);
    const double down = std::max(1.0, std::floor(k * t.oversubscription / (1 + t.oversubscription)));
    // Rails fill whole leaves: each rail's NICs padded to a multiple of the leaf's down-links.
    const double nics = t.kind == TopologyKind::rail_optimized
                            ? std::ceil(static_cast<double>(nodes) / down) * down * static_cast<double>(c_.nics_per_node)
                            : static_cast<double>(nodes) * static_cast<double>(c_.nics_per_node);
    double holds = 0;
    if (tree) {
      if (t.tiers <= 2) holds = k * down;
      else if (t.pod_gpus > 0) holds = k * static_cast<double>(t.pod_gpus / c_.gpus_per_node * c_.nics_per_node);
      else holds = k * (k / 2) * down;
    }
    if (holds > 0 && nics > holds) {
      d_.error("cluster.num_gpus", str(c_.num_gpus) + " GPUs need " + str(static_cast<std::int64_t>(nics)) + " NIC ports; a " +
                                       str(t.tiers) + "-tier fat tree of radix " + str(t.switch_radix) + " holds " +
                                       str(static_cast<std::int64_t>(holds)) +
                                       (t.tiers <= 2 ? " (use tiers: 3 or a larger radix)"
                                                     : (t.pod_gpus > 0 ? " (radix pods at most: use larger pods)" : " (use a larger radix)")));
    }
  }

  // A fused kernel runs only where it was built for: FlashAttention-3 on Hopper (sm_90a,
  // Shah et al. 2024 §1), any of them on a GPU (a CPU host runs the executor's own attention).
  // Megatron's dataloader's causal mask is micro_batch_size x seq_length^2 bytes a micro-batch:
  // a GiB at 32K tokens, copied and broadcast every micro-batch for kernels that do not read it.
  void check_batch_mask() {
    const double seq = static_cast<double>(plan_.model.seq_length);
    const double mask_bytes = static_cast<double>(plan_.training.micro_batch_size) * seq * seq;
    if (!plan_.training.attention_mask_in_batch || mask_bytes < 1024.0 * 1024 * 1024) return;
    std::ostringstream gib;
    gib.precision(3);
    gib << mask_bytes / (1024.0 * 1024 * 1024);
    d_.warning("training.attention_mask_in_batch", "the causal mask is " + gib.str() +
                                                       " GiB a micro-batch, copied from the host and broadcast over TP every micro-batch; "
                                                       "fused attention does not read it: Megatron's --no-create-attention-mask-in-dataloader "
                                                       "(attention_mask_in_batch: false) leaves it out");
  }

  void check_attention_kernel() {
    const AttentionKernel k = plan_.training.attention_kernel;
    if (k == AttentionKernel::automatic) return;
    const std::string name = "attention_kernel " + std::string(to_string(k));
    if (!plan_.training.flash_attention) {
      d_.error("training.attention_kernel", name + " is a fused kernel, but training.flash_attention is false (unfused attention); set one or the other");
      return;
    }
    const std::string gpu = c_.gpu.name.empty() ? std::string("the GPU") : c_.gpu.name;
    const GpuGeneration g = gpu_generation(c_.gpu);
    if (!has_tensor_peak(c_.gpu)) {
      d_.error("training.attention_kernel", name + " is a CUDA kernel, and " + gpu + " is not a GPU (no 16- or 8-bit tensor peak); leave it auto");
    } else if (k == AttentionKernel::flash3 && g != GpuGeneration::hopper) {
      d_.error("training.attention_kernel", "FlashAttention-3 runs only on Hopper (H100, H200, H800), not on " + gpu + "; use flash2 or cudnn");
    } else if (c_.gpu.calibration.attention_max_efficiency > 0) {
      d_.warning("training.attention_kernel", name + " is not priced: cluster.gpu.calibration measured the attention on the machine at hand, which replaces the kernel's pace");
    }
  }

  // A TP group should sit inside one NVLink domain: its all-reduces are on the critical path
  // of every layer (Narayanan et al. 2021 §3.3: "tensor model parallelism within a node").
  void check_tp_in_node() {
    const RankLayout layout = RankLayout::from_plan(p_);
    if (layout.world_size() != c_.num_gpus) return;
    // A TP group is {base + k * stride : k < TP} for each base whose TP coordinate is 0; one
    // pass over the ranks, no group materialised (4M ranks at most, by the schema's bounds).
    const std::int64_t stride = layout.stride(MeshDim::tp);
    const std::int64_t tp = layout.size(MeshDim::tp);
    const std::int64_t per_node = c_.gpus_per_node;
    // From its first member to its last, a group reaches this far; it spans nodes when its
    // first member's place in its node leaves less room than that.
    const std::int64_t reach = (tp - 1) * stride;
    auto warn = [&](std::int64_t base) {
      d_.warning("parallelism.tensor_model_parallel_size", "the TP group of ranks " + str(base) + ".." + str(base + reach) + " spans nodes of " +
                                                               str(per_node) + " GPUs: its all-reduces leave NVLink for the network");
    };
    if (reach == 0) return;
    if (reach >= per_node) return warn(0);  // rank 0's group, the first
    // The bases in increasing order: blocks of stride * tp ranks, each starting with the stride
    // bases of TP coordinate 0 (places in a node counted, not divided: a sweep validates every
    // plan, and a division per rank was a fifth of it, issue 18).
    const std::int64_t block = stride * tp, block_step = block % per_node;
    std::int64_t place = 0;  // the block's first rank's place in its node
    for (std::int64_t first = 0; first < layout.world_size(); first += block) {
      std::int64_t at = place;
      for (std::int64_t lo = 0; lo < stride; ++lo) {
        if (at + reach >= per_node) return warn(first + lo);
        if (++at == per_node) at = 0;
      }
      place += block_step;
      if (place >= per_node) place -= per_node;
    }
  }

  void check_failures() {
    const auto& f = plan_.failures;
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < f.stragglers.size(); ++i) {
      const auto& s = f.stragglers[i];
      const std::string path = index_path("failures.stragglers", i);
      if (c_.num_gpus > 0 && s.rank >= c_.num_gpus) {
        d_.error(path + ".rank", "rank " + str(s.rank) + " is outside the job's " + str(c_.num_gpus) + " GPUs");
      }
      if (!seen.insert(s.rank).second) d_.error(path + ".rank", "rank " + str(s.rank) + " is listed twice");
      if (s.slowdown < 1.0 && s.slowdown > 0) {
        d_.warning(path + ".slowdown", "below 1: this rank is faster than the others");
      }
    }
    for (std::size_t i = 0; i < f.events.size(); ++i) {
      const auto& e = f.events[i];
      const std::string path = index_path("failures.events", i) + ".target";
      const bool needs_index = e.kind == FailureEventKind::gpu_down || e.kind == FailureEventKind::node_down;
      if (!needs_index) continue;
      const std::int64_t limit = e.kind == FailureEventKind::gpu_down ? c_.num_gpus : c_.num_nodes();
      const char* what = e.kind == FailureEventKind::gpu_down ? "GPU" : "node";
      std::int64_t index = -1;
      bool numeric = !e.target.empty() && e.target.size() < 12;
      for (char ch : e.target) numeric = numeric && ch >= '0' && ch <= '9';
      if (numeric) index = std::stoll(e.target);
      if (!numeric) {
        d_.error(path, std::string("expected a ") + what + " index, got \"" + e.target + "\"");
      } else if (limit > 0 && index >= limit) {
        d_.error(path, std::string(what) + " " + e.target + " does not exist (the job has " + str(limit) + ")");
      }
    }
  }

  void check_checkpoint() {
    if (plan_.checkpoint.tiers.empty()) d_.error("checkpoint.tiers", "at least one tier is needed");
    if (plan_.checkpoint.spares > 0 && plan_.checkpoint.spares >= c_.num_nodes() && c_.num_nodes() > 0) {
      d_.warning("checkpoint.spares", "as many spare nodes as the job has nodes");
    }
    const auto& k = plan_.checkpoint;
    const auto& f = plan_.failures;
    if (k.on_failure == FailureResponse::shrink_dp && p_.data_parallel_size == 1) {
      d_.error("checkpoint.on_failure", "shrink_dp needs data parallelism above 1 (parallelism.data_parallel_size is 1)");
    }
    if (!k.tiers.empty() && std::find(k.tiers.begin(), k.tiers.end(), CheckpointTier::persistent) == k.tiers.end()) {
      d_.warning("checkpoint.tiers", "without a persistent tier, a node failing with its in-memory partner restarts training from the beginning");
    }
    if (!k.interval.automatic && k.interval.seconds > plan_.run.horizon_s) {
      d_.warning("checkpoint.interval", "longer than run.horizon: no checkpoint is ever taken");
    }
    for (std::size_t i = 0; i < f.events.size(); ++i) {
      if (f.events[i].at_s > plan_.run.horizon_s) d_.warning(index_path("failures.events", i) + ".at", "after run.horizon: it never happens");
    }
    if (f.distribution == FailureDistribution::exponential && f.weibull_shape != FailureConfig{}.weibull_shape) {
      d_.warning("failures.weibull_shape", "has no effect with distribution: exponential");
    }
  }

  const Plan& plan_;
  const ModelConfig& m_;
  const ParallelismConfig& p_;
  const ClusterConfig& c_;
  Diagnostics d_;
};

}  // namespace

double peak_tflops(const GpuSpec& gpu, Precision precision) {
  switch (precision) {
    case Precision::bf16: return gpu.peak_tflops.bf16;
    case Precision::fp16: return gpu.peak_tflops.fp16;
    case Precision::fp8: return gpu.peak_tflops.fp8;
    case Precision::fp32: return gpu.peak_tflops.fp32;
  }
  return 0;
}

double attention_peak_tflops(const GpuSpec& gpu, const TrainingConfig& training) {
  if (training.precision == Precision::fp8 && !training.fp8_attention && gpu.peak_tflops.bf16 > 0) return gpu.peak_tflops.bf16;
  return peak_tflops(gpu, training.precision);
}

Diagnostics validate(const Plan& plan) { return Validator(plan).run(); }

}  // namespace meshwork::plan
