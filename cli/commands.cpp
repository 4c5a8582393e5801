#include "cli/commands.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <ostream>

#include "meshwork/version.hpp"
#include "plan/plan_io.hpp"
#include "plan/reader.hpp"

namespace meshwork::cli {

std::string days_text(const report::Report& r) {
  if (!(r.time_to_train_s > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", r.time_to_train_s / 86400);
  return buf;
}

void print_diagnostics(std::ostream& os, const plan::Diagnostics& diags, const std::string& file) {
  for (const auto& d : diags.items()) os << plan::format(d, file) << '\n';
}

std::optional<plan::Plan> load_plan_for(Io& io, const std::string& file, std::string_view what) {
  auto loaded = plan::load_plan(file);
  print_diagnostics(io.err, loaded.diagnostics, file);
  if (!loaded.ok()) {
    io.err << file << ": " << loaded.diagnostics.error_count() << " error(s); nothing to " << what << '\n';
    io.exit_code = 1;
    return std::nullopt;
  }
  return std::move(loaded.plan);
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The allocator this process runs on, for --version (benchmarks record it beside their
// timings): jemalloc where the program was linked against it (cmake/MeshworkOptions.cmake),
// found by its control entry point, the system's otherwise (glibc's, or a sanitizer's).
namespace {
std::string allocator_name() {
  using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
  void* symbol = dlsym(RTLD_DEFAULT, "mallctl");
  if (symbol == nullptr) return "system malloc";
  const char* version = nullptr;
  std::size_t size = sizeof version;
  if (reinterpret_cast<Mallctl>(symbol)("version", static_cast<void*>(&version), &size, nullptr, 0) != 0 || version == nullptr) return "jemalloc";
  return std::string("jemalloc ") + version;
}
}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Io io{out, err, 0};
  CLI::App app{"meshwork: plan, predict and run large-model training on GPU clusters", "meshwork"};
  app.set_version_flag("--version", std::string("meshwork ") + kVersion + " (" + kGitCommit + "; " + allocator_name() + ")");
  app.require_subcommand(1);
  add_validate_command(app, io);
  add_show_command(app, io);
  add_presets_command(app, io);
  add_schema_command(app, io);
  add_import_hf_command(app, io);
  add_import_megatron_command(app, io);
  add_estimate_command(app, io);
  add_accuracy_command(app, io);
  add_sweep_command(app, io);
  add_search_command(app, io);
  add_topology_command(app, io);
  add_program_command(app, io);
  add_simulate_command(app, io);
  add_reliability_command(app, io);
#ifdef MESHWORK_HAVE_MPI
  add_execute_command(app, io);
  add_calibrate_command(app, io);
#endif
  add_compare_command(app, io);

  // A mistyped command: name the nearest one ("meshwork estimat").
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (!args.empty() && !args.front().empty() && args.front()[0] != '-' &&
      std::find(names.begin(), names.end(), args.front()) == names.end()) {
    const std::string best = plan::nearest(args.front(), names);
    err << "meshwork: unknown command \"" << args.front() << "\"" << (best.empty() ? std::string() : "; did you mean \"" + best + "\"?")
        << "\n(run `meshwork --help` for the commands)\n";
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them in reverse
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << app.version() << '\n';
    return 0;
  } catch (const CLI::ParseError& e) {
    // Subcommand help comes as CallForHelp from the subcommand: print that subcommand's help.
    if (e.get_exit_code() == 0) {
      out << e.what() << '\n';
      return 0;
    }
    err << "meshwork: " << e.what() << "\n(run `meshwork --help` for usage)\n";
    return 2;
  }
  return io.exit_code;
}

}  // namespace meshwork::cli
