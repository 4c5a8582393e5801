#include <iomanip>
#include <ostream>
#include <sstream>

#include "cli/commands.hpp"
#include "models/hardware.hpp"
#include "models/params.hpp"
#include "report/report_io.hpp"
#include "plan/derived.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"
#include "plan/rank_layout.hpp"
#include "plan/units.hpp"
#include "plan/validate.hpp"

namespace meshwork::cli {
namespace {

// "unfused", or the fused kernel, auto's choice named as such: "cudnn (auto on Hopper)".
// Adam's states when not the default fp32 ones: ", Adam m bf16, v bf16, master weights none".
std::string optimizer_states_text(const plan::TrainingConfig& t) {
  const auto& st = t.optimizer_states;
  if (st.classic()) return "";
  return ", Adam m " + std::string(to_string(st.exp_avg)) + ", v " + std::string(to_string(st.exp_avg_sq)) +
         (t.precision == plan::Precision::fp32 ? std::string() : ", master weights " + std::string(to_string(st.master_weights)));
}

std::string attention_text(const plan::Plan& p) {
  if (!p.training.flash_attention) return "unfused";
  const auto hw = models::hardware_profile(p.cluster.gpu);
  if (hw.attention_max_efficiency > 0) return "fused, as measured (cluster.gpu.calibration)";
  const plan::GpuGeneration generation = plan::gpu_generation(p.cluster.gpu);
  if (!plan::has_tensor_peak(p.cluster.gpu)) return "fused, the executor's own";
  const std::string kernel(plan::to_string(models::attention_kernel(hw, p.training.attention_kernel)));
  if (p.training.attention_kernel != plan::AttentionKernel::automatic) return kernel;
  const char* on = generation == plan::GpuGeneration::ampere   ? "Ampere"
                   : generation == plan::GpuGeneration::hopper ? "Hopper"
                   : generation == plan::GpuGeneration::blackwell ? "Blackwell"
                                                                  : "a GPU no generation covers";
  return kernel + " (auto on " + on + ")";
}

std::string num(double v) {
  std::ostringstream s;
  s << std::setprecision(6) << v;
  return s.str();
}

std::string ranks(const std::vector<std::int64_t>& members) {
  std::string out = "[";
  const std::size_t shown = std::min<std::size_t>(members.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) out += (i ? " " : "") + std::to_string(members[i]);
  if (members.size() > shown) out += " ... " + std::to_string(members.back());
  return out + "]";
}

void print_summary(std::ostream& os, const plan::Plan& p) {
  using plan::to_string;
  const auto d = plan::derive(p);
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const auto& c = p.cluster;
  os << "plan      " << (p.name.empty() ? "(unnamed)" : p.name) << '\n';
  os << "model     " << (m.name.empty() ? "(custom)" : m.name) << ": " << m.num_layers << " layers, hidden "
     << m.hidden_size << ", " << m.num_attention_heads << " heads (" << m.num_query_groups << " KV groups, width "
     << m.kv_channels << "), FFN " << m.ffn_hidden_size << ' ' << to_string(m.activation) << ", "
     << to_string(m.normalization) << ", seq " << m.seq_length << ", vocab " << m.vocab_size << '\n';
  os << "params    " << report::parameters_line(models::parameter_summary(m)) << '\n';
  if (m.is_moe()) {
    os << "moe       " << m.moe.num_moe_experts << " experts, top-" << m.moe.moe_router_topk << ", expert FFN "
       << m.moe.moe_ffn_hidden_size;
    if (m.moe.moe_shared_expert_intermediate_size > 0) os << ", shared FFN " << m.moe.moe_shared_expert_intermediate_size;
    if (m.moe.first_k_dense_layers > 0) os << ", first " << m.moe.first_k_dense_layers << " layers dense";
    os << '\n';
  }
  os << "training  global batch " << p.training.global_batch_size << " x micro-batch " << p.training.micro_batch_size
     << ", " << to_string(p.training.precision) << (p.training.grad_reduce_in_bf16 ? " (gradients in bf16)" : "") << optimizer_states_text(p.training)
     << ", recompute " << to_string(p.training.recompute)
     << ", attention " << attention_text(p) << ", batch load " << to_string(p.training.data_loading)
     << (p.training.attention_mask_in_batch ? " with the causal mask" : "") << '\n';
  os << "mesh      TP " << par.tensor_model_parallel_size << " x CP " << par.context_parallel_size << " x PP "
     << par.pipeline_model_parallel_size << " x DP " << par.data_parallel_size << " = " << c.num_gpus << " GPUs";
  if (par.expert_model_parallel_size > 1) os << " (EP " << par.expert_model_parallel_size << " x expert-DP " << d.expert_data_parallel_size << ")";
  os << ", order " << par.order << ", ZeRO " << par.zero_stage << (par.sequence_parallel ? ", SP" : "") << '\n';
  os << "pipeline  " << to_string(par.pipeline_schedule) << ", " << par.pipeline_model_parallel_size
     << (par.pipeline_model_parallel_size == 1 ? " stage" : " stages");
  if (par.virtual_pipeline_model_parallel_size > 1) os << " x " << par.virtual_pipeline_model_parallel_size << " chunks";
  os << ", layers per stage " << ranks(d.layers_per_stage) << ", " << d.micro_batches_per_step
     << " micro-batches per step\n";
  os << "tokens    " << d.tokens_per_step << " per step";
  if (d.steps_to_train > 0) os << "; " << num(p.training.tokens) << " tokens = " << num(d.steps_to_train) << " steps";
  os << '\n';
  os << "cluster   " << c.num_gpus << " x " << c.gpu.name << " (" << num(plan::peak_tflops(c.gpu, p.training.precision)) << " TFLOP/s "
     << to_string(p.training.precision) << ", "
     << num(c.gpu.hbm_gib) << " GiB at " << num(c.gpu.hbm_gbytes_per_s) << " GB/s) on " << d.num_nodes << " nodes of "
     << c.gpus_per_node << '\n';
  os << "network   " << to_string(c.intra_node.kind) << " " << num(c.intra_node.bandwidth_gbytes_per_s)
     << " GB/s in a node; " << c.nics_per_node << " x " << num(c.nic_bandwidth_gbps) << " Gb/s NICs per node, "
     << to_string(c.topology.kind) << " (" << c.topology.tiers << " tiers, radix " << c.topology.switch_radix
     << ", oversubscription " << num(c.topology.oversubscription) << ")\n";
  os << "run       horizon " << plan::format_duration(p.run.horizon_s) << ", seed " << p.run.seed << ", "
     << p.run.trials << " trials; checkpoint "
     << (p.checkpoint.interval.automatic ? "auto" : plan::format_duration(p.checkpoint.interval.seconds)) << " "
     << to_string(p.checkpoint.mode) << '\n';
  const auto layout = plan::RankLayout::from_plan(par);
  os << "rank 0    ";
  for (auto g : plan::kAllGroupKinds) {
    if (layout.distinct(g)) os << to_string(g) << ' ' << ranks(layout.group_members(g, 0)) << "  ";
  }
  os << '\n';
}

}  // namespace

void add_show_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("show", "Print the resolved plan: defaults filled, aliases expanded, derived values");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto derived = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_flag("--json", *json, "Print the resolved plan as JSON, the save format: it loads back as the same plan");
  cmd->add_flag("--derived", *derived, "With --json: print {\"plan\": ..., \"derived\": ...} with DP, micro-batches, layers per stage...");
  cmd->callback([file, json, derived, &io] {
    const auto result = plan::load_plan(*file);
    print_diagnostics(io.err, result.diagnostics, *file);
    if (!result.ok()) {
      io.err << *file << ": " << result.diagnostics.error_count() << " error(s); nothing to show\n";
      io.exit_code = 1;
      return;
    }
    if (*json && !*derived) {
      io.out << plan::to_json_string(result.plan);
    } else if (*json) {
      nlohmann::json out = {{"plan", plan::to_json(result.plan)}};
      const auto d = plan::derive(result.plan);
      out["derived"] = {{"data_parallel_size", d.data_parallel_size},
                        {"expert_data_parallel_size", d.expert_data_parallel_size},
                        {"num_nodes", d.num_nodes},
                        {"micro_batches_per_step", d.micro_batches_per_step},
                        {"gradient_accumulation_steps", d.micro_batches_per_step},
                        {"tokens_per_step", d.tokens_per_step},
                        {"layers_per_stage", d.layers_per_stage},
                        {"steps_to_train", d.steps_to_train}};
      const auto params = models::parameter_summary(result.plan.model);
      out["derived"]["parameters"] = {{"total", params.total},
                                      {"active", params.active},
                                      {"embedding", params.embedding},
                                      {"non_embedding", params.non_embedding()}};
      io.out << out.dump(2) << '\n';
    } else {
      print_summary(io.out, result.plan);
    }
  });
}

}  // namespace meshwork::cli
