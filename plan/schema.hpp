#pragma once
// The plan file's schema: every field of every section, described once. Visitors (reader,
// writer, range checks, the README's field reference) walk these functions. A visitor V has:
//   v.field(member, FieldInfo)         a scalar, enum, string, list of enums or interval
//   v.section(member, FieldInfo)       a nested section (itself described here)
//   v.list(member, FieldInfo)          a list of sections
//   v.preset(section, FieldInfo)       `preset: NAME` fills the section from a preset
//   v.hf_config(section, FieldInfo)    `hf_config: PATH` fills the model from a HF config.json
// Bounds keep every product of sizes far from integer overflow (a 2^22-GPU mesh at most).

#include "plan/field_info.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

inline constexpr double kMaxParallel = 1 << 20;
inline constexpr double kMaxGpus = 1 << 22;
inline constexpr double kMaxDim = 1 << 24;  // hidden, FFN, sequence, vocabulary sizes

template <class V>
void describe(V& v, MoeConfig& s) {
  v.field(s.num_moe_experts, {.key = "num_moe_experts", .doc = "Routed experts per MoE layer; 0 for a dense model.", .aliases = "num_experts", .min = 0, .max = kMaxParallel});
  v.field(s.moe_router_topk, {.key = "moe_router_topk", .doc = "Experts each token is routed to.", .aliases = "topk", .min = 1, .max = 1024});
  v.field(s.moe_ffn_hidden_size, {.key = "moe_ffn_hidden_size", .doc = "FFN width of one routed expert.", .min = 1, .max = kMaxDim, .default_text = "= ffn_hidden_size"});
  v.field(s.moe_shared_expert_intermediate_size, {.key = "moe_shared_expert_intermediate_size", .doc = "Total FFN width of the shared experts (DeepSeek, Qwen-MoE); 0 for none.", .min = 0, .max = kMaxDim});
  v.field(s.first_k_dense_layers, {.key = "first_k_dense_layers", .doc = "Leading layers with a dense FFN instead of experts (DeepSeek's first_k_dense_replace).", .aliases = "first_k_dense_replace", .min = 0, .max = 1e5});
  v.field(s.capacity_factor, {.key = "capacity_factor", .doc = "Expert capacity over the balanced load; tokens beyond it are dropped. 0 for dropless.", .aliases = "moe_expert_capacity_factor", .min = 0, .max = 1e3});
  v.field(s.routing_imbalance, {.key = "routing_imbalance", .doc = "Load of the hottest expert over the mean load (1 = perfectly balanced); scales EP all-to-all and expert compute.", .min = 1, .max = 1e3});
}

template <class V>
void describe(V& v, MlaConfig& s) {
  v.field(s.q_lora_rank, {.key = "q_lora_rank", .doc = "Rank of the query down-projection; 0 projects queries directly.", .min = 0, .max = kMaxDim});
  v.field(s.kv_lora_rank, {.key = "kv_lora_rank", .doc = "Rank of the key/value latent; 0 turns MLA off.", .min = 0, .max = kMaxDim});
  v.field(s.qk_head_dim, {.key = "qk_head_dim", .doc = "Query/key head width without the rotary part.", .min = 1, .max = kMaxDim});
  v.field(s.qk_pos_emb_head_dim, {.key = "qk_pos_emb_head_dim", .doc = "Rotary part of the query/key head width.", .min = 0, .max = kMaxDim});
  v.field(s.v_head_dim, {.key = "v_head_dim", .doc = "Value head width.", .min = 1, .max = kMaxDim});
}

