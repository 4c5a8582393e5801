#include <ostream>

#include "cli/commands.hpp"
#include "plan/hf_import.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"

namespace meshwork::cli {

void add_import_hf_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("import-hf", "Print the model section for a Hugging Face config.json");
  auto file = std::make_shared<std::string>();
  cmd->add_option("CONFIG", *file, "config.json of a Hugging Face model")->required();
  cmd->footer("A plan can also name the file directly: model: {hf_config: path/to/config.json}");
  cmd->callback([file, &io] {
    plan::Plan p;
    plan::Diagnostics diags;
    if (!plan::import_hf_config_file(*file, p.model, diags, "config")) {
      print_diagnostics(io.err, diags, *file);
      io.exit_code = 1;
      return;
    }
    plan::resolve(p, diags);
    // Only the model's own rules apply: no mesh or cluster is given.
    const plan::Diagnostics rules = plan::validate(p);
    for (const auto& d : rules.items()) {
      if (d.path.rfind("model.", 0) == 0) diags.add(d);
    }
    print_diagnostics(io.err, diags, *file);
    if (diags.has_errors()) {
      io.exit_code = 1;
      return;
    }
    nlohmann::json out = {{"model", plan::to_json(p)["model"]}};
    io.out << out.dump(2) << '\n';
  });
}

}  // namespace meshwork::cli
