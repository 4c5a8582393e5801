#pragma once
// The plan's enumerations and their names in plan files. Each enum has one table of names,
// used by the loader, the writer and the field reference alike.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace meshwork::plan {

enum class Activation { gelu, swiglu };
enum class Normalization { layernorm, rmsnorm };
enum class PositionEmbedding { learned_absolute, rope };
enum class Precision { bf16, fp16, fp8, fp32 };
enum class Recompute { none, selective, full };
// Where the optimizer keeps the weights it updates, in 16-bit training: an fp32 copy (Megatron's
// default); an fp16 copy (--main-params-dtype fp16 with --use-precision-aware-optimizer); the
// low 16 bits of the fp32 value beside the bf16 weight (store_param_remainders: Megatron-core's
// default with the precision-aware optimizer, Transformer Engine >= 2.1; Apex's
// DistributedFusedAdam); none, the 16-bit weights updated in place (Apex's
// DistributedFusedAdam with its state in the model's dtype and store_params off, as NeMo 1.x
// sets it for optim.dtype bf16).
enum class MasterWeights { fp32, fp16, remainders, none };
// How MFU's model FLOPs count causal attention: the full s x s matrix (the papers: Korthikanti
// et al. 2022 eq. 7, NAR21) or its causal half (Megatron-LM's throughput since 2024).
enum class AttentionFlops { full, causal };
enum class RecomputeMethod { uniform, block };
// Which fused attention kernel runs (Megatron-core's --attention-backend with Transformer Engine):
// auto, the one Transformer Engine picks on the plan's GPU generation (models/hardware.cpp);
// FlashAttention-2; FlashAttention-3 (Hopper only); cuDNN's fused attention.
enum class AttentionKernel { automatic, flash2, flash3, cudnn };
// How a micro-batch reaches the GPUs of the first and last pipeline stages: tp_broadcast, the
// tensor-parallel group's rank 0 copies it to its GPU and broadcasts it to the group
// (Megatron-LM's get_batch_on_this_tp_rank); every_rank, each GPU copies what it needs itself
// (NeMo 1.x's MegatronGPTModel).
enum class DataLoading { tp_broadcast, every_rank };
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zero_bubble };
// Context parallelism's exchange of K and V (Megatron-core's --cp-comm-type).
enum class CpCommType { p2p, all_gather };
enum class GradientCompression { none, onebit, topk };
enum class IntraNodeKind { nvswitch, nvlink_mesh, pcie, shared_memory };
enum class TopologyKind { single_node, fat_tree, rail_optimized, multi_plane };
enum class Routing { d_mod_k, ecmp_hash, adaptive };
enum class CollectiveAlgorithm { automatic, ring, tree, nvls, hierarchical };
enum class FailureEventKind { gpu_down, node_down, nic_down, link_down, switch_down, maintenance };
enum class CheckpointMode { sync, async };
enum class CheckpointTier { memory, persistent };
enum class FailureResponse { restart, shrink_dp };
enum class FailureDistribution { exponential, weibull };
enum class FailurePreset { none, llama3 };

template <class E>
struct EnumNames;

#define MESHWORK_ENUM_NAMES(E, ...)                                               \
  template <>                                                                    \
  struct EnumNames<E> {                                                          \
    static constexpr std::array values = {__VA_ARGS__};                          \
    static constexpr std::string_view type_name = #E;                            \
  }

MESHWORK_ENUM_NAMES(Activation, std::pair{Activation::gelu, std::string_view("gelu")},
                    std::pair{Activation::swiglu, std::string_view("swiglu")});
MESHWORK_ENUM_NAMES(Normalization, std::pair{Normalization::layernorm, std::string_view("layernorm")},
                    std::pair{Normalization::rmsnorm, std::string_view("rmsnorm")});
MESHWORK_ENUM_NAMES(PositionEmbedding,
                    std::pair{PositionEmbedding::learned_absolute, std::string_view("learned_absolute")},
                    std::pair{PositionEmbedding::rope, std::string_view("rope")});
MESHWORK_ENUM_NAMES(Precision, std::pair{Precision::bf16, std::string_view("bf16")},
                    std::pair{Precision::fp16, std::string_view("fp16")},
                    std::pair{Precision::fp8, std::string_view("fp8")},
                    std::pair{Precision::fp32, std::string_view("fp32")});
MESHWORK_ENUM_NAMES(MasterWeights, std::pair{MasterWeights::fp32, std::string_view("fp32")},
                    std::pair{MasterWeights::fp16, std::string_view("fp16")},
                    std::pair{MasterWeights::remainders, std::string_view("remainders")},
                    std::pair{MasterWeights::none, std::string_view("none")});
MESHWORK_ENUM_NAMES(Recompute, std::pair{Recompute::none, std::string_view("none")},
                    std::pair{Recompute::selective, std::string_view("selective")},
                    std::pair{Recompute::full, std::string_view("full")});
MESHWORK_ENUM_NAMES(AttentionFlops, std::pair{AttentionFlops::full, std::string_view("full")},
                    std::pair{AttentionFlops::causal, std::string_view("causal")});
MESHWORK_ENUM_NAMES(AttentionKernel, std::pair{AttentionKernel::automatic, std::string_view("auto")},
                    std::pair{AttentionKernel::flash2, std::string_view("flash2")},
                    std::pair{AttentionKernel::flash3, std::string_view("flash3")},
                    std::pair{AttentionKernel::cudnn, std::string_view("cudnn")});
