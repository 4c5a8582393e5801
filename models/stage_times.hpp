#pragma once
// What the closed form times per micro-batch on one stage (models/estimate.cpp), shared with its
// replay of data parallelism (models/dp_replay).
#include <array>
#include <iterator>

#include "models/op_table.hpp"

namespace meshwork::models {

// The op kinds of models/op_table.hpp. A kind's index is its enumerator's value; a kind missing
// here fails loudly (std::array::at) rather than being dropped from op_times.
constexpr OpKind kOpKinds[] = {OpKind::gemm,      OpKind::attention, OpKind::elementwise, OpKind::norm,
                               OpKind::embedding, OpKind::loss,      OpKind::optimizer,   OpKind::data};
constexpr std::size_t kNumOpKinds = std::size(kOpKinds);

// Seconds and op counts by kind (forward, backward and recompute together).
struct KindTimes {
  std::array<double, kNumOpKinds> seconds{};
  std::array<double, kNumOpKinds> count{};
  void add(OpKind k, double s) {
    const auto i = static_cast<std::size_t>(k);
    seconds.at(i) += s;
    count.at(i) += 1;
  }
  // Adds `times` copies of `o` (layers of one kind).
  void add(const KindTimes& o, double times = 1) {
    for (std::size_t i = 0; i < kNumOpKinds; ++i) {
      seconds[i] += times * o.seconds[i];
      count[i] += times * o.count[i];
    }
  }
};

struct StageTimes {
  double forward_s = 0, backward_s = 0, recompute_s = 0;
  KindTimes kinds;  // the same seconds as forward_s + backward_s + recompute_s, by op kind
  double gemm_s = 0, attention_s = 0;  // what communication can hide under
  double tp_s = 0, cp_s = 0, ep_s = 0;  // per micro-batch
  double weight_s = 0;                  // the weight-gradient part of backward_s
  double comm_f_s = 0, comm_b_s = 0;    // tp + cp + ep of the forward, of the backward (with recompute)
  double params = 0;                    // dense parameters per GPU (for DP volumes)
  double expert_params = 0;
};

}  // namespace meshwork::models
