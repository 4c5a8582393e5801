#pragma once
// What the simulator plays for a stage's instructions: each compute instruction's seconds, or,
// merged (the default), runs of compute and in-node TP/CP collectives as single blocks whose
// collectives are timed by the ring formula on the NVLink links they would have used alone.

#include <vector>

#include "models/compute_time.hpp"
#include "models/program.hpp"
#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::sim {

// Bytes each rank sends to its ring neighbour, as one flow, and the ring's steps: the
// nccl-tests conventions (all-reduce 2(n-1)/n S in 2(n-1) steps, reduce-scatter and all-gather
// (n-1)/n S in n-1). All-to-all is approximated as a ring too (each rank's (n-1)/n S passed
// along).
struct RingFlow {
  double bytes = 0;
  double steps = 0;
};
RingFlow ring_flow(models::Collective c, double bytes, double n);

// The seconds a compute instruction (or a merged block) stands for, by kind.
struct BlockTime {
  double compute_s = 0, recompute_s = 0, optimizer_s = 0, tp_s = 0, cp_s = 0;
  [[nodiscard]] double total() const { return compute_s + recompute_s + optimizer_s + tp_s + cp_s; }
};

struct BlockTimer {
  const plan::Plan& plan;
  const plan::RankLayout& layout;
  const models::ComputeTimer& timer;
  bool free_communication = false;

  // One entry per instruction, the compute ones timed.
  [[nodiscard]] std::vector<BlockTime> per_instruction(const models::StageProgram& sp) const;
  // Merges runs of compute and in-node blocking collectives of `sp` into single compute
  // blocks (the other instructions stay, their `after` remapped); one entry per new instruction.
  std::vector<BlockTime> coarsen(models::StageProgram& sp) const;

 private:
  void charge(BlockTime& b, const models::Instr& in) const;
  [[nodiscard]] bool in_node(plan::GroupKind g) const;
  [[nodiscard]] double nvlink_collective_s(const models::Instr& in) const;
};

}  // namespace meshwork::sim
