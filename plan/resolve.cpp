#include "plan/validate.hpp"

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
      diags.error("model.kv_channels", "hidden_size " + std::to_string(m.hidden_size) +
                                           " does not divide into num_attention_heads " +
                                           std::to_string(m.num_attention_heads) + "; give the head width");
    }
  }
  if (m.ffn_hidden_size == 0) {
    // Megatron-LM's default, and GPT-3's (Brown et al. 2020 §2.1: d_ff = 4 d_model).
    if (auto ffn = checked_mul(4, m.hidden_size)) m.ffn_hidden_size = *ffn;
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

  if (c.intra_node.bandwidth_gbytes_per_s == 0) {
    // Without NVLink (a CPU host), ranks in a node exchange through memory.
    c.intra_node.bandwidth_gbytes_per_s =
        c.gpu.nvlink_gbytes_per_s > 0 ? c.gpu.nvlink_gbytes_per_s : c.gpu.hbm_gbytes_per_s;
  }
}

}  // namespace meshwork::plan
