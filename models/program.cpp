#include "models/program.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "models/compute_time.hpp"
#include "models/layer_comm.hpp"
#include "models/memory.hpp"
#include "models/op_table.hpp"
#include "models/params.hpp"
#include "plan/derived.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

double d(std::int64_t v) { return static_cast<double>(v); }
std::int32_t i32(std::int64_t v) { return static_cast<std::int32_t>(v); }


// Builds one stage's instruction list.
class StageLowering {
 public:
  StageLowering(const plan::Plan& p, Program& prog, std::int64_t stage) : p_(p), prog_(prog), stage_(stage) {
    const auto& par = p.parallelism;
    t_ = d(par.tensor_model_parallel_size);
    e_ = activation_bytes(p.training.precision);
    tokens_ = d(p.training.micro_batch_size) * d(p.model.seq_length) / d(par.context_parallel_size);
    dense_ = layer_ops(p, false);
    if (p.model.is_moe()) moe_ = layer_ops(p, true);
    first_ = first_stage_ops(p);
    last_ = last_stage_ops(p);
    counts_ = count_params(p.model);
    chunks_ = plan::layers_per_chunk(p);
    dp_cp_ = std::max<std::int64_t>(1, par.data_parallel_size * par.context_parallel_size);
    // Experts are replicated over CP too (each member sees its share of the tokens), so their
    // gradients are reduced over CP x DP/EP (Megatron-core's expert data-parallel group).
    expert_dp_ = std::max<std::int64_t>(1, par.data_parallel_size * par.context_parallel_size / par.expert_model_parallel_size);
    dense_groups_ = dp_groups(p, false);
    expert_groups_ = dp_groups(p, true);
  }

  // `expected`: the instructions to make room for (the previous stage's count: stages differ
  // little, and growing a vector of millions copies it and faults its pages in twice).
  StageProgram run(std::size_t expected) {
    StageProgram sp;
    sp.instrs.reserve(expected);
    sp.stage = stage_;
    sp.ranks = p_.cluster.num_gpus / prog_.stages;
    sp.schedule = stage_schedule(prog_.schedule, prog_.stages, stage_, prog_.microbatches, prog_.chunks);
    out_ = &sp.instrs;
    if (gathers_params_ahead()) {
      for (std::int64_t c = 0; c < prog_.chunks; ++c) {
        const auto [lo, hi] = layers(c);
        buckets_.push_back(dp_buckets(p_, counts_, lo, hi, first_virtual(c), last_virtual(c)));
        bucket_gather_.emplace_back(buckets_.back().size(), -1);
      }
      awaited_.assign(static_cast<std::size_t>(prog_.chunks), 0);
      // Dispatched together at the start of the step, in the order the forward needs them.
      item_ = 0;
      for (std::size_t c = 0; c < buckets_.size(); ++c) {
        for (std::size_t j = 0; j < buckets_[c].size(); ++j) {
          bucket_gather_[c][j] = dp_collectives(Collective::all_gather, buckets_[c][j].params, e_, buckets_[c][j].first_layer, "dp_param");
        }
      }
    }
    // The step starts by zeroing the gradient buffer (Megatron-core's zero_grad_buffer at the
    // top of train_step), once, whatever the micro-batches; the executor zeroes there too.
    item_ = -1;
    const GpuParams held = held_params();
    compute({"zero_grad_buffer", OpKind::elementwise, OpPhase::forward, 0, gradient_buffer_bytes(p_, held.dense, held.expert), {}}, OpPhase::forward, -1);
    // The last item that produces weight gradients of each chunk: DP reduces after it.
    std::vector<std::int64_t> last_grad_item(static_cast<std::size_t>(prog_.chunks), -1);
    for (std::size_t i = 0; i < sp.schedule.size(); ++i) {
      const Pass ps = sp.schedule[i].pass;
      if (ps == Pass::backward || ps == Pass::backward_weight) last_grad_item[static_cast<std::size_t>(sp.schedule[i].chunk)] = static_cast<std::int64_t>(i);
    }
    for (std::size_t i = 0; i < sp.schedule.size(); ++i) {
      item_ = i32(static_cast<std::int64_t>(i));
      const ScheduleItem& it = sp.schedule[i];
      // ZeRO-2 and 3 keep only their shard of the gradients, so every micro-batch's are
      // reduce-scattered (Rajbhandari et al. 2020 §5.2; Megatron-FSDP's optim_grads); without
      // sharded gradients the reduction waits for the last micro-batch.
      const bool reduce = sharded_grads() || last_grad_item[static_cast<std::size_t>(it.chunk)] == static_cast<std::int64_t>(i);
      switch (it.pass) {
        case Pass::forward: forward(it); break;
        case Pass::backward:
        case Pass::backward_input: backward(it, it.pass == Pass::backward, reduce); break;
        case Pass::backward_weight: weight(it, reduce); break;
      }
    }
    optimizer();
    return sp;
  }

