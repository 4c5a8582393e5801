// The Program at zero communication cost (replay) and its checks (check): what every plan's
// lowering must satisfy before a tier plays it (models/program.hpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "models/program.hpp"

namespace meshwork::models {

ReplayResult replay(const Program& program, const std::function<double(const StageProgram&, const Instr&)>& duration,
                    ProgramConsumer* consumer) {
  ReplayResult r;
  const std::size_t n = program.classes.size();
  r.busy_s.assign(n, 0);
  r.idle_s.assign(n, 0);
  std::vector<std::size_t> next(n, 0);
  std::vector<std::vector<double>> end(n);
  std::vector<std::array<double, 6>> stream_free(n, std::array<double, 6>{});
  std::map<std::tuple<std::int64_t, std::int64_t, std::int32_t>, double> sent;  // (from, to, tag) -> time
  for (std::size_t s = 0; s < n; ++s) end[s].assign(program.classes[s].instrs.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < n; ++s) {
      const StageProgram& sp = program.classes[s];
      while (next[s] < sp.instrs.size()) {
        const Instr& in = sp.instrs[next[s]];
        double start = stream_free[s][static_cast<std::size_t>(in.stream)];
        if (in.after >= 0) start = std::max(start, end[s][static_cast<std::size_t>(in.after)]);
        if (in.also_after >= 0) start = std::max(start, end[s][static_cast<std::size_t>(in.also_after)]);
        if (in.kind == InstrKind::recv) {
          const auto it = sent.find({in.peer_stage, sp.stage, in.tag});
          if (it == sent.end()) break;  // its send has not run yet
          start = std::max(start, it->second);
        }
        const double dt = duration(sp, in);
        double finish = start + dt;
        if (in.tail_after >= 0) finish = std::max(finish, end[s][static_cast<std::size_t>(in.tail_after)] + in.tail_fraction * dt);
        end[s][next[s]] = finish;
        stream_free[s][static_cast<std::size_t>(in.stream)] = finish;
        if (in.kind == InstrKind::send) sent[{sp.stage, in.peer_stage, in.tag}] = finish;
        if (in.kind == InstrKind::compute) r.busy_s[s] += dt;
        if (consumer != nullptr) consumer->on(sp, next[s], in, start, finish);
        r.makespan_s = std::max(r.makespan_s, finish);
        ++next[s];
        progress = true;
      }
    }
  }
  for (std::size_t s = 0; s < n; ++s) {
    if (next[s] < program.classes[s].instrs.size()) {
      const Instr& in = program.classes[s].instrs[next[s]];
      r.error = "deadlock: stage " + std::to_string(s) + " waits at instruction " + std::to_string(next[s]) + " (" +
                program.name(in) + ", tag " + std::to_string(in.tag) + ") for a send that never comes";
      return r;
    }
  }
  double ideal = 0;
  for (std::size_t s = 0; s < n; ++s) {
    r.idle_s[s] = r.makespan_s - r.busy_s[s];
    ideal = std::max(ideal, r.busy_s[s]);
  }
  r.bubble_fraction = ideal > 0 ? (r.makespan_s - ideal) / ideal : 0;
  return r;
}

std::function<double(const StageProgram&, const Instr&)> unit_item_durations(const Program& program) {
  // Compute instructions per (stage, item), to share each item's time among them.
  auto counts = std::make_shared<std::vector<std::vector<double>>>();
  for (const auto& sp : program.classes) {
    std::vector<double> c(sp.schedule.size(), 0);
    for (const auto& in : sp.instrs) {
      if (in.kind == InstrKind::compute && in.item >= 0) c[static_cast<std::size_t>(in.item)] += 1;
    }
    counts->push_back(std::move(c));
  }
  const double v = static_cast<double>(program.chunks);
  return [counts, v](const StageProgram& sp, const Instr& in) {
    if (in.kind != InstrKind::compute || in.item < 0) return 0.0;
    const ScheduleItem& it = sp.schedule[static_cast<std::size_t>(in.item)];
    const double units = it.pass == Pass::backward ? 2 : 1;
    return units / v / (*counts)[static_cast<std::size_t>(sp.stage)][static_cast<std::size_t>(in.item)];
  };
}

