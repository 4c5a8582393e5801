#include "models/pipeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
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

// One schedule's traversal, the same for any times: every item of every stage, in an order in
// which each comes after the item whose send it waits for. Which item a stage can run next
// depends only on which sends have happened, never on their times, so the traversal is made
// once per (schedule, stages, micro-batches, chunks) and timed as a flat loop (issue 18: the
// estimate's speed; the traversal with its bookkeeping was two thirds of the replay's time).
struct Traversal {
  StageOrders orders;  // per stage, its items
  struct Step {
    std::int32_t stage = 0;
    std::int32_t from = -1;     // the step whose send this item waits for; -1: none
    std::int32_t boundary = 0;  // the boundary that send crosses
    std::int32_t slot = 0;      // (stage * chunks + chunk) * 4 + pass: its seconds' index
  };
  std::vector<Step> steps;
  std::vector<std::vector<std::int32_t>> step_of;  // per stage and item of its order, its step
};

Traversal traverse(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t m, std::int64_t v) {
  Traversal t;
  PipelineSpec shape;
  shape.schedule = schedule;
  shape.stages = p;
  shape.microbatches = m;
  shape.chunks = v;
  t.orders = stage_orders(shape);
  const auto P = static_cast<std::size_t>(p);
  std::size_t items = 0;
  for (const auto& o : t.orders) items += o.size();
  // Steps are numbered in 32 bits (half the memory of the replay's hot loop).
  if (items > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::length_error("a pipeline schedule of " + std::to_string(items) + " items: more than the replay numbers (2^31)");
  }
  t.steps.reserve(items);
  t.step_of.resize(P);
  for (std::size_t s = 0; s < P; ++s) t.step_of[s].reserve(t.orders[s].size());
  // The step that sent what a stage's chunk needs for a micro-batch: by receiver,
  // [(stage * v + chunk) * m + micro-batch]; -1 until it is sent.
  const auto slots = static_cast<std::size_t>(p * v * m);
  std::vector<std::int32_t> activation(slots, -1), gradient(slots, -1);
  auto slot = [&](std::int64_t s, std::int64_t c, std::int64_t mb) { return static_cast<std::size_t>((s * v + c) * m + mb); };
  std::vector<std::size_t> next(P, 0);
  std::vector<std::int64_t> work;
  work.reserve(P * 2);
  for (std::int64_t s = p - 1; s >= 0; --s) work.push_back(s);
  while (!work.empty()) {
    const std::int64_t s = work.back();
    work.pop_back();
    const auto S = static_cast<std::size_t>(s);
    while (next[S] < t.orders[S].size()) {
      const ScheduleItem& it = t.orders[S][next[S]];
      const std::int64_t c = it.chunk, mb = it.microbatch;
      const bool forward = it.pass == Pass::forward;
      const bool needs = forward ? !(s == 0 && c == 0) : !(s == p - 1 && c == v - 1) && it.pass != Pass::backward_weight;
      Traversal::Step step;
      step.stage = static_cast<std::int32_t>(s);
      step.slot = static_cast<std::int32_t>((s * v + c) * 4 + static_cast<std::int64_t>(it.pass));
      if (needs) {
        step.from = (forward ? activation : gradient)[slot(s, c, mb)];
        if (step.from < 0) break;  // its sender has not got there yet
        // From the previous stage (forward; stage 0 from the last) or the next (backward).
        step.boundary = static_cast<std::int32_t>(forward ? (s + p - 1) % p : s);
      }
      const auto here = static_cast<std::int32_t>(t.steps.size());
      t.steps.push_back(step);
      t.step_of[S].push_back(here);
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
        (forward ? activation : gradient)[slot(to, to_chunk, mb)] = here;
        if (to != s) work.push_back(to);
      }
    }
  }
  return t;
}

