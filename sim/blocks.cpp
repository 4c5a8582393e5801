#include "sim/blocks.hpp"

namespace meshwork::sim {

using models::Instr;
using models::InstrKind;

RingFlow ring_flow(models::Collective c, double bytes, double n) {
  switch (c) {
    case models::Collective::all_reduce: return {2 * (n - 1) / n * bytes, 2 * (n - 1)};
    case models::Collective::reduce_scatter:
    case models::Collective::all_gather:
    case models::Collective::all_to_all: return {(n - 1) / n * bytes, n - 1};
    case models::Collective::ring_exchange: return {bytes, n - 1};
    case models::Collective::none: break;
  }
  return {};
}

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
  const double dt = timer(in.op, in.flops, in.bytes);
  if (in.phase == models::OpPhase::recompute) b.recompute_s += dt;
  else if (in.op == models::OpKind::optimizer) b.optimizer_s += dt;
  else b.compute_s += dt;
}

// Whether a collective's group sits inside one NVLink domain (its ring never leaves the
// node's switch, nothing else shares its links).
bool BlockTimer::in_node(plan::GroupKind g) const {
  return layout.group_size(g) <= 1 || layout.group_span(g) < plan.cluster.gpus_per_node;
}

// The ring formula on the NVLink links a collective would use alone (what the fine mode's
// flows take when uncontended).
double BlockTimer::nvlink_collective_s(const Instr& in) const {
  const double n = static_cast<double>(layout.group_size(in.group));
  if (n <= 1 || free_communication) return 0;
  const RingFlow f = ring_flow(in.collective, in.bytes, n);
  const auto& hw = timer.hardware();
  const double bw = plan.cluster.intra_node.bandwidth_gbytes_per_s * 1e9 * hw.nvlink_efficiency;
  // One intra-node hop per ring step (through the switch or a direct NVLink alike).
  return f.bytes / bw + f.steps * plan.cluster.intra_node.latency_us * 1e-6;
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