template <class V>
void describe(V& v, ModelConfig& s) {
  v.preset(s, {.key = "preset", .doc = "Start from a model preset (`meshwork presets`); fields given here override it. `model: NAME` is short for `model: {preset: NAME}`."});
  v.hf_config(s, {.key = "hf_config", .doc = "Start from a Hugging Face config.json (path relative to the plan file); fields given here override it."});
  v.field(s.name, {.key = "name", .doc = "Name of the model, informative; set by a preset or HF import."});
  v.field(s.num_layers, {.key = "num_layers", .doc = "Transformer layers.", .aliases = "layers", .min = 1, .max = 1e5, .required = true});
  v.field(s.hidden_size, {.key = "hidden_size", .doc = "Model width h.", .aliases = "hidden", .min = 1, .max = kMaxDim, .required = true});
  v.field(s.num_attention_heads, {.key = "num_attention_heads", .doc = "Query heads a.", .aliases = "heads", .min = 1, .max = 1e5, .required = true});
  v.field(s.num_query_groups, {.key = "num_query_groups", .doc = "Key/value heads (GQA); equal to the heads for multi-head attention.", .aliases = "kv_heads,num_key_value_heads", .min = 1, .max = 1e5, .default_text = "= num_attention_heads"});
  v.field(s.kv_channels, {.key = "kv_channels", .doc = "Width of one attention head.", .aliases = "head_dim", .min = 1, .max = kMaxDim, .default_text = "= hidden_size / num_attention_heads"});
  v.field(s.ffn_hidden_size, {.key = "ffn_hidden_size", .doc = "Width of the dense MLP (per branch for SwiGLU).", .aliases = "ffn", .min = 1, .max = kMaxDim, .default_text = "= 4 * hidden_size (gelu); 8/3 * hidden_size rounded down to 64 (swiglu)"});
  v.field(s.activation, {.key = "activation", .doc = "MLP activation: gelu (two GEMMs) or swiglu (three)."});
  v.field(s.normalization, {.key = "normalization", .doc = "layernorm or rmsnorm."});
  v.field(s.position_embedding_type, {.key = "position_embedding_type", .doc = "learned_absolute (a learned s x h table, GPT) or rope (no parameters)."});
  v.field(s.seq_length, {.key = "seq_length", .doc = "Tokens per sequence s.", .aliases = "seq_len", .min = 1, .max = kMaxDim, .required = true});
  v.field(s.vocab_size, {.key = "vocab_size", .doc = "Vocabulary V (padded as trained).", .aliases = "vocab", .min = 1, .max = kMaxDim, .required = true});
  v.field(s.untie_embeddings_and_output_weights, {.key = "untie_embeddings_and_output_weights", .doc = "Separate input embedding and LM head (Llama) rather than shared (GPT-3)."});
  v.field(s.add_bias_linear, {.key = "add_bias_linear", .doc = "Biases in the linear layers (GPT-3 yes, Llama no)."});
  v.field(s.hidden_dropout, {.key = "hidden_dropout", .doc = "Dropout probability after attention, MLP and embedding (Megatron's --hidden-dropout, default 0.1); 0 stores no masks. Hugging Face imports take it from the config (0 when absent, as Llama and most decoders since).", .min = 0, .max = 1});
  v.field(s.attention_dropout, {.key = "attention_dropout", .doc = "Dropout probability on the attention scores (Megatron's --attention-dropout, default 0.1); only unfused attention stores its mask.", .min = 0, .max = 1});
  v.section(s.mla, {.key = "mla", .doc = "Multi-head latent attention (DeepSeek); absent for standard attention."});
  v.section(s.moe, {.key = "moe", .doc = "Mixture of experts; absent for a dense model."});
}

template <class V>
void describe(V& v, OptimizerStates& s) {
  v.field(s.exp_avg, {.key = "exp_avg", .doc = "Adam's first moment: fp32 (4 bytes a parameter the GPU owns), bf16 or fp16 (2), fp8 (1) (Megatron's --exp-avg-dtype with --use-precision-aware-optimizer; Apex's DistributedFusedAdam dtype).", .aliases = "exp_avg_dtype"});
  v.field(s.exp_avg_sq, {.key = "exp_avg_sq", .doc = "Adam's second moment, as exp_avg (Megatron's --exp-avg-sq-dtype).", .aliases = "exp_avg_sq_dtype"});
  v.field(s.master_weights, {.key = "master_weights", .doc = "In 16-bit training, the optimizer's copy of the weights: fp32 (4 bytes a parameter the GPU owns), fp16 (2, Megatron's --main-params-dtype fp16), remainders (2: the low 16 bits of the fp32 value beside the bf16 weight, Megatron-core's store_param_remainders, its default with --use-precision-aware-optimizer) or none (the 16-bit weights updated in place: Apex's DistributedFusedAdam with its state in bf16, NeMo 1.x's optim.dtype bf16). fp32 training keeps no copy: fp32.", .aliases = "main_params_dtype"});
}

