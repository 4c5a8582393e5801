#include "models/pipeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
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
// One item's seconds in a spec.
double item_s(const PipelineSpec& sp, const ScheduleItem& it, std::int64_t s) {
  const auto at = static_cast<std::size_t>(s * std::max<std::int64_t>(1, sp.chunks) + it.chunk);
  switch (it.pass) {
    case Pass::forward: return sp.forward_s[at];
    case Pass::backward: return sp.backward_s[at];
    case Pass::backward_input: return sp.backward_s[at] - sp.weight_s[at];
    case Pass::backward_weight: return sp.weight_s[at];
  }
  return 0;
}

template <std::size_t N>
using Lanes = std::array<double, N>;

// The replay of `m` micro-batches in `order` (the specs' own count, or fewer: see replay
// below); with `ends`, each item's end, by stage and item.
template <std::size_t N>
std::array<PipelineTimes, N> replay_orders(const std::array<const PipelineSpec*, N>& specs, std::int64_t m, const StageOrders& order,
                                           std::vector<std::vector<Lanes<N>>>* ends) {
  const PipelineSpec& spec = *specs[0];
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  const std::int64_t v = std::max<std::int64_t>(1, spec.chunks);
  const auto P = static_cast<std::size_t>(p);
  using Lanes = models::Lanes<N>;
  std::array<PipelineTimes, N> out;
  std::vector<Lanes> busy(P, Lanes{}), free_s(P, Lanes{});  // free_s: the stage's compute stream
  if (ends != nullptr) {
    ends->assign(P, {});
    for (std::size_t s = 0; s < P; ++s) (*ends)[s].reserve(order[s].size());
  }

  // When the activation (gradient) a stage's chunk needs for a micro-batch was sent: by
  // receiver, [(stage * v + chunk) * m + micro-batch]; unset until it is.
  const auto slots = static_cast<std::size_t>(p * v * m);
  std::vector<Lanes> activation(slots), gradient(slots);
  std::vector<char> activation_sent(slots, 0), gradient_sent(slots, 0);
  auto slot = [&](std::int64_t s, std::int64_t c, std::int64_t mb) { return static_cast<std::size_t>((s * v + c) * m + mb); };
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
        const double dt = item_s(*specs[k], it, s);
        end[k] = start[k] + dt;
        busy[S][k] += dt;
      }
      free_s[S] = end;
      if (ends != nullptr) (*ends)[S].push_back(end);
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
    o.replayed_microbatches = m;
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

// The steady state of a schedule's orders: each period of `microbatches` more micro-batches
// adds the same `items` to every stage's order, at the end of its steady section (1F1B's
// forward-backward pairs, ZB-H1's triples, the interleaved schedule's pairs over a group of p
// micro-batches in every chunk). 0: none the replay extrapolates (GPipe, or interleaved with
// m not a multiple of p).
struct Period {
  std::int64_t microbatches = 0, items = 0;
};

Period period_of(const PipelineSpec& spec, std::int64_t p, std::int64_t v, std::int64_t m) {
  switch (spec.schedule) {
    case plan::PipelineSchedule::one_f_one_b: return {1, 2};
    case plan::PipelineSchedule::zero_bubble: return {1, 3};
    case plan::PipelineSchedule::interleaved: return m % p == 0 ? Period{p, 2 * p * v} : Period{};
    case plan::PipelineSchedule::gpipe: return {};
  }
  return {};
}

// Where stage s's steady section begins and ends (its first cool-down item) in its order of m
// micro-batches (models/schedules.cpp builds the orders; m >= p here).
std::pair<std::int64_t, std::int64_t> steady_section(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t s, std::int64_t m,
                                                     std::int64_t v) {
  switch (schedule) {
    case plan::PipelineSchedule::one_f_one_b: {
      const std::int64_t warmup = std::min(p - s - 1, m);
      return {warmup, warmup + 2 * (m - warmup)};
    }
    case plan::PipelineSchedule::interleaved: {
      const std::int64_t total = m * v;
      const std::int64_t warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
      return {warmup, warmup + 2 * (total - warmup)};
    }
    case plan::PipelineSchedule::zero_bubble: return {p - 1 + s, p - 1 + s + 3 * (m - p + 1)};
    case plan::PipelineSchedule::gpipe: break;
  }
  return {0, 0};
}

