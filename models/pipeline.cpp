#include "models/pipeline.hpp"

#include <algorithm>

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

PipelineTimes pipeline_times(const PipelineSpec& spec) {
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  const std::int64_t v = std::max<std::int64_t>(1, spec.chunks);
  const std::int64_t m = std::max<std::int64_t>(1, spec.microbatches);
  const auto P = static_cast<std::size_t>(p);
  PipelineTimes out;
  out.busy_s.assign(P, 0);
  out.idle_s.assign(P, 0);

  StageOrders made;
  if (spec.orders == nullptr) made = stage_orders(spec);
  const StageOrders& order = spec.orders != nullptr ? *spec.orders : made;

  // When the activation (gradient) a stage's chunk needs for a micro-batch was sent: by
  // receiver, [(stage * v + chunk) * m + micro-batch]; negative until it is.
  const auto slots = static_cast<std::size_t>(p * v * m);
  std::vector<double> activation(slots, -1), gradient(slots, -1);
  auto slot = [&](std::int64_t s, std::int64_t c, std::int64_t mb) { return static_cast<std::size_t>((s * v + c) * m + mb); };
  auto at = [&](const std::vector<double>& d, std::int64_t s, std::int64_t c) { return d[static_cast<std::size_t>(s * v + c)]; };

  std::vector<std::size_t> next(P, 0);
  std::vector<double> free_s(P, 0);  // the stage's compute stream
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
      double start = free_s[S];
      if (needs) {
        const double sent = (forward ? activation : gradient)[slot(s, c, mb)];
        if (sent < 0) break;  // its sender has not got there yet
        // Posted ahead, the transfer left when it was sent; otherwise when this stage
        // reached the item.
        // From the previous stage (forward; stage 0 from the last) or the next (backward).
        const std::int64_t boundary = forward ? (s + p - 1) % p : s;
        const double transfer_s =
            spec.boundary_transfer_s.empty() ? spec.transfer_s : spec.boundary_transfer_s[static_cast<std::size_t>(boundary)];
        start = std::max(start, (spec.preposted ? sent : std::max(sent, free_s[S])) + transfer_s);
      }
      double dt = 0;
      switch (it.pass) {
        case Pass::forward: dt = at(spec.forward_s, s, c); break;
        case Pass::backward: dt = at(spec.backward_s, s, c); break;
        case Pass::backward_input: dt = at(spec.backward_s, s, c) - at(spec.weight_s, s, c); break;
        case Pass::backward_weight: dt = at(spec.weight_s, s, c); break;
      }
      free_s[S] = start + dt;
      out.busy_s[S] += dt;
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
        (forward ? activation : gradient)[slot(to, to_chunk, mb)] = free_s[S];
        if (to != s) work.push_back(to);
      }
    }
  }
  for (std::size_t s = 0; s < P; ++s) out.makespan_s = std::max(out.makespan_s, free_s[s]);
  for (std::size_t s = 0; s < P; ++s) out.idle_s[s] = out.makespan_s - out.busy_s[s];
  return out;
}

}  // namespace meshwork::models
