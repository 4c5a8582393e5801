#include "models/dp_replay.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <tuple>

#include "models/kept_last.hpp"
#include "models/layer_comm.hpp"
#include "models/memory.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "models/sm_share.hpp"

namespace meshwork::models {

namespace {

// A stage's order of items (models::stage_schedule) and, per chunk, its last item that
// produces weight gradients: the same for every plan of one schedule shape, so kept for the
// thread's last few shapes, as the pipeline's traversals are (models/pipeline.cpp; making and
// scanning the order was a tenth of the estimate).
struct StageOrder {
  std::vector<ScheduleItem> items;
  std::vector<std::size_t> last_grad_item;
  // Per item, chunk * 4 + pass: its seconds' index in PlainItems::seconds.
  std::vector<std::uint32_t> slot;
  // Per item, the first item from it on that reduces its chunk's gradients when they are not
  // sharded (its chunk's last with weight gradients; the order's size where none is left).
  std::vector<std::size_t> next_grad_item;
};

std::shared_ptr<const StageOrder> stage_order(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t stage, std::int64_t m,
                                              std::int64_t v, std::size_t chunks) {
  constexpr std::size_t kLargest = std::size_t{1} << 18;  // items of 24 bytes: at most 8 x 6 MiB kept
  thread_local KeptLast<std::tuple<plan::PipelineSchedule, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::size_t>, StageOrder> kept;
  auto make = [&] {
    StageOrder order;
    order.items = stage_schedule(schedule, p, stage, m, v);
    order.last_grad_item.assign(chunks, 0);
    order.slot.reserve(order.items.size());
    for (std::size_t i = 0; i < order.items.size(); ++i) {
      const ScheduleItem& it = order.items[i];
      if (it.pass == Pass::backward || it.pass == Pass::backward_weight) order.last_grad_item[static_cast<std::size_t>(it.chunk)] = i;
      order.slot.push_back(static_cast<std::uint32_t>(it.chunk) * 4 + static_cast<std::uint32_t>(it.pass));
    }
    order.next_grad_item.assign(order.items.size() + 1, order.items.size());
    for (std::size_t i = order.items.size(); i-- > 0;) {
      const ScheduleItem& it = order.items[i];
      const bool reduces = it.pass != Pass::forward && it.pass != Pass::backward_input && order.last_grad_item[static_cast<std::size_t>(it.chunk)] == i;
      order.next_grad_item[i] = reduces ? i : order.next_grad_item[i + 1];
    }
    return order;
  };
  return kept.get({schedule, p, stage, m, v, chunks}, make, [](const StageOrder& o) { return o.items.size() <= kLargest; });
}

// What DP adds to a stage's items: from its first backward on, item by item (the pipeline
// replay holds the stage's items for them: DpReplay::item_delays); before it, the step's start,
// where the parameter gathers dispatched at the step's start run at times one stage's replay
// cannot place for another (each reaches its first items after its neighbours), in all
// (DpReplay::start_delay_s). Rounding (a billionth of a microsecond at the item's end) is no
// delay.
struct ItemDelays {
  DpReplay& out;
  std::size_t first_backward = 0;  // in the stage's order
  void note(std::size_t i, const ScheduleItem& item, double extra_s, double end_s) {
    if (!(extra_s > 1e-15 * std::max(1.0, end_s))) return;
    if (i < first_backward) out.start_delay_s += extra_s;
    else out.item_delays.push_back({item, extra_s});
  }
};

// The items of a stage's order in which nothing happens between their layers, from `i` on:
// no ZeRO-3 gather, no parameter bucket to wait for (a forward), no gradient bucket to reduce
// (a backward with weight gradients: every one with sharded gradients, otherwise the chunk's
// last). Each runs at once for its seconds by (chunk, pass).
struct PlainItems {
  const StageOrder& schedule;  // the stage's order, with its slots and reductions
  const std::vector<ScheduleItem>& order;
  const std::vector<double>& seconds;  // [chunk * 4 + pass]
  const std::vector<std::size_t>& last_grad_item;
  const std::vector<std::vector<DpBucket>>& buckets;
  const std::vector<std::size_t>& awaited;
  bool sharded_grads = false;
  ItemDelays& delays;

