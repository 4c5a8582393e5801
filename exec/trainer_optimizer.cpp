// The Trainer's optimizer instructions (exec/trainer.hpp): the gradients' reductions, fp16's
// loss scaler (unscale_grads), clipping by the global norm (clip_grads) and AdamW with the
// distributed optimizer's gathers (optimizer_step), as Megatron-core's MixedPrecisionOptimizer
// runs them in its step.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/executor_adamw.hpp"
#include "exec/trainer.hpp"

namespace meshwork::exec {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// The tied embedding's, sequence parallelism's, data parallelism's (ZeRO 0-3) and the experts'
// reductions; AdamW's gradients are left in pending_.
void Trainer::reduce_gradients(std::int64_t step, const ExecuteOptions& options) {
  const auto& par = plan_.parallelism;
  Backend& b = *backend_;
  // The tied word embedding: its two copies (first and last stage) sum their gradients.
  if (stages_ > 1 && !plan_.model.untie_embeddings_and_output_weights) {
    for (auto& c : chunks_) {
      for (const auto& slot : c->slots()) {
        if (slot.spec->name == "embedding.word") g_.embedding->all_reduce_sum(slot.grad);
      }
    }
  }
  if (par.sequence_parallel && g_.tp->size() > 1) {
    for (auto& c : chunks_) {
      for (const auto& slot : c->slots()) {
        if (slot.spec->sequence_partial) g_.tp->all_reduce_sum(slot.grad);
      }
    }
  }
  const auto dp = static_cast<std::size_t>(g_.dp->size());
  Pending& u = pending_.emplace();
  u.flip = options.bitflip.step == step && options.bitflip.rank == world_rank_;
  // One data-parallel replica and nothing to keep or corrupt: AdamW updates each dense
  // parameter where its chunk holds it, with no flat copy of the gradients or the parameters
  // (params_ is refreshed from the chunks when a checkpoint asks for it).
  u.in_place = dp == 1 && !keep_reduced && !u.flip;
  u.sharded = !u.in_place && par.zero_stage >= 1 && dp > 1;
  u.experts_sharded = par.zero_stage >= 1 && g_.expert_dp->size() > 1;
  if (!u.in_place) {
    u.grads = b.allocate(shard_ * dp);  // zero padding past n_
    pack(false, true, u.grads.span());
  }
  u.expert_grads = b.allocate(ne_);
  pack(true, true, u.expert_grads.span());
  // Experts' gradients are divided by the whole DP size too: an expert's owner already holds the
  // sum over its EP group's tokens, and the expert-data-parallel sum adds the other replicas'.
  const float inv_dp = 1.0F / static_cast<float>(dp);
  if (keep_reduced) {
    Buffer copy = b.allocate(u.grads.size()), expert_copy = b.allocate(ne_);
    b.copy(u.grads.span(), copy.span());
    b.copy(u.expert_grads.span(), expert_copy.span());
    g_.dp->all_reduce_sum(copy.span());
    if (ne_ > 0) g_.expert_dp->all_reduce_sum(expert_copy.span());
    b.scale(copy.span(), inv_dp);
    b.scale(expert_copy.span(), inv_dp);
    reduced_flat_.assign(copy.size(), 0.0F);
    b.to_host(copy.span(), reduced_flat_);
    std::vector<float> expert_host(ne_);
    b.to_host(expert_copy.span(), expert_host);
    reduced_.clear();
    std::size_t at = 0, at_expert = 0;
    for (auto& c : chunks_) {
      for (const auto& slot : c->slots()) {
        const std::vector<float>& from = slot.spec->is_expert() ? expert_host : reduced_flat_;
        std::size_t& pos = slot.spec->is_expert() ? at_expert : at;
        reduced_.push_back({slot.spec, std::vector<float>(from.begin() + static_cast<std::ptrdiff_t>(pos), from.begin() + static_cast<std::ptrdiff_t>(pos + slot.size()))});
        pos += slot.size();
      }
    }
  }
  if (u.in_place) {
    // The chunks' gradients are AdamW's as they are.
  } else if (!u.sharded) {
    // This rank's own gradients, kept to reduce again if the replicas disagree.
    Buffer local;
    if (dp > 1) {
      local = b.allocate(u.grads.size());
      b.copy(u.grads.span(), local.span());
    }
    g_.dp->all_reduce_sum(u.grads.span());
    b.scale(u.grads.span(), inv_dp);
    const std::span<float> reduced = u.grads.span().first(n_);
    // A flipped bit in the reduced gradient (memory or compute corruption after the all-reduce).
    if (u.flip) flip_bit(reduced, n_ / 2);
    check_replicas(reduced, step, "reduced gradients", [&] {
      Buffer again = b.allocate(local.size());
      b.copy(local.span(), again.span());
      g_.dp->all_reduce_sum(again.span());
      b.scale(again.span(), inv_dp);
      return b.checksum(again.span().first(n_)) != b.checksum(reduced);
    });
  } else {
    // ZeRO 1-3: each rank reduce-scatters to its shard (Rajbhandari et al. 2020 §5.1-5.2).
    u.mine = b.allocate(shard_);
    g_.dp->reduce_scatter_sum(u.grads.span(), u.mine.span());
    b.scale(u.mine.span(), inv_dp);
    if (keep_reduced) {
      // What AdamW is given is what --verify compared: this rank's slice of the all-reduce.
      std::vector<float> host(shard_);
      b.to_host(u.mine.span(), host);
      const std::size_t begin = shard_ * static_cast<std::size_t>(g_.dp->rank());
      for (std::size_t i = 0; i < shard_ && begin + i < n_; ++i) {
        if (std::abs(host[i] - reduced_flat_[begin + i]) > 1e-6F * (std::abs(reduced_flat_[begin + i]) + 1e-30F) + 1e-12F) {
          throw CollectiveError("--verify: the reduce-scatter's shard of rank " + std::to_string(world_rank_) + " differs from the all-reduce at element " +
                                std::to_string(begin + i));
        }
      }
    }
  }
  if (ne_ > 0) {
    // MoE experts over their expert-data-parallel group: an all-reduce (ZeRO 0), or with ZeRO
    // 1-2 a reduce-scatter to this rank's shard. Their replicas are not checksummed.
    if (u.experts_sharded) {
      const auto edp = static_cast<std::size_t>(g_.expert_dp->size());
      Buffer padded = b.allocate(expert_shard_ * edp);
      b.copy(u.expert_grads.span(), padded.span().first(ne_));
      u.expert_mine = b.allocate(expert_shard_);
      g_.expert_dp->reduce_scatter_sum(padded.span(), u.expert_mine.span());
      b.scale(u.expert_mine.span(), inv_dp);
    } else {
      g_.expert_dp->all_reduce_sum(u.expert_grads.span());
      b.scale(u.expert_grads.span(), inv_dp);
    }
  }
}

void Trainer::for_each_update_gradient(const std::function<void(std::span<float>)>& f) {
  Pending& u = *pending_;
  if (u.in_place) {
    for (auto& c : chunks_) {
      for (const auto& slot : c->slots()) {
        if (!slot.spec->is_expert()) f(slot.grad);
      }
    }
  } else {
    f(u.sharded ? u.mine.span() : u.grads.span().first(n_));
  }
  if (ne_ > 0) f(u.experts_sharded ? u.expert_mine.span() : u.expert_grads.span());
}

// fp16's loss scaler (the Program's unscale_grads), as Megatron-core's
// MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan runs it: every gradient AdamW
// takes read, checked for inf and NaN and written times the inverse loss scale; a non-finite
// gradient on any rank skips the step's clipping and update on every rank. The executor
// computes in fp32 (bf16 on CUDA) and scales no loss, so its inverse scale is 1.
void Trainer::unscale_gradients() {
  Backend& b = *backend_;
  const auto start = Clock::now();
  double squares = 0;  // non-finite exactly when a gradient is (a float's square fits a double)
  for_each_update_gradient([&](std::span<float> g) {
    squares += b.sum_squares(g);
    b.scale(g, 1.0F);
  });
  b.synchronize();
  if (timing_ != nullptr) (*timing_)[models::OpKind::optimizer] += std::chrono::duration<double>(Clock::now() - start).count();
  std::array<double, 1> found{std::isfinite(squares) ? 0.0 : 1.0};
  g_.world->all_reduce_sum(std::span<double>(found));
  pending_->skip = found[0] > 0;
}

// The gradients' global norm and their clipping (the Program's clip_grads), as Megatron-core
// with Transformer Engine does it (megatron/core/optimizer/clip_grads.py, NVIDIA/Megatron-LM
// @0293807e): the sum of squares of every gradient element, each counted once over the world
// (a parameter replicated over TP by TP rank 0 only, the tied embedding by its first stage's
// copy, a gradient replicated over DP by DP rank 0, a shard by its owner), all-reduced; then
// every gradient AdamW takes is scaled by min(1, clip_grad / (norm + 1e-6)), every step.
void Trainer::clip_gradients() {
  Pending& u = *pending_;
  Backend& b = *backend_;
  grad_norm_ = 0;
  if (u.skip) return;
  auto start = Clock::now();
  const bool tp_lead = g_.tp->rank() == 0;
  double sum = 0;
  // Whether this rank counts a slot of chunk `c`: a TP-replicated parameter on TP rank 0 only,
  // the tied embedding on its first stage's copy only.
  auto counted = [&](std::size_t c, const ParamSlot& slot) {
    if (slot.spec->split == Split::replicated && !tp_lead) return false;
    return !(slot.spec->name == "embedding.word" && !program_.first_virtual(stage_, static_cast<std::int64_t>(c)));
  };
  // The counted elements of `flat`, which holds elements [begin, begin + flat.size()) of the
  // flat order of the dense parameters (or of the experts).
  auto add = [&](bool experts, std::span<const float> flat, std::size_t begin) {
    std::size_t at = 0;
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      for (const auto& slot : chunks_[c]->slots()) {
        if (slot.spec->is_expert() != experts) continue;
        const std::size_t lo = std::max(at, begin), hi = std::min(at + slot.size(), begin + flat.size());
        at += slot.size();
        if (lo < hi && counted(c, slot)) sum += b.sum_squares(flat.subspan(lo - begin, hi - lo));
      }
    }
  };
  if (u.in_place) {
    // Slot by slot: the dense gradients are where the chunks hold them.
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      for (const auto& slot : chunks_[c]->slots()) {
        if (!slot.spec->is_expert() && counted(c, slot)) sum += b.sum_squares(slot.grad);
      }
    }
  } else if (u.sharded) {
    add(false, u.mine.span(), shard_ * static_cast<std::size_t>(g_.dp->rank()));
  } else if (g_.dp->rank() == 0) {
    add(false, u.grads.span().first(n_), 0);
  }
  if (ne_ > 0) {
    if (u.experts_sharded) add(true, u.expert_mine.span(), expert_shard_ * static_cast<std::size_t>(g_.expert_dp->rank()));
    else if (g_.expert_dp->rank() == 0) add(true, u.expert_grads.span(), 0);
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::array<double, 1> total{sum};
  g_.world->all_reduce_sum(std::span<double>(total));
  start = Clock::now();
  grad_norm_ = std::sqrt(total[0]);
  // A NaN or inf in the gradients without fp16's scaler to skip the step: Megatron stops the
  // run here (--check-for-nan-in-loss-and-grad, on by default); every rank has the same norm.
  if (!std::isfinite(grad_norm_)) {
    throw std::runtime_error("step " + std::to_string(steps_done_) + ": the gradients' global norm is not finite (" + std::to_string(grad_norm_) +
                             "): a NaN or inf reached them; the update is not applied");
  }
  const auto coefficient = static_cast<float>(std::min(1.0, plan_.training.clip_grad / (grad_norm_ + 1e-6)));
  for_each_update_gradient([&](std::span<float> g) { b.scale(g, coefficient); });
  b.synchronize();
  seconds += std::chrono::duration<double>(Clock::now() - start).count();
  if (timing_ != nullptr) (*timing_)[models::OpKind::optimizer] += seconds;
}

