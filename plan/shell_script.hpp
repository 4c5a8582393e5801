#pragma once
// A static reading of a launch script (bash): what a training command's arguments are without
// running anything. It follows what such scripts do to build a command line: variable
// assignments (`NUM_LAYERS=32`, `export`, `+=`), arrays (`ARGS=(--tp 8 ...)`, `ARGS+=(...)`,
// `${ARGS[@]}`), `${X:-default}` and its kin, `$(( ))` arithmetic, line continuations, quotes
// and comments, and `if [[ "$X" == "y" ]]` / `[ -n "$X" ]` conditions on values it knows. What it
// cannot know is left as written and named: command substitutions (`$(hostname)`), positional
// parameters and environment variables the script does not set (taken as unset, so their
// `${1:-default}` defaults apply), conditions on files, loops and functions.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::plan {

struct ShellCommand {
  std::int64_t line = 0;           // 1-based line where the command starts
  std::vector<std::string> words;  // after expansion and word splitting
};

struct ShellReading {
  std::vector<ShellCommand> commands;  // every simple command run at the top level, in order
  std::map<std::string, std::string> variables;
  // What the reading could not follow, "LINE: what and why".
  std::vector<std::string> unknowns;
};

// `given` holds values the caller knows (NUM_NODES=16 from the user): they take the place of the
// environment, and the script's own assignments to them are passed over.
ShellReading read_shell_script(std::string_view text, const std::map<std::string, std::string>& given = {});

}  // namespace meshwork::plan
