#pragma once
// Quantities in plan files: a number in the unit its key names (`latency_us: 2`), or a string
// with a unit (`"2us"`, `"400Gb/s"`, `"54d"`, `"300e9"`, `"15T"`), converted to the key's unit.

#include <optional>
#include <string>
#include <string_view>

namespace meshwork::plan {

enum class Dimension { none, count, time, data_rate, data_size, power };

// The unit a field's number is stored in. `none` takes plain numbers only.
enum class Unit {
  none,
  count,         // tokens, samples: "300e9", "15T", "2.5B"
  seconds,
  microseconds,
  hours,
  gbps,          // gigabits per second (network links)
  gbytes_per_s,  // gigabytes per second (NVLink, HBM, storage)
  gib,           // gibibytes (HBM capacity)
  watts,
};

Dimension dimension(Unit u);
// The short suffix used in docs and keys: "s", "us", "h", "Gb/s", "GB/s", "GiB".
std::string_view symbol(Unit u);
// Examples of accepted strings, for error messages: "\"2us\", \"1.5ms\", \"1h\"".
std::string_view examples(Unit u);

struct QuantityError {
  std::string message;
};

// Parses "400Gb/s" into the field's unit (50 GB/s → 400 for Unit::gbps). Returns the value,
// or an error that says what was wrong and what would be accepted.
struct ParsedQuantity {
  std::optional<double> value;
  std::string error;
};
ParsedQuantity parse_quantity(std::string_view text, Unit target);

// Formats a duration the way people write it: "54d", "2h", "90s", "2us".
std::string format_duration(double seconds);

// Plain number parsing without locale effects; whole string must be a finite number.
std::optional<double> parse_number(std::string_view text);

}  // namespace meshwork::plan
