#pragma once
// Data parallelism in the closed form, by the Program's rules (models/program.cpp), replayed on
// one stage's schedule with its pipeline neighbours never late: the compute stream in order,
// the DP stream's collectives in issue order, each issued after the compute before it.
// Gradient buckets of grad_bucket_params join as the backward proceeds, on the last
// micro-batch of each chunk (every micro-batch with ZeRO-2 and 3, which keep only their shard);
// overlapped they run under the compute that follows, otherwise they wait for the end of the
// backward (sharded ones hold the backward where they are issued). ZeRO-3 gathers each layer
// before its forward and its backward, the next one prefetched under this one with
// overlap.param_gather. The distributed optimizer's gather of the updated parameters (ZeRO 1
// and 2) runs under the forward with overlap.param_gather, otherwise it follows the optimizer
// step. The estimate replays every stage so and plays what it finds in its pipeline replay, so
// that a stage late for its own DP makes its neighbours wait (models/pipeline): the stage's
// stream beside its items where its collectives only take SMs from them (DpReplay::streamed,
// issued: PipelineSpec::dp_streams), otherwise what DP held its items for here
// (DpReplay::item_delays: PipelineSpec::delays); each chunk's earliest first forward
// (chunk_ready_s: PipelineSpec::not_before).
#include <cstdint>
#include <utility>
#include <vector>

#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "models/layer_comm.hpp"
#include "models/params.hpp"
#include "models/stage_times.hpp"
#include "plan/plan.hpp"

namespace meshwork::models {

// The groups DP's collectives run on (models::dp_groups): where ZeRO shards, dense and expert,
// and, with several distributed-optimizer instances, across them. This and DpStage are views of
// the caller's objects, valid for the one call to replay_dp.
struct DpNetworks {
  const GroupNetwork& dense;
  const GroupNetwork& expert;
  const GroupNetwork& dense_replica;
  const GroupNetwork& expert_replica;
  std::int64_t dense_replicas = 1, expert_replicas = 1;
};

// The stage replayed, as the estimate timed it.
struct DpStage {
  std::int64_t index = 0;                          // its place in the pipeline
  std::int64_t micro_batches = 1;                  // per step
  const std::vector<std::int64_t>& chunk_layers;   // layers of each of its chunks
  const std::vector<std::int64_t>& chunk_firsts;   // each chunk's first layer
  const StageTimes (&layers)[2][2];                // a layer's times, [moe][recomputed]
  const StageTimes& first_ops;                     // the embedding's (first stage)
  const StageTimes& last_ops;                      // the head's and the loss's (last stage)
  double params = 0, expert_params = 0;            // per GPU
  // Compute before its first item, after the step's first DP collectives are issued (the
  // gradient buffer zeroed, the Program's zero_grad_buffer): the parameter gathers the
  // distributed optimizer dispatched run under it.
  double start_s = 0;
  // The pipeline's transfers through its GPUs' NICs, for the share of its items' span they run
  // (none without a pipeline or inside a node): a collective its DP stream runs during its items
  // runs that share of its time at the NIC's share beside them (models::nic_bytes_per_s_beside).
  NicSharing transfers_on_nic;
};

// The NIC's share between nodes for each of DpNetworks' groups (models::stage_nic_bytes_per_s).
struct DpNicRates {
  double dense = 0, expert = 0, dense_replica = 0, expert_replica = 0;
};

// The collectives a stage issues after its last item: the deferred gradient reduction (without
// overlap.grad_reduce, gradients not sharded), bucket by bucket, and the distributed
// optimizer's gather of the updated parameters when not overlapped with the next forward.
struct AfterLastItem {
  std::vector<std::pair<GpuParams, std::int64_t>> reductions;  // a bucket's gradients, how many such in a row
  GpuParams gathered;                                          // none without the closing gather
  [[nodiscard]] bool empty() const { return reductions.empty() && gathered.total() <= 0; }
};

struct DpReplay {
  double dp_s = 0;  // DP's exposed seconds per step, every collective at its group's share
  // Of the collectives whose group crosses nodes (on the NICs), the seconds run under the
  // stage's compute, and the span of that compute (its own items and what DP holds them for):
  // the share of its NIC the pipeline's transfers find busy (models::p2p_s, NicSharing).
  double under_compute_s = 0, span_s = 0;
  // Of dp_s: what DP holds the stage's items for up to its last item's end, and then the time
  // its DP stream is still busy with collectives issued before, after which those of
  // after_last_item start.
  double before_end_s = 0, tail_s = 0;
  AfterLastItem after_last_item;
  // Of before_end_s: what DP adds to the stage's items from its first backward on (its
  // collectives under them take SMs, or it waits for a blocking reduction or a ZeRO-3 gather),
  // item by item, which the estimate's pipeline replay adds to the stage's items where its
  // stream is not played there, so that its neighbours wait for it (PipelineSpec::delays); and
  // before that, in all, the
  // step's start (the parameter gathers dispatched with it), the stage's own: of which
  // start_wait_s its first forwards' waits for those gathers, the rest their SMs' slowdown.
  struct ItemDelay {
    ScheduleItem item;
    double seconds = 0;
  };
  std::vector<ItemDelay> item_delays;
  double start_delay_s = 0, start_wait_s = 0;
  // The step's start with the distributed optimizer's gathers dispatched with it
  // (overlap.param_gather), from the stage's first item (the gradient buffer's zeroing before
  // it, slowed beside the gathers, taken off: origin_s, where the first item starts), the
  // stage's own: per chunk, the earliest its first forward can start and wait for none of them
  // (each bucket's gather's end less the compute before its first layer), at full speed
  // (chunk_ready_s; the first stage's first chunk waits for the embedding's), and when the last
  // of them ends (gathers_end_s): until then the stage's compute runs on the SMs the gathers
  // leave it (sm_fraction, models/sm_share.hpp). The estimate's pipeline replay holds each
  // stage's first forwards to its ready times (PipelineSpec::not_before) and slows its compute
  // until its gathers end (PipelineSpec::dp_streams), wherever its items fall: a stage that
  // reaches them late neither waits nor runs slower (issue 18).
  std::vector<double> chunk_ready_s;
  double origin_s = 0, gathers_end_s = 0, sm_fraction = 0;
  // Whether the collectives its DP stream runs during its items only take SMs from them (no
  // ZeRO-3 gather, no blocking sharded reduction): then the estimate plays the stream in its
  // pipeline replay beside each stage's items where the schedule places them
  // (PipelineSpec::dp_streams and issues), rather than holding the items for item_delays,
  // measured here with the neighbours never late (a stage idle between items loses less to a
  // reduction than one that is not: issue 18). `issued`: each collective the stream issues
  // during an item, after how much of the item's compute at full speed, for how long.
  bool streamed = false;
  struct Issued {
    ScheduleItem item;
    double after_s = 0, seconds = 0;
  };
  std::vector<Issued> issued;
};

DpReplay replay_dp(const plan::Plan& p, const HardwareProfile& hw, const ParamCounts& counts, const DpNetworks& nets, const DpStage& stage,
                   CollectivePrices& price);

// The seconds of a stage's collectives after its last item (one after the other, as its DP
// stream issues them) at the NIC shares given.
double after_last_item_s(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price, const DpNicRates& rates);

}  // namespace meshwork::models