template <class V>
void describe(V& v, TrainingConfig& s) {
  v.field(s.global_batch_size, {.key = "global_batch_size", .doc = "Sequences per optimizer step, over all data-parallel ranks.", .aliases = "gbs", .min = 1, .max = 1 << 30, .required = true});
  v.field(s.micro_batch_size, {.key = "micro_batch_size", .doc = "Sequences per micro-batch on one rank.", .aliases = "mbs", .min = 1, .max = 1 << 20});
  v.field(s.precision, {.key = "precision", .doc = "Compute precision of the GEMMs; selects the GPU peak that MFU is measured against."});
  v.field(s.recompute, {.key = "recompute", .doc = "Activation recomputation: none, selective (attention core, Korthikanti et al. 2022) or full (every layer).", .aliases = "recompute_granularity"});
  v.field(s.recompute_method, {.key = "recompute_method", .doc = "With recompute: full, which layers (Megatron's --recompute-method): uniform recomputes every layer, checkpointing the input of each group of recompute_num_layers; block recomputes the first recompute_num_layers layers of each model chunk and stores the others' activations."});
  v.field(s.recompute_num_layers, {.key = "recompute_num_layers", .doc = "With recompute: full: layers per checkpointed group (uniform) or recomputed layers per model chunk (block; 0 recomputes none).", .min = 0, .max = 1e5});
  v.field(s.flash_attention, {.key = "flash_attention", .doc = "Fused attention that never stores the s x s score matrix."});
  v.field(s.attention_kernel, {.key = "attention_kernel", .doc = "With flash_attention: the fused kernel, priced from its published microbenchmarks (docs/reference/attention): flash2 (FlashAttention-2), flash3 (FlashAttention-3, Hopper only) or cudnn (cuDNN's fused attention, Transformer Engine's FusedAttention); auto, the one Transformer Engine picks on the GPU: cudnn on Hopper and Blackwell, flash2 on Ampere. Megatron's --attention-backend flash is flash2 (flash3 where Transformer Engine finds FlashAttention-3 installed), fused is cudnn."});
  v.field(s.fp8_attention, {.key = "fp8_attention", .doc = "With precision fp8: the attention's matmuls in FP8 too, at the FP8 peak (Transformer Engine's fp8_dpa). Off, as Transformer Engine's recipes default: the attention runs in BF16, at the BF16 peak, and only the layers' linear GEMMs in FP8 (the LM head and the MoE router stay in BF16, as Megatron-core runs them).", .aliases = "fp8_dpa,fp8_dot_product_attention"});
  v.field(s.clip_grad, {.key = "clip_grad", .doc = "Gradient clipping by the global norm (Megatron's --clip-grad): each step reads the gradients for their norm and scales them by min(1, clip_grad / norm), 12 bytes per parameter a GPU owns (Megatron-core's clip_grads.py with Transformer Engine). 0: no clipping, and neither pass.", .min = 0, .max = 1e6});
  v.field(s.grad_reduce_in_bf16, {.key = "grad_reduce_in_bf16", .doc = "Keep and reduce the gradients in bf16 rather than fp32 (Megatron's --grad-reduce-in-bf16; NeMo 1.x's distributed_fused_adam with grad_sync_dtype: bf16): 2 bytes a parameter in the gradient buffer and in the data-parallel reduction instead of 4; with the default optimizer_states each step copies the GPU's shard into fp32 main gradients for the optimizer (Megatron-core's), otherwise the optimizer reads them as they are. bf16 and fp8 training only."});
  v.section(s.optimizer_states, {.key = "optimizer_states", .doc = "What Adam keeps per parameter a GPU owns besides the weights and gradients; with any of them not fp32, the optimizer is Transformer Engine's FusedAdam (Megatron's precision-aware optimizer) or Apex's, which reads the gradients as they are and writes the 16-bit weights itself."});
  v.field(s.data_loading, {.key = "data_loading", .doc = "How each micro-batch reaches the GPUs of the first and last pipeline stages, once per micro-batch: tp_broadcast, tensor-parallel rank 0 copies it from the host and broadcasts it to its group, a broadcast per tensor (Megatron-LM's get_batch_on_this_tp_rank); every_rank, each GPU copies what it needs from the host (NeMo 1.x's MegatronGPTModel). The copy runs at the GPU's host link (PCIe) rate."});
  v.field(s.attention_mask_in_batch, {.key = "attention_mask_in_batch", .doc = "Whether each micro-batch carries the causal attention mask, micro_batch_size x seq_length^2 bytes (Megatron-LM's dataloader builds it unless --no-create-attention-mask-in-dataloader; NeMo 1.x leaves it out, get_attention_mask_from_fusion). The fused attention kernels do not read it; it only costs its copy and broadcast.", .aliases = "create_attention_mask_in_dataloader"});
  v.field(s.attention_flops, {.key = "attention_flops", .doc = "How MFU counts causal attention's FLOPs: full, the s x s matrix as the papers do (Korthikanti et al. 2022 eq. 7), or causal, half of it as Megatron-LM's throughput does; every Report says which (mfu_attention). The step's time does not change."});
  v.field(s.tokens, {.key = "tokens", .doc = "Tokens to train on, for the time to train; 0 when not given.", .aliases = "train_tokens", .unit = Unit::count, .min = 0, .max = 1e18});
}

template <class V>
void describe(V& v, OverlapConfig& s) {
  v.field(s.grad_reduce, {.key = "grad_reduce", .doc = "Data-parallel gradient reduction in buckets under the backward pass.", .aliases = "overlap_grad_reduce"});
  v.field(s.param_gather, {.key = "param_gather", .doc = "Parameter all-gather (distributed optimizer, ZeRO-3) under the forward pass.", .aliases = "overlap_param_gather"});
  v.field(s.tp_comm, {.key = "tp_comm", .doc = "Tensor-parallel communication overlapped with the GEMMs (Megatron's tp_comm_overlap).", .aliases = "tp_comm_overlap"});
  v.field(s.p2p, {.key = "p2p", .doc = "Receives posted ahead of the compute (Megatron's --overlap-p2p-communication): a transfer leaves as soon as it is sent; otherwise when the receiver reaches its item.", .aliases = "overlap_p2p_comm"});
}

