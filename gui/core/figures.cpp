#include "gui/core/figures.hpp"

#include <cstdio>

namespace meshwork::gui {

Headline headline(const report::Report& r, double usd_per_gpu_hour) {
  Headline h;
  h.step_time_s = r.step_time_s;
  h.mfu = r.mfu;
  h.tokens_per_s = r.tokens_per_s;
  h.time_to_train_s = r.time_to_train_s;
  h.cluster_megawatts = r.power.cluster_megawatts;
  h.gpu_hours = static_cast<double>(r.num_gpus) * r.time_to_train_s / 3600.0;
  h.energy_mwh = r.power.cluster_megawatts * r.time_to_train_s / 3600.0;
  if (usd_per_gpu_hour > 0) h.cost_usd = h.gpu_hours * usd_per_gpu_hour;
  return h;
}

std::vector<WaterfallBar> waterfall(const report::Breakdown& b) {
  const std::pair<const char*, double> parts[] = {
      {"compute", b.compute_s}, {"recompute", b.recompute_s}, {"TP comm", b.tp_s}, {"CP comm", b.cp_s},
      {"EP all-to-all", b.ep_s}, {"DP comm", b.dp_s},         {"PP comm", b.pp_s}, {"bubble", b.bubble_s},
      {"optimizer", b.optimizer_s}, {"stalls", b.stalls_s}};
  std::vector<WaterfallBar> bars;
  double at = 0;
  for (const auto& [label, s] : parts) {
    if (s <= 0) continue;
    bars.push_back({label, at, s});
    at += s;
  }
  return bars;
}

std::vector<MemoryStack> memory_stacks(const report::Report& r) {
  std::vector<MemoryStack> out;
  for (const auto& m : r.memory) {
    out.push_back({"stage " + std::to_string(m.stage),
                   {{"weights", m.weights_gib},
                    {"gradients", m.gradients_gib},
                    {"optimizer", m.optimizer_gib},
                    {"activations", m.activations_gib},
                    {"buffers", m.buffers_gib}},
                   m.capacity_gib,
                   m.fits});
  }
  return out;
}

std::string human_duration(double s) {
  char buf[64];
  if (s <= 0) return "-";
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else if (s < 120) std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  return buf;
}

}  // namespace meshwork::gui
