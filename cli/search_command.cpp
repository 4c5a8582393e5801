#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>

#include "cli/commands.hpp"
#include "models/search.hpp"
#include "plan/document.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {

void add_search_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("search", "Find the fastest valid plans for a model on a cluster");
  auto model = std::make_shared<std::string>();
  auto cluster = std::make_shared<std::string>();
  auto gpus = std::make_shared<std::int64_t>(0);
  auto seq = std::make_shared<std::int64_t>(0);
  auto top = std::make_shared<std::size_t>(5);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--model", *model, "A model preset (`meshwork presets`) or a Hugging Face config.json")->required();
  cmd->add_option("--cluster", *cluster, "A plan file giving the cluster and training sections (its model is replaced)")->required();
  cmd->add_option("--gpus", *gpus, "GPUs to plan for (default: the cluster plan's num_gpus)");
  cmd->add_option("--seq-length", *seq, "Training sequence length (default: the preset's; with a Hugging Face config, which gives none, the cluster plan's model.seq_length)");
  cmd->add_option("--top", *top, "Plans to show (default 5)");
  cmd->add_flag("--json", *json, "Print the best plans and their reports as JSON");
  cmd->footer("Searches TP, PP, CP (long sequences), EP (MoE), schedule and virtual stages, micro-batch,\n"
              "recomputation and ZeRO stage; DP follows from the GPU count. Exit 1 when no plan is valid, 3 when valid plans exist but none fits in GPU memory.");
  cmd->callback([=, &io] {
    auto doc = plan::read_document(*cluster);
    if (!doc.document) {
      print_diagnostics(io.err, doc.diagnostics, *cluster);
      io.exit_code = 1;
      return;
    }
    nlohmann::json base = doc.document->root;
    // A Hugging Face config names no training length (max_position_embeddings is the longest
    // context): the cluster plan's model.seq_length stays, unless --seq-length replaces it. A
    // preset brings its own.
    std::optional<nlohmann::json> plan_seq;
    if (base.contains("model") && base["model"].is_object()) {
      for (const char* key : {"seq_length", "seq_len"}) {
        if (base["model"].contains(key)) plan_seq = base["model"][key];
      }
    }
    const std::filesystem::path model_path = *model;
    if (model_path.extension() == ".json" || std::filesystem::exists(model_path)) {
      base["model"] = {{"hf_config", std::filesystem::absolute(model_path).string()}};
    } else {
      base["model"] = {{"preset", *model}};
    }
    if (*seq > 0) {
      base["model"]["seq_length"] = *seq;
    } else if (plan_seq && base["model"].contains("hf_config")) {
      base["model"]["seq_length"] = *plan_seq;
    }
    if (*gpus > 0) {
      if (!base.contains("cluster") || !base["cluster"].is_object()) base["cluster"] = nlohmann::json::object();
      base["cluster"].erase("gpus");
      base["cluster"]["num_gpus"] = *gpus;
    }
    if (*top == 0) {
      io.err << "meshwork search: --top must be at least 1\n";
      io.exit_code = 2;
      return;
    }
    // The model and cluster must be sound before any mesh is tried.
    nlohmann::json probe = base;
    probe["parallelism"] = nlohmann::json::object();
    const auto check = plan::load_plan_json(probe, std::filesystem::path(*cluster).parent_path());
    plan::Diagnostics fatal;
    for (const auto& d : check.diagnostics.items()) {
      const bool about_model_or_hardware = d.path.rfind("model", 0) == 0 || d.path.rfind("cluster.gpu", 0) == 0 || d.path.empty();
      if (d.severity == plan::Severity::error && (about_model_or_hardware || d.message.rfind("required", 0) == 0)) {
        fatal.add(d);
      }
    }
    if (fatal.has_errors()) {
      print_diagnostics(io.err, fatal, *cluster);
      io.err << "meshwork search: the model or cluster is not usable; nothing searched\n";
      io.exit_code = 1;
      return;
    }

    const auto result = models::search_plans(base, *top);
    if (result.best.empty()) {
      io.err << "meshwork search: no valid plan among " << result.candidates << " candidates.\n";
      if (result.out_of_memory > 0) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "  %llu do not fit in memory: the smallest needs %.1f GiB per GPU of %.1f GiB.\n",
                      static_cast<unsigned long long>(result.out_of_memory), result.least_memory_gib, result.capacity_gib);
        io.err << buf;
      }
      // One exit rule with the other commands that price a plan: valid meshes exist, none fits.
      io.exit_code = result.out_of_memory > 0 ? kExitDoesNotFit : 1;
      std::vector<std::pair<std::uint64_t, std::string>> reasons;
      for (const auto& [why, n] : result.invalid_reasons) reasons.emplace_back(n, why);
      std::sort(reasons.rbegin(), reasons.rend());
      for (std::size_t i = 0; i < reasons.size() && i < 5; ++i) {
        io.err << "  " << reasons[i].first << " invalid: " << reasons[i].second << '\n';
      }
      return;
    }
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& [p, r] : result.best) out.push_back({{"plan", plan::to_json(p)}, {"report", report::to_json(r)}});
      io.out << out.dump(2) << '\n';
      return;
    }
    io.out << result.candidates << " candidates: " << result.valid << " valid, " << result.out_of_memory
           << " out of memory, " << (result.candidates - result.valid - result.out_of_memory) << " invalid\n";
    io.out << "rank  TP  PP  CP  EP   DP  schedule      vpp mbs recompute  ZeRO | step (s)   MFU   memory (GiB)  verdict\n";
    int rank = 0;
    for (const auto& [p, r] : result.best) {
      const auto& par = p.parallelism;
      const double mem = r.max_memory_gib();
      char line[300];
      std::snprintf(line, sizeof line, "%4d %3lld %3lld %3lld %3lld %4lld  %-12s %4lld %3lld %-10s %4lld | %8.3f %5.1f%% %8.1f      %s\n",
                    ++rank, static_cast<long long>(par.tensor_model_parallel_size),
                    static_cast<long long>(par.pipeline_model_parallel_size),
                    static_cast<long long>(par.context_parallel_size),
                    static_cast<long long>(par.expert_model_parallel_size),
                    static_cast<long long>(par.data_parallel_size), std::string(plan::to_string(par.pipeline_schedule)).c_str(),
                    static_cast<long long>(par.virtual_pipeline_model_parallel_size),
                    static_cast<long long>(p.training.micro_batch_size),
                    std::string(plan::to_string(p.training.recompute)).c_str(), static_cast<long long>(par.zero_stage),
                    r.step_time_s, 100 * r.mfu, mem, std::string(memory_verdict_word(r)).c_str());
      io.out << line;
    }
  });
}

}  // namespace meshwork::cli