template <class V>
void describe(V& v, ParallelismConfig& s) {
  v.field(s.tensor_model_parallel_size, {.key = "tensor_model_parallel_size", .doc = "Tensor parallelism TP: each layer's GEMMs split over TP GPUs.", .aliases = "tp", .min = 1, .max = kMaxParallel});
  v.field(s.pipeline_model_parallel_size, {.key = "pipeline_model_parallel_size", .doc = "Pipeline stages PP.", .aliases = "pp", .min = 1, .max = kMaxParallel});
  v.field(s.data_parallel_size, {.key = "data_parallel_size", .doc = "Data-parallel replicas DP (Megatron's meaning: expert parallelism divides it).", .aliases = "dp", .min = 1, .max = kMaxGpus, .default_text = "= num_gpus / (TP * CP * PP)"});
  v.field(s.context_parallel_size, {.key = "context_parallel_size", .doc = "Context parallelism CP: the sequence split over CP GPUs.", .aliases = "cp", .min = 1, .max = kMaxParallel});
  v.field(s.expert_model_parallel_size, {.key = "expert_model_parallel_size", .doc = "Expert parallelism EP: experts spread over EP of the DP ranks.", .aliases = "ep", .min = 1, .max = kMaxParallel});
  v.field(s.virtual_pipeline_model_parallel_size, {.key = "virtual_pipeline_model_parallel_size", .doc = "Model chunks per pipeline stage for the interleaved schedule.", .aliases = "vpp", .min = 1, .max = 1024});
  v.field(s.decoder_first_pipeline_num_layers, {.key = "decoder_first_pipeline_num_layers", .doc = "Layers on the first stage when stages are uneven; 0: layers split evenly.", .min = 0, .max = 1e5});
  v.field(s.decoder_last_pipeline_num_layers, {.key = "decoder_last_pipeline_num_layers", .doc = "Layers on the last stage when stages are uneven; 0: layers split evenly.", .min = 0, .max = 1e5});
  v.field(s.account_for_embedding_in_pipeline_split, {.key = "account_for_embedding_in_pipeline_split", .doc = "The embedding counts as one layer when layers are split over stages and chunks (Megatron's --account-for-embedding-in-pipeline-split): the first chunk holds one layer fewer."});
  v.field(s.account_for_loss_in_pipeline_split, {.key = "account_for_loss_in_pipeline_split", .doc = "The LM head and loss count as one layer when layers are split (Megatron's --account-for-loss-in-pipeline-split): the last chunk holds one layer fewer."});
  v.field(s.pipeline_model_parallel_layout, {.key = "pipeline_model_parallel_layout", .doc = "Layers of every virtual stage in Megatron's --pipeline-model-parallel-layout syntax: virtual stages (pp x vpp, in the order c*pp + s) split by |, E the embedding, t a decoder layer, L the loss, (...)*n and x*n repeat, commas ignored; e.g. \"Et|(tt|)*6,t|L\". Empty: none."});
  v.field(s.sequence_parallel, {.key = "sequence_parallel", .doc = "Sequence parallelism: norms and dropout split over the TP group (Korthikanti et al. 2022).", .aliases = "sp"});
  v.field(s.context_parallel_load_balance, {.key = "context_parallel_load_balance", .doc = "Causal load balancing for CP: the sequence cut in 2*CP chunks (so it must divide by 2*CP)."});
  v.field(s.context_parallel_comm_type, {.key = "context_parallel_comm_type", .doc = "How CP exchanges K and V (Megatron-core's --cp-comm-type): p2p, the ring of Transformer Engine's ring attention, each step's exchange under the previous block's attention (only what the attention does not cover is exposed); all_gather, K and V gathered before the attention, which waits for them.", .aliases = "cp_comm_type"});
  v.field(s.zero_stage, {.key = "zero_stage", .doc = "ZeRO stage: 0 replicated, 1 optimizer states sharded (Megatron's distributed optimizer; a ZeRO-2 that keeps its gradients whole until the last micro-batch has the same memory and traffic), 2 + gradients sharded, reduce-scattered every micro-batch, 3 + parameters.", .aliases = "zero", .min = 0, .max = 3});
  v.field(s.num_distributed_optimizer_instances,
          {.key = "num_distributed_optimizer_instances",
           .doc = "Hybrid sharding (Megatron-core's --num-distributed-optimizer-instances): ZeRO shards within each of this many blocks of consecutive DP x CP ranks, and the blocks all-reduce their reduced gradient shards. 1: sharded over all of DP x CP.",
           .aliases = "dist_opt_instances", .min = 1});
  v.field(s.pipeline_schedule, {.key = "pipeline_schedule", .doc = "Pipeline schedule.", .aliases = "schedule"});
  v.field(s.order, {.key = "order", .doc = "Mesh dimensions from fastest- to slowest-varying rank (Megatron-core's order); all five of tp, cp, ep, dp, pp."});
  v.section(s.overlap, {.key = "overlap", .doc = "What communication runs under compute."});
  v.field(s.gradient_compression, {.key = "gradient_compression", .doc = "Compression of data-parallel gradients: onebit (sign with error feedback, Tang et al. 2021 1-bit Adam) or topk."});
  v.field(s.topk_ratio, {.key = "topk_ratio", .doc = "With topk compression: the fraction of gradient values sent (with their indices).", .min = 0, .max = 1, .min_exclusive = true});
}

