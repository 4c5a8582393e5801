#include <ostream>

#include "cli/commands.hpp"
#include "plan/schema_doc.hpp"

namespace meshwork::cli {

void add_schema_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("schema", "Print the plan file's field reference (Markdown, as in the README)");
  cmd->callback([&io] { io.out << plan::field_reference_markdown(); });
}

}  // namespace meshwork::cli
