#include <ostream>

#include "cli/commands.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::cli {

void add_validate_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("validate", "Check plan files: every problem, with the field it is about");
  auto files = std::make_shared<std::vector<std::string>>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *files, "Plan files (YAML or JSON)")->required();
  cmd->add_flag("-q,--quiet", *quiet, "Print only problems, not the \"ok\" lines");
  cmd->footer("Exit status: 0 when every plan is valid (warnings allowed), 1 when any has an error.");
  cmd->callback([files, quiet, &io] {
    for (const auto& file : *files) {
      const auto result = plan::load_plan(file);
      print_diagnostics(io.err, result.diagnostics, file);
      if (!result.ok()) {
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
