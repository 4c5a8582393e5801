#include "plan/megatron_import.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "plan/shell_script.hpp"

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
      {"--micro-batch-size", "training.micro_batch_size"},
      {"--global-batch-size", "training.global_batch_size"},
      {"--fp16", "training.precision"},
      {"--bf16", "training.precision"},
      {"--fp8-format", "training.precision"},
      {"--recompute-activations", "training.recompute"},
      {"--recompute-granularity", "training.recompute"},
      {"--recompute-method", "training.recompute_method"},
      {"--recompute-num-layers", "training.recompute_num_layers"},
      {"--use-flash-attn", "training.flash_attention"},
      {"--attention-backend", "training.flash_attention"},
      {"--train-iters", "training.tokens"},
      {"--train-samples", "training.tokens"},
      {"--tensor-model-parallel-size", "parallelism.tensor_model_parallel_size"},
      {"--pipeline-model-parallel-size", "parallelism.pipeline_model_parallel_size"},
      {"--context-parallel-size", "parallelism.context_parallel_size"},
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
      {"--num-distributed-optimizer-instances", "a sharding group smaller than DP (hybrid sharding) is not modelled; ZeRO shards over all of DP"},
      {"--enable-full-sharding-in-hsdp", "hybrid sharding is not modelled"},
      {"--suggested-communication-unit-size", "Megatron-FSDP's bucket size: buckets are priced as Megatron's defaults"},
      {"--fsdp-double-buffer", "Megatron-FSDP buffer layout: priced as the default"},
      {"--init-model-with-meta-device", "initialisation only"},
      {"--torch-fsdp2-no-reshard-after-forward", "FSDP2's ZeRO-2-like mode is priced as ZeRO-3"},
      {"--cp-comm-type", "context parallelism is priced as the p2p ring (Megatron's default)"},
      {"--hierarchical-context-parallel-sizes", "hierarchical CP is priced as one p2p ring"},
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
      {"--moe-grouped-gemm", "expert GEMMs are priced as dense GEMMs of the expert's width"},
      {"--moe-use-legacy-grouped-gemm", "expert GEMMs are priced as dense GEMMs of the expert's width"},
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
      {"--grad-reduce-in-bf16", "gradient reduction is priced in the precision of the gradients (fp32 for bf16 training)"},
      {"--accumulate-allreduce-grads-in-fp32", "gradient reduction is priced in the precision of the gradients (fp32 for bf16 training)"},
      {"--optimizer", "the optimizer is priced as Adam"},
      {"--optimizer-cpu-offload", "optimizer offload to the CPU is not modelled"},
      {"--optimizer-offload-fraction", "optimizer offload to the CPU is not modelled"},
      {"--use-torch-optimizer-for-cpu-offload", "optimizer offload to the CPU is not modelled"},
      {"--overlap-cpu-optimizer-d2h-h2d", "optimizer offload to the CPU is not modelled"},
      {"--use-precision-aware-optimizer", "optimizer state precision is priced as fp32 Adam"},
      {"--main-grads-dtype", "optimizer state precision is priced as fp32 Adam"},
      {"--main-params-dtype", "optimizer state precision is priced as fp32 Adam"},
      {"--exp-avg-dtype", "optimizer state precision is priced as fp32 Adam"},
      {"--exp-avg-sq-dtype", "optimizer state precision is priced as fp32 Adam"},
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

