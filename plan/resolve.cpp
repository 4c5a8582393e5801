#include "plan/validate.hpp"

#include "plan/pipeline_layout.hpp"

#include <algorithm>
#include <string>

namespace meshwork::plan {

std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

void resolve(Plan& plan, Diagnostics& diags) {
  ModelConfig& m = plan.model;
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  if (m.kv_channels == 0 && m.num_attention_heads > 0) {
    if (m.hidden_size % m.num_attention_heads == 0) {
      m.kv_channels = m.hidden_size / m.num_attention_heads;
    } else {
      diags.error("model.kv_channels", "num_attention_heads " + std::to_string(m.num_attention_heads) +
                                           " does not divide hidden_size " + std::to_string(m.hidden_size) +
                                           "; give the head width");
    }
  }
  if (m.ffn_hidden_size == 0 && m.hidden_size > 0) {
    if (m.activation == Activation::swiglu) {
      // Megatron-LM with --swiglu: int(4h * 2/3 / 64) * 64, the same parameters as a 4h GELU MLP.
      m.ffn_hidden_size = std::max<std::int64_t>(64, (4 * m.hidden_size * 2 / 3) / 64 * 64);
    } else {
      // Megatron-LM's default, and GPT-3's (Brown et al. 2020 §2.1: d_ff = 4 d_model).
      m.ffn_hidden_size = 4 * m.hidden_size;
    }
  }
  if (m.moe.moe_ffn_hidden_size == 0) m.moe.moe_ffn_hidden_size = m.ffn_hidden_size;

  ParallelismConfig& p = plan.parallelism;
  ClusterConfig& c = plan.cluster;
  auto model_parallel = checked_mul(p.tensor_model_parallel_size, p.context_parallel_size);
  if (model_parallel) model_parallel = checked_mul(*model_parallel, p.pipeline_model_parallel_size);
  if (model_parallel && *model_parallel > 0) {
    if (p.data_parallel_size == 0 && c.num_gpus > 0 && c.num_gpus % *model_parallel == 0) {
      p.data_parallel_size = c.num_gpus / *model_parallel;
    } else if (c.num_gpus == 0 && p.data_parallel_size > 0) {
      if (auto n = checked_mul(*model_parallel, p.data_parallel_size)) c.num_gpus = *n;
    }
  }

  // An explicit layout gives the model chunks per stage (Megatron infers the virtual pipeline
  // size from it); a vpp that disagrees is reported by validation.
  if (!p.pipeline_model_parallel_layout.empty() && p.virtual_pipeline_model_parallel_size == 1 &&
      p.pipeline_model_parallel_size > 0) {
    std::string error;
    if (const auto stages = parse_pipeline_layout(p.pipeline_model_parallel_layout, error)) {
      const auto n = static_cast<std::int64_t>(stages->size());
      if (n % p.pipeline_model_parallel_size == 0) p.virtual_pipeline_model_parallel_size = n / p.pipeline_model_parallel_size;
    }
  }

  if (c.intra_node.bandwidth_gbytes_per_s == 0) {
    switch (c.intra_node.kind) {
      case IntraNodeKind::nvswitch:
      case IntraNodeKind::nvlink_mesh: c.intra_node.bandwidth_gbytes_per_s = c.gpu.nvlink_gbytes_per_s; break;
      // PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 encoding = 31.5 GB/s per direction (PCI-SIG).
      case IntraNodeKind::pcie: c.intra_node.bandwidth_gbytes_per_s = 31.5; break;
      // Ranks of one host exchange through its memory.
      case IntraNodeKind::shared_memory: c.intra_node.bandwidth_gbytes_per_s = c.gpu.hbm_gbytes_per_s; break;
    }
  }
}

}  // namespace meshwork::plan