 private:
  // Layers of chunk c of this stage, as global indices: virtual stage c p + s holds the
  // (c p + s)-th slice of the model (Megatron's assignment; one chunk without interleaving).
  std::pair<std::int64_t, std::int64_t> layers(std::int64_t chunk) const {
    const std::int64_t first = plan::first_layer_of_chunk(chunks_, stage_, chunk);
    return {first, first + chunks_[static_cast<std::size_t>(stage_)][static_cast<std::size_t>(chunk)]};
  }
  bool first_virtual(std::int64_t chunk) const { return stage_ == 0 && chunk == 0; }
  bool last_virtual(std::int64_t chunk) const { return stage_ == prog_.stages - 1 && chunk == prog_.chunks - 1; }
  // Matches a send with its receive: micro-batch, the receiver's chunk, direction.
  std::int32_t tag(std::int64_t mb, std::int64_t receiver_chunk, bool gradient) const {
    return i32((mb * prog_.chunks + receiver_chunk) * 2 + (gradient ? 1 : 0));
  }

  std::int32_t intern(std::string_view name) {
    if (const auto it = ids_.find(name); it != ids_.end()) return it->second;
    const std::int32_t id = i32(static_cast<std::int64_t>(prog_.names.size()));
    prog_.names.emplace_back(name);
    ids_.emplace(std::string(name), id);
    return id;
  }
  std::int32_t last_index() const { return i32(static_cast<std::int64_t>(out_->size()) - 1); }

