// libFuzzer target for sweep files (`meshwork sweep SWEEP`): any bytes give a grid or
// diagnostics, never a crash, a hang or a sanitizer report; a grid that loads yields its
// first and last points. A relative base plan is looked for beside a file that does not exist.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan/sweep_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::plan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const SweepLoadResult r = load_sweep_text(text, "/nonexistent-fuzz-base/sweep.yaml");
  if (r.ok() && r.spec.size() > 0) {
    (void)r.spec.point(0);
    (void)r.spec.point_values(r.spec.size() - 1);
  }
  return 0;
}
