#pragma once
// One rank's training loop, the same on every backend (exec/backend.hpp): it plays its
// pipeline stage's instructions of the plan's Program (models/program.hpp) in order. Compute instructions go by op-table name to the chunk's
// kernels, TP and EP collectives to their groups, pipeline transfers to the neighbours with the
// Program's peers and tags; layer ranges and the schedule are the Program's. At the optimizer's
// instructions it reduces the gradients (sequence-parallel partials over TP, the tied embedding
// between first and last stage, data parallelism with ZeRO 0-3, MoE experts over expert data
// parallelism), unscales them with fp16 (unscale_grads), clips them by their global norm
// (clip_grads) and runs AdamW; the Program's per-bucket DP instructions are not played one by
// one yet (the reduction is one call per group at the optimizer), nor its per-layer ZeRO-3
// gathers (each schedule item gathers every parameter of the stage). The same class with
// groups of one on the CPU backend is the single-rank reference of --verify.
//
// What it holds and moves (the parameters' flat copies, the optimizer's state, the gradients
// it reduces) are the backend's buffers; it reads none of them itself: the backend copies,
// scales, hashes and updates them, and exec::Group reduces them.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "exec/backend.hpp"
#include "exec/checkpoint.hpp"
#include "exec/execute.hpp"
#include "exec/gpt.hpp"
#include "models/program.hpp"
#include "models/program_trace.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::exec {

// Where AdamW's gradients are once the Trainer has reduced them (Trainer::reduce_gradients),
// for its unscale, clipping and update. At namespace scope: a nested class with default member
// initializers is not default-constructible inside its enclosing class's definition, where
// std::optional<Pending> would be instantiated (clang rejects the emplace).
struct PendingUpdate {
  bool in_place = false;        // the dense gradients where the chunks hold them
  bool sharded = false;         // the dense gradients reduce-scattered to `mine` (ZeRO >= 1)
  bool experts_sharded = false; // the experts' to `expert_mine`
  bool flip = false;            // a test's bit flip on this rank this step
  bool skip = false;            // fp16: a non-finite gradient somewhere; no clipping, no update
  Buffer grads, mine, expert_grads, expert_mine;
};

class Trainer {
 public:
  // Throws std::invalid_argument when the plan cannot be lowered to a Program, or when the
  // backend cannot run one of its chunks. No backend: the CPU's.
  Trainer(const plan::Plan& plan, Groups groups, std::int64_t world_rank, OpSeconds* timing, std::unique_ptr<Backend> backend = nullptr);

  // One step (1-based); returns the step's loss, the mean over the global batch.
  double step(std::int64_t step, const ExecuteOptions& options);

  // The gradients after the TP, tied-embedding and DP reductions of the last step, by
  // parameter, this rank's shard, on the host (filled when `keep_reduced` is set before the step).
  bool keep_reduced = false;
  struct Reduced {
    const ParamSpec* spec;
    std::vector<float> grad;
  };
  [[nodiscard]] const std::vector<Reduced>& reduced() const { return reduced_; }
  // The global norm of the last step's reduced gradients, before clipping (training.clip_grad;
  // 0 when the plan does not clip, as Megatron reports none).
  [[nodiscard]] double grad_norm() const { return grad_norm_; }
  // Whether the last step's update was skipped: with fp16's loss scaler, a non-finite gradient
  // on some rank (Megatron skips the iteration).
  [[nodiscard]] bool skipped() const { return skipped_; }
  [[nodiscard]] std::vector<std::unique_ptr<Chunk>>& chunks() { return chunks_; }
  [[nodiscard]] Backend& backend() { return *backend_; }

  // Optimizer state and parameters as a checkpoint holds them.
  [[nodiscard]] RankState state();
  void restore(const RankState& s);

  [[nodiscard]] const Groups& groups() const { return g_; }
  // Makes every chunk's parameter values present (ZeRO-3 releases them between uses) and
  // returns whether they were released before; `release_after` puts them back.
  bool materialise();
  void release_after(bool released) {
    if (released) release_params();
  }
  // Sets the parameters (and the flat copy the optimizer updates) from the chunks' values.
  void load_from_chunks() {
    pack(false, false, params_.span());
    params_stale_ = false;
    pack(true, false, expert_params_.span());
    for (auto& c : chunks_) c->values_changed();
  }
  // The Program this rank plays (its stage's list is program().classes[stage()]).
  [[nodiscard]] const models::Program& program() const { return program_; }
  [[nodiscard]] const plan::Plan& plan() const { return plan_; }
  [[nodiscard]] std::int64_t stage() const { return stage_; }
  // Seconds per instruction of this rank's stage, summed over the steps since the last reset
  // (DP instructions, which the first of the optimizer's instructions plays, stay 0; that one
  // holds the reductions' time). On a device backend each
  // instruction is waited for only when the Trainer times it (an OpSeconds, `tracing` or a
  // delay); otherwise the device runs ahead and these are the host's enqueue times.
  [[nodiscard]] const std::vector<double>& instr_seconds() const { return instr_seconds_; }
  void reset_timing() { std::fill(instr_seconds_.begin(), instr_seconds_.end(), 0.0); }
  // With `tracing`, every instruction's run, in order (microseconds since the Trainer was made).
  std::vector<models::InstrTiming> events;
  bool tracing = false;
  // A test's slowdown: `delay_s` added to every run of instruction `delay_instr` (-1: none).
  std::int32_t delay_instr = -1;
  double delay_s = 0;