  bool plain(std::size_t i) const {
    const ScheduleItem& it = order[i];
    const auto c = static_cast<std::size_t>(it.chunk);
    if (it.pass == Pass::forward) return buckets.empty() || awaited[c] >= buckets[c].size();
    return it.pass == Pass::backward_input || !(sharded_grads || last_grad_item[c] == i);
  }
  // Runs the plain items from `i` on, as SharedSms::run runs them; returns the first item that
  // is not plain. Kept out of line: inlined into replay_dp, whose lambdas capture its clocks,
  // the loop kept them and its index in memory (a tenth of the estimate's time).
  [[gnu::noinline]] std::size_t run(std::size_t i, SharedSms& sms, double& compute_s, double& busy_s) const {
    double at = compute_s, total = busy_s;
    const bool full_speed = sms.idle_from(at);
    if (full_speed && buckets.empty() && !sharded_grads) {
      // Most steps (no bucket to wait for, gradients reduced at each chunk's last backward):
      // every item up to the next such backward is plain, in the same order of additions as
      // below, without testing each (issue 18).
      const std::size_t stop = schedule.next_grad_item[i];
      for (; i < stop; ++i) {
        const double dt = seconds[schedule.slot[i]];
        at += dt;
        total += dt;
      }
      compute_s = at;
      busy_s = total;
      return i;
    }
    for (; i < order.size() && plain(i); ++i) {
      const double dt = seconds[static_cast<std::size_t>(order[i].chunk) * 4 + static_cast<std::size_t>(order[i].pass)];
      if (full_speed) {
        at += dt;
      } else {
        const double from = at;
        at = sms.run(at, dt);
        delays.note(i, order[i], at - from - dt, at);
      }
      total += dt;
    }
    compute_s = at;
    busy_s = total;
    return i;
  }
};

// A gradient reduction's parts, each timed by time(group, the group's NIC share in `rates`,
// collective, bytes), summed in one order: dense over DP x CP, expert over expert-DP, then
// across distributed-optimizer instances where there are several.
template <class Time>
double reduce_parts(const GradientReduction& dense_reduction, const GradientReduction& expert_reduction, const DpNetworks& nets,
                    const DpNicRates& rates, const GpuParams& g, Time&& time) {
  double s = time(nets.dense, rates.dense, dense_reduction.collective, g.dense * dense_reduction.bytes_per_param) +
             time(nets.expert, rates.expert, expert_reduction.collective, g.expert * expert_reduction.bytes_per_param);
  if (dense_reduction.replica_bytes_per_param > 0) {
    s += time(nets.dense_replica, rates.dense_replica, Collective::all_reduce, g.dense * dense_reduction.replica_bytes_per_param);
  }
  if (expert_reduction.replica_bytes_per_param > 0) {
    s += time(nets.expert_replica, rates.expert_replica, Collective::all_reduce, g.expert * expert_reduction.replica_bytes_per_param);
  }
  return s;
}

}  // namespace

double after_last_item_s(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price, const DpNicRates& rates) {
  const GradientReduction dense_reduction = gradient_reduction(p, false), expert_reduction = gradient_reduction(p, true);
  auto at_rate = [&](const GroupNetwork& n, double rate, Collective c, double bytes) { return price.at_nic_rate(n, c, bytes, rate); };
  double s = 0;
  for (const auto& [g, count] : work.reductions) {
    s += static_cast<double>(count) * reduce_parts(dense_reduction, expert_reduction, nets, rates, g, at_rate);
  }
  if (work.gathered.total() > 0) {
    const double e = activation_bytes(p.training.precision);
    s += at_rate(nets.dense, rates.dense, Collective::all_gather, work.gathered.dense * e) +
         at_rate(nets.expert, rates.expert, Collective::all_gather, work.gathered.expert * e);
  }
  return s;
}

DpReplay replay_dp(const plan::Plan& p, const HardwareProfile& hw, const ParamCounts& counts, const DpNetworks& nets, const DpStage& stage,
                   CollectivePrices& price) {
  DpReplay out;
  const auto& m = p.model;
  const auto& par = p.parallelism;
  const double e = activation_bytes(p.training.precision);
  // The gradients' collective and bytes, with compression (models/layer_comm), as the
  // Program issues them: dense over DP x CP, expert over expert-DP.
  const GradientReduction dense_reduction = gradient_reduction(p, false), expert_reduction = gradient_reduction(p, true);
  // Of the collectives priced since the stream last issued, the time of those whose group
  // crosses nodes.
  double on_nics_s = 0;
  // A gradient reduction, kept for the next bucket of the same size (most are: issue 18), with
  // what it added to on_nics_s, part by part in order, to add again.
  struct Reduced {
    GpuParams of;
    double seconds = -1;
    std::array<double, 4> on_nics{};
    std::size_t parts = 0;
  };
  Reduced last_reduced;
  Reduced* recording = nullptr;
  // Whether the collective priced runs during the stage's items, beside the pipeline's
  // transfers through its NICs (not a reduction deferred to after its last item).
  bool beside_transfers = true;
  auto timed = [&](const GroupNetwork& g, Collective c, double bytes) {
    double dt = price(g, c, bytes);
    const double u = std::clamp(stage.transfers_on_nic.busy_fraction, 0.0, 1.0);
    if (beside_transfers && g.crosses_nodes && u > 0) {
      dt = (1 - u) * dt + u * price.at_nic_rate(g, c, bytes, nic_bytes_per_s_beside(g, stage.transfers_on_nic));
    }
    if (g.crosses_nodes) {
      on_nics_s += dt;
      if (recording) recording->on_nics.at(recording->parts++) = dt;
    }
    return dt;
  };
  auto dp_time = [&](Collective c, const GpuParams& g, double bytes_per_param) {
    return timed(nets.dense, c, g.dense * bytes_per_param) + timed(nets.expert, c, g.expert * bytes_per_param);
  };
  auto reduce_time = [&](const GpuParams& g) {
    return reduce_parts(dense_reduction, expert_reduction, nets, DpNicRates{}, g,
                        [&](const GroupNetwork& n, double, Collective c, double bytes) { return timed(n, c, bytes); });
  };
  if (nets.dense.size > 1 || nets.expert.size > 1 || nets.dense_replicas > 1 || nets.expert_replicas > 1) {
    const bool zero3 = par.zero_stage == 3;
    const bool sharded_grads = par.zero_stage >= 2;
    const bool overlap_grads = par.overlap.grad_reduce;
    const double bucket = grad_bucket_params(p);
    const std::int64_t pchunks = par.pipeline_schedule == plan::PipelineSchedule::interleaved ? par.virtual_pipeline_model_parallel_size : 1;
    const auto& chunks = stage.chunk_layers;
    const auto& firsts = stage.chunk_firsts;
    // This stage's order alone.
    const std::shared_ptr<const StageOrder> order =
        stage_order(par.pipeline_schedule, par.pipeline_model_parallel_size, stage.index, stage.micro_batches, pchunks, chunks.size());
    const std::vector<ScheduleItem>& sched = order->items;
    const std::vector<std::size_t>& last_grad_item = order->last_grad_item;
    double compute = 0, stream = 0, busy = 0, last_grad = 0, deferred = 0;
    // The item running, and its compute at full speed so far (DpReplay::issued).
    ScheduleItem current;
    double item_compute_s = 0;
    out.streamed = !zero3 && (overlap_grads || !sharded_grads);
    out.sm_fraction = sm_fraction(hw, Stream::dp, Collective::all_reduce, false);
    GpuParams pending;
    // The compute beside the DP stream's collectives runs on the SMs they leave it
    // (models/sm_share.hpp); what it loses there is exposed DP time, as in the simulator.
    SharedSms sms(sm_fraction(hw, Stream::dp, Collective::all_reduce, false));
    auto run = [&](double dt) {
      compute = sms.run(compute, dt);
      busy += dt;
      item_compute_s += dt;
    };
    auto issue = [&](double dt) {
      const double start = std::max(stream, compute);
      sms.busy(start, start + dt);
      out.under_compute_s += on_nics_s;
      on_nics_s = 0;
      return stream = start + dt;
    };
    auto flush = [&] {
      if (pending.total() <= 0) return;
      if (last_reduced.seconds < 0 || last_reduced.of.dense != pending.dense || last_reduced.of.expert != pending.expert) {
        last_reduced = Reduced{pending};
        recording = &last_reduced;
        // A reduction deferred to the step's end runs after the stage's items.
        beside_transfers = overlap_grads || sharded_grads;
        last_reduced.seconds = reduce_time(pending);
        beside_transfers = true;
        recording = nullptr;
      } else {
        for (std::size_t i = 0; i < last_reduced.parts; ++i) on_nics_s += last_reduced.on_nics[i];
      }
      const double dt = last_reduced.seconds;
      if (overlap_grads) {
        last_grad = issue(dt);
        out.issued.push_back({current, item_compute_s, dt});
      }
      else if (sharded_grads) compute = last_grad = issue(dt);
      else {
        deferred += dt;
        auto& reductions = out.after_last_item.reductions;
        if (!reductions.empty() && reductions.back().first.dense == pending.dense && reductions.back().first.expert == pending.expert) {
          ++reductions.back().second;
        } else {
          reductions.emplace_back(pending, 1);
        }
      }
      pending = {};
    };
    auto add_grads = [&](const GpuParams& g) {
      pending += g;
      if (pending.total() >= bucket) flush();
    };
    // ZeRO-3's gather of the layer at `k` of a pass (its compute waits for it) and the
    // prefetch of the next.
    double prefetched = -1;
    auto gather = [&](std::int64_t layer, bool has_next, std::int64_t next) {
      if (!zero3) return;
      double ready = prefetched >= 0 ? prefetched : issue(dp_time(Collective::all_gather, layer_params_per_gpu(p, counts, is_moe_layer(m, layer)), e));
      prefetched = -1;
      if (par.overlap.param_gather && has_next) prefetched = issue(dp_time(Collective::all_gather, layer_params_per_gpu(p, counts, is_moe_layer(m, next)), e));
      compute = std::max(compute, ready);
    };
    const bool first_stage = stage.index == 0, last_stage = stage.index + 1 == par.pipeline_model_parallel_size;
    // ZeRO 1 and 2 with overlap.param_gather: the gathers of the updated parameters are
    // dispatched at the start of the step, bucket by bucket in the order the forward needs
    // them, and the chunk's first forward waits for each where it needs it (the Program's
    // await_params).
    const bool gather_ahead = (par.zero_stage == 1 || par.zero_stage == 2) && par.overlap.param_gather;
    std::vector<std::vector<DpBucket>> buckets;
    std::vector<std::vector<double>> gathered;  // when each bucket's gather ends
    std::vector<std::size_t> awaited;
    if (gather_ahead) {
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        buckets.push_back(dp_buckets(p, counts, firsts[c], firsts[c] + chunks[c], first_stage && c == 0,
                                     last_stage && c + 1 == chunks.size()));
        auto& ends = gathered.emplace_back();
        for (const DpBucket& bk : buckets.back()) ends.push_back(issue(dp_time(Collective::all_gather, bk.params, e)));
      }
      awaited.assign(chunks.size(), 0);
    }
    run(stage.start_s);
    out.origin_s = compute;
    if (gather_ahead) {
      out.gathers_end_s = std::max(0.0, stream - compute);
      out.chunk_ready_s.assign(chunks.size(), 0.0);
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        // As the first forward awaits them (below): those of its first layer before the
        // embedding, then each layer's before it.
        double before = 0, ready = 0;
        std::size_t j = 0;
        auto await_to = [&](std::int64_t layer) {
          for (; j < buckets[c].size() && buckets[c][j].first_layer <= layer; ++j) ready = std::max(ready, gathered[c][j] - before);
        };
        await_to(firsts[c]);
        if (first_stage && c == 0) before += stage.first_ops.forward_s;
        for (std::int64_t k = 0; k < chunks[c]; ++k) {
          await_to(firsts[c] + k);
          const StageTimes& l = stage.layers[is_moe_layer(m, firsts[c] + k) ? 1 : 0][recomputes_layer(p.training, k) ? 1 : 0];
          before += l.forward_s + l.comm_f_s;
        }
        out.chunk_ready_s[c] = std::max(0.0, ready - compute);
      }
    }
    // The gathers dispatched at the step's start slow it: the first item starts that much later.
    // ZeRO-3's gathers are issued item by item, not with the step: every delay is an item's.
    ItemDelays delays{out, zero3 ? std::size_t{0}
                                 : static_cast<std::size_t>(std::find_if(sched.begin(), sched.end(), [](const ScheduleItem& it) { return it.pass != Pass::forward; }) -
                                                            sched.begin())};
    delays.note(0, ScheduleItem{}, compute - busy, compute);
    auto await_params = [&](std::size_t c, std::int64_t layer) {
      if (buckets.empty()) return;
      for (std::size_t& j = awaited[c]; j < buckets[c].size() && buckets[c][j].first_layer <= layer; ++j) {
        out.start_wait_s += std::max(0.0, gathered[c][j] - compute);
        compute = std::max(compute, gathered[c][j]);
      }
    };
    // Each chunk's passes summed, for the items in which nothing happens between its layers
    // (no ZeRO-3 gather, no bucket to wait for or to reduce): most items of a step, run at once.
    struct ChunkSums {
      double forward = 0, recompute = 0, input = 0, weight = 0;  // input: with its exposed comm
    };
    std::vector<ChunkSums> sums(chunks.size());
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      for (std::int64_t k = 0; k < chunks[c]; ++k) {
        const StageTimes& l = stage.layers[is_moe_layer(m, firsts[c] + k) ? 1 : 0][recomputes_layer(p.training, k) ? 1 : 0];
        sums[c].forward += l.forward_s + l.comm_f_s;
        sums[c].recompute += l.recompute_s;
        sums[c].input += l.backward_s - l.weight_s + l.comm_b_s;
        sums[c].weight += l.weight_s;
      }
    }
    // An item in which nothing happens between its layers runs at once, for its seconds by
    // (chunk, pass): no ZeRO-3 gather, no bucket to wait for (a forward) or to reduce (a
    // backward with weight gradients, on the chunk's last one unless gradients are sharded).
    std::vector<double> plain_s(chunks.size() * 4, 0.0);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const bool first_virtual = first_stage && c == 0, last_virtual = last_stage && c + 1 == chunks.size();
      for (const Pass pass : {Pass::forward, Pass::backward, Pass::backward_input, Pass::backward_weight}) {
        const bool input = pass != Pass::backward_weight, weights = pass != Pass::backward_input;
        auto part = [&](const StageTimes& st) { return (input ? st.backward_s - st.weight_s : 0) + (weights ? st.weight_s : 0); };
        plain_s[c * 4 + static_cast<std::size_t>(pass)] =
            pass == Pass::forward
                ? (first_virtual ? stage.first_ops.forward_s : 0) + sums[c].forward + (last_virtual ? stage.last_ops.forward_s : 0)
                : (last_virtual ? part(stage.last_ops) : 0) + (input ? sums[c].recompute + sums[c].input : 0) +
                      (weights ? sums[c].weight : 0) + (first_virtual ? part(stage.first_ops) : 0);
      }
    }
    const PlainItems plain{*order, sched, plain_s, last_grad_item, buckets, awaited, sharded_grads, delays};
    for (std::size_t i = 0; i < sched.size(); ++i) {
      if (!zero3) {
        i = plain.run(i, sms, compute, busy);
        if (i == sched.size()) break;
      }
      const ScheduleItem& it = sched[i];
      // What DP adds to this item: its time less its own.
      const double from_compute = compute, from_busy = busy;
      current = it;
      item_compute_s = 0;
      auto noted = [&] { delays.note(i, it, (compute - from_compute) - (busy - from_busy), compute); };
      const auto c = static_cast<std::size_t>(it.chunk);
      const std::int64_t lo = firsts[c], n = chunks[c];
      const bool first_virtual = first_stage && c == 0, last_virtual = last_stage && c + 1 == chunks.size();
      const bool reduce = sharded_grads || last_grad_item[c] == i;
      auto layer = [&](std::int64_t k) -> const StageTimes& {
        return stage.layers[is_moe_layer(m, lo + k) ? 1 : 0][recomputes_layer(p.training, k) ? 1 : 0];
      };
      if (it.pass == Pass::forward) {
        await_params(c, lo);
        if (first_virtual) run(stage.first_ops.forward_s);
        for (std::int64_t k = 0; k < n; ++k) {
          await_params(c, lo + k);
          gather(lo + k, k + 1 < n, lo + k + 1);
          run(layer(k).forward_s + layer(k).comm_f_s);
        }
        if (last_virtual) run(stage.last_ops.forward_s);
        noted();
        continue;
      }
      const bool input = it.pass != Pass::backward_weight, weights = it.pass != Pass::backward_input;
      auto part = [&](const StageTimes& st) {
        return (input ? st.backward_s - st.weight_s : 0) + (weights ? st.weight_s : 0);
      };
      if (last_virtual) run(part(stage.last_ops));
      if (input) {
        for (std::int64_t k = 0; k < n; ++k) run(layer(k).recompute_s);
      }
      // The head's gradients join the chunk's first bucket, the embedding's its last (dp_buckets).
      if (weights && reduce) pending += end_params_per_gpu(p, counts, false, last_virtual);
      for (std::int64_t k = n - 1; k >= 0; --k) {
        if (input) gather(lo + k, k > 0, lo + k - 1);
        run(part(layer(k)) + (input ? layer(k).comm_b_s : 0));
        if (weights && reduce) add_grads(layer_params_per_gpu(p, counts, is_moe_layer(m, lo + k)));
      }
      if (first_virtual) run(part(stage.first_ops));
      if (weights && reduce) {
        pending += end_params_per_gpu(p, counts, first_virtual, false);
        flush();
      }
      noted();
    }
    // The collectives issued from here on run after the stage's last item: the deferred
    // gradient reduction and the distributed optimizer's gather when not overlapped
    // (after_last_item, which the estimate times again as every stage runs them at the step's
    // end: models::end_of_step).
    out.span_s = compute;
    out.before_end_s = std::max(0.0, compute - busy);
    const double under_compute_s = out.under_compute_s;
    const bool closing_gather = (par.zero_stage == 1 || par.zero_stage == 2) && !gather_ahead;
    const GpuParams all{stage.params, stage.expert_params};
    if (deferred > 0 || closing_gather) out.tail_s = std::max(0.0, stream - compute);
    if (deferred > 0) last_grad = issue(deferred);
    compute = std::max(compute, last_grad);
    beside_transfers = false;
    if (closing_gather) {
      compute = issue(dp_time(Collective::all_gather, all, e));
      out.after_last_item.gathered = all;
    }
    out.dp_s = std::max(0.0, compute - busy);
    out.under_compute_s = under_compute_s;
  }
  return out;
}

}  // namespace meshwork::models
