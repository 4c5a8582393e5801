#include "models/search.hpp"

#include <algorithm>

#include "models/estimate.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

std::vector<std::int64_t> divisors_up_to(std::int64_t n, std::int64_t limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

bool power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

SearchResult search_plans(const nlohmann::json& base, std::size_t top,
                          const std::function<void(std::uint64_t, std::uint64_t)>& progress, const SearchPins& pins) {
  SearchResult result;
  // The model and cluster as resolved from the base, with a trivial mesh, give the bounds.
  nlohmann::json probe = base;
  probe["parallelism"] = nlohmann::json::object();
  plan::LoadResult seed = plan::load_plan_json(probe);
  const plan::Plan& p0 = seed.plan;
  const auto& m = p0.model;
  const std::int64_t gpus = p0.cluster.num_gpus;
  if (gpus <= 0 || m.num_layers <= 0) return result;

  // TP within a node and dividing the heads and groups; PP dividing the layers; CP for long
  // sequences; EP dividing the experts. Powers of two, as production meshes are.
  std::vector<std::int64_t> tps, pps, cps = {1}, eps = {1};
  for (auto t : divisors_up_to(p0.cluster.gpus_per_node, 64)) {
    if (power_of_two(t) && m.num_query_groups % t == 0 && m.num_attention_heads % t == 0) tps.push_back(t);
  }
  // PP dividing the layers, and powers of two that do not, with Megatron's uneven first and
  // last stages (Llama 3 405B: 126 layers on 16 stages, 7 + 14 x 8 + 7).
  for (auto pp : divisors_up_to(m.num_layers, 128)) pps.push_back(pp);
  std::vector<std::pair<std::int64_t, std::int64_t>> uneven;  // pp -> first (= last) stage layers
  for (std::int64_t pp = 4; pp <= std::min<std::int64_t>(128, m.num_layers / 2); pp *= 2) {
    if (m.num_layers % pp == 0) continue;
    const std::int64_t middle = (m.num_layers + pp - 1) / pp;
    const std::int64_t rest = m.num_layers - (pp - 2) * middle;
    if (rest >= 2 && rest % 2 == 0 && rest / 2 <= middle) {
      pps.push_back(pp);
      uneven.emplace_back(pp, rest / 2);
    }
  }
  auto first_stage = [&](std::int64_t pp) -> std::int64_t {
    for (const auto& [p, first] : uneven) {
      if (p == pp) return first;
    }
    return 0;
  };
  if (m.seq_length >= 16384) cps = {1, 2, 4, 8};
  if (m.is_moe()) {
    eps.clear();
    for (auto e : divisors_up_to(m.moe.num_moe_experts, 256)) {
      if (power_of_two(e)) eps.push_back(e);
    }
  }
  const std::vector<std::int64_t> mbss = {1, 2, 4};
  const std::vector<const char*> recomputes = {"none", "selective", "full"};
  std::vector<std::int64_t> zeros = {0, 1, 2, 3};
  // A pinned dimension replaces its list, whatever the search would have tried (the planner's
  // choice is checked like any other candidate).
  auto pin = [](std::vector<std::int64_t>& list, std::int64_t value) {
    if (value > 0) list = {value};
  };
  pin(tps, pins.tp);
  pin(pps, pins.pp);
  pin(cps, pins.cp);
  pin(eps, pins.ep);
  if (pins.zero >= 0) zeros = {pins.zero};

  struct Candidate {
    std::int64_t tp, pp, cp, ep, vpp, mbs, zero;
    const char* recompute;
    const char* schedule;
  };
  std::vector<Candidate> candidates;
  std::uint64_t meshes_not_dividing = 0, meshes_without_the_vpp = 0;
  for (auto tp : tps)
    for (auto pp : pps)
      for (auto cp : cps)
        for (auto ep : eps) {
          const std::int64_t mp = tp * pp * cp;
          if (gpus % mp != 0 || (gpus / mp) % ep != 0) {
            ++meshes_not_dividing;
            continue;
          }
          std::vector<std::pair<std::int64_t, const char*>> schedules = {{1, pp > 1 ? "1f1b" : "1f1b"}};
          if (pp > 1) {
            schedules.push_back({1, "zero_bubble"});
            for (auto v : divisors_up_to(m.num_layers / pp, 8)) {
              if (v > 1 && first_stage(pp) == 0) schedules.push_back({v, "interleaved"});
            }
          }
          if (pins.vpp > 0) {
            std::erase_if(schedules, [&](const auto& s) { return s.first != pins.vpp; });
            if (schedules.empty() && pins.vpp > 1 && pp > 1) schedules.push_back({pins.vpp, "interleaved"});
            if (schedules.empty()) ++meshes_without_the_vpp;
          }
          for (const auto& [vpp, schedule] : schedules)
            for (auto mbs : mbss)
              for (auto rc : recomputes)
                for (auto z : zeros) candidates.push_back({tp, pp, cp, ep, vpp, mbs, z, rc, schedule});
        }

  result.candidates = candidates.size();
  if (candidates.empty()) {
    // Nothing to try: say what the pins ruled out.
    if (meshes_not_dividing > 0) {
      result.invalid_reasons["TP x PP x CP (and EP) of the pinned sizes do not divide the " + std::to_string(gpus) + " GPUs"] +=
          meshes_not_dividing;
    }
    if (meshes_without_the_vpp > 0) {
      result.invalid_reasons["--vpp " + std::to_string(pins.vpp) + " needs PP > 1 with layers per stage it divides"] +=
          meshes_without_the_vpp;
    }
  }
  result.capacity_gib = p0.cluster.gpu.hbm_gib;
  EstimateOptions options;
  options.provenance = false;
  std::vector<std::pair<plan::Plan, report::Report>> ok;
  std::uint64_t done = 0;
  for (const auto& c : candidates) {
    nlohmann::json tree = base;
    nlohmann::json par = base.contains("parallelism") && base["parallelism"].is_object() ? base["parallelism"] : nlohmann::json::object();
    // Keep the base's overlap and compression settings; the mesh and schedule are the search's.
    nlohmann::json kept = nlohmann::json::object();
    for (const char* key : {"overlap", "overlap_grad_reduce", "gradient_compression", "topk_ratio", "order",
                            "context_parallel_load_balance", "context_parallel_comm_type", "cp_comm_type"}) {
      if (par.contains(key)) kept[key] = par[key];
    }
    kept["tensor_model_parallel_size"] = c.tp;
    kept["pipeline_model_parallel_size"] = c.pp;
    kept["context_parallel_size"] = c.cp;
    kept["expert_model_parallel_size"] = c.ep;
    kept["virtual_pipeline_model_parallel_size"] = c.vpp;
    kept["pipeline_schedule"] = c.schedule;
    kept["sequence_parallel"] = c.tp > 1;
    kept["zero_stage"] = c.zero;
    // The base's distributed-optimizer instances, under a sharded optimizer (a candidate whose
    // DP x CP they do not divide is refused by validation, with the reason).
    for (const char* key : {"num_distributed_optimizer_instances", "dist_opt_instances"}) {
      if (c.zero >= 1 && par.contains(key)) kept[key] = par[key];
    }
    if (const std::int64_t first = first_stage(c.pp); first > 0) {
      kept["decoder_first_pipeline_num_layers"] = first;
      kept["decoder_last_pipeline_num_layers"] = first;
    }
    tree["parallelism"] = kept;
    if (!tree.contains("training") || !tree["training"].is_object()) tree["training"] = nlohmann::json::object();
    for (const char* alias : {"mbs", "recompute_granularity"}) tree["training"].erase(alias);
    tree["training"]["micro_batch_size"] = c.mbs;
    tree["training"]["recompute"] = c.recompute;
    const auto loaded = plan::load_plan_json(tree);
    if (progress && (++done % 512 == 0 || done == candidates.size())) progress(done, candidates.size());
    if (!loaded.ok()) {
      for (const auto& d : loaded.diagnostics.items()) {
        if (d.severity == plan::Severity::error) {
          ++result.invalid_reasons[d.path.empty() ? d.message : d.path + ": " + d.message];
          break;
        }
      }
      continue;
    }
    report::Report r = estimate(loaded.plan, options);
    if (!r.fits) {
      ++result.out_of_memory;
      const double need = r.max_memory_gib();
      if (result.least_memory_gib == 0 || need < result.least_memory_gib) result.least_memory_gib = need;
      continue;
    }
    ++result.valid;
    ok.emplace_back(loaded.plan, std::move(r));
  }
  std::stable_sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a.second.step_time_s < b.second.step_time_s; });
  if (ok.size() > top) ok.resize(top);
  result.best = std::move(ok);
  return result;
}

}  // namespace meshwork::models
