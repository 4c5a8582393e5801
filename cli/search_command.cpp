#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/sweep_mpi.hpp"
#include "models/search.hpp"
#include "plan/derived.hpp"
#include "plan/document.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"
#ifdef MESHWORK_HAVE_SIMGRID
#include "sim/simulate.hpp"
#endif

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
  auto pins = std::make_shared<models::SearchPins>();
  cmd->add_option("--tp", pins->tp, "Pin tensor parallelism (otherwise searched)")->check(CLI::PositiveNumber);
  cmd->add_option("--pp", pins->pp, "Pin pipeline parallelism")->check(CLI::PositiveNumber);
  cmd->add_option("--cp", pins->cp, "Pin context parallelism")->check(CLI::PositiveNumber);
  cmd->add_option("--ep", pins->ep, "Pin expert parallelism")->check(CLI::PositiveNumber);
  cmd->add_option("--vpp", pins->vpp, "Pin virtual stages per pipeline rank")->check(CLI::PositiveNumber);
  cmd->add_option("--zero", pins->zero, "Pin the ZeRO stage (0-3)")->check(CLI::Range(0, 3));
  auto method = std::make_shared<std::string>("estimated");
  cmd->add_option("--method", *method, "estimated (rank by the closed form), or simulated: the closed form's best --top plans ranked by simulation")
      ->check(CLI::IsMember({"estimated", "simulated"}));
  auto csv = std::make_shared<std::string>();
  cmd->add_option("--csv", *csv, "Write the best plans as CSV to this file ('-' for stdout)");
  auto causal = std::make_shared<bool>(false);
  cmd->add_flag("--causal-flops", *causal, "Count only the causal half of attention in MFU's model FLOPs (Megatron-LM's convention): training.attention_flops: causal");
  cmd->footer("Searches TP, PP, CP (long sequences), EP (MoE), schedule and virtual stages, micro-batch,\n"
              "recomputation and ZeRO stage (--tp, --pp, --cp, --ep, --vpp, --zero pin them); DP follows from the GPU count.\n"
              "--method simulated simulates the closed form's best --top plans and ranks them by the simulated step, over\n"
              "MPI ranks when launched by mpirun. Exit 1 when no plan is valid, 3 when valid plans exist but none fits in GPU memory.");
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
    if (*causal) {
      if (!base.contains("training") || !base["training"].is_object()) base["training"] = nlohmann::json::object();
      base["training"]["attention_flops"] = "causal";
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
    if (pins->vpp > 1 && pins->pp == 1) {
      io.err << "meshwork search: --vpp " << pins->vpp << " needs pipeline stages: pin --pp above 1, or drop --vpp\n";
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

    const bool tty = ::isatty(STDERR_FILENO) != 0;
    auto result = models::search_plans(base, *top, [&](std::uint64_t done, std::uint64_t all) {
      if (tty) io.err << "\rsearching: " << done << " / " << all << " candidates" << std::flush;
    }, *pins);
    if (tty) io.err << "\r                                              \r" << std::flush;
    // Why the rest were rejected, counted by reason (the commonest first).
    std::vector<std::pair<std::uint64_t, std::string>> reasons;
    for (const auto& [why, n] : result.invalid_reasons) reasons.emplace_back(n, why);
    std::sort(reasons.rbegin(), reasons.rend());
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
      for (std::size_t i = 0; i < reasons.size() && i < 5; ++i) {
        io.err << "  " << reasons[i].first << " invalid: " << reasons[i].second << '\n';
      }
      return;
    }
    // --method simulated: the closed form's best, each simulated, ranked by the simulated step.
    std::vector<std::optional<report::Report>> simulated(result.best.size());
    if (*method == "simulated") {
#ifndef MESHWORK_HAVE_SIMGRID
      io.err << "meshwork search: --method simulated needs the simulator (SimGrid was not found)\n";
      io.exit_code = 1;
      return;
#else
      SweepMpi mpi;
      std::vector<models::SweepRow> mine;
      for (std::size_t i = 0; i < result.best.size(); ++i) {
        if (i % mpi.size() != mpi.rank()) continue;
        if (tty) io.err << "\rsimulating plan " << i + 1 << " of " << result.best.size() << std::flush;
        const sim::SimulateResult sr = sim::simulate(result.best[i].first);
        models::SweepRow row;
        row.index = i;
        if (sr.report) {
          row.report = *sr.report;
        } else {
          row.status = models::PointStatus::invalid;
          row.reason = sr.error;
        }
        mine.push_back(std::move(row));
      }
      if (tty) io.err << "\r                                   \r" << std::flush;
      const auto rows = mpi.size() > 1 ? mpi.gather(mine) : mine;
      if (mpi.rank() != 0) return;
      for (const auto& row : rows) {
        if (row.status == models::PointStatus::ok) {
          simulated[row.index] = row.report;
        } else {
          io.err << "meshwork search: plan " << row.index + 1 << " did not simulate: " << row.reason << '\n';
        }
      }
      std::vector<std::size_t> order(result.best.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      auto sim_step = [&](std::size_t i) { return simulated[i] ? simulated[i]->step_time_s : std::numeric_limits<double>::infinity(); };
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sim_step(a) < sim_step(b); });
      decltype(result.best) best;
      std::vector<std::optional<report::Report>> sims;
      for (std::size_t i : order) {
        best.push_back(result.best[i]);
        sims.push_back(simulated[i]);
      }
      result.best = std::move(best);
      simulated = std::move(sims);
#endif
    }
    const bool by_simulation = *method == "simulated";
    auto layers_text = [](const plan::Plan& p) {
      const auto layers = plan::derive(p).layers_per_stage;
      std::string out;
      const bool even = std::all_of(layers.begin(), layers.end(), [&](std::int64_t l) { return l == layers.front(); });
      if (even) return std::to_string(layers.front());
      for (std::size_t i = 0; i < layers.size(); ++i) {
        if (i == 3 && layers.size() > 5) {
          out += "..." + std::to_string(layers.back());
          break;
        }
        out += (i ? "," : "") + std::to_string(layers[i]);
      }
      return out;
    };
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (std::size_t i = 0; i < result.best.size(); ++i) {
        const auto& [p, r] = result.best[i];
        nlohmann::json entry = {{"plan", plan::to_json(p)}, {"report", report::to_json(r)}};
        if (simulated[i]) entry["simulated"] = report::to_json(*simulated[i]);
        out.push_back(std::move(entry));
      }
      io.out << out.dump(2) << '\n';
      return;
    }
    if (!csv->empty()) {
      std::ostringstream rows;
      rows << "rank,tp,pp,cp,ep,dp,sp,schedule,vpp,mbs,recompute,zero,layers_per_stage,estimated_step_s,estimated_mfu,"
              "simulated_step_s,simulated_mfu,days_to_train,memory_gib,verdict\n";
      for (std::size_t i = 0; i < result.best.size(); ++i) {
        const auto& [p, r] = result.best[i];
        const auto& par = p.parallelism;
        const report::Report& shown = simulated[i] ? *simulated[i] : r;
        rows << i + 1 << ',' << par.tensor_model_parallel_size << ',' << par.pipeline_model_parallel_size << ',' << par.context_parallel_size << ','
             << par.expert_model_parallel_size << ',' << par.data_parallel_size << ',' << (par.sequence_parallel ? "true" : "false") << ','
             << (par.pipeline_model_parallel_size > 1 ? plan::to_string(par.pipeline_schedule) : "-") << ','
             << par.virtual_pipeline_model_parallel_size << ',' << p.training.micro_batch_size << ',' << plan::to_string(p.training.recompute) << ','
             << par.zero_stage << ",\"" << layers_text(p) << "\"," << r.step_time_s << ',' << r.mfu << ','
             << (simulated[i] ? std::to_string(simulated[i]->step_time_s) : "") << ',' << (simulated[i] ? std::to_string(simulated[i]->mfu) : "")
             << ',' << (shown.time_to_train_s > 0 ? std::to_string(shown.time_to_train_s / 86400) : "") << ',' << r.max_memory_gib() << ',' << memory_verdict_word(r) << '\n';
      }
      if (*csv == "-") {
        io.out << rows.str();
      } else {
        std::string error;
        if (!plan::write_file_atomically(*csv, rows.str(), error)) {
          io.err << *csv << ": error: " << error << '\n';
          io.exit_code = 1;
          return;
        }
        io.err << "wrote " << result.best.size() << " plans to " << *csv << '\n';
      }
      if (*csv == "-") return;
    }
    io.out << result.candidates << " candidates: " << result.valid << " valid, " << result.out_of_memory
           << " out of memory, " << (result.candidates - result.valid - result.out_of_memory) << " invalid\n";
    io.out << "rank  TP  PP  CP  EP    DP  SP  schedule     vpp  mbs  recompute  ZeRO  layers/stage | step (s)   MFU     days  memory (GiB)  verdict"
           << (by_simulation ? "   | estimated step (s)" : "") << '\n';
    for (std::size_t i = 0; i < result.best.size(); ++i) {
      const auto& [p, r] = result.best[i];
      const auto& par = p.parallelism;
      const report::Report& shown = simulated[i] ? *simulated[i] : r;
      char line[400];
      std::snprintf(line, sizeof line, "%4zu %3lld %3lld %3lld %3lld %5lld  %-3s %-12s %3lld %4lld  %-9s %5lld  %-12s | %8.3f %5.1f%% %8s %13.1f  %s",
                    i + 1, static_cast<long long>(par.tensor_model_parallel_size), static_cast<long long>(par.pipeline_model_parallel_size),
                    static_cast<long long>(par.context_parallel_size), static_cast<long long>(par.expert_model_parallel_size),
                    static_cast<long long>(par.data_parallel_size), par.sequence_parallel ? "yes" : "no",
                    par.pipeline_model_parallel_size > 1 ? std::string(plan::to_string(par.pipeline_schedule)).c_str() : "-",
                    static_cast<long long>(par.virtual_pipeline_model_parallel_size), static_cast<long long>(p.training.micro_batch_size),
                    std::string(plan::to_string(p.training.recompute)).c_str(), static_cast<long long>(par.zero_stage), layers_text(p).c_str(),
                    shown.step_time_s, 100 * shown.mfu, days_text(shown).c_str(), r.max_memory_gib(),
                    std::string(memory_verdict_word(r)).c_str());
      io.out << line;
      if (by_simulation) {
        std::snprintf(line, sizeof line, "%*s | %8.3f", static_cast<int>(12 - std::min<std::size_t>(12, memory_verdict_word(r).size())), "", r.step_time_s);
        io.out << line;
      }
      io.out << '\n';
    }
    io.out << (by_simulation ? "Ranked by simulated step time; " : "Ranked by the closed form's step time; ") << "MFU counts "
           << result.best.front().second.mfu_attention << " attention FLOPs (training.attention_flops)\n";
    if (!reasons.empty()) io.out << "Rejected, by reason:\n";
    for (std::size_t i = 0; i < reasons.size() && i < 8; ++i) io.out << "  " << reasons[i].first << " invalid: " << reasons[i].second << '\n';
  });
}

}  // namespace meshwork::cli
