#pragma once
// The Program (docs/DESIGN.md): a plan lowered to what every rank does, in order. The
// simulator times it and the executor runs it, instruction for instruction, so that predicted
// and measured can be compared op by op.
//
// Ranks of one pipeline stage run the same instructions (TP, CP, EP and DP are symmetric), so
// the Program holds one instruction list per stage: a rank class, with its multiplicity. A
// rank's own peers and group ids come from plan::RankLayout on demand (for_rank()), so a
// 16K-GPU plan costs stages x instructions per stage, not ranks.
//
// Order and dependencies. Instructions of a rank run in list order on their stream; an
// instruction also waits for `after` and `also_after` (earlier instructions of the same rank:
// a compute can wait for a receive and a parameter gather) and a receive
// for its matching send on the peer stage; ring attention's last block waits for CP's p2p
// exchange (`tail_after`). Compute waits for the blocking collectives before
// it (TP, CP, EP); DP collectives and sends run in the background, as frameworks issue them.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/op_table.hpp"
#include "plan/plan.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::models {

enum class Stream : std::uint8_t { compute, tp, cp, ep, dp, pp };
enum class InstrKind : std::uint8_t { compute, collective, send, recv };
enum class Collective : std::uint8_t { none, all_reduce, reduce_scatter, all_gather, all_to_all, ring_exchange, broadcast };
// What a schedule item does with one micro-batch of one model chunk. `backward` is the whole
// backward pass; zero-bubble schedules split it into input-gradient and weight-gradient parts.
enum class Pass : std::uint8_t { forward, backward, backward_input, backward_weight };

std::string_view to_string(Stream s);
std::string_view to_string(InstrKind k);
std::string_view to_string(Collective c);
std::string_view to_string(Pass p);  // "F", "B", "B_input", "W": the schedule tables' letters
// The pass's name in traces and the GUI: "forward", "backward", "backward_input", "backward_weight".
std::string_view pass_name(Pass p);

struct ScheduleItem {
  Pass pass = Pass::forward;
  std::int32_t microbatch = 0;
  std::int32_t chunk = 0;  // model chunk (virtual stage) of this stage
  bool operator==(const ScheduleItem&) const = default;
};

struct Instr {
  InstrKind kind = InstrKind::compute;
  Stream stream = Stream::compute;
  Collective collective = Collective::none;
  OpKind op = OpKind::gemm;          // compute
  OpPhase phase = OpPhase::forward;  // compute
  plan::GroupKind group = plan::GroupKind::tp;  // collectives
  bool sixteen_bit = false;  // compute: Op::sixteen_bit (a GEMM an FP8 plan keeps in 16 bits)
  std::int32_t name = 0;        // index into Program::names: "qkv", "tp_all_reduce", ...
  std::int32_t item = -1;       // index into the stage's schedule; -1 for the optimizer step
  std::int32_t layer = -1;      // global layer index; -1 outside the layers
  std::int32_t peer_stage = -1; // send / recv
  std::int32_t tag = -1;        // send / recv: matches one send with one receive
  std::int32_t after = -1;      // an earlier instruction of this rank to wait for
  std::int32_t also_after = -1; // a second one, set only when `after` is (a compute waiting for a receive and a gather)
  // A compute split with a collective it consumes piece by piece (ring attention under CP's
  // p2p exchange): it starts without waiting for `tail_after`, and its last `tail_fraction`
  // (the last block's share) runs only after it, so it ends at
  // max(start + d, end of tail_after + tail_fraction d). -1: none.
  std::int32_t tail_after = -1;
  float tail_fraction = 0;  // beside tail_after, so that an Instr stays 72 bytes
  float cast_bytes = 0;     // compute: Op::cast_bytes (FP8 casts), beside tail_fraction in 8 bytes
  double flops = 0;
  double bytes = 0;             // HBM traffic (compute) or payload per rank (communication)
};

static_assert(sizeof(Instr) <= 72, "an Instr is 72 bytes: the 16K-GPU Programs hold millions");

struct StageProgram {
  std::int64_t stage = 0;
  std::int64_t ranks = 0;  // multiplicity: ranks that run this list
  std::vector<ScheduleItem> schedule;
  std::vector<Instr> instrs;
};

struct Program {
  plan::PipelineSchedule schedule = plan::PipelineSchedule::one_f_one_b;
  std::int64_t stages = 1;
  std::int64_t chunks = 1;        // virtual stages per stage
  std::int64_t microbatches = 1;  // per step, per pipeline
  std::vector<std::string> names;
  std::vector<StageProgram> classes;  // one per pipeline stage
  // The global layers [first, end) of each stage's chunks, [stage][chunk] (the plan's split:
  // uneven stages, the account_for_* switches, explicit layouts).
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> chunk_layers;

