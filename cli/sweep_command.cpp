#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <set>
#include <sstream>

#include "cli/commands.hpp"
#ifdef MESHWORK_HAVE_SIMGRID
#include "sim/simulate.hpp"
#endif
#include "cli/sweep_mpi.hpp"
#include "models/sweep.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {
namespace {

// A progress bar on stderr when it is a terminal; nothing otherwise (logs, CI).
class ProgressBar {
 public:
  explicit ProgressBar(std::ostream& err) : err_(err), enabled_(isatty(STDERR_FILENO) != 0) {}
  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_ || total == 0) return;
    const int width = 40;
    const int filled = static_cast<int>(width * done / total);
    err_ << "\r[" << std::string(static_cast<std::size_t>(filled), '=') << std::string(static_cast<std::size_t>(width - filled), ' ')
         << "] " << done << "/" << total << std::flush;
    if (done == total) err_ << '\n';
  }

 private:
  std::ostream& err_;
  bool enabled_;
};

bool parse_slice(const std::string& text, models::SweepSlice& slice) {
  unsigned long long rank = 0, size = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%llu/%llu%c", &rank, &size, &tail) != 2 || size == 0 || rank >= size) return false;
  slice = {rank, size};
  return true;
}

nlohmann::json rows_json(const plan::SweepSpec& spec, const std::vector<models::SweepRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json point = nlohmann::json::object();
    for (std::size_t a = 0; a < spec.axes.size(); ++a) point[spec.axes[a].path] = r.values[a];
    nlohmann::json j = {{"index", r.index}, {"point", point}, {"status", std::string(models::to_string(r.status))}};
    if (!r.reason.empty()) j["reason"] = r.reason;
    if (r.status != models::PointStatus::invalid) {
      const auto& rep = r.report;
      j["method"] = std::string(report::to_string(rep.method));
      j["step_time_s"] = rep.step_time_s;
      j["mfu"] = rep.mfu;
      j["hfu"] = rep.hfu;
      j["tokens_per_s"] = rep.tokens_per_s;
      j["time_to_train_s"] = rep.time_to_train_s;
      j["bubble_fraction"] = rep.bubble_fraction;
      j["max_memory_gib"] = rep.max_memory_gib();
      j["memory_verdict"] = std::string(report::to_string(rep.memory_verdict()));
      j["cluster_megawatts"] = rep.power.cluster_megawatts;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

void add_sweep_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("sweep", "Estimate every plan of a grid over a base plan; ranked, as CSV and JSON");
  auto file = std::make_shared<std::string>();
  auto csv = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto top = std::make_shared<std::int64_t>(0);
  auto slice_text = std::make_shared<std::string>();
  auto method = std::make_shared<std::string>("estimated");
  cmd->add_option("--method", *method, "estimated (closed form, microseconds a plan) or simulated (the discrete-event simulator)");
  cmd->add_option("SWEEP", *file, "Sweep file (YAML or JSON): base, grid, rank_by, top")->required();
  cmd->add_option("--csv", *csv, "Write all rows, ranked, as CSV to this file ('-' for stdout)");
  cmd->add_option("--json", *json, "Write all rows, ranked, as JSON to this file ('-' for stdout)");
  cmd->add_option("--top", *top, "Rows shown on the terminal (default: the sweep file's top, else 20)");
  cmd->add_option("--slice", *slice_text, "Take slice I/N of the grid (points i with i % N == I)");
  auto simulate_best = std::make_shared<std::size_t>(0);
  cmd->add_option("--simulate-best", *simulate_best,
                  "Estimate every plan, then simulate the closed form's best K and rank those K by simulation at the top (search --method simulated --top K does the same)");
  auto causal = std::make_shared<bool>(false);
  cmd->add_flag("--causal-flops", *causal, "Count only the causal half of attention in MFU's model FLOPs (Megatron-LM's convention): training.attention_flops: causal");
  cmd->footer(
      "Exit status: 0, or 3 when no valid plan fits in GPU memory; 1 for a base plan with errors, 2 bad usage.\n"
      "Invalid and out-of-memory plans stay in the output with the reason. Under mpirun, each rank takes a\n"
      "slice and rank 0 merges and writes the results (when meshwork is built with MPI).");
  cmd->callback([=, &io] {
    const auto loaded = plan::load_sweep(*file);
    print_diagnostics(io.err, loaded.diagnostics, *file);
    if (!loaded.ok()) {
      io.err << *file << ": " << loaded.diagnostics.error_count() << " error(s); nothing swept\n";
      io.exit_code = 1;
      return;
    }
    plan::SweepSpec spec = loaded.spec;
    if (*causal) {
      if (!spec.base_tree.contains("training") || !spec.base_tree["training"].is_object()) spec.base_tree["training"] = nlohmann::json::object();
      spec.base_tree["training"]["attention_flops"] = "causal";
    }
    models::SweepSlice slice;
    if (!slice_text->empty() && !parse_slice(*slice_text, slice)) {
      io.err << "meshwork sweep: --slice must be I/N with 0 <= I < N, not \"" << *slice_text << "\"\n";
      io.exit_code = 2;
      return;
    }
    SweepMpi mpi;
    if (slice_text->empty() && mpi.size() > 1) slice = {mpi.rank(), mpi.size()};

    ProgressBar bar(io.err);
    models::Evaluator evaluate;
    if (*method == "simulated") {
#ifdef MESHWORK_HAVE_SIMGRID
      evaluate = [](const plan::Plan& p) {
        const sim::SimulateResult r = sim::simulate(p);
        models::Evaluation e;
        e.ok = r.report.has_value();
        if (r.report) e.report = *r.report;
        e.error = r.error.empty() ? "" : "simulation: " + r.error;
        return e;
      };
#else
      io.err << "meshwork sweep: --method simulated needs the simulator, and this build has none (SimGrid was not found)\n";
      io.exit_code = 1;
      return;
#endif
    } else if (*method != "estimated") {
      io.err << "meshwork sweep: --method is estimated or simulated, not \"" << *method << "\"\n";
      io.exit_code = 2;
      return;
    }
    auto rows = models::run_sweep(spec, slice, [&](std::uint64_t done, std::uint64_t total) {
      if (mpi.rank() == 0) bar.update(done, total);
    }, evaluate);
    if (mpi.size() > 1 && slice_text->empty()) {
      rows = mpi.gather(rows);  // everyone's rows on rank 0, in index order
      if (mpi.rank() != 0) return;
    }
    models::rank_rows(rows, spec.rank_by);
    if (*simulate_best > 0) {
#ifdef MESHWORK_HAVE_SIMGRID
      // The closed form's best K, each simulated; ranked among themselves by the simulation.
      std::vector<models::SweepRow> best;
      std::size_t k = 0;
      while (k < rows.size() && k < *simulate_best && rows[k].status == models::PointStatus::ok) ++k;
      for (std::size_t i = 0; i < k; ++i) {
        if (mpi.rank() == 0) bar.update(i, k);
        models::SweepRow row = rows[i];
        const auto point = plan::load_plan_json(spec.point(row.index), spec.base.parent_path());
        const sim::SimulateResult r = sim::simulate(point.plan);
        if (r.report) {
          const auto memory = row.report.memory;
          const bool fits = row.report.fits;
          row.report = *r.report;
          row.report.memory = memory;
          row.report.fits = fits;
        } else {
          row.status = models::PointStatus::invalid;
          row.reason = "simulation: " + r.error;
        }
        best.push_back(std::move(row));
      }
      models::rank_rows(best, spec.rank_by);
      std::move(best.begin(), best.end(), rows.begin());
#else
      io.err << "meshwork sweep: --simulate-best needs the simulator, and this build has none (SimGrid was not found)\n";
      io.exit_code = 1;
      return;
#endif
    }

    auto emit = [&](const std::string& target, const std::string& content, const char* what) {
      if (target.empty()) return true;
      if (target == "-") {
        io.out << content;
        return true;
      }
      std::string error;
      if (!plan::write_file_atomically(target, content, error)) {
        io.err << "meshwork sweep: cannot write the " << what << ": " << error << '\n';
        io.exit_code = 1;
        return false;
      }
      return true;
    };
    std::string csv_text = models::sweep_csv_header(spec) + '\n';
    for (const auto& r : rows) csv_text += models::sweep_csv_row(r) + '\n';
    if (!emit(*csv, csv_text, "CSV")) return;
    if (!emit(*json, rows_json(spec, rows).dump(2) + '\n', "JSON")) return;

    std::size_t ok = 0, invalid = 0, oom = 0;
    for (const auto& r : rows) {
      if (r.status == models::PointStatus::ok) ++ok;
      else if (r.status == models::PointStatus::invalid) ++invalid;
      else ++oom;
    }
    // One exit rule with the other commands that price a plan: kExitDoesNotFit when no valid
    // plan of the sweep fits.
    if (ok == 0 && oom > 0) io.exit_code = kExitDoesNotFit;
    if (*csv == "-" || *json == "-") return;  // stdout holds the data
    io.out << rows.size() << (rows.size() == spec.size() ? "" : " of " + std::to_string(spec.size())) << " plans: " << ok << " valid, " << oom << " out of memory, " << invalid << " invalid\n";
    const std::int64_t shown = *top > 0 ? *top : spec.top;
    char line[256];
    io.out << "rank  ";
    for (const auto& a : spec.axes) io.out << a.path.substr(a.path.rfind('.') + 1) << "  ";
    io.out << "| step (s)   MFU    days to train  memory (GiB)  verdict\n";
    for (std::size_t i = 0; i < rows.size() && static_cast<std::int64_t>(i) < shown && rows[i].status == models::PointStatus::ok; ++i) {
      const auto& r = rows[i];
      io.out << std::to_string(i + 1) << "  ";
      for (const auto& v : r.values) io.out << v << "  ";
      const double mem = r.report.max_memory_gib();
      std::snprintf(line, sizeof line, "| %8.3f  %5.1f%%  %13s  %12.1f  %s\n", r.report.step_time_s, 100 * r.report.mfu,
                    days_text(r.report).c_str(), mem, std::string(memory_verdict_word(r.report)).c_str());
      io.out << line;
    }
    // The convention each row's Report used (an axis may vary it).
    std::set<std::string> conventions;
    for (const auto& r : rows) {
      if (r.status == models::PointStatus::ok) conventions.insert(r.report.mfu_attention);
    }
    if (!conventions.empty()) {
      io.out << "MFU counts " << (conventions.size() == 1 ? *conventions.begin() + " attention FLOPs" : std::string("full or causal attention FLOPs by row"))
             << " (training.attention_flops)\n";
    }
  });
}

}  // namespace meshwork::cli
