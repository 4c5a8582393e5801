#include "sim/blocks.hpp"

#include "models/layer_comm.hpp"
#include "models/sm_share.hpp"

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
  const double dt = timer_(in.op, in.flops, in.bytes, in.cast_bytes, in.phase, in.sixteen_bit);
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
  // overlap.tp_comm (models/layer_comm): an all-gather waits for the GEMM it is split with (the
  // next one), a reduce-scatter hides under the GEMM before it, within a block.
  const bool split_tp = models::tp_comm_overlapped(plan_);
  // What the split collectives take from their GEMMs' SMs (models/sm_share.hpp).
  const double rs_sms = models::sm_fraction(timer_.hardware(), models::Stream::tp, models::Collective::reduce_scatter, split_tp);
  const double ag_sms = models::sm_fraction(timer_.hardware(), models::Stream::tp, models::Collective::all_gather, split_tp);
  double pending_gather = 0, last_gemm = 0;
  // CP's p2p ring split with the attention after it (Instr::tail_after): merged in-node, its
  // exposed part is the estimate's models::split_exposed_s; between nodes it stays a flow, and
  // the attention a block of its own whose last block waits for it.
  const double cp_sms = models::sm_fraction(timer_.hardware(), models::Stream::cp, models::Collective::ring_exchange, false);
  const double cp = static_cast<double>(plan_.parallelism.context_parallel_size);
  std::vector<char> split(sp.instrs.size(), 0);
  for (const Instr& in : sp.instrs) {
    if (in.tail_after >= 0) split[static_cast<std::size_t>(in.tail_after)] = 1;
  }
  double pending_ring = 0;
  std::size_t current = 0;  // the instruction being placed
  auto close = [&] {
    if (open >= 0) times[static_cast<std::size_t>(open)].tp_s += pending_gather;
    pending_gather = 0;
    last_gemm = 0;
  };
  auto add_comm = [&](BlockTime& b, const Instr& in) {
    double t = nvlink_collective_s(in);
    if (in.stream == models::Stream::cp) {
      if (split[current] != 0) pending_ring += t;
      else b.cp_s += t;
      return;
    }
    if (split_tp && in.collective == models::Collective::all_gather) {
      pending_gather += t;
      return;
    }
    if (split_tp && in.collective == models::Collective::reduce_scatter) t = models::tp_exposed_s(t, last_gemm, rs_sms);
    b.tp_s += t;
  };
  auto add_compute = [&](BlockTime& b, const Instr& in) {
    charge(b, in);
    if (in.tail_after >= 0 && pending_ring > 0) {
      b.cp_s += models::split_exposed_s(pending_ring, timer_(in.op, in.flops, in.bytes, in.cast_bytes, in.phase, in.sixteen_bit), cp, cp_sms);
      pending_ring = 0;
    }
    if (in.op != models::OpKind::gemm) return;
    const double g = timer_(in.op, in.flops, in.bytes, in.cast_bytes, in.phase, in.sixteen_bit);
    if (pending_gather > 0) b.tp_s += models::tp_exposed_s(pending_gather, g, ag_sms);
    pending_gather = 0;
    last_gemm = g;
  };
  for (std::size_t k = 0; k < sp.instrs.size(); ++k) {
    const Instr& in = sp.instrs[k];
    current = k;
    // Split with a ring that stayed a flow: a block of its own, which nothing joins, so that
    // its last block's wait (tail_after) falls at its end.
    const bool tail_flow = in.tail_after >= 0 && out[static_cast<std::size_t>(map[static_cast<std::size_t>(in.tail_after)])].kind == InstrKind::collective;
    const bool mergeable_comm = in.kind == InstrKind::collective && (in.stream == models::Stream::tp || in.stream == models::Stream::cp) &&
                                in_node(in.group);
    // A block stays within one schedule item, so that traces name it by its item.
    const bool joins = !tail_flow && open >= 0 && (in.kind == InstrKind::compute || mergeable_comm) && out[static_cast<std::size_t>(open)].item == in.item &&
                       (in.after < 0 || map[static_cast<std::size_t>(in.after)] == open) &&
                       (in.also_after < 0 || map[static_cast<std::size_t>(in.also_after)] == open);
    if (joins) {
      map[k] = open;
      auto& b = times[static_cast<std::size_t>(open)];
      if (in.kind == InstrKind::compute) add_compute(b, in);
      else add_comm(b, in);
      continue;
    }
    close();
    Instr copy = in;
    copy.after = in.after >= 0 ? map[static_cast<std::size_t>(in.after)] : -1;
    copy.also_after = in.also_after >= 0 ? map[static_cast<std::size_t>(in.also_after)] : -1;
    copy.tail_after = tail_flow ? map[static_cast<std::size_t>(in.tail_after)] : -1;
    if (!tail_flow) copy.tail_fraction = 0;
    BlockTime b;
    if (in.kind == InstrKind::compute) {
      add_compute(b, in);
    } else if (mergeable_comm) {
      // A block that starts with an in-node collective: a compute block of its time.
      copy.kind = InstrKind::compute;
      copy.stream = models::Stream::compute;
      copy.op = models::OpKind::elementwise;
      add_comm(b, in);
    }
    out.push_back(copy);
    times.push_back(b);
    map[k] = static_cast<std::int32_t>(out.size() - 1);
    open = copy.kind == InstrKind::compute && !tail_flow ? map[k] : -1;
  }
  close();
  sp.instrs = std::move(out);
  return times;
}

}  // namespace meshwork::sim
