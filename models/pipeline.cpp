#include "models/pipeline.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace meshwork::models {

StageOrders stage_orders(const PipelineSpec& spec) {
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  StageOrders order(static_cast<std::size_t>(p));
  for (std::int64_t s = 0; s < p; ++s) {
    order[static_cast<std::size_t>(s)] =
        stage_schedule(spec.schedule, p, s, std::max<std::int64_t>(1, spec.microbatches), std::max<std::int64_t>(1, spec.chunks));
  }
  return order;
}

namespace {

// The replay of N specs that share their schedule (stages, micro-batches, chunks, orders),
// timed in one pass: which item a stage can run next depends only on which sends have
// happened, never on their times, so one traversal serves every spec (lane).
template <std::size_t N>
std::array<PipelineTimes, N> replay(const std::array<const PipelineSpec*, N>& specs) {
  const PipelineSpec& spec = *specs[0];
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  const std::int64_t v = std::max<std::int64_t>(1, spec.chunks);
  const std::int64_t m = std::max<std::int64_t>(1, spec.microbatches);
  const auto P = static_cast<std::size_t>(p);
  using Lanes = std::array<double, N>;
  std::array<PipelineTimes, N> out;
  std::vector<Lanes> busy(P, Lanes{}), free_s(P, Lanes{});  // free_s: the stage's compute stream

  StageOrders made;
  if (spec.orders == nullptr) made = stage_orders(spec);
  const StageOrders& order = spec.orders != nullptr ? *spec.orders : made;

  // When the activation (gradient) a stage's chunk needs for a micro-batch was sent: by
  // receiver, [(stage * v + chunk) * m + micro-batch]; unset until it is.
  const auto slots = static_cast<std::size_t>(p * v * m);
  std::vector<Lanes> activation(slots), gradient(slots);
  std::vector<char> activation_sent(slots, 0), gradient_sent(slots, 0);
  auto slot = [&](std::int64_t s, std::int64_t c, std::int64_t mb) { return static_cast<std::size_t>((s * v + c) * m + mb); };
  auto at = [&](const std::vector<double>& d, std::int64_t s, std::int64_t c) { return d[static_cast<std::size_t>(s * v + c)]; };
  // Each lane's transfer over each boundary.
  std::vector<Lanes> transfer(P);
  for (std::size_t b = 0; b < P; ++b) {
    for (std::size_t k = 0; k < N; ++k) {
      const PipelineSpec& sp = *specs[k];
      transfer[b][k] = b < sp.boundary_transfer_s.size() ? sp.boundary_transfer_s[b] : sp.transfer_s;
    }
  }

  std::vector<std::size_t> next(P, 0);
  std::vector<std::int64_t> work;
  work.reserve(P * 2);
  for (std::int64_t s = p - 1; s >= 0; --s) work.push_back(s);
  while (!work.empty()) {
    const std::int64_t s = work.back();
    work.pop_back();
    const auto S = static_cast<std::size_t>(s);
    while (next[S] < order[S].size()) {
      const ScheduleItem& it = order[S][next[S]];
      const std::int64_t c = it.chunk, mb = it.microbatch;
      const bool forward = it.pass == Pass::forward;
      const bool needs = forward ? !(s == 0 && c == 0) : !(s == p - 1 && c == v - 1) && it.pass != Pass::backward_weight;
      Lanes start = free_s[S];
      if (needs) {
        const std::size_t from = slot(s, c, mb);
        if (!(forward ? activation_sent : gradient_sent)[from]) break;  // its sender has not got there yet
        const Lanes& sent = (forward ? activation : gradient)[from];
        // From the previous stage (forward; stage 0 from the last) or the next (backward).
        // Posted ahead, the transfer left when it was sent; otherwise when this stage
        // reached the item.
        const auto boundary = static_cast<std::size_t>(forward ? (s + p - 1) % p : s);
        for (std::size_t k = 0; k < N; ++k) {
          start[k] = std::max(start[k], (specs[k]->preposted ? sent[k] : std::max(sent[k], free_s[S][k])) + transfer[boundary][k]);
        }
      }
      // The item's end, kept in a local: read back from free_s[S] right after its lanes were
      // stored one by one, it stalled on store forwarding (40% of the replay's time).
      Lanes end;
      for (std::size_t k = 0; k < N; ++k) {
        const PipelineSpec& sp = *specs[k];
        double dt = 0;
        switch (it.pass) {
          case Pass::forward: dt = at(sp.forward_s, s, c); break;
          case Pass::backward: dt = at(sp.backward_s, s, c); break;
          case Pass::backward_input: dt = at(sp.backward_s, s, c) - at(sp.weight_s, s, c); break;
          case Pass::backward_weight: dt = at(sp.weight_s, s, c); break;
        }
        end[k] = start[k] + dt;
        busy[S][k] += dt;
      }
      free_s[S] = end;
      ++next[S];
      // The send: forward to the next stage (the last one wraps to the first, next chunk),
      // backward to the previous (the first wraps to the last, previous chunk).
      std::int64_t to = -1, to_chunk = c;
      if (forward) {
        if (s + 1 < p) to = s + 1;
        else if (c + 1 < v) to = 0, to_chunk = c + 1;
      } else if (it.pass != Pass::backward_weight) {
        if (s > 0) to = s - 1;
        else if (c > 0) to = p - 1, to_chunk = c - 1;
      }
      if (to >= 0) {
        const std::size_t into = slot(to, to_chunk, mb);
        (forward ? activation : gradient)[into] = end;
        (forward ? activation_sent : gradient_sent)[into] = 1;
        if (to != s) work.push_back(to);
      }
    }
  }
  for (std::size_t k = 0; k < N; ++k) {
    PipelineTimes& o = out[k];
    o.busy_s.resize(P);
    o.idle_s.resize(P);
    for (std::size_t s = 0; s < P; ++s) o.makespan_s = std::max(o.makespan_s, free_s[s][k]);
    for (std::size_t s = 0; s < P; ++s) {
      o.busy_s[s] = busy[s][k];
      o.idle_s[s] = o.makespan_s - busy[s][k];
    }
  }
  return out;
}

}  // namespace

PipelineTimes pipeline_times(const PipelineSpec& spec) { return replay<1>({&spec})[0]; }

std::pair<PipelineTimes, PipelineTimes> pipeline_times(const PipelineSpec& a, const PipelineSpec& b) {
  auto both = replay<2>({&a, &b});
  return {std::move(both[0]), std::move(both[1])};
}

}  // namespace meshwork::models
