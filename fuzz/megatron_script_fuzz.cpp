// libFuzzer target for `meshwork import-megatron`: the static reading of a launch script
// (plan/shell_script.cpp) and the flag mapping (plan/megatron_import.cpp). Any bytes give a
// plan or diagnostics, never a crash, a hang, unbounded memory or a sanitizer report; a plan
// that imports is loaded as meshwork loads it (which may refuse it, not crash).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan/megatron_import.hpp"
#include "plan/plan_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::plan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const MegatronImport r = import_megatron_script(text, "fuzz", {{"NUM_NODES", "2"}});
  if (r.ok()) (void)load_plan_json(r.plan);
  return 0;
}
