#pragma once
// Import of a Megatron-LM launch: a script (read statically, plan/shell_script.hpp) or the
// arguments of pretrain_gpt.py, into a plan that needs only its cluster. Every flag of
// Megatron-LM's megatron/training/arguments.py at the pinned commit (plan/megatron_flags.inc) is
// either mapped to a plan field or ignored with its reason; Megatron's own defaults apply to what
// the launch leaves out (LayerNorm, GeLU, learned positions, dropout 0.1, a 4h FFN, fp32).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"

namespace meshwork::plan {

// The Megatron-LM commit whose arguments.py the flag table was made from (core_v0.15.0).
inline constexpr std::string_view kMegatronArgumentsCommit = "0d7e02bd26d3eb347ad8d1bef625002babfa6df7";

enum class Arity { none, one, many, optional };

struct MegatronFlag {
  std::string_view name;   // "--num-layers"
  Arity arity = Arity::one;
  std::string_view group;  // arguments.py's argument group ("network_size", "moe", ...)
};

// What import-megatron does with a flag: the plan field it sets, or why it is left out.
struct FlagClass {
  bool mapped = false;
  std::string field;   // mapped: "model.num_layers" (several, comma-separated, where it sets more)
  std::string reason;  // ignored: why
};

const std::vector<MegatronFlag>& megatron_flags();
// nullptr for a flag that is not in the pinned arguments.py.
const MegatronFlag* find_megatron_flag(std::string_view name);
// nullopt for a flag that is not in the pinned arguments.py.
std::optional<FlagClass> classify_megatron_flag(std::string_view flag);

struct MegatronImport {
  nlohmann::json plan;                // schema_version, name, model, training, parallelism, cluster (GPU counts)
  std::vector<std::string> mapped;    // "--num-layers 96 -> model.num_layers"
  std::vector<std::string> ignored;   // "--lr 6.0e-5: optimizer hyper-parameters change no cost"
  std::vector<std::string> unknowns;  // flags not in arguments.py, values the reading could not expand
  Diagnostics diagnostics;            // errors: no training command, malformed values
  [[nodiscard]] bool ok() const { return !diagnostics.has_errors(); }
};

// The words of a launch command: a launcher's (torchrun --nproc_per_node 8 --nnodes 2) and then,
// after the training script (a word ending in .py), Megatron's. Without a .py word, all of them
// are Megatron's.
MegatronImport import_megatron_args(const std::vector<std::string>& words, std::string_view name = "megatron-import");

// A launch script: its training command is the one that runs a .py with the most Megatron
// flags. `given` sets variables over the script's own values (NUM_NODES=16).
MegatronImport import_megatron_script(std::string_view text, std::string_view name,
                                      const std::map<std::string, std::string>& given = {});

}  // namespace meshwork::plan
