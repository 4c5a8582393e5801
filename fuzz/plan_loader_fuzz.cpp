// libFuzzer target for the plan loader: any bytes must give a plan or diagnostics, never a
// crash, a hang or a sanitizer report; a plan that loads must survive save and reload exactly.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan/plan_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::plan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first byte picks the parser, so that both are fuzzed from one corpus.
  const Format format = size > 0 && data[0] % 3 == 1 ? Format::json : (size > 0 && data[0] % 3 == 2 ? Format::yaml : Format::detect);
  const LoadResult r = load_plan_text(text, format, "/nonexistent-fuzz-base");
  if (r.ok()) {
    const LoadResult again = load_plan_json(to_json(r.plan));
    if (!again.ok() || !(again.plan == r.plan)) __builtin_trap();  // a round trip that is not exact
  }
  return 0;
}
