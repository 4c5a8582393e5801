#include "plan/hf_import.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "plan/document.hpp"
#include "plan/validate.hpp"

namespace meshwork::plan {
namespace {

class HfReader {
 public:
  HfReader(const nlohmann::json& cfg, Diagnostics& diags, std::string_view path)
      : cfg_(cfg), diags_(diags), path_(path) {}

  // The first of `keys` present, as a positive integer; nullopt when none is present.
  std::optional<std::int64_t> integer(std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      auto it = cfg_.find(key);
      if (it == cfg_.end() || it->is_null()) continue;
      if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return it->get<std::int64_t>();
      if (it->is_number_float()) {
        const double d = it->get<double>();
        if (d >= 0 && d <= 9e15 && std::floor(d) == d) return static_cast<std::int64_t>(d);
      }
      diags_.error(std::string(path_), std::string(key) + " must be a non-negative integer, got " + it->dump());
      ok_ = false;
      return std::nullopt;
    }
    return std::nullopt;
  }

  std::optional<std::int64_t> required(std::initializer_list<const char*> keys) {
    auto v = integer(keys);
    if (!v && ok_) {
      diags_.error(std::string(path_), std::string("the config has no ") + *keys.begin());
      ok_ = false;
    }
    return v;
  }

  std::optional<std::string> string(const char* key) {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    diags_.error(std::string(path_), std::string(key) + " must be a string, got " + it->dump());
    ok_ = false;
    return std::nullopt;
  }

  std::optional<bool> boolean(const char* key) {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) return std::nullopt;
    if (it->is_boolean()) return it->get<bool>();
    diags_.error(std::string(path_), std::string(key) + " must be true or false, got " + it->dump());
    ok_ = false;
    return std::nullopt;
  }

  // The first of `keys` present, as a number in [0, 1]; nullopt when none is present.
  std::optional<double> probability(std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      auto it = cfg_.find(key);
      if (it == cfg_.end() || it->is_null()) continue;
      if (it->is_number() && it->get<double>() >= 0 && it->get<double>() <= 1) return it->get<double>();
      diags_.error(std::string(path_), std::string(key) + " must be a probability in [0, 1], got " + it->dump());
      ok_ = false;
      return std::nullopt;
    }
    return std::nullopt;
  }

  bool has(const char* key) const { return cfg_.contains(key); }
  [[nodiscard]] bool ok() const { return ok_; }
  void fail(const std::string& message) {
    diags_.error(std::string(path_), message);
    ok_ = false;
  }

 private:
  const nlohmann::json& cfg_;
  Diagnostics& diags_;
  std::string_view path_;
  bool ok_ = true;
};

}  // namespace

