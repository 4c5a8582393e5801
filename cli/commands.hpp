#pragma once
// The `meshwork` subcommands. Each adds itself to the app; its callback sets the exit code.
// Output goes to the streams given, so that tests can run commands in-process.

#include <iosfwd>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "plan/diagnostics.hpp"
#include "plan/plan.hpp"
#include "report/report.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {

// `execute` stopped by a preemption signal at a step boundary, with a checkpoint of that step
// when it had a checkpoint directory: resumable (EX_TEMPFAIL of sysexits.h, "try again").
inline constexpr int kExitPreempted = 75;
// A valid plan whose memory model says some stage does not fit in its GPU's memory: the exit
// status of every command that prices a plan (estimate, simulate, reliability; sweep and
// search when no plan of theirs fits).
inline constexpr int kExitDoesNotFit = 3;

struct Io {
  std::ostream& out;
  std::ostream& err;
  int exit_code = 0;
};

void add_validate_command(CLI::App& app, Io& io);
void add_show_command(CLI::App& app, Io& io);
void add_presets_command(CLI::App& app, Io& io);
void add_schema_command(CLI::App& app, Io& io);
void add_import_hf_command(CLI::App& app, Io& io);
void add_import_megatron_command(CLI::App& app, Io& io);
void add_estimate_command(CLI::App& app, Io& io);
void add_accuracy_command(CLI::App& app, Io& io);
void add_sweep_command(CLI::App& app, Io& io);
void add_search_command(CLI::App& app, Io& io);
void add_topology_command(CLI::App& app, Io& io);
void add_program_command(CLI::App& app, Io& io);
void add_simulate_command(CLI::App& app, Io& io);
void add_reliability_command(CLI::App& app, Io& io);
void add_execute_command(CLI::App& app, Io& io);    // with MPI (the CPU executor)
void add_calibrate_command(CLI::App& app, Io& io);  // with MPI
void add_compare_command(CLI::App& app, Io& io);
// The reliability section as text (reliability_command.cpp); `daly_s` is Daly's optimum.
void print_reliability(std::ostream& out, const report::Reliability& r, double daly_s);

// Runs `meshwork ARGS...` and returns its exit code: 0 success, 1 a plan with errors or a
// failed command, 2 bad usage, kExitDoesNotFit a plan that does not fit in GPU memory,
// kExitPreempted an `execute` stopped by a preemption signal.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// One number printed with a printf format ("%.1f%%"), for the text reports.
std::string fmt(const char* format, double v);

// Prints diagnostics one per line, "FILE:LINE: error: path: message".
void print_diagnostics(std::ostream& os, const plan::Diagnostics& diags, const std::string& file);

// Loads a plan file for a command: prints its diagnostics; on errors also "FILE: N error(s);
// nothing to WHAT", sets the exit code to 1 and returns nothing.
std::optional<plan::Plan> load_plan_for(Io& io, const std::string& file, std::string_view what);

using report::memory_verdict_line;
using report::memory_verdict_word;

// Days to train to the plan's token target, "%.1f"; "-" when the plan sets no target.
std::string days_text(const report::Report& r);

}  // namespace meshwork::cli