  void compute(const Op& op, OpPhase phase, std::int64_t layer) {
    Instr in;
    in.kind = InstrKind::compute;
    in.stream = Stream::compute;
    in.op = op.kind;
    in.phase = phase;
    in.name = intern(op.name);
    in.item = item_;
    in.layer = i32(layer);
    in.flops = op.flops;
    in.bytes = op.bytes;
    in.cast_bytes = static_cast<float>(op.cast_bytes);
    in.sixteen_bit = op.sixteen_bit;
    in.after = blocking_;
    in.also_after = also_blocking_;
    if (in.after < 0) std::swap(in.after, in.also_after);
    // A receive and a collective: the collective second (the simulator charges the wait up to
    // also_after's end to it, the rest to `after`: a DP collective's wait first, as the
    // estimate's DP replay counts it beside the pipeline's bubble).
    if (in.also_after >= 0 && (*out_)[static_cast<std::size_t>(in.after)].kind == InstrKind::collective &&
        (*out_)[static_cast<std::size_t>(in.also_after)].kind != InstrKind::collective) {
      std::swap(in.after, in.also_after);
    }
    blocking_ = -1;
    also_blocking_ = -1;
    if (split_pending_ >= 0) {
      // Ring attention's blocks: the last of the CP ring's p2p steps brings the last block,
      // 1/CP of the attention (blocks taken as equal work: with causal load balancing each
      // member's share of every block's scores is alike; without it, Transformer Engine's
      // causal blocks are unequal, and this is an approximation).
      in.tail_after = split_pending_;
      in.tail_fraction = static_cast<float>(1.0 / d(p_.parallelism.context_parallel_size));
      split_pending_ = -1;
    }
    out_->push_back(in);
    last_compute_ = last_index();
  }
  // The next compute waits for instruction i too. It has two slots (Instr::after and
  // also_after): a stream runs its collectives in order, so of two collectives on one stream
  // the later stands for both; otherwise i takes a free slot. With both taken (a held
  // reduction, a receive, then all_gather's blocking CP exchange before a recomputed attention), the
  // collective i starts after the first: what the compute stream waits for orders what is
  // issued after it (PyTorch's NCCL streams wait for the current stream at launch), and the
  // first was issued after the compute that i follows, so nothing earlier is lost.
  void wait_for(std::int32_t i) {
    if (i < 0) return;
    const Instr& in = (*out_)[static_cast<std::size_t>(i)];
    for (std::int32_t* slot : {&blocking_, &also_blocking_}) {
      if (*slot < 0) continue;
      const Instr& held = (*out_)[static_cast<std::size_t>(*slot)];
      if (in.kind == InstrKind::collective && held.kind == InstrKind::collective && held.stream == in.stream) {
        *slot = std::max(*slot, i);
        return;
      }
    }
    if (blocking_ < 0) {
      blocking_ = i;
    } else if (also_blocking_ < 0) {
      also_blocking_ = i;
    } else {
      // Receives come before a pass's collectives in the lowering's order, so i is one.
      Instr& later = (*out_)[static_cast<std::size_t>(i)];
      if (later.kind == InstrKind::collective) later.after = std::max(later.after, blocking_);
      blocking_ = i;
    }
  }
  // A collective on `stream` of `bytes` per rank; blocking ones hold the next compute.
  void collective(Stream stream, Collective c, plan::GroupKind g, double bytes, std::int64_t layer, bool blocking,
                  std::string_view what, OpPhase phase = OpPhase::forward) {
    Instr in;
    in.kind = InstrKind::collective;
    in.stream = stream;
    in.phase = phase;
    in.collective = c;
    in.group = g;
    in.name = intern(std::string(what) + "_" + std::string(to_string(c)));
    in.item = item_;
    in.layer = i32(layer);
    in.bytes = bytes;
    in.after = last_compute_;
    out_->push_back(in);
    if (blocking) wait_for(last_index());
  }
  void p2p(InstrKind kind, std::int64_t peer, std::int32_t tg, const char* what) {
    Instr in;
    in.kind = kind;
    in.stream = Stream::pp;
    in.name = intern(what);
    in.item = item_;
    in.peer_stage = i32(peer);
    in.tag = tg;
    in.bytes = tokens_ * d(p_.model.hidden_size) * e_ / t_;  // scattered over TP (NAR21 §4.1)
    in.after = kind == InstrKind::send ? last_compute_ : -1;
    out_->push_back(in);
    if (kind == InstrKind::recv) wait_for(last_index());
  }

  bool moe_layer(std::int64_t layer) const { return is_moe_layer(p_.model, layer); }
  const std::vector<Op>& ops_of(std::int64_t layer) const { return moe_layer(layer) ? moe_ : dense_; }

  // Communication that Megatron issues around an op of a layer, before (`before`) or after it,
  // in the direction of the pass (models/layer_comm, the list the estimate times too).
  // `phase`: the pass it runs in (the executor applies a recomputation's collectives to the
  // recomputed activations, not to the backward's gradients).
  void around(const Op& op, std::int64_t layer, OpPhase phase, bool before) {
    comms_.clear();
    comm_around(p_, op.name, layer >= 0 && moe_layer(layer), phase == OpPhase::forward || phase == OpPhase::recompute, before, comms_);
    for (const LayerComm& c : comms_) {
      // A collective split with the op it feeds (CP's p2p ring before the attention) does not
      // hold it: the op's last part waits for it (Instr::tail_after).
      collective(c.stream, c.collective, c.group, c.bytes, layer, !c.split_with_next, c.what, phase);
      if (c.split_with_next) split_pending_ = last_index();
    }
  }
  // An op outside the layers with the collectives around it.
  void end_op(const Op& op, OpPhase phase) {
    around(op, -1, phase, true);
    compute(op, phase, -1);
    around(op, -1, phase, false);
  }