bool import_hf_config(const nlohmann::json& config, ModelConfig& model, Diagnostics& diags,
                      std::string_view path, HfImportNotes* notes) {
  if (!config.is_object()) {
    diags.error(std::string(path), "a Hugging Face config must be a JSON object");
    return false;
  }
  // Vision-language and other composite configs keep the decoder under text_config.
  const nlohmann::json& cfg =
      config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  HfReader r(cfg, diags, path);
  ModelConfig m;  // a fresh model: nothing of an earlier preset survives

  if (auto name = HfReader(config, diags, path).string("_name_or_path"); name && !name->empty()) {
    m.name = *name;
  } else if (auto type = r.string("model_type")) {
    m.name = *type;
  }
  // GPT-2 style configs name the same quantities n_layer, n_embd, n_head, n_inner, n_positions.
  if (auto v = r.required({"num_hidden_layers", "n_layer", "num_layers"})) m.num_layers = *v;
  if (auto v = r.required({"hidden_size", "n_embd", "d_model"})) m.hidden_size = *v;
  if (auto v = r.required({"num_attention_heads", "n_head"})) m.num_attention_heads = *v;
  if (auto v = r.required({"vocab_size"})) m.vocab_size = *v;
  m.num_query_groups = r.integer({"num_key_value_heads"}).value_or(0);
  // MLA configs (DeepSeek) give the value head width as v_head_dim.
  m.kv_channels = r.integer({"head_dim", "v_head_dim"}).value_or(0);
  m.ffn_hidden_size = r.integer({"intermediate_size", "n_inner", "ffn_dim"}).value_or(0);
  // max_position_embeddings is how far the positions reach (131,072 for Llama 3.1, which was
  // pre-trained at 8,192): not a training length. GPT-2's n_positions is the size of its learned
  // table, the length it trained at.
  if (auto v = r.integer({"seq_length", "n_positions"})) m.seq_length = *v;
  HfImportNotes found;
  found.max_position_embeddings = r.integer({"max_position_embeddings"});

  std::optional<std::string> hidden_act = r.string("hidden_act");
  if (!hidden_act) hidden_act = r.string("activation_function");
  if (auto act = hidden_act.value_or("gelu");
      act == "silu" || act == "swiglu" || act == "swish") {
    m.activation = Activation::swiglu;  // Llama-family MLPs gate with SiLU: three GEMMs
  } else if (act.rfind("gelu", 0) == 0) {
    m.activation = Activation::gelu;
  } else {
    r.fail("hidden_act \"" + act + "\" is not supported (silu/swiglu or gelu)");
  }
  m.normalization = r.has("rms_norm_eps") ? Normalization::rmsnorm : Normalization::layernorm;
  // transformers' PretrainedConfig ties embeddings unless tie_word_embeddings is false.
  m.untie_embeddings_and_output_weights = !r.boolean("tie_word_embeddings").value_or(true);
  m.add_bias_linear = r.boolean("attention_bias").value_or(m.normalization == Normalization::layernorm);

  // Dropout as the config trains it: GPT-2's resid_pdrop (or embd_pdrop) / attn_pdrop, BERT-style
  // hidden_dropout_prob, OPT's dropout, the Llama family's attention_dropout (and no hidden
  // dropout at all). Absent: 0, as transformers' decoders default (Megatron's 0.1 is for
  // Megatron's own models).
  m.hidden_dropout = r.probability({"hidden_dropout", "resid_pdrop", "hidden_dropout_prob", "dropout", "embd_pdrop"}).value_or(0);
  m.attention_dropout = r.probability({"attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"}).value_or(0);

  // GPT-2-style configs (n_positions) learn a position table; the others rotate (RoPE).
  m.position_embedding_type = r.has("n_positions") ? PositionEmbedding::learned_absolute : PositionEmbedding::rope;
  // DeepSeek's multi-head latent attention.
  if (auto kv_rank = r.integer({"kv_lora_rank"}); kv_rank && *kv_rank > 0) {
    m.mla.kv_lora_rank = *kv_rank;
    m.mla.q_lora_rank = r.integer({"q_lora_rank"}).value_or(0);
    m.mla.qk_head_dim = r.integer({"qk_nope_head_dim"}).value_or(m.mla.qk_head_dim);
    m.mla.qk_pos_emb_head_dim = r.integer({"qk_rope_head_dim"}).value_or(m.mla.qk_pos_emb_head_dim);
    m.mla.v_head_dim = r.integer({"v_head_dim"}).value_or(m.mla.v_head_dim);
  }

  // MoE: Mixtral num_local_experts, Qwen-MoE num_experts, DeepSeek n_routed_experts.
  if (auto experts = r.integer({"num_local_experts", "num_experts", "n_routed_experts"}); experts && *experts > 0) {
    m.moe.num_moe_experts = *experts;
    m.moe.moe_router_topk = r.integer({"num_experts_per_tok", "moe_topk"}).value_or(m.moe.moe_router_topk);
    // Mixtral's experts use intermediate_size; the others give moe_intermediate_size.
    m.moe.moe_ffn_hidden_size = r.integer({"moe_intermediate_size"}).value_or(m.ffn_hidden_size);
    if (auto shared = r.integer({"shared_expert_intermediate_size"})) {
      m.moe.moe_shared_expert_intermediate_size = *shared;  // Qwen-MoE
    } else if (auto n_shared = r.integer({"n_shared_experts"})) {
      // DeepSeek: n_shared_experts of moe_intermediate_size each.
      if (auto width = checked_mul(*n_shared, m.moe.moe_ffn_hidden_size)) {
        m.moe.moe_shared_expert_intermediate_size = *width;
      } else {
        r.fail("n_shared_experts x moe_intermediate_size is out of range");
      }
    }
    m.moe.first_k_dense_layers = r.integer({"first_k_dense_replace"}).value_or(0);
  }
  // What the model section has no field for. The parameter counts say what each leaves out.
  if (auto mtp = r.integer({"num_nextn_predict_layers"}); mtp && *mtp > 0) {
    found.ignored.push_back("num_nextn_predict_layers " + std::to_string(*mtp) +
                            ": DeepSeek's multi-token-prediction module is not modelled (its parameters, FLOPs and memory are "
                            "left out: DeepSeek-V3 counts 671B without it, 685B with it)");
  }
  if (cfg.contains("layer_types") || (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null() &&
                                      r.boolean("use_sliding_window").value_or(true))) {
    found.ignored.push_back("sliding_window / layer_types: sliding-window attention is priced as full causal attention");
  }
  if (cfg.contains("quantization_config")) {
    found.ignored.push_back("quantization_config: the stored checkpoint's quantization; training precision is training.precision");
  }
  if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
    found.ignored.push_back("rope_scaling: a context extension; it changes no cost");
  }
  if (!r.ok()) return false;
  model = m;
  if (notes) *notes = std::move(found);
  return true;
}

bool import_hf_config_file(const std::filesystem::path& file, ModelConfig& model, Diagnostics& diags,
                           std::string_view path, HfImportNotes* notes) {
  std::string error;
  auto text = read_text_file(file, kMaxPlanFileBytes, error);
  if (!text) {
    diags.error(std::string(path), file.string() + " " + error);
    return false;
  }
  auto doc = parse_document(*text, Format::json);
  if (!doc.document) {
    for (auto d : doc.diagnostics.items()) {
      d.path = std::string(path);
      d.message = file.string() + ": " + d.message;
      diags.add(std::move(d));
    }
    return false;
  }
  return import_hf_config(doc.document->root, model, diags, path, notes);
}

void warn_hf_import_notes(const HfImportNotes& notes, bool seq_length_missing, std::string_view remedy, Diagnostics& diags,
                          std::string_view path) {
  for (const auto& why : notes.ignored) diags.warning(std::string(path), "ignored " + why);
  if (!seq_length_missing) return;
  std::string why = "the config names no training sequence length: " + std::string(remedy);
  if (notes.max_position_embeddings) {
    why = "the config's max_position_embeddings (" + std::to_string(*notes.max_position_embeddings) +
          ") is the longest context the model supports, not the sequence it trains on: " + std::string(remedy);
  }
  diags.warning(std::string(path), why);
}

}  // namespace meshwork::plan