// AdamW on what reduce_gradients left, and the distributed optimizer's gathers of the updated
// parameters.
void Trainer::update(std::int64_t step) {
  Pending u = std::move(*pending_);
  pending_.reset();
  skipped_ = u.skip;
  if (u.skip) return;
  const auto& par = plan_.parallelism;
  const bool zero3 = par.zero_stage == 3 && g_.dp->size() > 1;
  const auto dp = static_cast<std::size_t>(g_.dp->size());
  Backend& b = *backend_;
  auto adamw = [&](std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v) {
    const auto start = Clock::now();
    b.adamw(params, grads, m, v, adam_step_, kExecutorAdamW);
    b.synchronize();
    if (timing_ != nullptr) (*timing_)[models::OpKind::optimizer] += std::chrono::duration<double>(Clock::now() - start).count();
  };
  ++adam_step_;
  // A step that updated in place left params_ behind the chunks; the flat path below updates
  // params_ and writes it back, so it must start from the chunks' values (a bit flip or
  // --verify on a later step of a one-replica run takes it).
  if (!u.in_place && params_stale_) {
    pack(false, false, params_.span());
    params_stale_ = false;
  }
  if (u.in_place) {
    const auto start = Clock::now();
    std::size_t at = 0;
    for (auto& c : chunks_) {
      for (const auto& slot : c->slots()) {
        if (slot.spec->is_expert()) continue;
        b.adamw(slot.value, slot.grad, exp_avg_.span().subspan(at, slot.size()), exp_avg_sq_.span().subspan(at, slot.size()), adam_step_, kExecutorAdamW);
        at += slot.size();
      }
      c->values_changed();
    }
    b.synchronize();
    if (timing_ != nullptr) (*timing_)[models::OpKind::optimizer] += std::chrono::duration<double>(Clock::now() - start).count();
    params_stale_ = true;
  } else if (!u.sharded) {
    adamw(params_.span(), u.grads.span().first(n_), exp_avg_.span(), exp_avg_sq_.span());
    unpack(false, params_.span());
  } else {
    // ZeRO 1-2: AdamW on this rank's shard, then the parameters all-gathered (Rajbhandari et
    // al. 2020 §5.1-5.2); ZeRO-3 keeps the shard.
    Buffer full;
    if (!zero3) {
      full = b.allocate(shard_ * dp);
      b.copy(params_.span(), full.span().first(n_));
    }
    const std::span<float> shard = zero3 ? params_.span() : full.span().subspan(shard_ * static_cast<std::size_t>(g_.dp->rank()), shard_);
    adamw(shard, u.mine.span(), exp_avg_.span(), exp_avg_sq_.span());
    if (!zero3) {
      Buffer gathered = b.allocate(full.size());
      g_.dp->all_gather(shard, gathered.span());
      const std::span<float> params = gathered.span().first(n_);
      if (u.flip) flip_bit(params, n_ / 2);
      check_replicas(params, step, "gathered parameters", [&] {
        // Each shard's owner vouches for it: its checksum of what it sent against this
        // rank's copy of that block.
        const std::uint64_t own = b.checksum(shard);
        std::vector<std::uint64_t> owners(dp);
        g_.dp->all_gather(std::span<const std::uint64_t>(&own, 1), owners);
        Buffer block = b.allocate(shard_);
        for (std::size_t i = 0; i < owners.size(); ++i) {
          b.fill(block.span(), 0.0F);
          const std::size_t begin = std::min(n_, i * shard_), end = std::min(n_, begin + shard_);
          b.copy(params.subspan(begin, end - begin), block.span().first(end - begin));
          if (b.checksum(block.span()) != owners[i]) return true;
        }
        return false;
      });
      b.copy(params, params_.span());
      unpack(false, params_.span());
    }
  }
  if (ne_ > 0) {
    // The experts: AdamW on every local expert (ZeRO 0), or on this rank's shard and an
    // all-gather of the parameters over expert data parallelism (ZeRO 1-2).
    if (u.experts_sharded) {
      const auto edp = static_cast<std::size_t>(g_.expert_dp->size());
      Buffer full = b.allocate(expert_shard_ * edp);
      b.copy(expert_params_.span(), full.span().first(ne_));
      const std::span<float> shard = full.span().subspan(expert_shard_ * static_cast<std::size_t>(g_.expert_dp->rank()), expert_shard_);
      adamw(shard, u.expert_mine.span(), expert_exp_avg_.span(), expert_exp_avg_sq_.span());
      Buffer gathered = b.allocate(full.size());
      g_.expert_dp->all_gather(shard, gathered.span());
      b.copy(gathered.span().first(ne_), expert_params_.span());
    } else {
      adamw(expert_params_.span(), u.expert_grads.span(), expert_exp_avg_.span(), expert_exp_avg_sq_.span());
    }
    unpack(true, expert_params_.span());
  }
}

}  // namespace meshwork::exec
