#include "sim/blocks.hpp"

namespace meshwork::sim {

using models::Instr;
using models::InstrKind;

std::vector<BlockTime> BlockTimer::per_instruction(const models::StageProgram& sp) const {
  std::vector<BlockTime> out;
  for (const auto& in : sp.instrs) {
    BlockTime b;
    if (in.kind == InstrKind::compute) charge(b, in);
    out.push_back(b);
  }
  return out;
}

void BlockTimer::charge(BlockTime& b, const Instr& in) const {
  const double dt = timer_(in.op, in.flops, in.bytes);
  if (in.phase == models::OpPhase::recompute) b.recompute_s += dt;
  else if (in.op == models::OpKind::optimizer) b.optimizer_s += dt;
  else b.compute_s += dt;
}

// Whether a collective's group sits inside one NVLink domain (its ring never leaves the
// node's switch, nothing else shares its links).
bool BlockTimer::in_node(plan::GroupKind g) const {
  return layout_.group_size(g) <= 1 || layout_.group_span(g) < plan_.cluster.gpus_per_node;
}

// The collective's time on the NVLink links it would use alone (what the fine mode's flows
// take when uncontended), by the algorithm the cost model picks (ring or NVLS).
double BlockTimer::nvlink_collective_s(const Instr& in) const {
  if (layout_.group_size(in.group) <= 1 || free_communication_) return 0;
  auto it = nets_.find(in.group);
  if (it == nets_.end()) it = nets_.emplace(in.group, models::group_network(plan_, timer_.hardware(), in.group)).first;
  return models::collective_s(it->second, in.collective, in.bytes);
}

std::vector<BlockTime> BlockTimer::coarsen(models::StageProgram& sp) const {
  std::vector<BlockTime> times;
  std::vector<Instr> out;
  std::vector<std::int32_t> map(sp.instrs.size(), -1);
  std::int32_t open = -1;  // the block being filled
  for (std::size_t k = 0; k < sp.instrs.size(); ++k) {
    const Instr& in = sp.instrs[k];
    const bool mergeable_comm = in.kind == InstrKind::collective && (in.stream == models::Stream::tp || in.stream == models::Stream::cp) &&
                                in_node(in.group);
    const bool joins = open >= 0 && (in.kind == InstrKind::compute || mergeable_comm) &&
                       (in.after < 0 || map[static_cast<std::size_t>(in.after)] == open);
    if (joins) {
      map[k] = open;
      auto& b = times[static_cast<std::size_t>(open)];
      if (in.kind == InstrKind::compute) charge(b, in);
      else (in.stream == models::Stream::tp ? b.tp_s : b.cp_s) += nvlink_collective_s(in);
      continue;
    }
    Instr copy = in;
    copy.after = in.after >= 0 ? map[static_cast<std::size_t>(in.after)] : -1;
    BlockTime b;
    if (in.kind == InstrKind::compute) {
      charge(b, in);
    } else if (mergeable_comm) {
      // A block that starts with an in-node collective: a compute block of its time.
      copy.kind = InstrKind::compute;
      copy.stream = models::Stream::compute;
      copy.op = models::OpKind::elementwise;
      (in.stream == models::Stream::tp ? b.tp_s : b.cp_s) += nvlink_collective_s(in);
    }
    out.push_back(copy);
    times.push_back(b);
    map[k] = static_cast<std::int32_t>(out.size() - 1);
    open = copy.kind == InstrKind::compute ? map[k] : -1;
  }
  sp.instrs = std::move(out);
  return times;
}

}  // namespace meshwork::sim
