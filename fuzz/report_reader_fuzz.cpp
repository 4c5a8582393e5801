// libFuzzer target for the Report reader (`meshwork compare`'s JSON inputs): any bytes give a
// Report or a json::exception (what compare turns into "not a meshwork Report"), never another
// exception, a crash or a sanitizer report; a Report read survives writing and reading again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "report/compare.hpp"
#include "report/report_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::report;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Report r = from_json(nlohmann::json::parse(text));
    const Report again = from_json(to_json(r));
    (void)compare(r, again);
  } catch (const nlohmann::json::exception&) {
    // The reader's one way to refuse input (compare_command.cpp catches exactly this).
  }
  return 0;
}
