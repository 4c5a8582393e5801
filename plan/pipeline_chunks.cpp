// The layers of every pipeline stage and model chunk (declared in plan/validate.hpp): an even
// split, Megatron's uneven first and last stages, its --account-for-*-in-pipeline-split, or its
// --pipeline-model-parallel-layout, each checked with the field named when it does not fit.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/pipeline_layout.hpp"
#include "plan/validate.hpp"

namespace meshwork::plan {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

using Chunks = std::vector<std::vector<std::int64_t>>;

// [stage][chunk] from layers per virtual stage (chunk c of stage s is virtual stage c pp + s).
Chunks from_virtual_stages(const std::vector<std::int64_t>& per_virtual, std::int64_t pp, std::int64_t vpp) {
  Chunks out(static_cast<std::size_t>(pp), std::vector<std::int64_t>(static_cast<std::size_t>(vpp), 0));
  for (std::size_t k = 0; k < per_virtual.size(); ++k) {
    out[k % static_cast<std::size_t>(pp)][k / static_cast<std::size_t>(pp)] = per_virtual[k];
  }
  return out;
}

// Megatron's --pipeline-model-parallel-layout: the layers of every virtual stage as given.
std::optional<Chunks> chunks_from_layout(const Plan& plan, const std::function<void(const std::string&, const std::string&)>& fail) {
  const auto& p = plan.parallelism;
  const std::string path = "parallelism.pipeline_model_parallel_layout";
  std::string error;
  const auto stages = parse_pipeline_layout(p.pipeline_model_parallel_layout, error);
  if (!stages) {
    fail(path, "does not parse: " + error);
    return std::nullopt;
  }
  const auto n = static_cast<std::int64_t>(stages->size());
  const std::int64_t pp = p.pipeline_model_parallel_size;
  if (n % pp != 0) {
    fail(path, str(n) + " virtual stages do not divide over pipeline_model_parallel_size " + str(pp));
    return std::nullopt;
  }
  if (n / pp != p.virtual_pipeline_model_parallel_size) {
    fail(path, str(n) + " virtual stages on " + str(pp) + " stages make " + str(n / pp) +
                   " model chunks per stage, but virtual_pipeline_model_parallel_size is " +
                   str(p.virtual_pipeline_model_parallel_size));
    return std::nullopt;
  }
  std::vector<std::int64_t> per_virtual;
  std::int64_t embeddings = 0, losses = 0, decoders = 0;
  for (const auto& stage : *stages) {
    per_virtual.push_back(static_cast<std::int64_t>(std::count(stage.begin(), stage.end(), 't')));
    decoders += per_virtual.back();
    embeddings += static_cast<std::int64_t>(std::count(stage.begin(), stage.end(), 'E'));
    losses += static_cast<std::int64_t>(std::count(stage.begin(), stage.end(), 'L'));
    if (stage.find('m') != std::string::npos) {
      fail(path, "has multi-token-prediction layers (m), which meshwork's models do not have; leave them out");
      return std::nullopt;
    }
  }
  // As Megatron's PipelineParallelLayerLayout.validate_layer_layout: the embedding is the very
  // first layer, the loss the very last, each exactly once, and the decoder layers all there.
  if (embeddings != 1 || stages->front().empty() || stages->front().front() != 'E') {
    fail(path, "must begin with the embedding E, once (it has " + str(embeddings) + ")");
    return std::nullopt;
  }
  if (losses != 1 || stages->back().empty() || stages->back().back() != 'L') {
    fail(path, "must end with the loss L, once (it has " + str(losses) + ")");
    return std::nullopt;
  }
  if (decoders != plan.model.num_layers) {
    fail(path, "places " + str(decoders) + " decoder layers (t), but model.num_layers is " + str(plan.model.num_layers));
    return std::nullopt;
  }
  return from_virtual_stages(per_virtual, pp, p.virtual_pipeline_model_parallel_size);
}

// Megatron's --account-for-embedding/loss-in-pipeline-split (transformer_block.py,
// get_num_layers_to_build): the embedding and the loss count as a layer each, the total
// splits evenly over the pp x vpp virtual stages, and the first (last) builds one fewer.
std::optional<Chunks> chunks_accounting(const Plan& plan, const std::function<void(const std::string&, const std::string&)>& fail) {
  const auto& p = plan.parallelism;
  const std::int64_t pp = p.pipeline_model_parallel_size, vpp = p.virtual_pipeline_model_parallel_size;
  const std::int64_t e = p.account_for_embedding_in_pipeline_split ? 1 : 0;
  const std::int64_t l = p.account_for_loss_in_pipeline_split ? 1 : 0;
  const std::int64_t total = plan.model.num_layers + e + l;
  const std::int64_t stages = pp * vpp;
  if (total % stages != 0) {
    fail(e ? "parallelism.account_for_embedding_in_pipeline_split" : "parallelism.account_for_loss_in_pipeline_split",
         "num_layers " + str(plan.model.num_layers) + (e ? " + 1 (embedding)" : "") + (l ? " + 1 (loss)" : "") + " = " +
             str(total) + " does not divide over " + str(pp) + " stages x " + str(vpp) + " model chunks");
    return std::nullopt;
  }
  std::vector<std::int64_t> per_virtual(static_cast<std::size_t>(stages), total / stages);
  per_virtual.front() -= e;
  per_virtual.back() -= l;
  return from_virtual_stages(per_virtual, pp, vpp);
}

}  // namespace

