#pragma once
// What each execution backend runs of a valid plan (`meshwork execute --backend`): its limits
// as diagnostics on the fields they are about, so that `validate --backend`, the GUI's plan
// editor and `execute` itself say the same thing, before anything is launched. A plan that
// passes validate() may still be beyond a backend; the simulator and the estimate take every
// valid plan.

#include <optional>
#include <string_view>

#include "plan/diagnostics.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

enum class Backend { cpu, cuda };

std::string_view to_string(Backend b);
// "cpu" or "cuda"; nullopt for anything else.
std::optional<Backend> parse_backend(std::string_view name);

// Errors for what `backend` cannot run of `plan` (validated and resolved), each naming its field
// and why; empty when the backend runs the plan.
Diagnostics backend_diagnostics(const Plan& plan, Backend backend);

}  // namespace meshwork::plan