const MegatronFlag* find_flag(std::string_view name) {
  for (const auto& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The launch's flags, in order; a flag given twice keeps its last value (argparse does).
struct Args {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> order;
  [[nodiscard]] bool has(std::string_view f) const { return values.count(std::string(f)) > 0; }
  // "--flag v1 v2" as given.
  [[nodiscard]] std::string given(const std::string& f) const {
    std::string s = f;
    auto it = values.find(f);
    if (it != values.end()) {
      for (const auto& v : it->second) s += " " + v;
    }
    return s;
  }
  [[nodiscard]] std::optional<std::string> value(std::string_view f) const {
    auto it = values.find(std::string(f));
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second.front();
  }
};

class Mapper {
 public:
  explicit Mapper(MegatronImport& out) : out_(out) {}

  std::optional<std::int64_t> integer(const Args& a, std::string_view flag) {
    const auto v = a.value(flag);
    if (!v) return std::nullopt;
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || end != v->data() + v->size() || n < 0) {
      bad(flag, *v, "a non-negative integer");
      return std::nullopt;
    }
    return n;
  }
  // A size or count that divides or multiplies others (parallel sizes, padding, launcher
  // counts): at least 1, and at most 2^20, so that products of three stay exact in 64 bits.
  std::optional<std::int64_t> positive(const Args& a, std::string_view flag) {
    const auto v = a.value(flag);
    if (!v) return std::nullopt;
    const auto n = integer(a, flag);
    if (!n) return std::nullopt;
    if (*n < 1 || *n > kMaxSize) {
      bad(flag, *v, "a positive integer up to 1048576");
      return std::nullopt;
    }
    return n;
  }
  static constexpr std::int64_t kMaxSize = std::int64_t{1} << 20;

  std::optional<double> real(const Args& a, std::string_view flag) {
    const auto v = a.value(flag);
    if (!v) return std::nullopt;
    try {
      std::size_t used = 0;
      const double d = std::stod(*v, &used);
      if (used == v->size() && std::isfinite(d)) return d;
    } catch (...) {
    }
    bad(flag, *v, "a number");
    return std::nullopt;
  }
  void bad(std::string_view flag, const std::string& value, const char* want) {
    if (value.find('$') != std::string::npos || value.find('`') != std::string::npos) {
      out_.unknowns.push_back(std::string(flag) + " " + value + ": the value could not be expanded statically (give the variable with --set NAME=VALUE)");
    } else {
      out_.diagnostics.error(std::string(flag), "expected " + std::string(want) + ", got \"" + value + "\"");
    }
  }

 private:
  MegatronImport& out_;
};

// K of Megatron's --moe-layer-freq "([0]*K+[1]*N)": K dense layers, then N MoE layers.
std::optional<std::int64_t> dense_layers_first(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c != ' ' && c != '(' && c != ')') s += c;
  }
  const std::string dense = "[0]*", sparse = "+[1]*";
  if (s.rfind(dense, 0) != 0) return std::nullopt;
  const std::size_t plus = s.find(sparse);
  if (plus == std::string::npos) return std::nullopt;
  const std::string k = s.substr(dense.size(), plus - dense.size()), n = s.substr(plus + sparse.size());
  auto all_digits = [](const std::string& x) { return !x.empty() && std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  if (!all_digits(k) || !all_digits(n) || k.size() > 6) return std::nullopt;
  return std::stoll(k);
}

// Megatron's _vocab_size_with_padding: up to a multiple of make_vocab_size_divisible_by x TP.
std::int64_t padded_vocab(std::int64_t vocab, std::int64_t divisible_by, std::int64_t tp) {
  const std::int64_t multiple = std::max<std::int64_t>(1, divisible_by * tp);
  return (vocab + multiple - 1) / multiple * multiple;
}