std::optional<std::vector<std::vector<std::int64_t>>> pipeline_chunks(const Plan& plan, Diagnostics* diags) {
  const std::int64_t layers = plan.model.num_layers;
  const auto& p = plan.parallelism;
  const std::int64_t pp = p.pipeline_model_parallel_size;
  const std::int64_t vpp = p.virtual_pipeline_model_parallel_size;
  const std::int64_t first = p.decoder_first_pipeline_num_layers;
  const std::int64_t last = p.decoder_last_pipeline_num_layers;
  std::optional<Chunks> none;
  auto fail = [&](const std::string& path, const std::string& message) {
    if (diags) diags->error(path, message);
  };
  if (layers <= 0 || pp <= 0 || vpp <= 0 || first < 0 || last < 0) return none;
  const auto stages = checked_mul(pp, vpp);
  if (!stages || *stages > (1 << 20)) return none;

  const bool layout = !p.pipeline_model_parallel_layout.empty();
  const bool account = p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
  const bool uneven = first > 0 || last > 0;
  if (layout && (account || uneven)) {
    fail("parallelism.pipeline_model_parallel_layout",
         std::string("places every layer itself, so it cannot be combined with ") +
             (account ? "account_for_embedding/loss_in_pipeline_split" : "decoder_first/last_pipeline_num_layers") +
             " (as in Megatron-LM)");
    return none;
  }
  if (account && uneven) {
    fail(p.account_for_embedding_in_pipeline_split ? "parallelism.account_for_embedding_in_pipeline_split"
                                                   : "parallelism.account_for_loss_in_pipeline_split",
         "cannot be combined with decoder_first/last_pipeline_num_layers (as in Megatron-LM); write the split as "
         "pipeline_model_parallel_layout instead");
    return none;
  }
  if (layout) return chunks_from_layout(plan, fail);
  if (account) return chunks_accounting(plan, fail);

  if (!uneven) {
    if (layers % *stages != 0) {
      fail("parallelism.pipeline_model_parallel_size",
           "num_layers " + str(layers) + " does not divide over " + str(pp) + " stages x " + str(vpp) +
               " model chunks; give decoder_first/last_pipeline_num_layers, the account_for_* switches or "
               "pipeline_model_parallel_layout for uneven stages");
      return none;
    }
    return Chunks(static_cast<std::size_t>(pp), std::vector<std::int64_t>(static_cast<std::size_t>(vpp), layers / *stages));
  }
  if (pp < 2) {
    fail(first ? "parallelism.decoder_first_pipeline_num_layers" : "parallelism.decoder_last_pipeline_num_layers",
         "uneven stages need pipeline_model_parallel_size of 2 or more");
    return none;
  }
  const std::int64_t given = (first > 0 ? 1 : 0) + (last > 0 ? 1 : 0);
  const std::int64_t middle = pp - given;
  const std::int64_t rest = layers - first - last;
  if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest < middle || rest % middle != 0))) {
    fail("parallelism.decoder_first_pipeline_num_layers",
         "first " + str(first) + " and last " + str(last) + " stage layers leave " + str(rest) + " of " + str(layers) +
             " layers, which do not divide evenly over the other " + str(middle) + " stages");
    return none;
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(pp), middle > 0 ? rest / middle : 0);
  if (first > 0) out.front() = first;
  if (last > 0) out.back() = last;
  Chunks chunks;
  if (vpp == 1) {
    for (const auto n : out) chunks.push_back({n});
  } else if (middle > 0) {
    // Interleaving with uneven ends (Llama 3, arXiv:2407.21783 §3.3.2): every model chunk of
    // the middle stages holds mid / vpp layers; the first stage's first chunk and the last
    // stage's last chunk hold what is left.
    const std::int64_t mid = out[first > 0 ? 1 : 0];
    if (mid % vpp != 0) {
      fail("parallelism.virtual_pipeline_model_parallel_size",
           "the middle stages have " + str(mid) + " layers, which do not split into " + str(vpp) + " model chunks");
      return none;
    }
    const std::int64_t chunk = mid / vpp;
    for (const auto& [n, path] : {std::pair{first, "parallelism.decoder_first_pipeline_num_layers"},
                                  std::pair{last, "parallelism.decoder_last_pipeline_num_layers"}}) {
      if (n > 0 && (n - (vpp - 1) * chunk < 1 || n - (vpp - 1) * chunk > chunk)) {
        fail(path, str(n) + " layers do not make " + str(vpp - 1) + " model chunks of " + str(chunk) +
                       " (as the middle stages' chunks) and one of 1 to " + str(chunk));
        return none;
      }
    }
    for (std::int64_t s = 0; s < pp; ++s) {
      std::vector<std::int64_t> c(static_cast<std::size_t>(vpp), chunk);
      const std::int64_t n = out[static_cast<std::size_t>(s)];
      if (n != mid) c[s == 0 ? 0 : c.size() - 1] = n - (vpp - 1) * chunk;
      chunks.push_back(std::move(c));
    }
  } else {
    for (std::size_t s = 0; s < out.size(); ++s) {
      if (out[s] % vpp != 0) {
        fail("parallelism.virtual_pipeline_model_parallel_size",
             "stage " + str(static_cast<std::int64_t>(s)) + " has " + str(out[s]) + " layers, which do not split into " +
                 str(vpp) + " model chunks");
        return none;
      }
      chunks.emplace_back(static_cast<std::size_t>(vpp), out[s] / vpp);
    }
  }
  return chunks;
}