MESHWORK_ENUM_NAMES(DataLoading, std::pair{DataLoading::tp_broadcast, std::string_view("tp_broadcast")},
                    std::pair{DataLoading::every_rank, std::string_view("every_rank")});
MESHWORK_ENUM_NAMES(RecomputeMethod, std::pair{RecomputeMethod::uniform, std::string_view("uniform")},
                    std::pair{RecomputeMethod::block, std::string_view("block")});
MESHWORK_ENUM_NAMES(PipelineSchedule, std::pair{PipelineSchedule::gpipe, std::string_view("gpipe")},
                    std::pair{PipelineSchedule::one_f_one_b, std::string_view("1f1b")},
                    std::pair{PipelineSchedule::interleaved, std::string_view("interleaved")},
                    std::pair{PipelineSchedule::zero_bubble, std::string_view("zero_bubble")});
MESHWORK_ENUM_NAMES(GradientCompression,
                    std::pair{GradientCompression::none, std::string_view("none")},
                    std::pair{GradientCompression::onebit, std::string_view("onebit")},
                    std::pair{GradientCompression::topk, std::string_view("topk")});
MESHWORK_ENUM_NAMES(IntraNodeKind, std::pair{IntraNodeKind::nvswitch, std::string_view("nvswitch")},
                    std::pair{IntraNodeKind::nvlink_mesh, std::string_view("nvlink_mesh")},
                    std::pair{IntraNodeKind::pcie, std::string_view("pcie")},
                    std::pair{IntraNodeKind::shared_memory, std::string_view("shared_memory")});
MESHWORK_ENUM_NAMES(TopologyKind, std::pair{TopologyKind::single_node, std::string_view("single_node")},
                    std::pair{TopologyKind::fat_tree, std::string_view("fat_tree")},
                    std::pair{TopologyKind::rail_optimized, std::string_view("rail_optimized")},
                    std::pair{TopologyKind::multi_plane, std::string_view("multi_plane")});
MESHWORK_ENUM_NAMES(CpCommType, std::pair{CpCommType::p2p, std::string_view("p2p")},
                    std::pair{CpCommType::all_gather, std::string_view("all_gather")});
MESHWORK_ENUM_NAMES(Routing, std::pair{Routing::d_mod_k, std::string_view("d_mod_k")},
                    std::pair{Routing::ecmp_hash, std::string_view("ecmp_hash")}, std::pair{Routing::adaptive, std::string_view("adaptive")});
MESHWORK_ENUM_NAMES(CollectiveAlgorithm, std::pair{CollectiveAlgorithm::automatic, std::string_view("auto")},
                    std::pair{CollectiveAlgorithm::ring, std::string_view("ring")},
                    std::pair{CollectiveAlgorithm::tree, std::string_view("tree")},
                    std::pair{CollectiveAlgorithm::nvls, std::string_view("nvls")},
                    std::pair{CollectiveAlgorithm::hierarchical, std::string_view("hierarchical")});
MESHWORK_ENUM_NAMES(FailureEventKind,
                    std::pair{FailureEventKind::gpu_down, std::string_view("gpu_down")},
                    std::pair{FailureEventKind::node_down, std::string_view("node_down")},
                    std::pair{FailureEventKind::nic_down, std::string_view("nic_down")},
                    std::pair{FailureEventKind::link_down, std::string_view("link_down")},
                    std::pair{FailureEventKind::switch_down, std::string_view("switch_down")},
                    std::pair{FailureEventKind::maintenance, std::string_view("maintenance")});
MESHWORK_ENUM_NAMES(CheckpointMode, std::pair{CheckpointMode::sync, std::string_view("sync")},
                    std::pair{CheckpointMode::async, std::string_view("async")});
MESHWORK_ENUM_NAMES(CheckpointTier, std::pair{CheckpointTier::memory, std::string_view("memory")},
                    std::pair{CheckpointTier::persistent, std::string_view("persistent")});
MESHWORK_ENUM_NAMES(FailureResponse, std::pair{FailureResponse::restart, std::string_view("restart")},
                    std::pair{FailureResponse::shrink_dp, std::string_view("shrink_dp")});

MESHWORK_ENUM_NAMES(FailureDistribution, std::pair{FailureDistribution::exponential, std::string_view("exponential")},
                    std::pair{FailureDistribution::weibull, std::string_view("weibull")});
MESHWORK_ENUM_NAMES(FailurePreset, std::pair{FailurePreset::none, std::string_view("none")},
                    std::pair{FailurePreset::llama3, std::string_view("llama3")});

#undef MESHWORK_ENUM_NAMES

template <class E>
constexpr std::string_view to_string(E value) {
  for (const auto& [v, name] : EnumNames<E>::values) {
    if (v == value) return name;
  }
  return "?";
}

// Case-insensitive, '-' and '_' alike: "1F1B", "zero-bubble", "RMSNorm".
inline bool enum_name_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto norm = [](char c) {
      if (c == '-') return '_';
      return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (norm(a[i]) != norm(b[i])) return false;
  }
  return true;
}

template <class E>
std::optional<E> enum_from_string(std::string_view text) {
  for (const auto& [v, name] : EnumNames<E>::values) {
    if (enum_name_equal(name, text)) return v;
  }
  return std::nullopt;
}

// "gelu | swiglu"
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::values) {
    if (!out.empty()) out += " | ";
    out += name;
  }
  return out;
}

}  // namespace meshwork::plan
