#include "exec/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <bit>
#include <csignal>
#include <limits>
#include <map>
#include <thread>

#include "exec/executor_adamw.hpp"
#include "exec/synthetic_batch.hpp"
#include "kernels/adamw.hpp"
#include "kernels/checksum.hpp"
#include "models/program.hpp"
#include "plan/derived.hpp"
#include "plan/validate.hpp"

namespace meshwork::exec {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Trainer::Trainer(const plan::Plan& plan, Groups groups, std::int64_t world_rank, OpSeconds* timing, std::unique_ptr<Backend> backend)
    : plan_(plan), layout_(plan::RankLayout::from_plan(plan.parallelism)), backend_(backend ? std::move(backend) : make_cpu_backend()), g_(std::move(groups)),
      world_rank_(world_rank), timing_(timing) {
  const auto& par = plan_.parallelism;
  const auto& m = plan_.model;
  stages_ = par.pipeline_model_parallel_size;
  stage_ = layout_.coord(world_rank_).pp;
  if (!g_.ep) g_.ep = std::make_unique<LocalGroup>("ep");
  if (!g_.expert_dp) g_.expert_dp = std::make_unique<LocalGroup>("expert_dp");
  if (!g_.cp) g_.cp = std::make_unique<LocalGroup>("cp");
  const TensorParallel tp{g_.tp.get(), par.sequence_parallel && g_.tp->size() > 1};
  const auto seed = static_cast<std::uint64_t>(plan_.run.seed);
  models::LowerResult lowered = models::lower(plan_);
  if (!lowered.program) throw std::invalid_argument("the plan cannot be lowered to a Program: " + lowered.error);
  program_ = std::move(*lowered.program);
  chunks_per_stage_ = program_.chunks;
  microbatches_ = program_.microbatches;
  const models::StageProgram& sp = program_.classes.at(static_cast<std::size_t>(stage_));
  instr_seconds_.assign(sp.instrs.size(), 0.0);
  // MPI guarantees tags up to 32767 (MPI 4.0 §3.2.3).
  for (const auto& in : sp.instrs) {
    if (in.tag > 32767) throw std::invalid_argument("more than 16383 micro-batches x chunks per step: past MPI's tag range");
  }
  // The gradients are zeroed only where the Program says: exactly once, before the first item,
  // or they would pile up across steps.
  int zeroings = 0;
  bool items_begun = false;
  for (const auto& in : sp.instrs) {
    if (in.kind == models::InstrKind::compute && in.item >= 0) items_begun = true;
    if (in.kind != models::InstrKind::compute || program_.name(in) != "zero_grad_buffer") continue;
    if (items_begun || in.item >= 0 || zeroings > 0) throw std::logic_error("the Program zeroes the gradient buffer other than once before its first item");
    ++zeroings;
  }
  if (zeroings == 0) throw std::logic_error("the Program never zeroes the gradient buffer");
  // Each chunk's layers as the Program holds them (chunk c of stage s is virtual stage c p + s,
  // Narayanan et al. 2021 §2.2); the first virtual stage holds the embedding, the last the head.
  for (std::int64_t c = 0; c < chunks_per_stage_; ++c) {
    const auto [first, end] = program_.chunk_layers.at(static_cast<std::size_t>(stage_)).at(static_cast<std::size_t>(c));
    const bool head = program_.last_virtual(stage_, c);
    const ChunkConfig config{m, first, end - first, program_.first_virtual(stage_, c), head, seed, tp, g_.ep.get(), g_.cp.get(), par.context_parallel_load_balance,
                             plan_.training.precision == plan::Precision::fp8};
    chunks_.push_back(backend_->make_chunk(config));
    head_.push_back(head);
  }
  for (auto& c : chunks_) {
    for (const auto& slot : c->slots()) (slot.spec->is_expert() ? ne_ : n_) += slot.size();
  }
  expert_params_ = backend_->allocate(ne_);
  pack(true, false, expert_params_.span());
  // ZeRO 1-2 shards the experts' optimizer state over their expert-data-parallel group, as
  // Megatron-core's distributed optimizer does (models/program.cpp prices the same).
  const auto edp = static_cast<std::size_t>(g_.expert_dp->size());
  expert_shard_ = (ne_ + edp - 1) / edp;
  const bool experts_sharded = par.zero_stage >= 1 && edp > 1;
  expert_exp_avg_ = backend_->allocate(experts_sharded ? expert_shard_ : ne_);
  expert_exp_avg_sq_ = backend_->allocate(experts_sharded ? expert_shard_ : ne_);
  const auto dp = static_cast<std::size_t>(g_.dp->size());
  shard_ = (n_ + dp - 1) / dp;
  const bool sharded = par.zero_stage >= 1 && dp > 1;
  exp_avg_ = backend_->allocate(sharded ? shard_ : n_);
  exp_avg_sq_ = backend_->allocate(sharded ? shard_ : n_);
  if (par.zero_stage == 3 && dp > 1) {
    // ZeRO-3 keeps only its shard of the parameters between uses (Rajbhandari et al. 2020 §5.3).
    Buffer full = backend_->allocate(shard_ * dp);
    pack(false, false, full.span());
    params_ = backend_->allocate(shard_);
    backend_->copy(full.span().subspan(shard_ * static_cast<std::size_t>(g_.dp->rank()), shard_), params_.span());
    release_params();
  } else {
    params_ = backend_->allocate(n_);
    pack(false, false, params_.span());
  }
}

void Trainer::pack(bool experts, bool grads, std::span<float> flat) {
  std::size_t at = 0;
  for (auto& c : chunks_) {
    for (const auto& slot : c->slots()) {
      if (slot.spec->is_expert() != experts) continue;
      backend_->copy(grads ? slot.grad : slot.value, flat.subspan(at, slot.size()));
      at += slot.size();
    }
  }
}
void Trainer::unpack(bool experts, std::span<const float> flat) {
  std::size_t at = 0;
  for (auto& c : chunks_) {
    for (const auto& slot : c->slots()) {
      if (slot.spec->is_expert() != experts) continue;
      backend_->copy(flat.subspan(at, slot.size()), slot.value);
      at += slot.size();
    }
    c->values_changed();
  }
}
void Trainer::release_params() {
  for (auto& c : chunks_) c->release_values();
}
void Trainer::gather_params() {
  Buffer full = backend_->allocate(shard_ * static_cast<std::size_t>(g_.dp->size()));
  g_.dp->all_gather(params_.span(), full.span());
  for (auto& c : chunks_) c->allocate_values();
  unpack(false, full.span());
}
void Trainer::flip_bit(std::span<float> x, std::size_t i) {
  float v = 0;
  backend_->to_host(x.subspan(i, 1), std::span<float>(&v, 1));
  v = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ (1U << 22));
  backend_->from_host(std::span<const float>(&v, 1), x.subspan(i, 1));
}