CheckResult check(const Program& program, double expected_flops) {
  CheckResult r;
  // Sends and receives pair up one to one.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int32_t>, std::pair<int, double>> sends, recvs;
  for (const auto& sp : program.classes) {
    for (std::size_t i = 0; i < sp.instrs.size(); ++i) {
      const Instr& in = sp.instrs[i];
      for (const std::int32_t a : {in.after, in.also_after, in.tail_after}) {
        if (a >= static_cast<std::int32_t>(i)) {
          r.errors.push_back("stage " + std::to_string(sp.stage) + " instruction " + std::to_string(i) + " (" + program.name(in) +
                             ") waits for a later instruction " + std::to_string(a));
        }
      }
      if (in.kind == InstrKind::send) {
        auto& s = sends[{sp.stage, in.peer_stage, in.tag}];
        ++s.first;
        s.second = in.bytes;
      }
      if (in.kind == InstrKind::recv) {
        auto& s = recvs[{in.peer_stage, sp.stage, in.tag}];
        ++s.first;
        s.second = in.bytes;
      }
      if (in.kind == InstrKind::compute) r.flops += in.flops * static_cast<double>(sp.ranks);
    }
  }
  auto describe = [](const std::tuple<std::int64_t, std::int64_t, std::int32_t>& k) {
    return "stage " + std::to_string(std::get<0>(k)) + " -> stage " + std::to_string(std::get<1>(k)) + " tag " + std::to_string(std::get<2>(k));
  };
  for (const auto& [k, v] : sends) {
    const auto it = recvs.find(k);
    if (it == recvs.end()) r.errors.push_back("send " + describe(k) + " has no receive");
    else if (it->second.first != v.first) r.errors.push_back("send " + describe(k) + " is sent " + std::to_string(v.first) + " times, received " + std::to_string(it->second.first));
    else if (it->second.second != v.second) r.errors.push_back("send " + describe(k) + " and its receive disagree on bytes");
  }
  for (const auto& [k, v] : recvs) {
    if (!sends.count(k)) r.errors.push_back("receive " + describe(k) + " has no send");
  }
  // Micro-batches in flight: forward done, backward (input gradient) not yet; with the
  // backward split, also those whose weight gradient is not done (ZB-H1 keeps them within p).
  for (const auto& sp : program.classes) {
    std::int64_t in_flight = 0, worst = 0, awaiting_w = 0, worst_w = 0;
    for (const auto& it : sp.schedule) {
      if (it.pass == Pass::forward) worst = std::max(worst, ++in_flight);
      if (it.pass == Pass::backward || it.pass == Pass::backward_input) --in_flight;
      if (it.pass == Pass::forward) worst_w = std::max(worst_w, ++awaiting_w);
      if (it.pass == Pass::backward || it.pass == Pass::backward_weight) --awaiting_w;
      if (in_flight < 0) {
        r.errors.push_back("stage " + std::to_string(sp.stage) + " runs a backward of micro-batch " + std::to_string(it.microbatch) + " before its forward");
        break;
      }
    }
    r.max_in_flight.push_back(worst);
    if (program.schedule == plan::PipelineSchedule::zero_bubble && worst_w > std::min(program.stages, program.microbatches)) {
      r.errors.push_back("stage " + std::to_string(sp.stage) + " holds " + std::to_string(worst_w) +
                         " micro-batches awaiting their weight gradients; ZB-H1 keeps 1F1B's peak of " + std::to_string(program.stages));
    }
    const std::int64_t bound = in_flight_bound(program, sp.stage);
    if (worst > bound) {
      r.errors.push_back("stage " + std::to_string(sp.stage) + " holds " + std::to_string(worst) + " micro-batches in flight; the " +
                         std::string(plan::to_string(program.schedule)) + " schedule allows " + std::to_string(bound));
    }
  }
  if (r.errors.empty()) {
    const ReplayResult rep = replay(program, unit_item_durations(program));
    if (!rep.error.empty()) r.errors.push_back(rep.error);
  }
  if (expected_flops > 0 && std::abs(r.flops - expected_flops) > 1e-9 * expected_flops) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "the Program's FLOPs %.6e differ from the cost model's %.6e", r.flops, expected_flops);
    r.errors.emplace_back(buf);
  }
  return r;
}

}  // namespace meshwork::models