void map_args(const Args& a, const std::vector<std::string>& launcher, MegatronImport& out, std::string_view name) {
  Mapper num(out);
  nlohmann::json model = nlohmann::json::object(), training = nlohmann::json::object(),
                 par = nlohmann::json::object(), cluster = nlohmann::json::object();
  auto note = [&](const std::string& flag, const std::string& field) { out.mapped.push_back(a.given(flag) + " -> " + field); };

  // Model (Megatron's defaults where the launch is silent: megatron/training/arguments.py).
  const auto layers = num.integer(a, "--num-layers");
  const auto hidden = num.integer(a, "--hidden-size");
  const auto heads = num.integer(a, "--num-attention-heads");
  if (layers) model["num_layers"] = *layers;
  if (hidden) model["hidden_size"] = *hidden;
  if (heads) model["num_attention_heads"] = *heads;
  for (const char* f : {"--num-layers", "--hidden-size", "--num-attention-heads"}) {
    if (!a.has(f)) out.diagnostics.warning(f, std::string("not given: Megatron requires it; the plan needs model.") +
                                                  (std::string_view(f) == "--num-layers" ? "num_layers" : std::string_view(f) == "--hidden-size" ? "hidden_size" : "num_attention_heads"));
  }
  if (heads) {
    // arguments.py: --num-query-groups defaults to 1, so --group-query-attention alone is
    // multi-query attention; without --group-query-attention every head has its own K and V.
    model["num_query_groups"] = a.has("--group-query-attention") ? num.positive(a, "--num-query-groups").value_or(1) : *heads;
    if (a.has("--num-query-groups") && !a.has("--group-query-attention")) {
      out.ignored.push_back("--num-query-groups: Megatron uses it only with --group-query-attention; the model keeps one KV group per head");
    }
  }
  if (auto kv = num.integer(a, "--kv-channels")) {
    model["kv_channels"] = *kv;
  } else if (hidden && heads && *heads > 0) {
    model["kv_channels"] = *hidden / *heads;
  }
  const bool swiglu = a.has("--swiglu");
  model["activation"] = swiglu ? "swiglu" : "gelu";
  if (auto ffn = num.integer(a, "--ffn-hidden-size")) {
    model["ffn_hidden_size"] = *ffn;
  } else if (hidden) {
    // Megatron: 4h, or for SwiGLU int(4h x 2/3 / 64) x 64 (arguments.py, validate_args).
    model["ffn_hidden_size"] = swiglu ? (*hidden * 4 * 2 / 3) / 64 * 64 : 4 * *hidden;
  }
  const std::string norm = a.value("--normalization").value_or("LayerNorm");
  if (norm == "RMSNorm") model["normalization"] = "rmsnorm";
  else if (norm == "LayerNorm") model["normalization"] = "layernorm";
  else out.diagnostics.error("--normalization", "expected LayerNorm or RMSNorm, got \"" + norm + "\"");
  std::string positions = a.value("--position-embedding-type").value_or("learned_absolute");
  if (a.has("--use-rotary-position-embeddings")) positions = "rope";
  if (positions == "rope" || positions == "mrope" || positions == "yarn") {
    model["position_embedding_type"] = "rope";
  } else if (positions == "none") {
    model["position_embedding_type"] = "rope";  // no table, like RoPE
    out.ignored.push_back("--position-embedding-type none: priced as RoPE (no position table)");
  } else if (positions == "learned_absolute") {
    model["position_embedding_type"] = a.has("--no-position-embedding") ? "rope" : "learned_absolute";
  } else {
    out.diagnostics.error("--position-embedding-type", "expected learned_absolute, rope or none, got \"" + positions + "\"");
  }
  if (auto seq = num.integer(a, a.has("--seq-length") ? "--seq-length" : "--encoder-seq-length")) {
    model["seq_length"] = *seq;
  } else if (auto maxpos = num.integer(a, "--max-position-embeddings")) {
    model["seq_length"] = *maxpos;  // Megatron: seq_length defaults to max_position_embeddings
  } else {
    out.diagnostics.warning("--seq-length", "not given: the plan needs model.seq_length");
  }
  const std::int64_t tp = num.positive(a, "--tensor-model-parallel-size").value_or(1);
  const std::int64_t divisible = num.positive(a, "--make-vocab-size-divisible-by").value_or(128);
  std::optional<std::int64_t> vocab = num.positive(a, "--vocab-size");
  const std::string tokenizer = a.value("--tokenizer-type").value_or("");
  if (!vocab) {
    // A vocab file and a merge file are GPT-2's BPE (the only tokenizer that takes merges).
    const bool gpt2_files = tokenizer.empty() && a.has("--vocab-file") && a.has("--merge-file");
    if (tokenizer == "GPT2BPETokenizer" || gpt2_files) vocab = 50257;  // GPT-2's vocabulary (vocab.json)
    else if (tokenizer == "Llama2Tokenizer") vocab = 32000;    // Llama 2's SentencePiece model
  }
  if (vocab) {
    model["vocab_size"] = padded_vocab(*vocab, divisible, tp);
  } else {
    out.diagnostics.warning("--vocab-size", "the vocabulary comes from the tokenizer's files" +
                                                (tokenizer.empty() ? std::string() : " (" + tokenizer + ")") +
                                                ": give model.vocab_size (Megatron pads it to a multiple of " +
                                                std::to_string(divisible * tp) + ")");
  }
  model["untie_embeddings_and_output_weights"] = a.has("--untie-embeddings-and-output-weights");
  model["add_bias_linear"] = !a.has("--disable-bias-linear");
  model["hidden_dropout"] = num.real(a, "--hidden-dropout").value_or(0.1);
  model["attention_dropout"] = num.real(a, "--attention-dropout").value_or(0.1);
  if (a.has("--multi-latent-attention")) {
    nlohmann::json mla = {{"kv_lora_rank", num.integer(a, "--kv-lora-rank").value_or(32)},
                          {"qk_head_dim", num.integer(a, "--qk-head-dim").value_or(128)},
                          {"qk_pos_emb_head_dim", num.integer(a, "--qk-pos-emb-head-dim").value_or(64)},
                          {"v_head_dim", num.integer(a, "--v-head-dim").value_or(128)}};
    if (auto q = num.integer(a, "--q-lora-rank")) mla["q_lora_rank"] = *q;
    model["mla"] = mla;
  }
  if (auto experts = num.integer(a, "--num-experts"); experts && *experts > 0) {
    nlohmann::json moe = {{"num_moe_experts", *experts}, {"moe_router_topk", num.integer(a, "--moe-router-topk").value_or(2)}};
    if (auto f = num.integer(a, "--moe-ffn-hidden-size")) moe["moe_ffn_hidden_size"] = *f;
    else if (model.contains("ffn_hidden_size")) moe["moe_ffn_hidden_size"] = model["ffn_hidden_size"];
    if (auto s = num.integer(a, "--moe-shared-expert-intermediate-size")) moe["moe_shared_expert_intermediate_size"] = *s;
    if (auto c = num.real(a, "--moe-expert-capacity-factor")) moe["capacity_factor"] = *c;
    if (auto freq = a.value("--moe-layer-freq")) {
      // 1: every layer; "([0]*K+[1]*N)": K dense layers first (DeepSeek-V3's launch).
      if (*freq == "1") {
      } else if (const auto dense = dense_layers_first(*freq)) {
        moe["first_k_dense_layers"] = *dense;
      } else {
        out.unknowns.push_back("--moe-layer-freq " + *freq + ": only 1 and ([0]*K+[1]*N) (dense layers first) are modelled");
      }
    }
    model["moe"] = moe;
  }

  // Training.
  const std::int64_t mbs = num.integer(a, "--micro-batch-size").value_or(1);
  training["micro_batch_size"] = mbs;
  if (auto gbs = num.integer(a, "--global-batch-size")) training["global_batch_size"] = *gbs;
  if (a.has("--fp8-format")) training["precision"] = "fp8";
  else if (a.has("--bf16")) training["precision"] = "bf16";
  else if (a.has("--fp16")) training["precision"] = "fp16";
  else training["precision"] = "fp32";
  std::string recompute = a.has("--recompute-activations") ? "selective" : "none";
  if (auto g = a.value("--recompute-granularity")) recompute = *g;
  if (recompute != "none" && recompute != "selective" && recompute != "full") {
    out.diagnostics.error("--recompute-granularity", "expected full or selective, got \"" + recompute + "\"");
  } else {
    training["recompute"] = recompute;
  }
  if (auto method = a.value("--recompute-method")) training["recompute_method"] = *method;
  if (auto n = num.integer(a, "--recompute-num-layers")) training["recompute_num_layers"] = *n;
  // Megatron-core's attention backend defaults to auto (Transformer Engine picks flash or fused
  // attention); unfused and local materialise the score matrix.
  const std::string backend = a.value("--attention-backend").value_or(a.has("--use-flash-attn") ? "flash" : "auto");
  training["flash_attention"] = backend != "unfused" && backend != "local";
  const auto seq = model.contains("seq_length") ? std::optional<std::int64_t>(model["seq_length"].get<std::int64_t>()) : std::nullopt;
  if (auto iters = num.integer(a, "--train-iters"); iters && seq && training.contains("global_batch_size")) {
    training["tokens"] = static_cast<double>(*iters) * static_cast<double>(training["global_batch_size"].get<std::int64_t>()) * static_cast<double>(*seq);
  } else if (auto samples = num.integer(a, "--train-samples"); samples && seq) {
    training["tokens"] = static_cast<double>(*samples) * static_cast<double>(*seq);
  }

  // Parallelism.
  const std::int64_t pp = num.positive(a, "--pipeline-model-parallel-size").value_or(1);
  const std::int64_t cp = num.positive(a, "--context-parallel-size").value_or(1);
  par["tensor_model_parallel_size"] = tp;
  par["pipeline_model_parallel_size"] = pp;
  par["context_parallel_size"] = cp;
  par["expert_model_parallel_size"] = num.positive(a, "--expert-model-parallel-size").value_or(1);
  std::int64_t vpp = 1;
  if (auto v = num.positive(a, "--num-virtual-stages-per-pipeline-rank")) {
    vpp = *v;
  } else if (auto per = num.positive(a, "--num-layers-per-virtual-pipeline-stage"); per && layers) {
    vpp = *layers / (pp * *per);  // Megatron: num_layers // pp // layers per virtual stage
  }
  par["virtual_pipeline_model_parallel_size"] = vpp;
  par["pipeline_schedule"] = vpp > 1 ? "interleaved" : "1f1b";
  if (auto f = num.integer(a, "--decoder-first-pipeline-num-layers")) par["decoder_first_pipeline_num_layers"] = *f;
  if (auto l = num.integer(a, "--decoder-last-pipeline-num-layers")) par["decoder_last_pipeline_num_layers"] = *l;
  if (a.has("--account-for-embedding-in-pipeline-split")) par["account_for_embedding_in_pipeline_split"] = true;
  if (a.has("--account-for-loss-in-pipeline-split")) par["account_for_loss_in_pipeline_split"] = true;
  if (auto layout = a.value("--pipeline-model-parallel-layout")) par["pipeline_model_parallel_layout"] = *layout;
  // Megatron turns sequence parallelism off without TP (arguments.py, validate_args).
  par["sequence_parallel"] = a.has("--sequence-parallel") && tp > 1;
  if (a.has("--sequence-parallel") && tp == 1) out.ignored.push_back("--sequence-parallel: off with TP 1, as Megatron turns it off");
  std::int64_t zero = a.has("--use-distributed-optimizer") ? 1 : 0;
  if (a.has("--use-megatron-fsdp")) {
    // Megatron-FSDP's --data-parallel-sharding-strategy (default optim_grads_params).
    const std::string strategy = a.value("--data-parallel-sharding-strategy").value_or("optim_grads_params");
    if (strategy == "no_shard") zero = 0;
    else if (strategy == "optim") zero = 1;
    else if (strategy == "optim_grads") zero = 2;
    else if (strategy == "optim_grads_params") zero = 3;
    else out.diagnostics.error("--data-parallel-sharding-strategy", "expected no_shard, optim, optim_grads or optim_grads_params, got \"" + strategy + "\"");
  }
  if (a.has("--use-torch-fsdp2")) zero = 3;
  par["zero_stage"] = zero;
  // Megatron overlaps p2p with compute in the interleaved schedule unless told not to.
  par["overlap"] = {{"grad_reduce", a.has("--overlap-grad-reduce")},
                    {"param_gather", a.has("--overlap-param-gather")},
                    {"tp_comm", a.has("--tp-comm-overlap")},
                    {"p2p", vpp > 1 && !a.has("--no-overlap-p2p-communication")}};

  // The launcher's GPU count: torchrun --nproc_per_node x --nnodes.
  std::optional<std::int64_t> per_node, nodes;
  for (std::size_t i = 0; i < launcher.size(); ++i) {
    std::string w = launcher[i], v;
    if (const auto eq = w.find('='); eq != std::string::npos) {
      v = w.substr(eq + 1);
      w = w.substr(0, eq);
    } else if (i + 1 < launcher.size()) {
      v = launcher[i + 1];
    }
    std::int64_t n = 0;
    const bool number = !v.empty() && std::from_chars(v.data(), v.data() + v.size(), n).ec == std::errc() &&
                        std::to_string(n) == v;
    if (number && (n < 1 || n > Mapper::kMaxSize) && (w == "--nproc_per_node" || w == "--nproc-per-node" || w == "--nnodes")) {
      out.diagnostics.error(w, "expected a positive integer up to 1048576, got \"" + v + "\"");
      continue;
    }
    if (w == "--nproc_per_node" || w == "--nproc-per-node") {
      if (number) per_node = n; else out.unknowns.push_back("the launcher's " + w + " " + v + " could not be expanded statically");
    } else if (w == "--nnodes") {
      if (number) nodes = n; else out.unknowns.push_back("the launcher's --nnodes " + v + " could not be expanded statically (give it with --set)");
    }
  }
  if (per_node) cluster["gpus_per_node"] = *per_node;
  if (per_node && nodes) {
    const std::int64_t world = *per_node * *nodes;
    if (world % (tp * pp * cp) != 0) {
      out.diagnostics.warning("cluster.num_gpus", "the launcher starts " + std::to_string(world) + " GPUs (" +
                                                      std::to_string(*nodes) + " nodes x " + std::to_string(*per_node) +
                                                      "), which TP " + std::to_string(tp) + " x PP " + std::to_string(pp) +
                                                      " x CP " + std::to_string(cp) +
                                                      " does not divide: give cluster.num_gpus, or the node count with --set");
    } else {
      cluster["num_gpus"] = world;
    }
  }

  // What was read, and what was not.
  for (const auto& flag : a.order) {
    const auto cls = classify_megatron_flag(flag);
    if (!cls) {
      out.unknowns.push_back(flag + ": not a flag of Megatron-LM's arguments.py @ " + std::string(kMegatronArgumentsCommit.substr(0, 12)) + "; ignored");
    } else if (cls->mapped) {
      note(flag, cls->field);
    } else {
      out.ignored.push_back(a.given(flag) + ": " + cls->reason);
    }
  }

  out.plan = {{"schema_version", 1}, {"name", std::string(name)}, {"model", model}, {"training", training}, {"parallelism", par}};
  if (!cluster.empty()) out.plan["cluster"] = cluster;
}

}  // namespace