// Replicas of a data-parallel group must hold bit-identical reduced gradients (or gathered
// parameters): their checksums are compared (silent data corruption, Dixit et al. 2021; Llama
// 3 §3.3.4). On a mismatch each replica asks `corrupt` whether its own copy is the bad one
// (against a fresh reduction, or the owners' checksums of their shards), so that even two
// replicas, which have no majority, name the right rank.
void Trainer::check_replicas(std::span<const float> data, std::int64_t step, const char* what, const std::function<bool()>& corrupt) {
  if (g_.dp->size() <= 1 || replica_check_every_ <= 0 || step % replica_check_every_ != 0) return;
  const std::uint64_t mine = backend_->checksum(data);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(g_.dp->size()));
  g_.dp->all_gather(std::span<const std::uint64_t>(&mine, 1), all);
  if (std::all_of(all.begin(), all.end(), [&](std::uint64_t c) { return c == all.front(); })) return;
  const std::uint64_t flag = corrupt() ? 1 : 0;
  std::vector<std::uint64_t> flags(all.size());
  g_.dp->all_gather(std::span<const std::uint64_t>(&flag, 1), flags);
  std::string odd;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0) odd += (odd.empty() ? "" : ", ") + std::to_string(g_.dp->world_rank(static_cast<int>(i)));
  }
  throw CollectiveError("silent data corruption at step " + std::to_string(step) + ": the " + what + " of rank " + (odd.empty() ? "(none could tell)" : odd) +
                        " differ from its data-parallel replicas' (checksums compared over the " + g_.dp->name() + " group)");
}