// The traversals made last on this thread: a sweep or search prices many plans of one
// schedule shape (every ZeRO stage, TP size or fabric of a mesh). A traversal of more than
// kLargest steps is made for its call alone.
const Traversal& traversal(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t m, std::int64_t v,
                           std::shared_ptr<const Traversal>& hold) {
  constexpr std::size_t kKept = 8;
  constexpr std::int64_t kLargest = 1 << 18;  // at most 8 x 4 MiB kept
  struct Kept {
    plan::PipelineSchedule schedule;
    std::int64_t p, m, v;
    std::shared_ptr<const Traversal> traversal;
  };
  thread_local std::vector<Kept> kept;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (kept[i].schedule == schedule && kept[i].p == p && kept[i].m == m && kept[i].v == v) {
      std::rotate(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(i), kept.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      hold = kept.front().traversal;
      return *hold;
    }
  }
  hold = std::make_shared<const Traversal>(traverse(schedule, p, m, v));
  if (static_cast<std::int64_t>(hold->steps.size()) > kLargest) return *hold;
  if (kept.size() == kKept) kept.pop_back();
  kept.insert(kept.begin(), Kept{schedule, p, m, v, hold});
  return *hold;
}

template <std::size_t N>
using Lanes = std::array<double, N>;

// One item's seconds in a spec.
double item_s(const PipelineSpec& sp, const ScheduleItem& it, std::int64_t s) {
  const auto at = static_cast<std::size_t>(s * std::max<std::int64_t>(1, sp.chunks) + it.chunk);
  switch (it.pass) {
    case Pass::forward: return sp.forward_s[at];
    case Pass::backward: return sp.backward_s[at];
    // weight_s: only zero-bubble schedules need it; an empty one is no split.
    case Pass::backward_input: return sp.backward_s[at] - (at < sp.weight_s.size() ? sp.weight_s[at] : 0);
    case Pass::backward_weight: return at < sp.weight_s.size() ? sp.weight_s[at] : 0;
  }
  return 0;
}

// Each lane's seconds per (stage, chunk, pass): a Traversal::Step's slot.
template <std::size_t N>
std::vector<Lanes<N>> item_seconds(const std::array<const PipelineSpec*, N>& specs) {
  const std::int64_t p = std::max<std::int64_t>(1, specs[0]->stages);
  const std::int64_t v = std::max<std::int64_t>(1, specs[0]->chunks);
  std::vector<Lanes<N>> seconds(static_cast<std::size_t>(p * v * 4));
  for (std::int64_t s = 0; s < p; ++s) {
    for (std::int64_t c = 0; c < v; ++c) {
      for (const Pass pass : {Pass::forward, Pass::backward, Pass::backward_input, Pass::backward_weight}) {
        Lanes<N>& dt = seconds[static_cast<std::size_t>((s * v + c) * 4 + static_cast<std::int64_t>(pass))];
        for (std::size_t k = 0; k < N; ++k) dt[k] = item_s(*specs[k], {pass, 0, static_cast<std::int32_t>(c)}, s);
      }
    }
  }
  return seconds;
}

