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
// step. What DP holds the stage's items for (DpReplay::item_delays, chunk_ready_s) the estimate
// then holds every stage's items for in its pipeline replay, so that a stage late for its own DP
// makes its neighbours wait (models/pipeline, PipelineSpec::delays).
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
  // item by item, which the estimate's pipeline replay adds to every stage's items alike, so
  // that its neighbours wait for it there (PipelineSpec::delays); and before that, in all, the
  // step's start (the parameter gathers dispatched with it), the stage's own: of which
  // start_wait_s its first forwards' waits for those gathers, the rest their SMs' slowdown.
  struct ItemDelay {
    ScheduleItem item;
    double seconds = 0;
  };
  std::vector<ItemDelay> item_delays;
  double start_delay_s = 0, start_wait_s = 0;
  // With the distributed optimizer's gathers dispatched at the step's start
  // (overlap.param_gather): per chunk, the earliest its first forward can start and wait for
  // none of them (each bucket's gather's end less the compute before its first layer), at full
  // speed, from the stage's first item (the gradient buffer's zeroing before it, which the
  // gathers run beside, taken off). The estimate's pipeline replay holds every stage's first
  // forwards to them (PipelineSpec::not_before): a stage that reaches them late does not wait.
  std::vector<double> chunk_ready_s;
};

DpReplay replay_dp(const plan::Plan& p, const HardwareProfile& hw, const ParamCounts& counts, const DpNetworks& nets, const DpStage& stage,
                   CollectivePrices& price);

// The seconds of a stage's collectives after its last item (one after the other, as its DP
// stream issues them) at the NIC shares given.
double after_last_item_s(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price, const DpNicRates& rates);

}  // namespace meshwork::models