  void forward_layers(std::int64_t chunk, OpPhase phase) {
    const auto [lo, hi] = layers(chunk);
    for (std::int64_t l = lo; l < hi; ++l) {
      // recompute_method: block repeats only the chunk's first recompute_num_layers layers.
      // (Selective recomputation repeats its ops in every layer.)
      if (phase == OpPhase::recompute && p_.training.recompute == plan::Recompute::full && !recomputes_layer(p_.training, l - lo)) continue;
      // A recomputed layer runs on its backward's gather (see gather_params).
      if (phase == OpPhase::forward) {
        await_params(chunk, l);
        gather_params(l, l + 1 < hi ? l + 1 : -1);
      }
      for (const Op& op : ops_of(l)) {
        if (op.phase != phase) continue;
        around(op, l, phase, true);
        compute(op, phase, l);
        around(op, l, phase, false);
      }
    }
  }

  void forward(const ScheduleItem& it) {
    const std::int64_t c = it.chunk;
    if (!first_virtual(c)) p2p(InstrKind::recv, stage_ == 0 ? prog_.stages - 1 : stage_ - 1, tag(it.microbatch, c, false), "recv_activation");
    await_params(c, layers(c).first);
    if (first_virtual(c)) {
      for (const Op& op : first_) if (op.phase == OpPhase::forward) end_op(op, OpPhase::forward);
    }
    // The last stage loads its labels at the start of its forward, as Megatron's forward_step
    // calls get_batch before the model.
    if (last_virtual(c)) {
      for (const Op& op : last_) if (op.kind == OpKind::data) end_op(op, OpPhase::forward);
    }
    forward_layers(c, OpPhase::forward);
    if (last_virtual(c)) {
      for (const Op& op : last_) if (op.phase == OpPhase::forward && op.kind != OpKind::data) end_op(op, OpPhase::forward);
    } else {
      const bool wrap = stage_ == prog_.stages - 1;
      p2p(InstrKind::send, wrap ? 0 : stage_ + 1, tag(it.microbatch, wrap ? c + 1 : c, false), "send_activation");
    }
  }

  // Backward of the ops of one list in reverse; with `weights` each op's weight gradient
  // follows its input gradient.
  void backward_ops(const std::vector<Op>& ops, std::int64_t layer, bool weights) {
    for (const Op* op : backward_order(ops, weights)) {
      if (op->phase == OpPhase::backward_input) {
        around(*op, layer, OpPhase::backward_input, true);
        compute(*op, OpPhase::backward_input, layer);
        around(*op, layer, OpPhase::backward_input, false);
      } else {
        weight_op(*op, layer);
      }
    }
  }

  void backward(const ScheduleItem& it, bool weights, bool reduce) {
    const std::int64_t c = it.chunk;
    if (!last_virtual(c)) {
      const bool wrap = stage_ == prog_.stages - 1;
      p2p(InstrKind::recv, wrap ? 0 : stage_ + 1, tag(it.microbatch, c, true), "recv_gradient");
    }
    if (last_virtual(c)) backward_ops(last_, -1, weights);
    const auto [lo, hi] = layers(c);
    // Recomputation repeats the forward (or part of it) of the chunk's layers first.
    bool recompute = false;
    for (const Op& op : dense_) recompute = recompute || op.phase == OpPhase::recompute;
    if (recompute) forward_layers(c, OpPhase::recompute);
    // The head's gradients come first and join the chunk's first bucket, the embedding's last
    // (dp_buckets).
    if (weights && reduce) pending_ += end_params_per_gpu(p_, counts_, false, last_virtual(c));
    for (std::int64_t l = hi - 1; l >= lo; --l) {
      gather_params(l, l > lo ? l - 1 : -1);
      backward_ops(ops_of(l), l, weights);
      if (weights && reduce) reduce_grads(l);
    }
    if (first_virtual(c)) backward_ops(first_, -1, weights);
    if (weights && reduce) {
      pending_ += end_params_per_gpu(p_, counts_, first_virtual(c), false);
      flush_grads(lo);
    }
    if (!first_virtual(c)) {
      const bool wrap = stage_ == 0;
      p2p(InstrKind::send, wrap ? prog_.stages - 1 : stage_ - 1, tag(it.microbatch, wrap ? c - 1 : c, true), "send_gradient");
    }
  }

