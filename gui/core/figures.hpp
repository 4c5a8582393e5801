#pragma once
// What the results view draws, computed from a Report as plain data so it is tested without
// widgets: the headline figures, the step-time waterfall and the memory stacks per stage.

#include <string>
#include <vector>

#include "report/report.hpp"

namespace meshwork::gui {

struct Headline {
  double step_time_s = 0;
  double mfu = 0;
  double tokens_per_s = 0;
  double time_to_train_s = 0;     // 0 when the plan has no token target
  double cluster_megawatts = 0;
  double energy_mwh = 0;          // over the time to train
  double cost_usd = 0;            // GPU-hours to train x price; 0 without a price or a target
  double gpu_hours = 0;
};

// `usd_per_gpu_hour` <= 0: no cost. Cost is GPU-hours (num_gpus x time to train) x price, the
// way clouds bill reserved GPUs; energy is the cluster's power over the time to train.
Headline headline(const report::Report& r, double usd_per_gpu_hour);

// One bar of the step-time waterfall: it starts where the previous one ended.
struct WaterfallBar {
  std::string label;
  double start_s = 0;
  double length_s = 0;
};
// Compute, recomputation, exposed TP/CP/EP/DP/PP communication, bubble, optimizer and stalls,
// in that order, skipping parts that are zero; the last bar ends at the breakdown's total.
std::vector<WaterfallBar> waterfall(const report::Breakdown& b);

// One pipeline stage's memory, GiB, by part, against its GPU's capacity.
struct MemoryStack {
  std::string label;  // "stage 0"
  std::vector<std::pair<std::string, double>> parts_gib;  // weights, gradients, optimizer, activations, buffers
  double capacity_gib = 0;
  bool fits = true;
};
std::vector<MemoryStack> memory_stacks(const report::Report& r);

// "1.23 s", "456 ms", "3.2 days": a duration as people read it.
std::string human_duration(double seconds);

}  // namespace meshwork::gui
