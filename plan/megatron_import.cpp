#include "plan/megatron_import.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <tuple>

#include "plan/shell_script.hpp"

namespace meshwork::plan {
namespace {

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
  if (auto c = num.real(a, "--clip-grad")) training["clip_grad"] = *c;
  // Megatron's dataloader puts the b x 1 x s x s causal mask in every batch unless told not
  // to; get_batch_on_this_tp_rank broadcasts it with the tokens (training.data_loading's
  // default, tp_broadcast).
  if (a.has("--no-create-attention-mask-in-dataloader")) training["attention_mask_in_batch"] = false;
  // The flag turns off bf16 training's fp32 gradient buffer; fp16's buffer is 16-bit already,
  // fp32's stays fp32.
  if (a.has("--grad-reduce-in-bf16")) {
    if (training["precision"] == "bf16" || training["precision"] == "fp8") {
      training["grad_reduce_in_bf16"] = true;
    } else {
      out.diagnostics.warning("--grad-reduce-in-bf16", "ignored with " + training["precision"].get<std::string>() +
                                                           " training: only bf16 and fp8 training keep fp32 gradients to reduce in bf16");
    }
  }
  // The precision-aware optimizer (Transformer Engine's FusedAdam; arguments.py @0d7e02bd): Adam's
  // moments in --exp-avg-dtype and --exp-avg-sq-dtype; the master weights fp16 with
  // --main-params-dtype fp16, otherwise, with bf16 weights, the int16 remainders of their fp32
  // values (OptimizerConfig.store_param_remainders, True by default from Transformer Engine 2.1,
  // megatron/core/optimizer/optimizer_config.py); --main-grads-dtype bf16 keeps the gradients in
  // bf16 as --grad-reduce-in-bf16 does. Without the flag Megatron refuses any dtype but fp32.
  {
    const bool aware = a.has("--use-precision-aware-optimizer");
    const std::string precision = training["precision"].get<std::string>();
    const bool bf16_weights = precision == "bf16" || precision == "fp8";
    nlohmann::json states = nlohmann::json::object();
    for (const auto& [flag, key, choices] : {std::tuple{"--exp-avg-dtype", "exp_avg", "fp32, fp16, bf16, fp8"},
                                             std::tuple{"--exp-avg-sq-dtype", "exp_avg_sq", "fp32, fp16, bf16, fp8"},
                                             std::tuple{"--main-params-dtype", "master_weights", "fp32, fp16"},
                                             std::tuple{"--main-grads-dtype", "", "fp32, bf16"}}) {
      const auto v = a.value(flag);
      if (!v || *v == "fp32") continue;
      if ((std::string(", ") + choices + ",").find(", " + *v + ",") == std::string::npos) {
        out.diagnostics.error(flag, "expected one of " + std::string(choices) + ", got \"" + *v + "\"");
      } else if (!aware) {
        out.diagnostics.error(flag, *v + " needs --use-precision-aware-optimizer (Megatron refuses any dtype but fp32 without it)");
      } else if (std::string_view(key).empty()) {
        if (bf16_weights) training["grad_reduce_in_bf16"] = true;
        else out.diagnostics.warning(flag, "ignored with " + precision + " training: only bf16 and fp8 training keep fp32 gradients to reduce in bf16");
      } else if (std::string_view(key) == "master_weights" && precision == "fp32") {
        out.diagnostics.warning(flag, "ignored with fp32 training, which keeps no master copy");
      } else {
        states[key] = *v;
      }
    }
    if (aware && bf16_weights && !states.contains("master_weights")) {
      // With FP8 GEMMs under another recipe than delayed scaling, Megatron-core keeps its own fp32
      // masters and copy passes (OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8,
      // optimizer_config.py @0d7e02bd): no remainders.
      const std::string recipe = a.value("--fp8-recipe").value_or("delayed");
      if (precision == "fp8" && recipe != "delayed") {
        out.diagnostics.warning("--use-precision-aware-optimizer", "with --fp8-recipe " + recipe +
                                                                       " Megatron-core keeps fp32 master weights and its own copy passes: priced so with fp32 moments, "
                                                                       "as one fused kernel over fp32 masters with lower-precision ones");
      } else {
        states["master_weights"] = "remainders";
      }
    }
    if (!states.empty()) training["optimizer_states"] = states;
  }
  // Megatron-core's attention backend (AttnBackend) defaults to auto: Transformer Engine picks
  // flash or fused attention, as training.attention_kernel auto does for the GPU. flash is
  // FlashAttention through Transformer Engine, and the older --use-flash-attn the flash-attn
  // package: FlashAttention-2 (Transformer Engine takes FlashAttention-3 where it is installed,
  // on Hopper, which the flags do not say); fused is cuDNN's; unfused and local materialise
  // the score matrix.
  const std::string backend = a.value("--attention-backend").value_or(a.has("--use-flash-attn") ? "flash" : "auto");
  if (backend == "unfused" || backend == "local") {
    training["flash_attention"] = false;
  } else if (backend == "flash" || backend == "fused" || backend == "auto") {
    training["flash_attention"] = true;
    training["attention_kernel"] = backend == "flash" ? "flash2" : backend == "fused" ? "cudnn" : "auto";
  } else {
    out.diagnostics.error("--attention-backend", "expected flash, fused, unfused, local or auto, got \"" + backend + "\"");
  }
  const double seq = model.contains("seq_length") ? static_cast<double>(model["seq_length"].get<std::int64_t>()) : 0;  // 0: not given
  if (auto iters = num.integer(a, "--train-iters"); iters && seq > 0 && training.contains("global_batch_size")) {
    training["tokens"] = static_cast<double>(*iters) * static_cast<double>(training["global_batch_size"].get<std::int64_t>()) * seq;
  } else if (auto samples = num.integer(a, "--train-samples"); samples && seq > 0) {
    training["tokens"] = static_cast<double>(*samples) * seq;
  }