const std::vector<MegatronFlag>& megatron_flags() { return kFlags; }

std::optional<FlagClass> classify_megatron_flag(std::string_view flag) {
  const MegatronFlag* f = find_flag(flag);
  if (!f) return std::nullopt;
  if (auto it = mapped_flags().find(flag); it != mapped_flags().end()) return FlagClass{true, std::string(it->second), {}};
  if (auto it = flag_reasons().find(flag); it != flag_reasons().end()) return FlagClass{false, {}, std::string(it->second)};
  return FlagClass{false, {}, std::string(group_reason(f->group, flag))};
}

MegatronImport import_megatron_args(const std::vector<std::string>& words, std::string_view name) {
  MegatronImport out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i].size() > 3 && words[i].compare(words[i].size() - 3, 3, ".py") == 0) {
      start = i + 1;
      break;
    }
  }
  const std::vector<std::string> launcher(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(start));
  Args a;
  for (std::size_t i = start; i < words.size();) {
    std::string w = words[i++];
    if (w.rfind("--", 0) != 0) {
      out.unknowns.push_back("\"" + w + "\" follows no flag; ignored");
      continue;
    }
    std::vector<std::string> values;
    if (const auto eq = w.find('='); eq != std::string::npos) {
      values.push_back(w.substr(eq + 1));
      w = w.substr(0, eq);
    }
    const MegatronFlag* f = find_flag(w);
    const Arity arity = f ? f->arity : Arity::many;
    auto is_flag = [](const std::string& x) { return x.rfind("--", 0) == 0; };
    if (values.empty()) {
      if (arity == Arity::one) {
        if (i < words.size()) values.push_back(words[i++]);
        else out.diagnostics.error(w, "expects a value");
      } else if (arity == Arity::many || arity == Arity::optional) {
        while (i < words.size() && !is_flag(words[i])) {
          values.push_back(words[i++]);
          if (arity == Arity::optional) break;
        }
      }
    }
    if (!a.has(w)) a.order.push_back(w);
    a.values[w] = std::move(values);
  }
  map_args(a, launcher, out, name);
  return out;
}

MegatronImport import_megatron_script(std::string_view text, std::string_view name,
                                      const std::map<std::string, std::string>& given) {
  const ShellReading reading = read_shell_script(text, given);
  // The training command: a .py launch with the most Megatron flags.
  const ShellCommand* best = nullptr;
  std::size_t best_flags = 0;
  for (const auto& c : reading.commands) {
    bool runs_python = false;
    std::size_t flags = 0;
    for (const auto& w : c.words) {
      runs_python |= w.size() > 3 && w.compare(w.size() - 3, 3, ".py") == 0;
      if (runs_python && find_flag(w.substr(0, w.find('=')))) ++flags;
    }
    if (runs_python && flags > best_flags) {
      best = &c;
      best_flags = flags;
    }
  }
  if (!best) {
    MegatronImport out;
    out.diagnostics.error("", "no training command: no line of the script runs a .py file with Megatron-LM flags "
                              "(torchrun ... pretrain_gpt.py --num-layers ...)");
    out.unknowns = reading.unknowns;
    return out;
  }
  MegatronImport out = import_megatron_args(best->words, name);
  out.unknowns.insert(out.unknowns.begin(), reading.unknowns.begin(), reading.unknowns.end());
  return out;
}

}  // namespace meshwork::plan
