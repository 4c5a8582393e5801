#include <cstdio>
#include <ostream>

#include "cli/commands.hpp"
#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "plan/units.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {
namespace {

void print_summary(std::ostream& os, const report::Report& r) {
  const auto& b = r.breakdown;
  os << "plan " << (r.plan_name.empty() ? "(unnamed)" : r.plan_name) << ": estimated on " << r.num_gpus << " GPUs\n";
  os << "  model: " << report::parameters_line(r.parameters) << '\n';
  os << "  elapsed time per iteration (ms): " << fmt("%.1f", r.step_time_s * 1e3)
     << " | throughput per GPU (TFLOP/s/GPU): " << fmt("%.1f", r.model_tflops_per_gpu) << " model, "
     << fmt("%.1f", r.hardware_tflops_per_gpu) << " hardware\n";
  os << "  MFU " << fmt("%.1f%%", 100 * r.mfu) << " (" << r.mfu_attention << " attention) | HFU " << fmt("%.1f%%", 100 * r.hfu) << " | tokens/s "
     << fmt("%.4g", r.tokens_per_s) << " | bubble fraction " << fmt("%.3f", r.bubble_fraction);
  if (r.time_to_train_s > 0) os << " | time to train " << fmt("%.1f", r.time_to_train_s / 86400) << " days";
  os << "\n  step breakdown (s): compute " << fmt("%.3f", b.compute_s) << ", recompute " << fmt("%.3f", b.recompute_s)
     << ", TP " << fmt("%.3f", b.tp_s) << ", CP " << fmt("%.3f", b.cp_s) << ", EP " << fmt("%.3f", b.ep_s) << ", DP "
     << fmt("%.3f", b.dp_s) << ", PP " << fmt("%.3f", b.pp_s) << ", bubble " << fmt("%.3f", b.bubble_s)
     << ", optimizer " << fmt("%.3f", b.optimizer_s) << '\n';
  os << report::memory_table_text(r);
  os << "  power: " << fmt("%.0f", r.power.gpu_watts) << " W per GPU, " << fmt("%.2f", r.power.node_watts / 1e3)
     << " kW per node, " << fmt("%.3f", r.power.cluster_megawatts) << " MW, " << fmt("%.3g", r.power.joules_per_token)
     << " J/token\n";
  if (r.interval) os << "  " << report::interval_line(r) << '\n';
  for (const auto& note : r.notes) os << "  note: " << note << '\n';
  os << memory_verdict_line(r) << '\n';
}

}  // namespace

void add_estimate_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("estimate", "Closed-form estimate of a plan: step time, MFU, memory, power");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto csv = std::make_shared<bool>(false);
  auto causal = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_flag("--json", *json, "Print the Report as JSON");
  cmd->add_flag("--csv", *csv, "Print the Report as one CSV row with a header");
  cmd->add_flag("--causal-flops", *causal, "Count only the causal half of attention in MFU's model FLOPs (Megatron-LM's convention): training.attention_flops: causal");
  cmd->footer("Exit status: 0 when the plan is valid and fits in memory (a tight fit warns), 3 when it does not fit, 1 for a plan with errors.");
  cmd->callback([=, &io] {
    const auto loaded = load_plan_for(io, *file, "estimate");
    if (!loaded) return;
    plan::Plan p = *loaded;
    if (*causal) p.training.attention_flops = plan::AttentionFlops::causal;
    const report::Report r = models::estimate(p);
    if (*json) {
      io.out << report::to_json(r).dump(2) << '\n';
    } else if (*csv) {
      io.out << report::csv_header() << '\n' << report::csv_row(r) << '\n';
    } else {
      print_summary(io.out, r);
    }
    if (!r.fits) io.exit_code = kExitDoesNotFit;
  });
}

}  // namespace meshwork::cli