  [[nodiscard]] const std::string& name(const Instr& i) const { return names[static_cast<std::size_t>(i.name)]; }
  // Whether chunk `chunk` of `stage` is the first virtual stage (the embedding's) or the last
  // (the head's and the loss's).
  [[nodiscard]] bool first_virtual(std::int64_t stage, std::int64_t chunk) const { return stage == 0 && chunk == 0; }
  [[nodiscard]] bool last_virtual(std::int64_t stage, std::int64_t chunk) const { return stage == stages - 1 && chunk == chunks - 1; }
  // A schedule item's name in traces: its pass and its chunk's layers, "forward L0-3",
  // "backward_weight L8-15" ("forward embedding" for a chunk without layers).
  [[nodiscard]] std::string block_name(std::int64_t stage, const ScheduleItem& item) const;
};

struct LowerResult {
  std::optional<Program> program;
  std::string error;  // why the plan cannot be lowered
};

// The per-stage order of forward and backward passes, as the published schedule functions
// order them (schedules.cpp cites each).
std::vector<ScheduleItem> stage_schedule(plan::PipelineSchedule schedule, std::int64_t stages, std::int64_t stage,
                                         std::int64_t microbatches, std::int64_t chunks);

// Lowers a validated plan.
// `each_stage`, when given, is handed each stage's program as soon as it is lowered, to
// rewrite in place (the simulator merges it into blocks there, so that a long pipeline's
// per-operation instructions never all exist at once).
LowerResult lower(const plan::Plan& plan, const std::function<void(StageProgram&)>& each_stage = {});

// A rank's concrete view: its stage's instructions with the rank's peers and group ids.
struct RankView {
  std::int64_t rank = 0;
  const StageProgram* stage = nullptr;
  std::int64_t prev_rank = -1, next_rank = -1;  // pipeline neighbours (same TP/CP/DP coordinates)
  std::vector<std::pair<plan::GroupKind, std::int64_t>> groups;  // group index of each kind with >1 member
};
RankView for_rank(const Program& program, const plan::RankLayout& layout, std::int64_t rank);

// The zero-communication-cost replay: every instruction takes `duration(stage, instr)` seconds
// (communication usually 0), streams in order, receives after their sends; a compute split with
// a collective (tail_after) ends no earlier than that collective plus its last part. Per stage: busy and
// idle compute time; the bubble fraction as the papers define it, (makespan - ideal) / ideal
// with ideal the busiest stage's compute. Fails (error set) on a deadlock.
struct ReplayResult {
  double makespan_s = 0;
  std::vector<double> busy_s, idle_s;
  double bubble_fraction = 0;
  std::string error;
};
// What the simulator and the executor are handed: each instruction once, in an order that
// respects streams, `after` (and `tail_after`) and receives, with the replay's start and end
// times (a split compute's end includes its wait for tail_after).
class ProgramConsumer {
 public:
  virtual ~ProgramConsumer() = default;
  virtual void on(const StageProgram& stage, std::size_t index, const Instr& instr, double start_s, double end_s) = 0;
};
// A consumer that records what it is handed, for the simulator's and executor's tests.
class RecordingConsumer : public ProgramConsumer {
 public:
  struct Event {
    std::int64_t stage = 0;
    std::size_t index = 0;
    double start_s = 0, end_s = 0;
  };
  std::vector<Event> events;
  void on(const StageProgram& stage, std::size_t index, const Instr&, double start_s, double end_s) override {
    events.push_back({stage.stage, index, start_s, end_s});
  }
};
ReplayResult replay(const Program& program, const std::function<double(const StageProgram&, const Instr&)>& duration,
                    ProgramConsumer* consumer = nullptr);
// Durations that make each forward, backward-input and weight-gradient item of one chunk take
// 1 / chunks (a whole backward 2 / chunks) and communication nothing: the papers' T_F = T_B = T_W.
std::function<double(const StageProgram&, const Instr&)> unit_item_durations(const Program& program);

// The checker: every send has exactly one receive (same tag, bytes, peer) and the reverse; no
// instruction waits on a later one; the replay finishes (no deadlock); the micro-batches in
// flight on each stage stay within the schedule's bound; and, when `expected_flops` > 0, the
// FLOPs of all instructions times their multiplicity equal it (relative 1e-9).
struct CheckResult {
  std::vector<std::string> errors;
  std::vector<std::int64_t> max_in_flight;  // per stage
  double flops = 0;
  [[nodiscard]] bool ok() const { return errors.empty(); }
};
CheckResult check(const Program& program, double expected_flops = 0);
// The schedule's bound on micro-batches in flight (forward done, backward not) on a stage:
// GPipe m, 1F1B p - stage, interleaved Megatron's warm-up count + 1, ZB-H1 as 1F1B.
std::int64_t in_flight_bound(const Program& program, std::int64_t stage);
// The same from the schedule's sizes: chunks a stage holds at its peak (Megatron's warm-up,
// all m v chunks when m = p under interleaving).
std::int64_t in_flight_bound(plan::PipelineSchedule schedule, std::int64_t stages, std::int64_t stage,
                             std::int64_t microbatches, std::int64_t chunks);

}  // namespace meshwork::models
