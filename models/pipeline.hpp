#pragma once
// The pipeline as the Program plays it, at the grain of schedule items: every stage runs its
// schedule (models::stage_schedule) in order, a forward waits for its activations and a
// backward for its gradients from the neighbouring stage. The estimate's bubble and exposed
// pipeline communication come from here, with the rules the simulator plays (sim/engine.cpp):
//
// - A transfer takes `transfer_s` (models::p2p_s of the pipeline group), or its boundary's,
//   at the share of the fabric its boundary gets (topology/fabric_share).
// - Sends are buffered: the sender goes on.
// - With overlap.p2p the receive is posted ahead (Megatron's --overlap-p2p-communication
//   posts the next item's receive before the current item's compute), so a transfer runs as
//   soon as it is sent. Without it the receive is posted when the stage reaches the item (a
//   rendezvous, as NCCL's send and receive), and a transfer sent earlier starts only then.
//
// Even posted ahead, a transfer can sit on the critical path: in 1F1B's steady state a stage
// waits two transfers per micro-batch for its neighbour (the cycle forward to it, backward
// from it), which is why the bubble of (p-1)/m alone does not price pipeline communication.
#include <cstdint>
#include <utility>
#include <vector>

#include "models/program.hpp"

namespace meshwork::models {

// Every stage's order of items (models::stage_schedule), by stage.
using StageOrders = std::vector<std::vector<ScheduleItem>>;

struct PipelineSpec {
  plan::PipelineSchedule schedule = plan::PipelineSchedule::one_f_one_b;
  std::int64_t stages = 1;
  std::int64_t microbatches = 1;
  std::int64_t chunks = 1;  // virtual stages per stage (interleaved), 1 otherwise
  // Seconds of one item, per stage and chunk: [stage * chunks + chunk]. backward_s is the
  // whole backward (input and weight gradients); weight_s its weight-gradient part, which
  // zero-bubble schedules run as an item of its own.
  std::vector<double> forward_s, backward_s, weight_s;
  double transfer_s = 0;  // one activation or gradient between neighbouring stages
  // Per boundary b, between stage b and stage b + 1 (b = stages - 1: the last stage and the
  // first, which interleaved schedules cross): its own transfer time, when the fabric gives
  // boundaries different shares (an oversubscribed pod crossed by some of them). Empty: every
  // boundary takes transfer_s.
  std::vector<double> boundary_transfer_s;
  // Every item's seconds (backward_s - weight_s too) and every transfer is at least zero
  // (pipeline_times throws std::invalid_argument otherwise): no item ends before the step starts.
  bool preposted = true;  // overlap.p2p
  // Items that run longer than their slot's seconds: a stage's DP holds them for a blocking
  // reduction or a ZeRO-3 gather, or its collectives take SMs from them where its stream is not
  // played (dp_streams below), as its own replay measured (models/dp_replay), on some items
  // only, so its neighbours wait for it there. Each names its stage, chunk, pass and
  // micro-batch (under the spec's), its seconds at least zero; one on a pass the schedule does
  // not run (backward_input under 1F1B) holds nothing. A spec with delays is replayed whole (no
  // steady state is extrapolated); its busy_s does not count them, its idle_s does.
  struct Delay {
    std::int32_t stage = 0, chunk = 0;
    Pass pass = Pass::forward;
    std::int32_t microbatch = 0;
    double seconds = 0;
  };
  std::vector<Delay> delays;
  // Items that cannot start before a time from the step's start (a chunk's first forward waits
  // for the parameter gathers dispatched with the step: models/dp_replay), as delays name them;
  // `seconds` is that time. A spec with any is replayed whole too.
  std::vector<Delay> not_before;
  // Per stage, its DP stream, played beside its compute as the simulator plays it
  // (sim/engine_play.cpp) where its collectives only take SMs from the compute (overlapped
  // gradient reductions, the distributed optimizer's gathers dispatched with the step:
  // models/dp_replay): the stream runs one collective at a time, in issue order, and while one
  // runs the stage's compute runs at 1 - fraction (models::SharedSms). The collectives
  // dispatched with the step keep it busy from the step's start until `busy_until_s`; `issues`
  // names the rest. Empty: no stream; a stage past its end or of zero fraction: none for it.
  // A spec with streams is replayed whole too.
  struct DpStream {
    double fraction = 0, busy_until_s = 0;
  };
  std::vector<DpStream> dp_streams;
  // A collective a stage's DP stream issues during one of its items, as delays name them, once
  // `after_s` of the item's compute (at full speed, at most the item's seconds) has run, for
  // `seconds`; an item's issues run in order of after_s, in the order given where equal. One on
  // a stage without a stream is not played.
  struct Issue {
    std::int32_t stage = 0, chunk = 0;
    Pass pass = Pass::forward;
    std::int32_t microbatch = 0;
    double after_s = 0, seconds = 0;
  };
  std::vector<Issue> issues;
  // A transfer's seconds while the DP stream of the stage sending or receiving it runs a
  // collective, whose flows share the transfer's NIC (models::p2p_s with NicSharing), per
  // boundary as boundary_transfer_s, or for every boundary: the replay prices a transfer at
  // the slower rate for what of it runs beside such a collective. Zero (or at most the
  // transfer's own): no sharing.
  double shared_transfer_s = 0;
  std::vector<double> boundary_shared_transfer_s;
  // Replay a shorter step and add the steady state's periods it skips, where the check allows
  // (models/pipeline.cpp); false: every micro-batch (the reference the tests compare with).
  bool extrapolate = true;
};

struct PipelineTimes {
  double makespan_s = 0;
  std::vector<double> busy_s;  // per stage: its items' seconds
  std::vector<double> idle_s;  // per stage: makespan - busy
  std::vector<double> end_s;   // per stage: when its last item ends
  std::int64_t replayed_microbatches = 0;  // fewer than the spec's where the steady state was extrapolated
  // Per stage, how long PipelineSpec::not_before held its items beyond what else they waited
  // for (in idle_s); empty for a spec without it.
  std::vector<double> held_back_s;
  // Per stage, what its DP stream's collectives slowed its items by (in idle_s), and when its
  // last collective ends (0 if none): empty for a spec without streams.
  std::vector<double> slowed_s, dp_end_s;
};

// The orders pipeline_times replays for `spec`.
StageOrders stage_orders(const PipelineSpec& spec);

// Replays the schedule: O(stages x micro-batches x chunks) timed steps, or, extrapolated over
// its steady state, O(stages x (stages + check periods) x chunks) (not with delays, earliest
// starts or DP streams). The schedule's traversal (which item waits for which, found in rounds over
// the stages: O(stages x (2 micro-batches x chunks + stages))) is made once per shape and kept
// per thread for the next calls. Throws std::invalid_argument for an interleaved schedule whose
// micro-batches are not a multiple of its stages (plan::validate refuses such plans), an item
// or transfer of negative seconds, a delay or earliest start outside the schedule or
// negative, DP streams of more stages than the schedule's, a negative time, a fraction outside
// [0, 1), or an issue outside the schedule, or after its item's compute.
PipelineTimes pipeline_times(const PipelineSpec& spec);
// Replays two specs of one schedule (the same stages, micro-batches, chunks and orders; their
// times, transfers, preposted, delays, earliest starts and DP streams may differ) in one pass: the
// estimate's replay with communication and without.
std::pair<PipelineTimes, PipelineTimes> pipeline_times(const PipelineSpec& a, const PipelineSpec& b);

}  // namespace meshwork::models
