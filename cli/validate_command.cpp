#include <memory>
#include <ostream>
#include <string>

#include "cli/commands.hpp"
#include "plan/backend_limits.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::cli {

void add_validate_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("validate", "Check plan files: every problem, with the field it is about");
  auto files = std::make_shared<std::vector<std::string>>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *files, "Plan files (YAML or JSON)")->required();
  cmd->add_flag("-q,--quiet", *quiet, "Print only problems, not the \"ok\" lines");
  auto backend = std::make_shared<std::string>();
  cmd->add_option("--backend", *backend,
                  "Also check that `execute --backend B` runs the plan (cpu or cuda): what the backend cannot run is an error on its field")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->footer("Exit status: 0 when every plan is valid (warnings allowed), 1 when any has an error.");
  cmd->callback([files, quiet, backend, &io] {
    for (const auto& file : *files) {
      auto result = plan::load_plan(file);
      if (result.ok() && !backend->empty()) result.diagnostics.append(plan::backend_diagnostics(result.plan, *plan::parse_backend(*backend)));
      print_diagnostics(io.err, result.diagnostics, file);
      if (result.diagnostics.has_errors()) {
        io.err << file << ": " << result.diagnostics.error_count() << " error(s)\n";
        io.exit_code = 1;
      } else if (!*quiet) {
        io.out << file << ": ok";
        if (result.diagnostics.warning_count() > 0) io.out << " (" << result.diagnostics.warning_count() << " warning(s))";
        io.out << '\n';
      }
    }
  });
}

}  // namespace meshwork::cli
