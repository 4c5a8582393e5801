#include "plan/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace meshwork::plan {
namespace {

struct UnitSymbol {
  std::string_view text;
  Dimension dim;
  double to_base;  // base units: 1, seconds, bytes per second, bytes, watts
};

// Decimal prefixes for bits and bytes (IEC 80000-13: "G" = 1e9; "Gi" = 2^30). Network rates are
// in bits (InfiniBand NDR = 400 Gb/s per port), memory and storage in bytes.
constexpr double kKi = 1024.0;
constexpr std::array kSymbols = {
    UnitSymbol{"", Dimension::count, 1.0},
    UnitSymbol{"K", Dimension::count, 1e3},
    UnitSymbol{"M", Dimension::count, 1e6},
    UnitSymbol{"B", Dimension::count, 1e9},  // billions (tokens, parameters)
    UnitSymbol{"T", Dimension::count, 1e12},
    UnitSymbol{"ns", Dimension::time, 1e-9},
    UnitSymbol{"us", Dimension::time, 1e-6},
    UnitSymbol{"\xC2\xB5s", Dimension::time, 1e-6},  // µs
    UnitSymbol{"ms", Dimension::time, 1e-3},
    UnitSymbol{"s", Dimension::time, 1.0},
    UnitSymbol{"sec", Dimension::time, 1.0},
    UnitSymbol{"min", Dimension::time, 60.0},
    UnitSymbol{"h", Dimension::time, 3600.0},
    UnitSymbol{"hr", Dimension::time, 3600.0},
    UnitSymbol{"d", Dimension::time, 86400.0},
    UnitSymbol{"day", Dimension::time, 86400.0},
    UnitSymbol{"days", Dimension::time, 86400.0},
    UnitSymbol{"w", Dimension::time, 7 * 86400.0},
    UnitSymbol{"b/s", Dimension::data_rate, 1.0 / 8},
    UnitSymbol{"Kb/s", Dimension::data_rate, 1e3 / 8},
    UnitSymbol{"Mb/s", Dimension::data_rate, 1e6 / 8},
    UnitSymbol{"Gb/s", Dimension::data_rate, 1e9 / 8},
    UnitSymbol{"Gbps", Dimension::data_rate, 1e9 / 8},
    UnitSymbol{"Tb/s", Dimension::data_rate, 1e12 / 8},
    UnitSymbol{"Tbps", Dimension::data_rate, 1e12 / 8},
    UnitSymbol{"B/s", Dimension::data_rate, 1.0},
    UnitSymbol{"KB/s", Dimension::data_rate, 1e3},
    UnitSymbol{"MB/s", Dimension::data_rate, 1e6},
    UnitSymbol{"GB/s", Dimension::data_rate, 1e9},
    UnitSymbol{"TB/s", Dimension::data_rate, 1e12},
    UnitSymbol{"KiB/s", Dimension::data_rate, kKi},
    UnitSymbol{"MiB/s", Dimension::data_rate, kKi * kKi},
    UnitSymbol{"GiB/s", Dimension::data_rate, kKi * kKi * kKi},
    UnitSymbol{"TiB/s", Dimension::data_rate, kKi * kKi * kKi * kKi},
    UnitSymbol{"B", Dimension::data_size, 1.0},
    UnitSymbol{"KB", Dimension::data_size, 1e3},
    UnitSymbol{"MB", Dimension::data_size, 1e6},
    UnitSymbol{"GB", Dimension::data_size, 1e9},
    UnitSymbol{"TB", Dimension::data_size, 1e12},
    UnitSymbol{"PB", Dimension::data_size, 1e15},
    UnitSymbol{"KiB", Dimension::data_size, kKi},
    UnitSymbol{"MiB", Dimension::data_size, kKi * kKi},
    UnitSymbol{"GiB", Dimension::data_size, kKi * kKi * kKi},
    UnitSymbol{"TiB", Dimension::data_size, kKi * kKi * kKi * kKi},
    UnitSymbol{"W", Dimension::power, 1.0},
    UnitSymbol{"kW", Dimension::power, 1e3},
};

struct UnitInfo {
  Dimension dim;
  double to_base;
  std::string_view symbol;
  std::string_view examples;
};

UnitInfo info(Unit u) {
  switch (u) {
    case Unit::none: return {Dimension::none, 1.0, "", "a plain number"};
    case Unit::count: return {Dimension::count, 1.0, "", "300e9, \"2.5B\", \"15T\""};
    case Unit::seconds: return {Dimension::time, 1.0, "s", "\"600s\", \"10min\", \"2h\", \"54d\""};
    case Unit::microseconds: return {Dimension::time, 1e-6, "us", "\"2us\", \"1.5ms\""};
    case Unit::hours: return {Dimension::time, 3600.0, "h", "\"50000h\", \"125d\""};
    case Unit::gbps: return {Dimension::data_rate, 1e9 / 8, "Gb/s", "\"400Gb/s\", \"50GB/s\""};
    case Unit::gbytes_per_s: return {Dimension::data_rate, 1e9, "GB/s", "\"450GB/s\", \"3.2Tb/s\""};
    case Unit::gib: return {Dimension::data_size, kKi * kKi * kKi, "GiB", "\"80GiB\", \"141GB\""};
    case Unit::watts: return {Dimension::power, 1.0, "W", "\"700W\", \"1.2kW\""};
  }
  return {Dimension::none, 1.0, "", ""};
}

std::string_view dimension_name(Dimension d) {
  switch (d) {
    case Dimension::none: return "a plain number";
    case Dimension::count: return "a count";
    case Dimension::time: return "a duration";
    case Dimension::data_rate: return "a data rate";
    case Dimension::data_size: return "a data size";
    case Dimension::power: return "a power";
  }
  return "?";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Dimension dimension(Unit u) { return info(u).dim; }
std::string_view symbol(Unit u) { return info(u).symbol; }
std::string_view examples(Unit u) { return info(u).examples; }

std::optional<double> parse_number(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

ParsedQuantity parse_quantity(std::string_view text, Unit target) {
  const UnitInfo want = info(target);
  std::string_view s = trim(text);
  // The number is the longest prefix from_chars accepts; the rest is the unit symbol.
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double number = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || end == s.data()) {
    return {std::nullopt, "\"" + std::string(text) + "\" is not a quantity; write e.g. " +
                              std::string(want.examples)};
  }
  if (!std::isfinite(number)) {
    return {std::nullopt, "\"" + std::string(text) + "\" is not finite"};
  }
  const std::string_view unit = trim(std::string_view(end, static_cast<std::size_t>(s.data() + s.size() - end)));

  // Network ports are named by their bit rate alone: "400G" (400GbE, NDR), "800G", "1.6T".
  if (target == Unit::gbps && (unit == "G" || unit == "T" || unit == "Gb" || unit == "Gbit" || unit == "Gbit/s" || unit == "GbE")) {
    return {number * (unit == "T" ? 1e3 : 1.0), {}};
  }
  if (want.dim != Dimension::none) {
    for (const auto& sym : kSymbols) {
      if (sym.dim != want.dim || sym.text != unit) continue;
      if (unit.empty() && want.dim != Dimension::count) break;  // a bare number in a string
      return {number * sym.to_base / want.to_base, {}};
    }
    if (unit.empty()) {
      return {std::nullopt, "\"" + std::string(text) + "\" has no unit; write a plain number (in " +
                                std::string(want.symbol) + ") or e.g. " + std::string(want.examples)};
    }
  }
  for (const auto& sym : kSymbols) {
    if (sym.text == unit && sym.dim != want.dim && !unit.empty()) {
      return {std::nullopt, "\"" + std::string(text) + "\" is " + std::string(dimension_name(sym.dim)) + ", not " +
                                std::string(dimension_name(want.dim)) + "; write e.g. " + std::string(want.examples)};
    }
  }
  return {std::nullopt, "unknown unit \"" + std::string(unit) + "\" in \"" + std::string(text) +
                            "\"; write e.g. " + std::string(want.examples)};
}

std::string format_duration(double seconds) {
  struct Step {
    double size;
    const char* suffix;
  };
  constexpr Step steps[] = {{86400, "d"}, {3600, "h"}, {60, "min"}, {1, "s"}, {1e-3, "ms"}, {1e-6, "us"}};
  for (const auto& st : steps) {
    if (std::fabs(seconds) >= st.size) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g%s", seconds / st.size, st.suffix);
      return buf;
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6gs", seconds);
  return buf;
}

}  // namespace meshwork::plan
