// libFuzzer target for what `execute --resume` reads: checkpoint shards and the `latest`
// tracker. Any bytes give a state or a std::runtime_error naming the file, never another
// exception, a crash, a hang or a sanitizer report; a shard that parses survives writing and
// reading again. The first byte picks the reader, so both are fuzzed from one corpus.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshwork::exec;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    const LatestRecord r = parse_latest(bytes);
    if (r.step.has_value() == !r.problem.empty() || (r.step && *r.step < 1)) __builtin_trap();  // one of the two, and a real step
    return 0;
  }
  try {
    const RankState s = parse_shard(bytes, "fuzz.ckpt");
    if (s.plan_hash.size() > 1024) __builtin_trap();
    // Bitwise: a NaN parameter must come back as the same NaN.
    const std::string again = serialize_shard(s);
    if (serialize_shard(parse_shard(again, "again.ckpt")) != again) __builtin_trap();
  } catch (const std::runtime_error&) {
    // Refused, with the file named: what a resume warns about and skips.
  }
  return 0;
}