std::optional<std::vector<std::int64_t>> layers_per_stage(const Plan& plan, Diagnostics* diags) {
  const auto chunks = pipeline_chunks(plan, diags);
  if (!chunks) return std::nullopt;
  std::vector<std::int64_t> out;
  for (const auto& stage : *chunks) {
    std::int64_t n = 0;
    for (const auto c : stage) n += c;
    out.push_back(n);
  }
  return out;
}

std::vector<std::vector<std::int64_t>> layers_per_chunk(const Plan& plan) {
  return pipeline_chunks(plan).value_or(std::vector<std::vector<std::int64_t>>{});
}

std::vector<std::vector<std::int64_t>> chunk_first_layers(const std::vector<std::vector<std::int64_t>>& chunks) {
  std::vector<std::vector<std::int64_t>> out;
  out.reserve(chunks.size());
  for (const auto& stage : chunks) out.emplace_back(stage.size(), 0);
  const std::size_t pp = chunks.size();
  const std::size_t vpp = pp > 0 ? chunks.front().size() : 0;
  std::int64_t next = 0;
  for (std::size_t c = 0; c < vpp; ++c) {
    for (std::size_t s = 0; s < pp; ++s) {
      out[s][c] = next;
      next += chunks[s][c];
    }
  }
  return out;
}

std::int64_t first_layer_of_chunk(const std::vector<std::vector<std::int64_t>>& chunks, std::int64_t stage, std::int64_t chunk) {
  const auto pp = static_cast<std::int64_t>(chunks.size());
  std::int64_t first = 0;
  for (std::int64_t vs = 0; vs < chunk * pp + stage; ++vs) {
    first += chunks[static_cast<std::size_t>(vs % pp)][static_cast<std::size_t>(vs / pp)];
  }
  return first;
}

}  // namespace meshwork::plan