  // A weight-gradient op; the embedding's (it has no input-gradient part) with the gather of
  // its output's gradient before it (models/layer_comm).
  void weight_op(const Op& op, std::int64_t layer) {
    if (layer < 0) around(op, layer, OpPhase::backward_weight, true);
    compute(op, OpPhase::backward_weight, layer);
  }

  void weight(const ScheduleItem& it, bool reduce) {
    const std::int64_t c = it.chunk;
    auto weights_of = [&](const std::vector<Op>& ops, std::int64_t layer) {
      for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
        if (op->phase == OpPhase::backward_weight) weight_op(*op, layer);
      }
    };
    if (last_virtual(c)) weights_of(last_, -1);
    const auto [lo, hi] = layers(c);
    if (reduce) pending_ += end_params_per_gpu(p_, counts_, false, last_virtual(c));
    for (std::int64_t l = hi - 1; l >= lo; --l) {
      weights_of(ops_of(l), l);
      if (reduce) reduce_grads(l);
    }
    if (first_virtual(c)) weights_of(first_, -1);
    if (reduce) {
      pending_ += end_params_per_gpu(p_, counts_, first_virtual(c), false);
      flush_grads(lo);
    }
  }

  // DP: gradients reduced in buckets as the backward proceeds (Megatron-core's
  // DistributedDataParallel with overlap_grad_reduce): layers join the open bucket, which is
  // reduced once it holds grad_bucket_params; the last bucket of a chunk when its backward
  // ends. ZeRO >= 1 reduce-scatters. Dense gradients over DP x CP, expert ones over expert-DP.
  void reduce_grads(std::int64_t l) {
    if (dp_cp_ <= 1 && expert_dp_ <= 1) return;
    pending_ += layer_params_per_gpu(p_, counts_, moe_layer(l));
    if (pending_.total() >= grad_bucket_params(p_)) flush_grads(l);
  }
  void flush_grads(std::int64_t l) {
    if (pending_.total() <= 0) return;
    if (p_.parallelism.overlap.grad_reduce) {
      emit_grads(pending_, l, false);
    } else if (sharded_grads()) {
      // Not overlapped, a sharded gradient's reduction holds the backward where it is issued.
      emit_grads(pending_, l, true);
    } else {
      // Without overlap the buckets wait for the end of the backward pass (Megatron-LM of
      // 2021: gradients all-reduced after it).
      deferred_.emplace_back(pending_, l);
    }
    pending_ = {};
  }
  // A bucket's parameter gathers: dense then expert, each in the group its optimizer shards
  // over (models::dp_groups), on the DP stream (which runs them in order, so waiting for the
  // last is waiting for both). Returns the last one's index, -1 if none.
  std::int32_t dp_collectives(Collective c, const GpuParams& params, double bytes_per_param, std::int64_t l, const char* what) {
    std::int32_t last = -1;
    if (dense_groups_.shard_size > 1 && params.dense > 0) {
      collective(Stream::dp, c, dense_groups_.shard, params.dense * bytes_per_param, l, false, what);
      last = last_index();
    }
    if (expert_groups_.shard_size > 1 && params.expert > 0) {
      collective(Stream::dp, c, expert_groups_.shard, params.expert * bytes_per_param, l, false, what);
      last = last_index();
    }
    return last;
  }
  // A bucket's gradients, by the rule both tiers share (models::gradient_reduction: the
  // collective, its group and bytes, with compression; with several distributed-optimizer
  // instances the all-reduce of the shard across them), dense then expert.
  void emit_grads(const GpuParams& params, std::int64_t l, bool blocking) {
    std::int32_t last = -1;
    auto reduce = [&](bool expert, double n) {
      const GradientReduction r = gradient_reduction(p_, expert);
      const DpGroups& g = expert ? expert_groups_ : dense_groups_;
      if (g.shard_size > 1) {
        collective(Stream::dp, r.collective, r.group, n * r.bytes_per_param, l, false, "dp_grad");
        last = last_index();
      }
      if (r.replica_bytes_per_param > 0) {
        collective(Stream::dp, Collective::all_reduce, r.replica_group, n * r.replica_bytes_per_param, l, false, "dp_grad_replicas");
        last = last_index();
      }
    };
    if (dp_cp_ > 1 && params.dense > 0) reduce(false, params.dense);
    if (expert_dp_ > 1 && params.expert > 0) reduce(true, params.expert);
    if (last < 0) return;
    last_grad_ = last;
    if (blocking) wait_for(last);
  }
  bool sharded_grads() const { return p_.parallelism.zero_stage >= 2 && (dp_cp_ > 1 || expert_dp_ > 1); }
  // ZeRO-3: a layer's parameters gathered before each use, once in the forward and once in the
  // backward (Rajbhandari et al. 2020 §5.3: 2 all-gathers and a reduce-scatter of the
  // parameters per micro-batch); a recomputed layer reuses its backward's gather, as
  // DeepSpeed's and FSDP's layer-wise checkpointing run it. With overlap.param_gather the
  // next layer's gather (`next`, -1 at the end of the pass) is issued when this layer's
  // compute starts: prefetch depth 1, FSDP's forward_prefetch and BACKWARD_PRE. Without, each
  // gather holds its layer's compute. The layer's first compute waits for its gather.
  void gather_params(std::int64_t l, std::int64_t next) {
    if (p_.parallelism.zero_stage != 3 || (dp_cp_ <= 1 && expert_dp_ <= 1)) return;
    // A receive the compute also waits for: the gather waits for it, the compute for both.
    const std::int32_t pending = blocking_;
    std::int32_t mine = prefetched_layer_ == l ? prefetched_ : -1;
    prefetched_layer_ = -1;
    auto gather = [&](std::int64_t layer, std::int32_t after) {
      const std::size_t first = out_->size();
      const std::int32_t last = dp_collectives(Collective::all_gather, layer_params_per_gpu(p_, counts_, moe_layer(layer)), e_, layer, "dp_param");
      if (after >= 0 && first < out_->size()) (*out_)[first].after = after;
      return last;
    };
    if (mine < 0) mine = gather(l, pending);
    if (p_.parallelism.overlap.param_gather && next >= 0) {
      prefetched_ = gather(next, -1);
      prefetched_layer_ = next;
    }
    // A gather issued now follows `pending` and stands for it; a prefetched one was issued
    // before anything held since (a bucket's reduction), so it joins them.
    wait_for(mine);
  }

  // ZeRO 1 and 2 with overlap.param_gather: the parameters the distributed optimizer updated
  // are gathered under the next step's forward (Megatron-core's overlap_param_gather), in the
  // gradient buckets. As Megatron-LM launches them by default (--align-param-gather), every
  // stage dispatches its chunks' gathers at the start of the step, all stages at once, and
  // each bucket is waited for where its chunk's first forward needs it (the DDP forward
  // pre-hook; megatron/core/distributed/distributed_data_parallel.py, start_param_sync and
  // finish_param_sync). One step stands for the steady state: its gathers are those of the
  // previous step's optimizer, of the same size. (Megatron dispatches the chunks after the
  // second of an interleaved schedule a few micro-batches later; on the DP stream, which runs
  // its collectives in order, that only matters to ZeRO-2 reductions queued behind them.)
  bool gathers_params_ahead() const {
    const auto& par = p_.parallelism;
    return (par.zero_stage == 1 || par.zero_stage == 2) && par.overlap.param_gather && (dp_cp_ > 1 || expert_dp_ > 1);
  }
  // Before the forward compute at `layer` of `chunk` (its first layer: the chunk's start).
  void await_params(std::int64_t chunk, std::int64_t layer) {
    if (buckets_.empty()) return;
    const auto c = static_cast<std::size_t>(chunk);
    for (std::size_t& j = awaited_[c]; j < buckets_[c].size() && buckets_[c][j].first_layer <= layer; ++j) {
      wait_for(bucket_gather_[c][j]);
    }
  }

  // The parameters one GPU of this stage holds (after TP and EP sharding).
  GpuParams held_params() const {
    GpuParams params;
    for (std::int64_t c = 0; c < prog_.chunks; ++c) {
      const auto [lo, hi] = layers(c);
      for (std::int64_t l = lo; l < hi; ++l) params += layer_params_per_gpu(p_, counts_, moe_layer(l));
      params += end_params_per_gpu(p_, counts_, first_virtual(c), last_virtual(c));
    }
    return params;
  }

  void optimizer() {
    item_ = -1;
    const GpuParams params = held_params();
    // The distributed optimizer shards over data and context parallelism together (Megatron-core's
    // data-parallel group with context parallelism), expert parameters over expert-DP, or over
    // one instance of each (models::dp_groups).
    const bool sharded = p_.parallelism.zero_stage >= 1;
    const double owned = sharded ? params.dense / d(dense_groups_.shard_size) + params.expert / d(std::max<std::int64_t>(1, expert_groups_.shard_size))
                                 : params.total();
    for (const auto& [n, l] : deferred_) emit_grads(n, l, false);
    deferred_.clear();
    Op step{"optimizer_step", OpKind::optimizer, OpPhase::forward, 0, owned * optimizer_bytes_per_param(p_), {}};
    // The step updates with reduced gradients: it waits for the last bucket. fp16's unscale and
    // clipping come first, on the gradients this GPU owns (kUnscaleGradBytesPerParam,
    // kClipGradBytesPerParam), in MixedPrecisionOptimizer.step's order.
    wait_for(last_grad_);
    if (p_.training.precision == plan::Precision::fp16) {
      compute({"unscale_grads", OpKind::optimizer, OpPhase::forward, 0, owned * unscale_grad_bytes_per_param(p_), {}}, OpPhase::forward, -1);
    }
    if (p_.training.clip_grad > 0) {
      compute({"clip_grads", OpKind::optimizer, OpPhase::forward, 0, owned * clip_grad_bytes_per_param(p_), {}}, OpPhase::forward, -1);
    }
    compute(step, OpPhase::forward, -1);
    // The distributed optimizer gathers the updated 16-bit parameters (ZeRO 1 and 2).
    if (sharded && p_.parallelism.zero_stage < 3 && !gathers_params_ahead()) {
      const std::int32_t last = dp_collectives(Collective::all_gather, params, e_, -1, "dp_param");
      wait_for(last);
    }
  }

  const plan::Plan& p_;
  Program& prog_;
  std::int64_t stage_;
  double t_ = 1, e_ = 2, tokens_ = 0;
  std::vector<Op> dense_, moe_, first_, last_;
  std::vector<LayerComm> comms_;
  ParamCounts counts_;
  std::vector<std::vector<std::int64_t>> chunks_;  // layers per [stage][chunk]
  std::vector<Instr>* out_ = nullptr;
  // Looked up by a string_view (an op's name) without a string made for it.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::int32_t, NameHash, std::equal_to<>> ids_;
  std::int32_t item_ = -1, blocking_ = -1, last_compute_ = -1;
  GpuParams pending_;  // DP: parameters in the open gradient bucket
  std::vector<std::pair<GpuParams, std::int64_t>> deferred_;  // buckets held for the end of the backward
  std::int32_t last_grad_ = -1;  // the last gradient collective issued
  std::int64_t dp_cp_ = 1, expert_dp_ = 1;  // sizes of the gradient-reduction groups
  DpGroups dense_groups_, expert_groups_;     // where ZeRO shards (models::dp_groups)
  std::int64_t prefetched_layer_ = -1;  // ZeRO-3: the layer whose gather was issued ahead
  std::int32_t prefetched_ = -1;
  // ZeRO 1 and 2 gathered ahead (await_params): each chunk's buckets, the gather issued for
  // each (-1 until it is), and how many of a chunk's the forward has waited for.
  std::vector<std::vector<DpBucket>> buckets_;
  std::vector<std::vector<std::int32_t>> bucket_gather_;
  std::vector<std::size_t> awaited_;
  std::int32_t also_blocking_ = -1;  // what the next compute waits for besides blocking_ (wait_for)
  std::int32_t split_pending_ = -1;  // a collective the next compute is split with (Instr::tail_after)
};

}  // namespace