template <class V>
void describe(V& v, PeakTflops& s) {
  v.field(s.bf16, {.key = "bf16", .doc = "Dense BF16 tensor peak, TFLOP/s.", .min = 0, .max = 1e6});
  v.field(s.fp16, {.key = "fp16", .doc = "Dense FP16 tensor peak, TFLOP/s.", .min = 0, .max = 1e6});
  v.field(s.fp8, {.key = "fp8", .doc = "Dense FP8 tensor peak, TFLOP/s; 0 when the GPU has none.", .min = 0, .max = 1e6});
  v.field(s.tf32, {.key = "tf32", .doc = "Dense TF32 tensor peak, TFLOP/s.", .min = 0, .max = 1e6});
  v.field(s.fp32, {.key = "fp32", .doc = "FP32 (non-tensor) peak, TFLOP/s.", .min = 0, .max = 1e6});
}

template <class V>
void describe(V& v, Calibration& s) {
  v.field(s.gemm_max_efficiency, {.key = "gemm_max_efficiency", .doc = "Largest GEMMs' achieved over peak FLOP/s.", .min = 0, .max = 1});
  v.field(s.gemm_half_macs, {.key = "gemm_half_macs", .doc = "GEMM size (multiply-adds) at half the largest GEMMs' efficiency.", .min = 0, .max = 1e18});
  v.field(s.memory_efficiency, {.key = "memory_efficiency", .doc = "Streaming kernels' achieved over datasheet memory bandwidth.", .min = 0, .max = 100});
  v.field(s.elementwise_efficiency, {.key = "elementwise_efficiency", .doc = "Elementwise kernels (activation, bias, residual): achieved bytes/s over memory bandwidth; 0: memory_efficiency.", .min = 0, .max = 100});
  v.field(s.norm_efficiency, {.key = "norm_efficiency", .doc = "Normalisation kernels: achieved bytes/s over memory bandwidth; 0: memory_efficiency.", .min = 0, .max = 100});
  v.field(s.attention_max_efficiency, {.key = "attention_max_efficiency", .doc = "Attention as the executor computes it (unfused): the largest ops' achieved over peak FLOP/s; 0: a GEMM of its size plus the score passes.", .min = 0, .max = 1});
  v.field(s.attention_half_macs, {.key = "attention_half_macs", .doc = "Attention op size (multiply-adds) at half attention_max_efficiency.", .min = 0, .max = 1e18});
  v.field(s.loss_efficiency, {.key = "loss_efficiency", .doc = "Softmax cross-entropy: achieved bytes/s over memory bandwidth; 0: memory_efficiency.", .min = 0, .max = 100});
  v.field(s.embedding_efficiency, {.key = "embedding_efficiency", .doc = "Embedding lookup and its gradient: achieved bytes/s over memory bandwidth; 0: memory_efficiency.", .min = 0, .max = 100});
  v.field(s.optimizer_efficiency, {.key = "optimizer_efficiency", .doc = "Optimizer step (Adam): achieved bytes/s over memory bandwidth; 0: memory_efficiency.", .min = 0, .max = 100});
  v.field(s.kernel_overhead_us, {.key = "kernel_overhead_us", .doc = "Fixed cost of one kernel or CPU op.", .unit = Unit::microseconds, .min = 0, .max = 1e6});
  v.field(s.intra_node_efficiency, {.key = "intra_node_efficiency", .doc = "Collectives' bus bandwidth inside a node over the node fabric's bandwidth.", .min = 0, .max = 2});
  v.field(s.nic_efficiency, {.key = "nic_efficiency", .doc = "Collectives' bus bandwidth between nodes over the NICs' line rate.", .min = 0, .max = 2});
  v.field(s.collective_sm_fraction, {.key = "collective_sm_fraction", .doc = "Fraction of the SMs an NCCL collective holds while it runs (channels / SMs; 0: copy-engine collectives), which compute beside it loses; at most 0.59 (NCCL's 64 channels on A100's 108 SMs); negative: the GPU generation's. TP's reduce-scatter split with its GEMM (overlap.tp_comm) keeps Transformer Engine's 16 SMs.", .min = -1, .max = 64.0 / 108});
}

template <class V>
void describe(V& v, GpuSpec& s) {
  v.preset(s, {.key = "preset", .doc = "Start from a GPU preset; fields given here override it. `gpu: NAME` is short for `gpu: {preset: NAME}`."});
  v.field(s.name, {.key = "name", .doc = "Name of the GPU, informative."});
  v.section(s.peak_tflops, {.key = "peak_tflops", .doc = "Dense peaks per precision."});
  v.field(s.hbm_gib, {.key = "hbm_gib", .doc = "Device memory.", .unit = Unit::gib, .min = 0, .max = 1e6, .min_exclusive = true, .required = true});
  v.field(s.hbm_gbytes_per_s, {.key = "hbm_gbytes_per_s", .doc = "Device memory bandwidth.", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e6, .min_exclusive = true, .required = true});
  v.field(s.nvlink_gbytes_per_s, {.key = "nvlink_gbytes_per_s", .doc = "NVLink bandwidth per GPU, one direction; 0 without NVLink.", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e6});
  v.field(s.tdp_watts, {.key = "tdp_watts", .doc = "Board power at full load.", .unit = Unit::watts, .min = 0, .max = 1e5});
  v.section(s.calibration, {.key = "calibration", .doc = "Efficiencies measured by `meshwork calibrate` on this machine; 0: the GPU generation's."});
}

