#include <ostream>

#include "cli/commands.hpp"
#include "models/params.hpp"
#include "report/report_io.hpp"
#include "plan/hf_import.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"

namespace meshwork::cli {

void add_import_hf_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("import-hf", "Print the model section for a Hugging Face config.json");
  auto file = std::make_shared<std::string>();
  auto seq = std::make_shared<std::int64_t>(0);
  cmd->add_option("CONFIG", *file, "config.json of a Hugging Face model")->required();
  cmd->add_option("--seq-length", *seq, "Training sequence length to write (a config gives only the longest context it supports)")
      ->check(CLI::PositiveNumber);
  cmd->footer("A plan can also name the file directly: model: {hf_config: path/to/config.json}\n"
              "What the config sets that meshwork does not model is listed as warnings; the parameter counts go to stderr.");
  cmd->callback([file, seq, &io] {
    plan::Plan p;
    plan::Diagnostics diags;
    plan::HfImportNotes notes;
    if (!plan::import_hf_config_file(*file, p.model, diags, "config", &notes)) {
      print_diagnostics(io.err, diags, *file);
      io.exit_code = 1;
      return;
    }
    if (*seq > 0) p.model.seq_length = *seq;
    const bool no_length = p.model.seq_length == 0;
    plan::warn_hf_import_notes(notes, no_length, "the plan must give model.seq_length (or pass --seq-length)", diags, "config");
    if (no_length) p.model.seq_length = 1;  // only for the model's own rules below; not written
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
    io.err << *file << ": " << report::parameters_line(models::parameter_summary(p.model)) << '\n';
    nlohmann::json out = {{"model", plan::to_json(p)["model"]}};
    if (no_length) out["model"].erase("seq_length");
    io.out << out.dump(2) << '\n';
  });
}

}  // namespace meshwork::cli