// The replay, extrapolated over its steady state where it has one (issue 18: the estimate's
// speed). Timing a schedule is a max-plus linear recurrence: once every stage's items of a
// period end a constant delta after the same items of the period before, the state the next
// period starts from is the last one's shifted by delta, and so is all that follows. So the
// replay plays a shorter step (the warm-up, the periods the check needs, the cool-down),
// checks that its last kCheckedPeriods periods repeat shifted on every stage and lane, and adds
// the skipped periods: delta to the makespan, a period's items to each stage's busy time. Where
// the check fails (a transient longer than the short step), it replays every micro-batch.
template <std::size_t N>
std::array<PipelineTimes, N> replay(const std::array<const PipelineSpec*, N>& specs) {
  constexpr std::int64_t kCheckedPeriods = 2;
  const PipelineSpec& spec = *specs[0];
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  const std::int64_t v = std::max<std::int64_t>(1, spec.chunks);
  const std::int64_t m = std::max<std::int64_t>(1, spec.microbatches);
  const Period period = period_of(spec, p, v, m);
  auto whole = [&] {
    StageOrders made;
    if (spec.orders == nullptr) made = stage_orders(spec);
    return replay_orders<N>(specs, m, spec.orders != nullptr ? *spec.orders : made, nullptr);
  };
  if (!spec.extrapolate || period.microbatches == 0 || p < 2) return whole();
  // The short step: room on every stage for a transient of p micro-batches (one period of the
  // interleaved schedule's p) and the checked periods, besides the warm-up and cool-down.
  std::int64_t short_m = m;
  for (std::int64_t k = m % period.microbatches; k < m; k += period.microbatches) {
    if (k < p + 1) continue;
    bool room = true;
    for (std::int64_t s = 0; s < p && room; ++s) {
      const auto [from, to] = steady_section(spec.schedule, p, s, k, v);
      const std::int64_t transient = p / period.microbatches * period.items;
      room = to - from >= transient + (kCheckedPeriods + 1) * period.items;
    }
    if (room) {
      short_m = k;
      break;
    }
  }
  const std::int64_t skipped = (m - short_m) / period.microbatches;
  if (skipped < 2) return whole();

  PipelineSpec short_spec = spec;
  short_spec.microbatches = short_m;
  short_spec.orders = nullptr;
  const StageOrders order = stage_orders(short_spec);
  std::vector<std::vector<Lanes<N>>> ends;
  std::array<PipelineTimes, N> out = replay_orders<N>(specs, short_m, order, &ends);
  const auto P = static_cast<std::size_t>(p);
  const auto L = static_cast<std::size_t>(period.items);
  std::array<double, N> delta{};
  std::vector<Lanes<N>> period_busy(P, Lanes<N>{});
  for (std::size_t s = 0; s < P; ++s) {
    const auto to = static_cast<std::size_t>(steady_section(spec.schedule, p, static_cast<std::int64_t>(s), short_m, v).second);
    for (std::size_t k = 0; k < N; ++k) {
      if (s == 0) delta[k] = ends[0][to - 1][k] - ends[0][to - 1 - L][k];
      if (!std::isfinite(delta[k])) return whole();
      for (std::size_t i = to - kCheckedPeriods * L; i < to; ++i) {
        const double shift = ends[s][i][k] - ends[s][i - L][k];
        // Written so that a NaN fails it.
        if (!(std::abs(shift - delta[k]) <= 1e-9 * std::max(1.0, std::abs(ends[s][i][k])))) return whole();
      }
      for (std::size_t i = to - L; i < to; ++i) period_busy[s][k] += item_s(*specs[k], order[s][i], static_cast<std::int64_t>(s));
    }
  }
  const auto n = static_cast<double>(skipped);
  for (std::size_t k = 0; k < N; ++k) {
    PipelineTimes& o = out[k];
    o.makespan_s += n * delta[k];
    for (std::size_t s = 0; s < P; ++s) {
      o.busy_s[s] += n * period_busy[s][k];
      o.idle_s[s] = o.makespan_s - o.busy_s[s];
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