double Trainer::step(std::int64_t step, const ExecuteOptions& options) {
  steps_done_ = step;
  replica_check_every_ = options.replica_check_every;
  if (options.death.step == step && options.death.rank == world_rank_) std::raise(SIGKILL);
  // A preemption notice: the handler records it and the step runs to its end.
  if (options.signal.step == step && options.signal.rank == world_rank_) std::raise(SIGTERM);
  if (options.hang.step == step && options.hang.rank == world_rank_) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const auto& par = plan_.parallelism;
  const bool zero3 = par.zero_stage == 3 && g_.dp->size() > 1;
  // The gradients are zeroed where the Program says (its zero_grad_buffer instruction).
  for (auto& c : chunks_) c->reset_loss();
  const models::StageProgram& sp = program_.classes[static_cast<std::size_t>(stage_)];
  // Rows a pipeline transfer carries: this rank's share of the micro-batch's tokens (over CP,
  // then over TP with SP).
  const Index rows = chunks_.front()->local_rows(plan_.training.micro_batch_size * plan_.model.seq_length / g_.cp->size());
  const std::int64_t cp_rank = g_.cp->rank();
  const Index hidden = plan_.model.hidden_size;
  const double loss_scale = 1.0 / static_cast<double>(microbatches_);
  // Entering and leaving a schedule item: its micro-batch's state on its chunk (and, with
  // ZeRO-3, the stage's parameters gathered for it and released after).
  std::int32_t item = -1;
  auto leave = [&] {
    if (item < 0) return;
    const models::ScheduleItem& it = sp.schedule[static_cast<std::size_t>(item)];
    if (it.pass == models::Pass::backward || it.pass == models::Pass::backward_weight) chunks_[static_cast<std::size_t>(it.chunk)]->end_backward(it.microbatch);
    if (zero3) release_params();
    item = -1;
  };
  auto enter = [&](std::int32_t next) {
    leave();
    item = next;
    if (item < 0) return;
    const models::ScheduleItem& it = sp.schedule[static_cast<std::size_t>(item)];
    if (zero3) gather_params();
    Chunk& chunk = *chunks_[static_cast<std::size_t>(it.chunk)];
    if (it.pass == models::Pass::forward) {
      batch_ = synthetic_batch(plan_, microbatches_, layout_.dp_index(world_rank_), step, it.microbatch, cp_rank);
      chunk.begin_forward(it.microbatch, batch_, loss_scale);
    } else if (it.pass != models::Pass::backward_weight) {
      chunk.begin_backward(it.microbatch);
    }
  };
  for (std::size_t k = 0; k < sp.instrs.size(); ++k) {
    const models::Instr& in = sp.instrs[k];
    // DP instructions are played by the optimizer instruction (see trainer.hpp).
    if (in.kind == models::InstrKind::collective && in.stream == models::Stream::dp) continue;
    if (in.item != item) enter(in.item);
    const auto t0 = Clock::now();
    if (in.item < 0 && in.kind == models::InstrKind::compute && program_.name(in) == "zero_grad_buffer") {
      for (auto& c : chunks_) c->zero_grads();
    } else if (in.item < 0) {
      const std::string& name = program_.name(in);
      if (in.kind != models::InstrKind::compute || in.op != models::OpKind::optimizer ||
          (name != "unscale_grads" && name != "clip_grads" && name != "optimizer_step")) {
        throw std::logic_error("a Program instruction outside the schedule items the executor does not play: " + name);
      }
      if (!pending_) {
        // Sends still buffered (NcclGroup posts a send with the next receive, or at flush) go
        // out before the optimizer's collectives: the tied embedding's all-reduce spans the
        // first and last stages, and the last stage's buffered gradient is what the first
        // stage's last receive waits for; held back, each would wait for the other.
        g_.pp->flush();
        reduce_gradients(step, options);
      }
      if (name == "unscale_grads") unscale_gradients();
      else if (name == "clip_grads") clip_gradients();
      else update(step);
    } else {
      const models::ScheduleItem& it = sp.schedule[static_cast<std::size_t>(in.item)];
      Chunk& chunk = *chunks_[static_cast<std::size_t>(it.chunk)];
      switch (in.kind) {
        case models::InstrKind::recv:
          // The peer stage is its rank in the pipeline group; the tag names (micro-batch,
          // receiving chunk, direction), so messages match whatever order they are posted in.
          g_.pp->recv(in.peer_stage, in.tag, chunk.receive(it.microbatch, rows, hidden));
          break;
        case models::InstrKind::send: g_.pp->send(in.peer_stage, in.tag, chunk.flowing(it.microbatch)); break;
        case models::InstrKind::compute:
          if (in.op == models::OpKind::data) load_batch(in.bytes);
          else chunk.run(program_.name(in), in.phase, in.layer, it.microbatch);
          break;
        case models::InstrKind::collective:
          if (in.collective == models::Collective::broadcast) broadcast_batch(in.bytes);
          else if (in.stream == models::Stream::tp && program_.name(in).starts_with("moe_tp")) chunk.ep_collective(program_.name(in), in.phase, in.layer, it.microbatch);
          else if (in.stream == models::Stream::tp) chunk.tp_collective(in.collective, in.phase, it.microbatch);
          else if (in.stream == models::Stream::ep) chunk.ep_collective(program_.name(in), in.phase, in.layer, it.microbatch);
          else if (in.stream == models::Stream::cp) chunk.cp_collective(program_.name(in), in.phase, in.layer, it.microbatch);
          else throw std::logic_error("the executor has no " + std::string(models::to_string(in.stream)) + " stream (" + program_.name(in) + ")");
          break;
      }
    }
    if (static_cast<std::int32_t>(k) == delay_instr && delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    // A device backend's instruction ends when its work does: waited for when it is timed.
    if (timing_ != nullptr || tracing || delay_instr >= 0) backend_->synchronize();
    const auto t1 = Clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    instr_seconds_[k] += dt;
    if (in.kind == models::InstrKind::compute && in.op != models::OpKind::optimizer && timing_ != nullptr) (*timing_)[in.op] += dt;
    if (tracing) {
      const double start_us = std::chrono::duration<double, std::micro>(t0 - epoch_).count();
      events.push_back({static_cast<std::int32_t>(k), static_cast<std::int32_t>(step), start_us, start_us + dt * 1e6});
    }
  }
  leave();
  g_.pp->flush();
  // The step's loss: the last stage's micro-batch means, averaged over micro-batches and
  // data-parallel replicas (and CP members, whose shares hold equal numbers of tokens), known
  // on every rank.
  double loss = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    if (head_[c] && g_.tp->rank() == 0) loss += chunks_[c]->loss_sum() / static_cast<double>(microbatches_ * g_.dp->size());
  }
  std::array<double, 1> total{loss};
  g_.world->all_reduce_sum(std::span<double>(total));
  return total[0];
}