// The replay of N specs that share their schedule (stages, micro-batches, chunks), timed in one
// pass over its traversal of `m` micro-batches (the specs' own count, or fewer: see replay
// below). `seconds`: item_seconds(specs); `ends`: each step's end, by step.
template <std::size_t N>
std::array<PipelineTimes, N> replay_traversal(const std::array<const PipelineSpec*, N>& specs, std::int64_t m, const Traversal& t,
                                              const std::vector<Lanes<N>>& seconds, std::vector<Lanes<N>>& ends) {
  const PipelineSpec& spec = *specs[0];
  const auto P = static_cast<std::size_t>(std::max<std::int64_t>(1, spec.stages));
  using Lanes = models::Lanes<N>;
  // Each lane's transfer over each boundary.
  std::vector<Lanes> transfer(P);
  Lanes preposted{};
  for (std::size_t k = 0; k < N; ++k) {
    const PipelineSpec& sp = *specs[k];
    preposted[k] = sp.preposted ? 1 : 0;
    for (std::size_t b = 0; b < P; ++b) transfer[b][k] = b < sp.boundary_transfer_s.size() ? sp.boundary_transfer_s[b] : sp.transfer_s;
  }
  std::vector<Lanes> busy(P, Lanes{}), free_s(P, Lanes{});  // free_s: the stage's compute stream
  ends.resize(t.steps.size());
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const Traversal::Step& step = t.steps[i];
    const auto S = static_cast<std::size_t>(step.stage);
    Lanes start = free_s[S];
    if (step.from >= 0) {
      // Posted ahead, the transfer left when it was sent; otherwise when this stage reached
      // the item.
      const Lanes& sent = ends[static_cast<std::size_t>(step.from)];
      const Lanes& tr = transfer[static_cast<std::size_t>(step.boundary)];
      for (std::size_t k = 0; k < N; ++k) {
        start[k] = std::max(start[k], (preposted[k] != 0 ? sent[k] : std::max(sent[k], start[k])) + tr[k]);
      }
    }
    // The item's end, kept in a local: read back from free_s[S] right after its lanes were
    // stored one by one, it stalled on store forwarding.
    const Lanes& dt = seconds[static_cast<std::size_t>(step.slot)];
    Lanes end;
    for (std::size_t k = 0; k < N; ++k) {
      end[k] = start[k] + dt[k];
      busy[S][k] += dt[k];
    }
    free_s[S] = end;
    ends[i] = end;
  }
  std::array<PipelineTimes, N> out;
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
  thread_local std::vector<Lanes<N>> ends;  // scratch, kept between calls
  // ... but not the memory of one very long replay (a schedule too large to keep).
  if (ends.capacity() > (std::size_t{1} << 20)) std::vector<Lanes<N>>().swap(ends);
  std::shared_ptr<const Traversal> hold;
  const std::vector<Lanes<N>> seconds = item_seconds<N>(specs);
  auto whole = [&] { return replay_traversal<N>(specs, m, traversal(spec.schedule, p, m, v, hold), seconds, ends); };
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

  const Traversal& t = traversal(spec.schedule, p, short_m, v, hold);
  std::array<PipelineTimes, N> out = replay_traversal<N>(specs, short_m, t, seconds, ends);
  auto end_of = [&](std::size_t s, std::size_t i) -> const Lanes<N>& { return ends[static_cast<std::size_t>(t.step_of[s][i])]; };
  const auto P = static_cast<std::size_t>(p);
  const auto L = static_cast<std::size_t>(period.items);
  std::array<double, N> delta{};
  std::vector<Lanes<N>> period_busy(P, Lanes<N>{});
  for (std::size_t s = 0; s < P; ++s) {
    const auto to = static_cast<std::size_t>(steady_section(spec.schedule, p, static_cast<std::int64_t>(s), short_m, v).second);
    if (s == 0) {
      for (std::size_t k = 0; k < N; ++k) {
        delta[k] = end_of(0, to - 1)[k] - end_of(0, to - 1 - L)[k];
        if (!std::isfinite(delta[k])) return whole();
      }
    }
    for (std::size_t i = to - kCheckedPeriods * L; i < to; ++i) {
      const Lanes<N>& now = end_of(s, i);
      const Lanes<N>& before = end_of(s, i - L);
      for (std::size_t k = 0; k < N; ++k) {
        // Written so that a NaN fails it.
        if (!(std::abs(now[k] - before[k] - delta[k]) <= 1e-9 * std::max(1.0, std::abs(now[k])))) return whole();
      }
    }
    for (std::size_t i = to - L; i < to; ++i) {
      const Lanes<N>& dt = seconds[static_cast<std::size_t>(t.steps[static_cast<std::size_t>(t.step_of[s][i])].slot)];
      for (std::size_t k = 0; k < N; ++k) period_busy[s][k] += dt[k];
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
