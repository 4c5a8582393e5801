// meshwork import-megatron SCRIPT | --args "ARGS": a Megatron-LM launch as a plan that needs only
// its cluster (plan/megatron_import.hpp).
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "cli/commands.hpp"
#include "plan/megatron_import.hpp"
#include "plan/plan_io.hpp"
#include "plan/shell_script.hpp"

namespace meshwork::cli {

// Every flag of the pinned arguments.py with what import-megatron does with it (Markdown).
std::string megatron_flag_table() {
  std::ostringstream os;
  os << "| flag | group | import-megatron |\n|---|---|---|\n";
  for (const auto& f : plan::megatron_flags()) {
    const auto c = plan::classify_megatron_flag(f.name);
    os << "| `" << f.name << "` | " << f.group << " | " << (c->mapped ? "-> `" + c->field + "`" : "ignored: " + c->reason) << " |\n";
  }
  return os.str();
}

void add_import_megatron_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("import-megatron", "A Megatron-LM launch script (or its arguments) as a plan that needs only the cluster");
  auto script = std::make_shared<std::string>();
  auto args = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto out_file = std::make_shared<std::string>();
  auto table = std::make_shared<bool>(false);
  cmd->add_option("SCRIPT", *script, "A launch script (bash) that runs pretrain_gpt.py");
  cmd->add_option("--args", *args, "The arguments instead of a script, as one string: \"--num-layers 32 --hidden-size 4096 ...\"");
  cmd->add_option("--set", *sets, "NAME=VALUE for a variable of the script (NUM_NODES=16), over the environment and the script's own assignment; repeatable");
  cmd->add_option("--out", *out_file, "Write the plan there (atomically) instead of printing it");
  cmd->add_flag("--flags", *table, "Print every flag of the pinned arguments.py and what the import does with it (Markdown)");
  cmd->footer("The script is read, never run: variables, arrays, ${X:-default}, $(( )) and if-conditions on known values\n"
              "are followed; what cannot be known is named. Megatron's defaults apply to what the launch leaves out.\n"
              "Flags: Megatron-LM megatron/training/arguments.py @ " + std::string(plan::kMegatronArgumentsCommit) + " (core_v0.15.0).");
  cmd->callback([=, &io] {
    if (*table) {
      io.out << megatron_flag_table();
      return;
    }
    if (script->empty() == args->empty()) {
      io.err << "meshwork import-megatron: give a SCRIPT or --args, one of them\n";
      io.exit_code = 2;
      return;
    }
    std::map<std::string, std::string> given;
    for (const auto& s : *sets) {
      const auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0) {
        io.err << "meshwork import-megatron: --set takes NAME=VALUE, got \"" << s << "\"\n";
        io.exit_code = 2;
        return;
      }
      given[s.substr(0, eq)] = s.substr(eq + 1);
    }
    plan::MegatronImport r;
    std::string source = "--args";
    if (!script->empty()) {
      std::ifstream in(*script, std::ios::binary);
      std::stringstream text;
      if (!in || !(text << in.rdbuf())) {
        io.err << *script << ": error: cannot read the file\n";
        io.exit_code = 1;
        return;
      }
      std::string name = std::filesystem::path(*script).stem().string();
      r = plan::import_megatron_script(text.str(), name, given);
      source = *script;
    } else {
      const auto reading = plan::read_shell_script("pretrain_gpt.py " + *args, given);
      // Arguments pasted over several lines without backslashes (or with ; or |) read as
      // several commands: they are one argument list, and the reading says so.
      std::vector<std::string> words;
      for (const auto& c : reading.commands) words.insert(words.end(), c.words.begin(), c.words.end());
      r = plan::import_megatron_args(words);
      r.unknowns.insert(r.unknowns.begin(), reading.unknowns.begin(), reading.unknowns.end());
      if (reading.commands.size() > 1) {
        r.unknowns.insert(r.unknowns.begin(), "--args holds " + std::to_string(reading.commands.size()) +
                                                  " commands (line breaks without a backslash, ; or |): read as one argument list");
      }
    }
    print_diagnostics(io.err, r.diagnostics, source);
    if (!r.ok()) {
      for (const auto& u : r.unknowns) io.err << source << ": not read: " << u << '\n';
      io.exit_code = 1;
      return;
    }
    io.err << source << ": " << r.mapped.size() << " flags mapped, " << r.ignored.size() << " ignored, " << r.unknowns.size()
           << " not read\n";
    for (const auto& m : r.mapped) io.err << "  mapped   " << m << '\n';
    for (const auto& i : r.ignored) io.err << "  ignored  " << i << '\n';
    for (const auto& u : r.unknowns) io.err << "  not read " << u << '\n';
    io.err << "The plan needs its cluster: cluster.gpu (meshwork presets), the NICs and topology"
           << (r.plan.contains("cluster") && r.plan["cluster"].contains("num_gpus") ? "" : ", and cluster.num_gpus") << ".\n";
    const std::string text = r.plan.dump(2) + '\n';
    if (out_file->empty()) {
      io.out << text;
      return;
    }
    std::string error;
    if (!plan::write_file_atomically(*out_file, text, error)) {
      io.err << *out_file << ": error: " << error << '\n';
      io.exit_code = 1;
    }
  });
}

}  // namespace meshwork::cli