 private:
  // The dense parameters' (or the experts') values or gradients, flat in the chunks' order,
  // into the front of `flat`; unpack writes values back. The experts are reduced and updated
  // apart from the dense ones, over the expert-data-parallel group (ZeRO 1-2 shard their
  // optimizer state there; ZeRO-3 does not shard their parameters).
  void pack(bool experts, bool grads, std::span<float> flat);
  void unpack(bool experts, std::span<const float> flat);
  void release_params();
  void gather_params();
  // The value of element `i` with one bit flipped (a test's corruption).
  void flip_bit(std::span<float> x, std::size_t i);
  void check_replicas(std::span<const float> data, std::int64_t step, const char* what, const std::function<bool()>& corrupt);
  // The optimizer's instructions, in three parts: the gradients' reductions (at the first of
  // unscale_grads, clip_grads and optimizer_step), fp16's unscale, the norm and clipping, and
  // AdamW (exec/trainer_optimizer.cpp). What the first leaves for the others: PendingUpdate.
  using Pending = PendingUpdate;
  void reduce_gradients(std::int64_t step, const ExecuteOptions& options);
  // Calls `f` on every span of gradients AdamW will take (this rank's, after the reductions).
  void for_each_update_gradient(const std::function<void(std::span<float>)>& f);
  void unscale_gradients();
  void clip_gradients();
  void update(std::int64_t step);
  // The micro-batch's load (a Program's OpKind::data instruction): its `bytes` staged in host
  // memory and copied into the backend's; then each tensor's broadcast over TP, the next `bytes`
  // of that copy from TP rank 0 (Megatron's get_batch_on_this_tp_rank).
  void load_batch(double bytes);
  void broadcast_batch(double bytes);

  plan::Plan plan_;
  plan::RankLayout layout_;
  // Before the groups, so that it outlives them: a StagedGroup holds it by reference, and an
  // NcclGroup is bound to its stream.
  std::unique_ptr<Backend> backend_;
  Groups g_;
  std::int64_t world_rank_;
  OpSeconds* timing_;
  std::int64_t stage_ = 0, stages_ = 1, chunks_per_stage_ = 1, microbatches_ = 1;
  models::Program program_;
  std::vector<double> instr_seconds_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<bool> head_;  // per chunk: whether it holds the head and the loss
  std::size_t n_ = 0, shard_ = 0;      // parameters of this rank; their DP shard (ZeRO >= 1)
  // The backend's buffers: the parameters whole (ZeRO 0-2) or the shard (ZeRO-3); AdamW's
  // moments whole (ZeRO 0) or the shard (ZeRO >= 1).
  Buffer params_, exp_avg_, exp_avg_sq_;
  bool params_stale_ = false;  // AdamW updated the chunks in place (one replica): params_ is behind
  std::size_t ne_ = 0;  // expert parameters of this rank
  std::size_t expert_shard_ = 0;  // their expert-DP shard (ZeRO 1-2)
  Buffer expert_params_, expert_exp_avg_, expert_exp_avg_sq_;
  std::optional<Pending> pending_;
  double grad_norm_ = 0;
  bool skipped_ = false;
  std::int64_t adam_step_ = 0;   // AdamW's updates
  std::int64_t steps_done_ = 0;  // the last step played (more than adam_step_ after fp16 skips)
  std::int64_t replica_check_every_ = 1;
  std::vector<Reduced> reduced_;
  std::vector<float> reduced_flat_;  // --verify: the all-reduced gradients, flat, on the host
  Batch batch_;                      // the forward item's micro-batch
  std::vector<float> batch_host_;    // its load, staged on the host
  Buffer batch_device_;              // and in the backend's memory
  std::size_t batch_broadcast_ = 0;  // floats of it broadcast so far
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
};

}  // namespace meshwork::exec