LowerResult lower(const plan::Plan& p, const std::function<void(StageProgram&)>& each_stage) {
  LowerResult out;
  const auto& par = p.parallelism;
  const plan::DerivedFigures derived = plan::derive(p);
  Program prog;
  prog.schedule = par.pipeline_schedule;
  prog.stages = par.pipeline_model_parallel_size;
  prog.chunks = par.pipeline_schedule == plan::PipelineSchedule::interleaved ? par.virtual_pipeline_model_parallel_size : 1;
  prog.microbatches = derived.micro_batches_per_step;
  if (prog.microbatches < 1 || static_cast<std::int64_t>(derived.layers_per_stage.size()) != prog.stages) {
    out.error = "the plan has no micro-batches or stages to lower (validate it first)";
    return out;
  }
  if (prog.chunks > 1 && prog.microbatches % prog.stages != 0) {
    // Megatron-LM's interleaved schedule requires it too.
    out.error = "parallelism.virtual_pipeline_model_parallel_size: the interleaved schedule needs micro-batches per step (" +
                std::to_string(prog.microbatches) + ") to be a multiple of the pipeline stages (" + std::to_string(prog.stages) + ")";
    return out;
  }
  const auto per_chunk = plan::layers_per_chunk(p);
  for (std::int64_t s = 0; s < prog.stages; ++s) {
    auto& row = prog.chunk_layers.emplace_back();
    for (std::int64_t c = 0; c < prog.chunks; ++c) {
      const std::int64_t first = plan::first_layer_of_chunk(per_chunk, s, c);
      row.emplace_back(first, first + per_chunk[static_cast<std::size_t>(s)][static_cast<std::size_t>(c)]);
    }
  }
  std::size_t expected = 0;
  for (std::int64_t s = 0; s < prog.stages; ++s) {
    StageLowering lowering(p, prog, s);
    prog.classes.push_back(lowering.run(expected));
    expected = prog.classes.back().instrs.size() + prog.classes.back().instrs.size() / 16;
    if (each_stage) each_stage(prog.classes.back());
  }
  out.program = std::move(prog);
  return out;
}

std::string Program::block_name(std::int64_t stage, const ScheduleItem& item) const {
  const auto [first, end] = chunk_layers.at(static_cast<std::size_t>(stage)).at(static_cast<std::size_t>(item.chunk));
  std::string out(pass_name(item.pass));
  if (end > first) return out + " L" + std::to_string(first) + "-" + std::to_string(end - 1);
  return out + (first_virtual(stage, item.chunk) ? " embedding" : " head");
}

RankView for_rank(const Program& program, const plan::RankLayout& layout, std::int64_t rank) {
  RankView v;
  v.rank = rank;
  const plan::MeshCoord c = layout.coord(rank);
  v.stage = &program.classes[static_cast<std::size_t>(c.pp)];
  if (program.stages > 1) {
    plan::MeshCoord prev = c, next = c;
    prev.pp = (c.pp + program.stages - 1) % program.stages;
    next.pp = (c.pp + 1) % program.stages;
    v.prev_rank = layout.rank(prev);
    v.next_rank = layout.rank(next);
  }
  for (auto g : plan::kAllGroupKinds) {
    if (layout.distinct(g)) v.groups.emplace_back(g, layout.group_index(g, rank));
  }
  return v;
}

}  // namespace meshwork::models
