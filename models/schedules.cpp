// Per-stage orders of the pipeline schedules. Each follows its published schedule function;
// micro-batches and stages count from 0.
#include <algorithm>

#include "models/program.hpp"

namespace meshwork::models {
namespace {

using Items = std::vector<ScheduleItem>;
std::int32_t i32(std::int64_t v) { return static_cast<std::int32_t>(v); }

// GPipe (Huang et al. 2019, §2.2): every forward, then every backward.
Items gpipe(std::int64_t m) {
  Items out;
  out.reserve(static_cast<std::size_t>(2 * m));
  for (std::int64_t k = 0; k < m; ++k) out.push_back({Pass::forward, i32(k), 0});
  for (std::int64_t k = 0; k < m; ++k) out.push_back({Pass::backward, i32(k), 0});
  return out;
}

// 1F1B, as Megatron-LM's forward_backward_pipelining_without_interleaving
// (megatron/core/pipeline_parallel/schedules.py): p - s - 1 warm-up forwards, then one forward
// and one backward in turn, then the cool-down backwards.
Items one_f_one_b(std::int64_t p, std::int64_t s, std::int64_t m) {
  const std::int64_t warmup = std::min(p - s - 1, m);
  Items out;
  out.reserve(static_cast<std::size_t>(2 * m));
  for (std::int64_t k = 0; k < warmup; ++k) out.push_back({Pass::forward, i32(k), 0});
  for (std::int64_t k = 0; k < m - warmup; ++k) {
    out.push_back({Pass::forward, i32(warmup + k), 0});
    out.push_back({Pass::backward, i32(k), 0});
  }
  for (std::int64_t k = m - warmup; k < m; ++k) out.push_back({Pass::backward, i32(k), 0});
  return out;
}

// Interleaved 1F1B, as Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th
// forward of a stage is micro-batch (k / (p v)) p + k % p of chunk (k % (p v)) / p; backwards
// run the chunks in reverse; (p - s - 1) 2 + (v - 1) p warm-up forwards (all of them when
// m = p), then one forward and one backward in turn.
Items interleaved(std::int64_t p, std::int64_t s, std::int64_t m, std::int64_t v) {
  const std::int64_t total = m * v;
  std::int64_t warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
  // The k-th item of a direction, counted up rather than divided out (k % p, (k % (p v)) / p,
  // (k / (p v)) p): two divisions per item were a quarter of an estimate's time.
  struct Cursor {
    std::int64_t p, v, in_group = 0, chunk = 0, base = 0;
    ScheduleItem next(bool forward) {
      const ScheduleItem it{forward ? Pass::forward : Pass::backward, i32(base + in_group), i32(forward ? chunk : v - 1 - chunk)};
      if (++in_group == p) {
        in_group = 0;
        if (++chunk == v) chunk = 0, base += p;
      }
      return it;
    }
  };
  Cursor fwd{p, v}, bwd{p, v};
  Items out;
  out.reserve(static_cast<std::size_t>(2 * total));
  for (std::int64_t k = 0; k < warmup; ++k) out.push_back(fwd.next(true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(fwd.next(true));
    out.push_back(bwd.next(false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) out.push_back(bwd.next(false));
  return out;
}

// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, arXiv:2401.10241, §3.1):
// the backward split into input-gradient (B) and weight-gradient (W) passes. Stage s runs, for
// x = 0 .. m + p - 2, the triple (F_x, B_(x - (p - 1 - s)), W_(x - (p - 1))), each pass only
// when its micro-batch is in 0 .. m-1: p - 1 - s lone forwards, then (F, B) pairs, the steady
// (F, B, W) triples, and a cool-down in which the deferred W's fill what would be 1F1B's
// bubble. With T_F = T_B = T_W the bubble is (p - 1) / (3 m), and a stage holds at most
// p - s forwards awaiting their B (1F1B's bound) and p awaiting their W.
Items zero_bubble(std::int64_t p, std::int64_t s, std::int64_t m) {
  Items out;
  out.reserve(static_cast<std::size_t>(3 * m));
  for (std::int64_t x = 0; x < m + p - 1; ++x) {
    const std::int64_t b = x - (p - 1 - s), w = x - (p - 1);
    if (x < m) out.push_back({Pass::forward, i32(x), 0});
    if (b >= 0 && b < m) out.push_back({Pass::backward_input, i32(b), 0});
    if (w >= 0 && w < m) out.push_back({Pass::backward_weight, i32(w), 0});
  }
  return out;
}

}  // namespace

std::vector<ScheduleItem> stage_schedule(plan::PipelineSchedule schedule, std::int64_t stages, std::int64_t stage,
                                         std::int64_t microbatches, std::int64_t chunks) {
  switch (schedule) {
    case plan::PipelineSchedule::gpipe: return gpipe(microbatches);
    case plan::PipelineSchedule::one_f_one_b: return one_f_one_b(stages, stage, microbatches);
    case plan::PipelineSchedule::interleaved: return interleaved(stages, stage, microbatches, chunks);
    case plan::PipelineSchedule::zero_bubble: return zero_bubble(stages, stage, microbatches);
  }
  return {};
}

std::int64_t in_flight_bound(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t stage, std::int64_t m,
                             std::int64_t v) {
  switch (schedule) {
    case plan::PipelineSchedule::gpipe: return m;
    case plan::PipelineSchedule::one_f_one_b:
    case plan::PipelineSchedule::zero_bubble: return std::min(m, p - stage);
    case plan::PipelineSchedule::interleaved:
      return m == p ? m * v : std::min(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1);
  }
  return m;
}

std::int64_t in_flight_bound(const Program& program, std::int64_t stage) {
  return in_flight_bound(program.schedule, program.stages, stage, program.microbatches, program.chunks);
}

std::string_view to_string(Stream s) {
  switch (s) {
    case Stream::compute: return "compute";
    case Stream::tp: return "tp";
    case Stream::cp: return "cp";
    case Stream::ep: return "ep";
    case Stream::dp: return "dp";
    case Stream::pp: return "pp";
  }
  return "?";
}

std::string_view to_string(InstrKind k) {
  switch (k) {
    case InstrKind::compute: return "compute";
    case InstrKind::collective: return "collective";
    case InstrKind::send: return "send";
    case InstrKind::recv: return "recv";
  }
  return "?";
}

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::none: return "none";
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::all_to_all: return "all_to_all";
    case Collective::ring_exchange: return "ring_exchange";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

std::string_view to_string(Pass p) {
  switch (p) {
    case Pass::forward: return "F";
    case Pass::backward: return "B";
    case Pass::backward_input: return "B_input";
    case Pass::backward_weight: return "W";
  }
  return "?";
}

std::string_view pass_name(Pass p) {
  switch (p) {
    case Pass::forward: return "forward";
    case Pass::backward: return "backward";
    case Pass::backward_input: return "backward_input";
    case Pass::backward_weight: return "backward_weight";
  }
  return "?";
}

}  // namespace meshwork::models
