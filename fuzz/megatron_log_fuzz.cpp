// libFuzzer target for the Megatron-LM log reader (`meshwork compare PREDICTED LOG`): any
// bytes give intervals or errors, never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "report/megatron_log.hpp"
#include "report/report_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::report;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const MegatronLog log = parse_megatron_log(text);
  if (log.ok()) (void)to_json(log.report).dump();  // what compare prints from it
  return 0;
}