bool Trainer::materialise() {
  if (!(plan_.parallelism.zero_stage == 3 && g_.dp->size() > 1)) return false;
  gather_params();
  return true;
}

RankState Trainer::state() {
  if (params_stale_) {
    pack(false, false, params_.span());
    params_stale_ = false;
  }
  auto host = [&](const Buffer& from) {
    std::vector<float> out(from.size());
    backend_->to_host(from.span(), out);
    return out;
  };
  RankState s;
  s.step = steps_done_;
  s.adam_step = adam_step_;
  s.params = host(params_);
  s.exp_avg = host(exp_avg_);
  s.exp_avg_sq = host(exp_avg_sq_);
  s.expert_params = host(expert_params_);
  s.expert_exp_avg = host(expert_exp_avg_);
  s.expert_exp_avg_sq = host(expert_exp_avg_sq_);
  return s;
}

void Trainer::restore(const RankState& s) {
  if (s.params.size() != params_.size() || s.exp_avg.size() != exp_avg_.size() || s.exp_avg_sq.size() != exp_avg_sq_.size() ||
      s.expert_params.size() != expert_params_.size() || s.expert_exp_avg.size() != expert_exp_avg_.size() || s.expert_exp_avg_sq.size() != expert_exp_avg_sq_.size()) {
    throw std::runtime_error("the checkpoint's shard sizes do not match this plan's (another mesh or model?)");
  }
  backend_->from_host(s.params, params_.span());
  backend_->from_host(s.exp_avg, exp_avg_.span());
  backend_->from_host(s.exp_avg_sq, exp_avg_sq_.span());
  backend_->from_host(s.expert_params, expert_params_.span());
  backend_->from_host(s.expert_exp_avg, expert_exp_avg_.span());
  backend_->from_host(s.expert_exp_avg_sq, expert_exp_avg_sq_.span());
  steps_done_ = s.step;
  adam_step_ = s.adam_step;
  params_stale_ = false;
  unpack(true, expert_params_.span());
  if (!(plan_.parallelism.zero_stage == 3 && g_.dp->size() > 1)) unpack(false, params_.span());
}

void Trainer::load_batch(double bytes) {
  // A loader hands Megatron its micro-batch in pinned host memory, and TP rank 0 (every rank
  // with every_rank) copies it to the GPU. The executor's batch is synthetic_batch's, drawn
  // alike on every rank (exec/synthetic_batch.hpp), and each chunk keeps its own copy for the
  // model: this stages the bytes the Program prices (the ids and targets in front, as floats,
  // the masks and positions as zeros) and copies them into the backend's memory.
  const auto n = static_cast<std::size_t>(std::ceil(bytes / sizeof(float)));
  batch_host_.assign(n, 0.0F);
  std::size_t k = 0;
  for (const std::int64_t id : batch_.ids) {
    if (k < n) batch_host_[k++] = static_cast<float>(id);
  }
  for (const std::int64_t t : batch_.targets) {
    if (k < n) batch_host_[k++] = static_cast<float>(t);
  }
  if (batch_device_.size() != n) batch_device_ = backend_->allocate(n);
  backend_->from_host(batch_host_, batch_device_.span());
  batch_broadcast_ = 0;
}

void Trainer::broadcast_batch(double bytes) {
  // Each tensor's broadcast takes the next part of the load, as Megatron broadcasts its
  // tensors one by one from TP rank 0.
  const std::size_t left = batch_device_.size() - std::min(batch_broadcast_, batch_device_.size());
  const std::size_t n = std::min(left, static_cast<std::size_t>(std::ceil(bytes / sizeof(float))));
  g_.tp->broadcast(0, batch_device_.span().subspan(batch_broadcast_, n));
  batch_broadcast_ += n;
}

}  // namespace meshwork::exec
