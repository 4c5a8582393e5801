// The flag table of import-megatron: every flag of Megatron-LM's arguments.py at the pinned
// commit (plan/megatron_flags.inc, made by scripts/regen-megatron-flags), each mapped to the plan
// fields it sets or left out with its reason (docs/megatron-flags.md lists them).
#include <map>

#include "plan/megatron_import.hpp"

namespace meshwork::plan {
namespace {

const std::vector<MegatronFlag> kFlags = {
#include "plan/megatron_flags.inc"
};

// The flags import-megatron reads, with the fields they set (Megatron-LM's names: the plan's
// are Megatron-core's, docs/DESIGN.md "The plan file").
const std::map<std::string_view, std::string_view>& mapped_flags() {
  static const std::map<std::string_view, std::string_view> m = {
      {"--num-layers", "model.num_layers"},
      {"--hidden-size", "model.hidden_size"},
      {"--num-attention-heads", "model.num_attention_heads"},
      {"--group-query-attention", "model.num_query_groups"},
      {"--num-query-groups", "model.num_query_groups"},
      {"--kv-channels", "model.kv_channels"},
      {"--ffn-hidden-size", "model.ffn_hidden_size"},
      {"--swiglu", "model.activation, model.ffn_hidden_size (its 8h/3 default)"},
      {"--normalization", "model.normalization"},
      {"--position-embedding-type", "model.position_embedding_type"},
      {"--use-rotary-position-embeddings", "model.position_embedding_type"},
      {"--no-position-embedding", "model.position_embedding_type"},
      {"--seq-length", "model.seq_length"},
      {"--encoder-seq-length", "model.seq_length"},
      {"--max-position-embeddings", "model.seq_length (when --seq-length is absent, as Megatron does)"},
      {"--vocab-size", "model.vocab_size"},
      {"--tokenizer-type", "model.vocab_size (GPT2BPETokenizer 50,257, Llama2Tokenizer 32,000)"},
      {"--merge-file", "model.vocab_size (a vocab and a merge file: GPT-2's BPE, 50,257)"},
      {"--make-vocab-size-divisible-by", "model.vocab_size (padding)"},
      {"--untie-embeddings-and-output-weights", "model.untie_embeddings_and_output_weights"},
      {"--disable-bias-linear", "model.add_bias_linear"},
      {"--hidden-dropout", "model.hidden_dropout"},
      {"--attention-dropout", "model.attention_dropout"},
      {"--multi-latent-attention", "model.mla"},
      {"--q-lora-rank", "model.mla.q_lora_rank"},
      {"--kv-lora-rank", "model.mla.kv_lora_rank"},
      {"--qk-head-dim", "model.mla.qk_head_dim"},
      {"--qk-pos-emb-head-dim", "model.mla.qk_pos_emb_head_dim"},
      {"--v-head-dim", "model.mla.v_head_dim"},
      {"--num-experts", "model.moe.num_moe_experts"},
      {"--moe-router-topk", "model.moe.moe_router_topk"},
      {"--moe-ffn-hidden-size", "model.moe.moe_ffn_hidden_size"},
      {"--moe-shared-expert-intermediate-size", "model.moe.moe_shared_expert_intermediate_size"},
      {"--moe-layer-freq", "model.moe.first_k_dense_layers"},
      {"--moe-expert-capacity-factor", "model.moe.capacity_factor"},
      {"--clip-grad", "training.clip_grad"},
      {"--no-create-attention-mask-in-dataloader", "training.attention_mask_in_batch"},
      {"--grad-reduce-in-bf16", "training.grad_reduce_in_bf16"},
      {"--use-precision-aware-optimizer", "training.optimizer_states (master_weights remainders with bf16 weights: store_param_remainders, Transformer Engine >= 2.1)"},
      {"--exp-avg-dtype", "training.optimizer_states.exp_avg"},
      {"--exp-avg-sq-dtype", "training.optimizer_states.exp_avg_sq"},
      {"--main-params-dtype", "training.optimizer_states.master_weights"},
      {"--main-grads-dtype", "training.grad_reduce_in_bf16 (bf16)"},
      {"--micro-batch-size", "training.micro_batch_size"},
      {"--global-batch-size", "training.global_batch_size"},
      {"--fp16", "training.precision"},
      {"--bf16", "training.precision"},
      {"--fp8-format", "training.precision"},
      {"--recompute-activations", "training.recompute"},
      {"--recompute-granularity", "training.recompute"},
      {"--recompute-method", "training.recompute_method"},
      {"--recompute-num-layers", "training.recompute_num_layers"},
      {"--use-flash-attn", "training.flash_attention, training.attention_kernel"},
      {"--attention-backend", "training.flash_attention, training.attention_kernel"},
      {"--train-iters", "training.tokens"},
      {"--train-samples", "training.tokens"},
      {"--tensor-model-parallel-size", "parallelism.tensor_model_parallel_size"},
      {"--pipeline-model-parallel-size", "parallelism.pipeline_model_parallel_size"},
      {"--context-parallel-size", "parallelism.context_parallel_size"},
      {"--cp-comm-type", "parallelism.context_parallel_comm_type"},
      {"--expert-model-parallel-size", "parallelism.expert_model_parallel_size"},
      {"--num-layers-per-virtual-pipeline-stage", "parallelism.virtual_pipeline_model_parallel_size"},
      {"--num-virtual-stages-per-pipeline-rank", "parallelism.virtual_pipeline_model_parallel_size"},
      {"--decoder-first-pipeline-num-layers", "parallelism.decoder_first_pipeline_num_layers"},
      {"--decoder-last-pipeline-num-layers", "parallelism.decoder_last_pipeline_num_layers"},
      {"--account-for-embedding-in-pipeline-split", "parallelism.account_for_embedding_in_pipeline_split"},
      {"--account-for-loss-in-pipeline-split", "parallelism.account_for_loss_in_pipeline_split"},
      {"--pipeline-model-parallel-layout", "parallelism.pipeline_model_parallel_layout"},
      {"--sequence-parallel", "parallelism.sequence_parallel"},
      {"--use-distributed-optimizer", "parallelism.zero_stage (1)"},
      {"--num-distributed-optimizer-instances", "parallelism.num_distributed_optimizer_instances"},
      {"--use-megatron-fsdp", "parallelism.zero_stage (by --data-parallel-sharding-strategy)"},
      {"--data-parallel-sharding-strategy", "parallelism.zero_stage"},
      {"--use-torch-fsdp2", "parallelism.zero_stage (3)"},
      {"--overlap-grad-reduce", "parallelism.overlap.grad_reduce"},
      {"--overlap-param-gather", "parallelism.overlap.param_gather"},
      {"--tp-comm-overlap", "parallelism.overlap.tp_comm"},
      {"--no-overlap-p2p-communication", "parallelism.overlap.p2p"},
  };
  return m;
}

// Flags left out, each with why; the rest of a group takes the group's reason.
const std::map<std::string_view, std::string_view>& flag_reasons() {
  static const std::map<std::string_view, std::string_view> m = {
      {"--rampup-batch-size", "a batch-size ramp-up changes the first steps only; the plan models the full global batch"},
      {"--batch-size", "an old alias of --micro-batch-size kept for inference"},
      {"--decrease-batch-size-if-needed", "a batch adjustment on restarts with fewer GPUs; the plan gives its batch"},
      {"--distribute-saved-activations", "spreads checkpointed activations over TP; not modelled (memory is priced as kept per rank)"},
      {"--recompute-modules", "selective recomputation is priced as Megatron's default set (core attention)"},
      {"--moe-layer-recompute", "MoE-layer recomputation is not modelled; use --recompute-granularity"},
      {"--tp-comm-overlap-cfg", "Transformer Engine's per-GEMM overlap settings; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-overlap-ag", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-overlap-rs", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--tp-comm-overlap-rs-dgrad", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-bulk-dgrad", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-bulk-wgrad", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-split-ag", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--disable-tp-comm-split-rs", "per-collective TP overlap switches; parallelism.overlap.tp_comm is all or nothing"},
      {"--add-qkv-bias", "biases on Q, K and V only (Qwen2): a few thousand parameters per layer, not modelled"},
      {"--squared-relu", "squared-ReLU MLPs are priced as a GeLU MLP (two GEMMs)"},
      {"--quick-geglu", "GeGLU MLPs are not modelled; priced as given by --swiglu"},
      {"--openai-gelu", "a GeLU variant: the same cost"},
      {"--apply-layernorm-1p", "a norm parameterisation: the same cost"},
      {"--apply-residual-connection-post-layernorm", "where the residual is taken: the same cost"},
      {"--norm-epsilon", "numerics only"},
      {"--rotary-base", "RoPE's base: the same cost"},
      {"--rotary-percent", "the rotated share of each head: priced as full RoPE"},
      {"--rotary-interleaved", "RoPE's layout: the same cost"},
      {"--rotary-seq-len-interpolation-factor", "context extension: the same cost"},
      {"--use-rope-scaling", "context extension: the same cost"},
      {"--rope-scaling-factor", "context extension: the same cost"},
      {"--window-size", "sliding-window attention is priced as full causal attention"},
      {"--window-attn-skip-freq", "sliding-window attention is priced as full causal attention"},
      {"--softmax-type", "attention-sink softmax variants: the same cost"},
      {"--mtp-num-layers", "multi-token prediction modules are not modelled (their parameters, FLOPs and memory are left out)"},
      {"--mtp-loss-scaling-factor", "multi-token prediction modules are not modelled"},
      {"--encoder-num-layers", "encoder-decoder models are not modelled"},
      {"--decoder-num-layers", "encoder-decoder models are not modelled; --num-layers gives the decoder"},
      {"--relative-attention-num-buckets", "T5 relative attention is not modelled"},
      {"--relative-attention-max-distance", "T5 relative attention is not modelled"},
      {"--mrope-section", "multimodal RoPE: the same cost"},
      {"--no-rope-freq", "which layers skip RoPE: the same cost"},
      {"--onnx-safe", "export setting"},
      {"--bert-no-binary-head", "BERT only"},
      {"--activation-func-clamp-value", "numerics only"},
      {"--glu-linear-offset", "numerics only"},
      {"--model-parallel-size", "an old alias removed by Megatron (it errors); give --tensor-model-parallel-size"},
      {"--microbatch-group-size-per-virtual-pipeline-stage", "the interleaved schedule's micro-batch grouping: the schedule takes Megatron's default (the pipeline size)"},
      {"--overlap-p2p-communication-warmup-flush", "warm-up and flush overlap of the interleaved schedule: priced as parallelism.overlap.p2p"},
      {"--overlap-param-gather-with-optimizer-step", "priced as parallelism.overlap.param_gather"},
      {"--enable-full-sharding-in-hsdp", "hybrid sharding is not modelled"},
      {"--suggested-communication-unit-size", "Megatron-FSDP's bucket size: buckets are priced as Megatron's defaults"},
      {"--fsdp-double-buffer", "Megatron-FSDP buffer layout: priced as the default"},
      {"--init-model-with-meta-device", "initialisation only"},
      {"--torch-fsdp2-no-reshard-after-forward", "FSDP2's ZeRO-2-like mode is priced as ZeRO-3"},
      {"--hierarchical-context-parallel-sizes", "hierarchical CP is priced as one CP group of parallelism.context_parallel_comm_type"},
      {"--ddp-bucket-size", "gradient buckets are priced as Megatron's default size"},
      {"--ddp-num-buckets", "gradient buckets are priced as Megatron's default size"},
      {"--ddp-pad-buckets-for-high-nccl-busbw", "bucket padding: the same traffic"},
      {"--ddp-average-in-collective", "where the gradient average is taken: the same traffic"},
      {"--no-align-grad-reduce", "when each stage's reduction starts: priced with the default alignment"},
      {"--no-align-param-gather", "when each stage's gather starts: priced with the default alignment"},
      {"--defer-embedding-wgrad-compute", "the embedding's weight-gradient deferral is not modelled"},
      {"--wgrad-deferral-limit", "the embedding's weight-gradient deferral is not modelled"},
      {"--use-sharp", "SHARP in-network reduction is chosen by cluster.collective_algorithm"},
      {"--sharp-enabled-group", "SHARP in-network reduction is chosen by cluster.collective_algorithm"},
      {"--use-nccl-ub", "NCCL user-buffer registration: collectives are priced from nccl-tests curves"},
      {"--disable-symmetric-registration", "NCCL buffer registration: collectives are priced from nccl-tests curves"},
      {"--use-ring-exchange-p2p", "the p2p mechanism: priced as sends and receives"},
      {"--no-scatter-gather-tensors-in-pipeline", "pipeline transfers are priced whole per stage boundary"},
      {"--use-tp-pp-dp-mapping", "rank order: give parallelism.order (tp-cp-ep-dp-pp is Megatron's default)"},
      {"--expert-tensor-parallel-size", "expert tensor parallelism is not modelled: experts are not split by TP"},
      {"--moe-grouped-gemm", "the local experts are always priced as one grouped GEMM of their whole size"},
      {"--moe-use-legacy-grouped-gemm", "the local experts are always priced as one grouped GEMM of their whole size"},
      {"--moe-token-dispatcher-type", "dispatch is priced as the all-to-all over EP"},
      {"--moe-enable-deepep", "dispatch is priced as the all-to-all over EP"},
      {"--moe-deepep-num-sms", "dispatch is priced as the all-to-all over EP"},
      {"--moe-shared-expert-overlap", "the shared expert's overlap with dispatch is not modelled"},
      {"--overlap-moe-expert-parallel-comm", "EP overlap with compute is not modelled"},
      {"--delay-wgrad-compute", "EP overlap with compute is not modelled"},
      {"--moe-pad-expert-input-to-capacity", "priced with model.moe.capacity_factor"},
      {"--moe-token-drop-policy", "priced with model.moe.capacity_factor"},
      {"--fp8-param-gather", "parameter gathers are priced at the training precision"},
      {"--first-last-layers-bf16", "FP8 is priced for every layer (docs/efficiency-constants.md)"},
      {"--num-layers-at-start-in-bf16", "FP8 is priced for every layer (docs/efficiency-constants.md)"},
      {"--num-layers-at-end-in-bf16", "FP8 is priced for every layer (docs/efficiency-constants.md)"},
      {"--fp4-format", "FP4 has no peak in the GPU presets; the plan's precision is one of bf16, fp16, fp8, fp32"},
      {"--fp4-recipe", "FP4 has no peak in the GPU presets"},
      {"--fp4-param-gather", "FP4 has no peak in the GPU presets"},
      {"--transformer-impl", "Transformer Engine or local kernels: priced from the GPU's profile"},
      {"--accumulate-allreduce-grads-in-fp32", "gradients are fp32 in bf16 and fp8 training unless --grad-reduce-in-bf16 (training.grad_reduce_in_bf16)"},
      {"--optimizer", "the optimizer is priced as Adam"},
      {"--optimizer-cpu-offload", "optimizer offload to the CPU is not modelled"},
      {"--optimizer-offload-fraction", "optimizer offload to the CPU is not modelled"},
      {"--use-torch-optimizer-for-cpu-offload", "optimizer offload to the CPU is not modelled"},
      {"--overlap-cpu-optimizer-d2h-h2d", "optimizer offload to the CPU is not modelled"},
      {"--use-mcore-models", "Megatron-core's GPT: the model meshwork prices"},
      {"--use-legacy-models", "the legacy GPT has the same shapes"},
      {"--sequence-parallel-size", "not a flag of this version"},
      {"--empty-unused-memory-level", "allocator cache behaviour: memory is priced without it"},
      {"--manual-gc", "Python garbage collection: no cost modelled"},
      {"--manual-gc-interval", "Python garbage collection: no cost modelled"},
      {"--no-manual-gc-eval", "Python garbage collection: no cost modelled"},
      {"--calculate-per-token-loss", "the loss's normalisation: the same cost"},
      {"--cross-entropy-loss-fusion", "kernel fusion: fused kernels are priced (docs/efficiency-constants.md)"},
      {"--cross-entropy-fusion-impl", "kernel fusion: fused kernels are priced (docs/efficiency-constants.md)"},
      {"--use-cpu-initialization", "initialisation only"},
      {"--deterministic-mode", "deterministic kernels are not priced separately"},
      {"--train-sync-interval", "host synchronisation: no cost modelled"},
      {"--dataloader-type", "data loading is outside the step's cost"},
      {"--pipeline-model-parallel-comm-backend", "pipeline transfers are priced from the fabric"},
      {"--high-priority-stream-groups", "stream priorities are not modelled"},
      {"--use-te-activation-func", "kernel choice: priced from the GPU's profile"},
      {"--checkpoint-activations", "an old alias of --recompute-activations removed by Megatron (it errors)"},
      {"--exit-interval", "when the job stops: the run's length is training.tokens"},
      {"--exit-duration-in-mins", "when the job stops: the run's length is training.tokens"},
      {"--exit-signal-handler", "job control"},
      {"--tensorboard-dir", "logging"},
      {"--log-interval", "logging"},
      {"--no-check-for-nan-in-loss-and-grad", "checks on the loss: no cost modelled"},
      {"--check-for-spiky-loss", "checks on the loss: no cost modelled"},
      {"--check-for-large-grads", "checks on the gradients: no cost modelled"},
      {"--check-weight-hash-across-dp-replicas-interval", "replica checks: no cost modelled"},
      {"--iterations-to-skip", "skipped iterations: the run's length is training.tokens"},
      {"--result-rejected-tracker-filename", "result validation: no cost modelled"},
      {"--disable-gloo-process-groups", "process-group setup"},
      {"--no-clone-scatter-output-in-embedding", "a memory detail of the embedding: not modelled"},
  };
  return m;
}

// The reason for the rest of each arguments.py group.
std::string_view group_reason(std::string_view group, std::string_view flag) {
  if (flag.find("fusion") != std::string_view::npos || flag.rfind("--no-bias-", 0) == 0 || flag == "--no-masked-softmax-fusion" ||
      flag == "--no-persist-layer-norm" || flag == "--no-gradient-accumulation-fusion" || flag == "--no-rope-fusion" ||
      flag == "--no-gradient-reduce-div-fusion" || flag == "--no-async-tensor-model-parallel-allreduce" || flag == "--rope-type") {
    return "a kernel-fusion or kernel-choice switch: fused kernels are priced (docs/efficiency-constants.md)";
  }
  if (flag.find("profile") != std::string_view::npos || flag.find("memory-history") != std::string_view::npos ||
      flag.find("memory-snapshot") != std::string_view::npos || flag.find("pytorch-profiler") != std::string_view::npos) {
    return "profiling: no cost modelled";
  }
  static const std::map<std::string_view, std::string_view> m = {
      {"logging", "logging: no cost in a step"},
      {"one_logger", "logging: no cost in a step"},
      {"config_logger", "logging: no cost in a step"},
      {"straggler_detector", "monitoring: stragglers are failures.stragglers"},
      {"workload_inspector_server", "monitoring: no cost in a step"},
      {"checkpointing", "checkpoint paths, formats and intervals: the checkpoint section models the cost (checkpoint.interval, checkpoint.mode)"},
      {"data", "data loading and splits: outside the step's cost"},
      {"tokenizer", "the tokenizer's files: only its vocabulary size matters (model.vocab_size)"},
      {"validation", "evaluation: outside the training step"},
      {"learning_rate", "the learning-rate schedule changes no cost"},
      {"regularization", "optimizer hyper-parameters change no cost"},
      {"initialization", "initialisation and seeds change no cost"},
      {"mixed_precision", "loss scaling and numerics: no cost modelled"},
      {"transformer_engine", "FP8 recipe details: FP8 is priced from the GPU's peak (docs/efficiency-constants.md)"},
      {"distributed", "process-group and launcher setup: no cost modelled"},
      {"moe", "router and load-balancing details: routing is priced as balanced top-k (model.moe.routing_imbalance for skew)"},
      {"mla", "MLA details that do not change its shapes"},
      {"network_size", "a model detail that does not change its cost"},
      {"training", "a training-loop detail that does not change the step's cost"},
      {"inference", "inference: meshwork plans training"},
      {"rl", "reinforcement learning: meshwork plans pre-training"},
      {"sft", "fine-tuning data handling: the step is priced as pre-training"},
      {"biencoder", "retrieval models: not modelled"},
      {"retro", "RETRO: not modelled"},
      {"vision", "vision models: not modelled"},
      {"experimental", "experimental and hybrid (Mamba) architectures: not modelled"},
      {"heterogeneous", "heterogeneous layers: not modelled"},
      {"kitchen_quantization", "quantization experiments: not modelled"},
      {"msc", "storage client: checkpoints are priced by the checkpoint section"},
      {"autoresume", "job restarts: the failures section models their cost"},
      {"ft_package", "fault tolerance: the failures section models its cost"},
      {"inprocess_restart", "in-process restart: the failures section models restart time (failures.restart_s)"},
      {"rerun_machine", "result re-runs: no cost modelled"},
      {"fault_injector", "fault injection: use failures.events"},
  };
  auto it = m.find(group);
  return it == m.end() ? std::string_view("not modelled") : it->second;
}

}  // namespace

const std::vector<MegatronFlag>& megatron_flags() { return kFlags; }

const MegatronFlag* find_megatron_flag(std::string_view name) {
  for (const auto& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::optional<FlagClass> classify_megatron_flag(std::string_view flag) {
  const MegatronFlag* f = find_megatron_flag(flag);
  if (!f) return std::nullopt;
  if (auto it = mapped_flags().find(flag); it != mapped_flags().end()) return FlagClass{true, std::string(it->second), {}};
  if (auto it = flag_reasons().find(flag); it != flag_reasons().end()) return FlagClass{false, {}, std::string(it->second)};
  return FlagClass{false, {}, std::string(group_reason(f->group, flag))};
}

}  // namespace meshwork::plan