template <class V>
void describe(V& v, IntraNodeConfig& s) {
  v.field(s.kind, {.key = "kind", .doc = "How GPUs in a node connect."});
  v.field(s.bandwidth_gbytes_per_s, {.key = "bandwidth_gbytes_per_s", .doc = "Per-GPU bandwidth into the node fabric, one direction.", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e6, .min_exclusive = true, .default_text = "= gpu.nvlink_gbytes_per_s; 31.5 for pcie; gpu.hbm_gbytes_per_s for shared_memory"});
  v.field(s.latency_us, {.key = "latency_us", .doc = "Latency of one intra-node hop (point-to-point transfers, all-to-all and context-parallel exchange steps; on a CPU host every collective step: other GPU collectives take NCCL's tuner's latencies).", .unit = Unit::microseconds, .min = 0, .max = 1e6});
}

template <class V>
void describe(V& v, TopologyConfig& s) {
  v.field(s.kind, {.key = "kind", .doc = "Shape of the scale-out network."});
  v.field(s.tiers, {.key = "tiers", .doc = "Switch tiers of a fat tree (2: leaf/spine, 3: + core).", .min = 1, .max = 3});
  v.field(s.switch_radix, {.key = "switch_radix", .doc = "Ports per switch.", .aliases = "radix", .min = 2, .max = 4096});
  v.field(s.oversubscription, {.key = "oversubscription", .doc = "Down-links over up-links at the leaf tier (1 = non-blocking).", .min = 1, .max = 1024});
  v.field(s.link_latency_us, {.key = "link_latency_us", .doc = "Latency of one switch hop.", .unit = Unit::microseconds, .min = 0, .max = 1e6});
  v.field(s.planes, {.key = "planes", .doc = "multi_plane: parallel fat trees, each NIC with one port (of its bandwidth / planes) on each (Alibaba HPN: 2).", .min = 1, .max = 16});
  v.field(s.pod_gpus, {.key = "pod_gpus", .doc = "3-tier fat tree: GPUs per pod, non-blocking inside (Llama 3: 3072); 0 for the k-ary tree's pods of k/2 leaves.", .min = 0, .max = kMaxGpus});
  v.field(s.routing, {.key = "routing", .doc = "How a flow picks among equal-cost paths: d_mod_k (by destination, InfiniBand's fat-tree routing; a shift pattern does not collide on a full tree, but a step's rings and boundaries can, and both tiers count it), ecmp_hash (per-flow hash, Ethernet ECMP; flows can collide) or adaptive (switches spread each flow's packets onto the least-loaded path: InfiniBand AR, Spectrum-X)."});
  v.field(s.flows_per_peer, {.key = "flows_per_peer", .doc = "Flows between two GPUs (NCCL's channels per NIC x NCCL_IB_QPS_PER_CONNECTION), each hashed on its own path by ecmp_hash and placed on its own by adaptive (Llama 3: 16). d_mod_k routes them all alike.", .min = 1, .max = 256});
  v.field(s.reroute_s, {.key = "reroute_s", .doc = "Seconds from a link or switch failing until its traffic moves to other paths; negative: the routing's (adaptive 0, ecmp_hash 1, d_mod_k 10: OpenSM's sweep).", .unit = Unit::seconds, .min = -1, .max = 1e6, .default_text = "by routing: adaptive 0, ecmp_hash 1, d_mod_k 10"});
  v.field(s.pod_oversubscription, {.key = "pod_oversubscription", .doc = "Pods: a pod's down-links over its up-links to the core tier (Llama 3: 7).", .min = 1, .max = 1024});
}

template <class V>
void describe(V& v, ClusterConfig& s) {
  v.section(s.gpu, {.key = "gpu", .doc = "The accelerator: a preset name or a spec.", .required = true});
  v.field(s.num_gpus, {.key = "num_gpus", .doc = "GPUs in the job.", .aliases = "gpus", .min = 1, .max = kMaxGpus, .default_text = "= TP * CP * PP * DP when DP is given"});
  v.field(s.gpus_per_node, {.key = "gpus_per_node", .doc = "GPUs per node (one NVLink domain).", .min = 1, .max = 1 << 16});
  v.section(s.intra_node, {.key = "intra_node", .doc = "The fabric inside a node."});
  v.field(s.nics_per_node, {.key = "nics_per_node", .doc = "Scale-out NICs per node.", .min = 0, .max = 1 << 16});
  v.field(s.nic_bandwidth_gbps, {.key = "nic_bandwidth_gbps", .doc = "Bandwidth of one NIC, one direction.", .aliases = "nic_gbps", .unit = Unit::gbps, .min = 0, .max = 1e7, .min_exclusive = true});
  v.section(s.topology, {.key = "topology", .doc = "The network between nodes."});
  v.field(s.memory_headroom_fraction, {.key = "memory_headroom_fraction", .doc = "Share of each GPU's memory a plan should leave free for what the memory model does not count (the caching allocator's fragmentation, transient workspaces); a plan that fits with less gets a warning. Default 0.05: an assumption, see models/memory.hpp.", .min = 0, .max = 0.9});
  v.field(s.collective_algorithm, {.key = "collective_algorithm", .doc = "How collectives run, as NCCL_ALGO: ring; tree (double binary tree between nodes, all-reduce only); nvls (NVLink SHARP, a group inside an NVSwitch node, Hopper and later); hierarchical (in-node reduce-scatter, all-reduce between nodes, in-node all-gather); auto: the fastest by the cost model, as NCCL's tuner picks. Where the one asked for does not apply, the ring runs.", .aliases = "nccl_algo"});
}

