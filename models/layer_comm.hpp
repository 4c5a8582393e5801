#pragma once
// The collectives Megatron-core issues around the ops of one transformer layer for one
// micro-batch: TP's f/g operators (all-reduce, or all-gather and reduce-scatter with sequence
// parallelism), EP's dispatch and combine all-to-all, CP's ring exchange of K and V. One list,
// read by the Program's lowering (which places each where it runs) and by the estimate (which
// times each with models/comm), so that both tiers price the same messages.

#include <cstdint>
#include <string_view>
#include <vector>

#include "models/op_table.hpp"
#include "models/params.hpp"
#include "models/program.hpp"
#include "plan/plan.hpp"

namespace meshwork::models {

struct LayerComm {
  Stream stream = Stream::tp;
  Collective collective = Collective::none;
  plan::GroupKind group = plan::GroupKind::tp;
  double bytes = 0;             // per rank: the buffer, as nccl-tests' "size"
  std::string_view what = "";   // the instruction's name stem: "tp", "ep_dispatch", "cp"
  // Split with the op after it (CP's p2p ring before the attention): the op does not wait for
  // it, only the op's last block does (Instr::tail_after, models::split_exposed_s).
  bool split_with_next = false;
};

// The load of the hottest expert rank over the balanced load: routing_imbalance, capped by the
// capacity factor when the router drops tokens. An all-to-all moves at the pace of the rank
// that receives the most, so its bytes are scaled by this.
double hottest_expert_load(const plan::MoeConfig& moe);

// The collectives issued next to the op named `op` of a (MoE when `moe_layer`) layer, or of
// the ops outside the layers (embedding, final_norm), in the forward pass (a recomputation
// repeats it) or the backward (`forward` false: around the op's input-gradient part; the
// embedding, which has only a weight-gradient part, before that), before the op or after it.
// Appends to `out`.
void comm_around(const plan::Plan& plan, std::string_view op, bool moe_layer, bool forward, bool before, std::vector<LayerComm>& out);

// Megatron's --tp-comm-overlap (Transformer Engine's userbuffers; it needs sequence
// parallelism): each TP all-gather is split with the GEMM that consumes it (the next GEMM of
// the pass), each reduce-scatter with the GEMM that produces it (the previous one), and only
// what the GEMM does not cover is exposed, in both tiers. Without SP the flag changes nothing.
// (Chunked pipelining of the pair is taken as perfect; the SMs the collective takes from the
// GEMM are priced by models::tp_exposed_s, models/sm_share.hpp.)
bool tp_comm_overlapped(const plan::Plan& plan);

// Parameters one GPU holds of a layer (or of the parts outside the layers), split by the group
// that reduces their gradients and shards them: dense ones over data x context parallelism,
// expert ones over expert-data parallelism (Megatron-core's expert_data_parallel group).
struct GpuParams {
  double dense = 0, expert = 0;
  [[nodiscard]] double total() const { return dense + expert; }
  GpuParams& operator+=(const GpuParams& o) {
    dense += o.dense;
    expert += o.expert;
    return *this;
  }
};
GpuParams layer_params_per_gpu(const plan::Plan& plan, const ParamCounts& counts, bool moe_layer);
// The embedding on the first virtual stage; the LM head (or, tied, the embedding's copy when
// the pipeline has more than one stage) on the last.
GpuParams end_params_per_gpu(const plan::Plan& plan, const ParamCounts& counts, bool first_virtual, bool last_virtual);
// Megatron-core DDP's gradient bucket: max(40M, 1M x DP) parameters
// (megatron/core/distributed/distributed_data_parallel.py, bucket_size's default).
double grad_bucket_params(const plan::Plan& plan);

// Where data parallelism runs for dense (expert = false) or expert parameters: the group ZeRO
// shards over (and gathers parameters in) and its size, and, with several distributed-optimizer
// instances, the group of replicas that all-reduces each reduced shard (Megatron-core's
// inter-instance group; megatron/core/distributed/param_and_grad_buffer.py, start_grad_sync:
// the reduce-scatter in the instance, then the all-reduce of the local shard, on the same
// communication stream). Dense parameters use DP x CP, expert ones expert-DP.
struct DpGroups {
  plan::GroupKind shard = plan::GroupKind::dp_cp;
  std::int64_t shard_size = 1;
  plan::GroupKind replica = plan::GroupKind::dp_cp;
  std::int64_t replicas = 1;  // instances; 1: no replica group
};
DpGroups dp_groups(const plan::Plan& plan, bool expert);

// How DP reduces one parameter's gradient, the same in both tiers: the collective, its group
// and its bytes per parameter (as models/comm's `bytes`: nccl-tests' size), and with several
// instances the all-reduce of the shard across them (1/shard_size of the bytes).
// Without compression ZeRO-0 all-reduces and ZeRO >= 1 reduce-scatters, in the gradients'
// precision (models::gradient_bytes). 1-bit Adam (Tang et al. 2021, arXiv:2102.02888) sends
// one bit per value. Top-k sends the chosen values (activation precision) with 32-bit
// indices; the sparse sets of different ranks do not line up, so they are all-gathered: the
// buffer gathered is group_size times a rank's.
struct GradientReduction {
  Collective collective = Collective::all_reduce;
  plan::GroupKind group = plan::GroupKind::dp_cp;
  double bytes_per_param = 0;
  plan::GroupKind replica_group = plan::GroupKind::dp_cp;
  double replica_bytes_per_param = 0;  // 0: no all-reduce across instances
};
GradientReduction gradient_reduction(const plan::Plan& plan, bool expert);
// Bytes of HBM the optimizer step reads and writes per parameter it owns. With fp32 states
// (Megatron-core's classic optimizer): Adam's (kAdamBytesPerParam), the master weights' copy into
// 16-bit weights unless the plan trains in fp32 (kMasterCopyBytesPerParam), bf16 gradients' copy
// into fp32 main gradients (kMainGradCopyBytesPerParam, training.grad_reduce_in_bf16). With
// training.optimizer_states otherwise, one fused kernel over each state in its own dtype
// (layer_comm.cpp, adam_bytes_per_param). With compression, the error-feedback residual (fp32,
// read and written: 12 more, with the compensated gradient).
double optimizer_bytes_per_param(const plan::Plan& plan);
// Gradient clipping's and fp16's unscale passes per parameter a GPU owns: on fp32 main gradients
// with the default optimizer states (kClipGradBytesPerParam, kUnscaleGradBytesPerParam); with
// training.optimizer_states otherwise there are none, and they read (and write) the gradients
// as the buffer keeps them, 3 and 2 gradient values (Megatron-core clips the decoupled grads,
// megatron/core/optimizer/optimizer.py and clip_grads.py @0d7e02bd; Apex folds the clipping
// scale into its Adam kernel instead, one read fewer: not told apart). With gradient compression
// the optimizer works on an fp32 compensated gradient (optimizer_bytes_per_param): fp32's.
double clip_grad_bytes_per_param(const plan::Plan& plan);
double unscale_grad_bytes_per_param(const plan::Plan& plan);

// One DP bucket of a model chunk, as Megatron-core DDP forms them: layers join the open bucket
// from the chunk's last layer (the order their gradients are produced), which closes once it
// holds grad_bucket_params. The head's parameters (the last virtual stage) join the first
// bucket the backward fills, the embedding's the last one it fills (in the list below, which
// is in forward order, the last and the first).
// Both tiers reduce gradients in these buckets and, with ZeRO 1 or 2 and
// overlap.param_gather, gather the updated parameters in them. `first_layer`: the bucket's
// lowest layer, where the forward pass first needs its parameters.
struct DpBucket {
  std::int64_t first_layer = 0;
  GpuParams params;
};
// The buckets of layers [lo, hi) of a chunk, in forward order (the lowest layers first).
std::vector<DpBucket> dp_buckets(const plan::Plan& plan, const ParamCounts& counts, std::int64_t lo, std::int64_t hi, bool first_virtual,
                                 bool last_virtual);

}  // namespace meshwork::models