  // Parallelism.
  std::string cp_comm_note;  // how --cp-comm-type was read, when not as given
  const std::int64_t pp = num.positive(a, "--pipeline-model-parallel-size").value_or(1);
  const std::int64_t cp = num.positive(a, "--context-parallel-size").value_or(1);
  par["tensor_model_parallel_size"] = tp;
  par["pipeline_model_parallel_size"] = pp;
  par["context_parallel_size"] = cp;
  // --cp-comm-type: one value, or one per layer (Megatron-core); the first is taken, and a
  // list of mixed types is named. a2a and a2a+p2p (Ulysses-style all-to-alls before and after
  // the attention, which wait for them) are priced as all_gather: the attention waits for its
  // exchange, not as the p2p ring that hides it.
  if (const auto it = a.values.find("--cp-comm-type"); it != a.values.end() && !it->second.empty()) {
    const std::string& type = it->second.front();
    if (type == "p2p" || type == "all_gather") {
      par["context_parallel_comm_type"] = type;
    } else {
      par["context_parallel_comm_type"] = "all_gather";
      cp_comm_note = "--cp-comm-type " + type + ": priced as all_gather (the attention waits for its exchange; parallelism.context_parallel_comm_type has p2p and all_gather)";
    }
    for (const auto& other : it->second) {
      if (other != type) {
        cp_comm_note += std::string(cp_comm_note.empty() ? "" : "; ") + "--cp-comm-type: the layers' types differ (" + type + ", " + other + "): the first is taken for every layer";
        break;
      }
    }
  }
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
  if (auto n = num.integer(a, "--num-distributed-optimizer-instances")) par["num_distributed_optimizer_instances"] = *n;
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
    } else if (flag == "--cp-comm-type" && !cp_comm_note.empty()) {
      out.ignored.push_back(cp_comm_note);
      if (cp_comm_note.starts_with("--cp-comm-type:")) note(flag, cls->field);  // read as given, with a caveat
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
    const MegatronFlag* f = find_megatron_flag(w);
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
      if (runs_python && find_megatron_flag(w.substr(0, w.find('=')))) ++flags;
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