template <class V>
void describe(V& v, MtbfHours& s) {
  v.field(s.gpu, {.key = "gpu", .doc = "Mean time between failures of one GPU; 0: never fails.", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.hbm, {.key = "hbm", .doc = "Of one GPU's HBM.", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.nic, {.key = "nic", .doc = "Of one NIC.", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.link, {.key = "link", .doc = "Of one network link or cable.", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.network_switch, {.key = "switch", .doc = "Of one network switch.", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.node, {.key = "node", .doc = "Of one host (CPU, memory, power, chassis).", .aliases = "host", .unit = Unit::hours, .min = 0, .max = 1e12});
  v.field(s.software, {.key = "software", .doc = "Between software faults of one node.", .unit = Unit::hours, .min = 0, .max = 1e12});
}

template <class V>
void describe(V& v, NodeDayRates& s) {
  v.field(s.gpu, {.key = "gpu", .doc = "GPU failures per 1,000 node-days.", .min = 0, .max = 1e9});
  v.field(s.hbm, {.key = "hbm", .doc = "HBM failures per 1,000 node-days.", .min = 0, .max = 1e9});
  v.field(s.nic, {.key = "nic", .doc = "NIC failures per 1,000 node-days.", .min = 0, .max = 1e9});
  v.field(s.link, {.key = "link", .doc = "Link or cable failures per 1,000 node-days.", .min = 0, .max = 1e9});
  v.field(s.network_switch, {.key = "switch", .doc = "Switch failures per 1,000 node-days.", .min = 0, .max = 1e9});
  v.field(s.node, {.key = "node", .doc = "Host failures per 1,000 node-days.", .aliases = "host", .min = 0, .max = 1e9});
  v.field(s.software, {.key = "software", .doc = "Software faults per 1,000 node-days.", .min = 0, .max = 1e9});
}

template <class V>
void describe(V& v, FailureEvent& s) {
  v.field(s.at_s, {.key = "at", .doc = "Time of the event from the start of the run.", .unit = Unit::seconds, .min = 0, .max = 1e12, .required = false});
  v.field(s.kind, {.key = "kind", .doc = "What happens."});
  v.field(s.target, {.key = "target", .doc = "The GPU or node index, or the link or switch name."});
}

template <class V>
void describe(V& v, Straggler& s) {
  v.field(s.rank, {.key = "rank", .doc = "The slow rank.", .min = 0, .max = kMaxGpus});
  v.field(s.slowdown, {.key = "slowdown", .doc = "Compute time multiplier (1.10 = 10% slower).", .min = 0, .max = 1e6, .min_exclusive = true});
}

template <class V>
void describe(V& v, DegradedLink& s) {
  v.field(s.target, {.key = "target", .doc = "The link's name (`meshwork topology` lists them).", .required = true});
  v.field(s.bandwidth_factor, {.key = "bandwidth_factor", .doc = "Remaining fraction of the link's bandwidth.", .min = 0, .max = 1, .min_exclusive = true});
}

template <class V>
void describe(V& v, FailureConfig& s) {
  v.field(s.preset, {.key = "preset", .doc = "Failure rates of a published fleet: llama3 (Llama 3 405B, 54 days on 16K H100; fields of mtbf_hours given override it)."});
  v.section(s.mtbf_hours, {.key = "mtbf_hours", .doc = "Failure rates per component class, as MTBF of one component."});
  v.section(s.per_1000_node_days, {.key = "per_1000_node_days", .doc = "Failure rates per component class, as interruptions per 1,000 node-days (added to mtbf_hours'); the fields' units are counts."});
  v.field(s.distribution, {.key = "distribution", .doc = "Time between a class's interruptions: exponential, or weibull with weibull_shape."});
  v.field(s.weibull_shape, {.key = "weibull_shape", .doc = "Shape of the Weibull distribution (below 1: failures cluster).", .min = 0.05, .max = 20});
  v.list(s.events, {.key = "events", .doc = "Scheduled events."});
  v.list(s.stragglers, {.key = "stragglers", .doc = "Ranks that compute slower."});
  v.list(s.degraded_links, {.key = "degraded_links", .doc = "Links running below their bandwidth."});
  v.field(s.sdc_per_gpu_hour, {.key = "sdc_per_gpu_hour", .doc = "Silent data corruptions per GPU-hour.", .min = 0, .max = 1});
  v.field(s.sdc_check_s, {.key = "sdc_check_s", .doc = "Time between checks that catch a silent corruption (checksums, loss spikes).", .unit = Unit::seconds, .min = 0, .max = 1e9, .min_exclusive = true});
  v.field(s.repair_s, {.key = "repair_s", .doc = "Time until a failed node is back in the pool (a hot spare again).", .unit = Unit::seconds, .min = 0, .max = 1e9});
  v.field(s.requeue_s, {.key = "requeue_s", .doc = "Time to get replacement nodes from the scheduler when no hot spare is left (on top of restart_s).", .unit = Unit::seconds, .min = 0, .max = 1e9});
  v.field(s.straggler_per_gpu_day, {.key = "straggler_per_gpu_day", .doc = "Arrivals of a slow GPU (thermal, clocks) per GPU-day over the run.", .min = 0, .max = 1e3});
  v.field(s.straggler_slowdown, {.key = "straggler_slowdown", .doc = "Compute time multiplier of such a GPU.", .min = 1, .max = 1e3});
  v.field(s.straggler_s, {.key = "straggler_s", .doc = "How long a GPU stays slow.", .unit = Unit::seconds, .min = 0, .max = 1e9, .min_exclusive = true});
  v.field(s.degradation_per_link_day, {.key = "degradation_per_link_day", .doc = "Arrivals of a degraded link per link-day over the run.", .min = 0, .max = 1e3});
  v.field(s.degraded_bandwidth_factor, {.key = "degraded_bandwidth_factor", .doc = "Remaining fraction of such a link's bandwidth.", .min = 0, .max = 1, .min_exclusive = true});
  v.field(s.degradation_s, {.key = "degradation_s", .doc = "How long a link stays degraded.", .unit = Unit::seconds, .min = 0, .max = 1e9, .min_exclusive = true});
  v.field(s.detection_s, {.key = "detection_s", .doc = "Time from a failure to its detection.", .unit = Unit::seconds, .min = 0, .max = 1e9});
  v.field(s.restart_s, {.key = "restart_s", .doc = "Time to requeue and restart the job, before the checkpoint load.", .unit = Unit::seconds, .min = 0, .max = 1e9});
}

template <class V>
void describe(V& v, CheckpointConfig& s) {
  v.field(s.interval, {.key = "interval", .doc = "Time between checkpoints, or auto (Young 1974 / Daly 2006 optimum).", .unit = Unit::seconds, .min = 0, .max = 1e12, .min_exclusive = true});
  v.field(s.write_gbytes_per_s, {.key = "write_gbytes_per_s", .doc = "Aggregate write bandwidth to persistent storage.", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e9, .min_exclusive = true});
  v.field(s.read_gbytes_per_s, {.key = "read_gbytes_per_s", .doc = "Aggregate read bandwidth from persistent storage.", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e9, .min_exclusive = true});
  v.field(s.mode, {.key = "mode", .doc = "sync: the step waits for the write; async: only for the device-to-host snapshot."});
  v.field(s.tiers, {.key = "tiers", .doc = "Where checkpoints are kept, fastest first."});
  v.field(s.snapshot_gbytes_per_s, {.key = "snapshot_gbytes_per_s", .doc = "Device-to-host copy rate per GPU (the stall of an async or in-memory checkpoint).", .unit = Unit::gbytes_per_s, .min = 0, .max = 1e6, .min_exclusive = true});
  v.field(s.storage_link_gbps_per_node, {.key = "storage_link_gbps_per_node", .doc = "Each node's link to the storage, which a persistent write crosses; 0: the node's scale-out NICs.", .unit = Unit::gbps, .min = 0, .max = 1e7});
  v.field(s.spares, {.key = "spares", .doc = "Hot-spare nodes that replace a failed node.", .min = 0, .max = 1 << 20});
  v.field(s.on_failure, {.key = "on_failure", .doc = "After a failure without a spare: restart on the same mesh, or shrink data parallelism."});
}

template <class V>
void describe(V& v, RunConfig& s) {
  v.field(s.horizon_s, {.key = "horizon", .doc = "Wall-clock length of the run to model.", .unit = Unit::seconds, .min = 0, .max = 1e12, .min_exclusive = true});
  v.field(s.seed, {.key = "seed", .doc = "Random seed; results are deterministic for a seed.", .min = 0, .max = 9.0e18});
  v.field(s.trials, {.key = "trials", .doc = "Monte Carlo trials.", .min = 1, .max = 1e7});
}

template <class V>
void describe(V& v, Plan& s) {
  v.field(s.schema_version, {.key = "schema_version", .doc = "Version of this schema; 1."});
  v.field(s.name, {.key = "name", .doc = "Name of the plan."});
  v.field(s.description, {.key = "description", .doc = "Free text."});
  v.section(s.model, {.key = "model", .doc = "The model.", .required = true});
  v.section(s.training, {.key = "training", .doc = "Batch, precision, recomputation.", .required = true});
  v.section(s.parallelism, {.key = "parallelism", .doc = "The parallel mesh and schedule."});
  v.section(s.cluster, {.key = "cluster", .doc = "GPUs, nodes and network.", .required = true});
  v.section(s.failures, {.key = "failures", .doc = "Failures, stragglers and degraded links."});
  v.section(s.checkpoint, {.key = "checkpoint", .doc = "Checkpoint policy."});
  v.section(s.run, {.key = "run", .doc = "The run as a whole."});
}

}  // namespace meshwork::plan
