#pragma once
// What the simulator plays for a stage's instructions: each compute instruction's seconds, or,
// merged (the default), runs of compute and in-node TP/CP collectives as single blocks whose
// collectives are timed by models/comm's formula for their algorithm (ring or NVLS) on the
// NVLink links they would have used alone.

#include <map>
#include <vector>

#include "models/comm.hpp"
#include "models/compute_time.hpp"
#include "models/program.hpp"
#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::sim {

// The seconds a compute instruction (or a merged block) stands for, by kind.
struct BlockTime {
  double compute_s = 0, recompute_s = 0, optimizer_s = 0, tp_s = 0, cp_s = 0;
  [[nodiscard]] double total() const { return compute_s + recompute_s + optimizer_s + tp_s + cp_s; }
};

class BlockTimer {
 public:
  BlockTimer(const plan::Plan& plan, const plan::RankLayout& layout, const models::ComputeTimer& timer, bool free_communication)
      : plan_(plan), layout_(layout), timer_(timer), free_communication_(free_communication) {}

  // One entry per instruction, the compute ones timed.
  [[nodiscard]] std::vector<BlockTime> per_instruction(const models::StageProgram& sp) const;
  // Merges runs of compute and in-node collectives of `sp` into single compute blocks (an
  // in-node CP ring split with its attention charged as models::split_exposed_s; the other
  // instructions stay, their `after`, `also_after` and `tail_after` remapped); one entry per
  // new instruction.
  std::vector<BlockTime> coarsen(models::StageProgram& sp) const;

 private:
  void charge(BlockTime& b, const models::Instr& in) const;
  [[nodiscard]] bool in_node(plan::GroupKind g) const;
  [[nodiscard]] double nvlink_collective_s(const models::Instr& in) const;

  const plan::Plan& plan_;
  const plan::RankLayout& layout_;
  const models::ComputeTimer& timer_;
  bool free_communication_ = false;
  mutable std::map<plan::GroupKind, models::GroupNetwork> nets_;  // by group, as first asked
};

}  // namespace meshwork::sim
