#include "plan/units.hpp"

#include <gtest/gtest.h>

namespace meshwork::plan {
namespace {

double q(std::string_view text, Unit u) {
  auto r = parse_quantity(text, u);
  EXPECT_TRUE(r.value.has_value()) << text << ": " << r.error;
  return r.value.value_or(-1);
}

TEST(Units, NetworkRatesConvertBetweenBitsAndBytes) {
  EXPECT_DOUBLE_EQ(q("400Gb/s", Unit::gbps), 400);
  EXPECT_DOUBLE_EQ(q("50GB/s", Unit::gbps), 400);
  EXPECT_DOUBLE_EQ(q("3.2Tb/s", Unit::gbytes_per_s), 400);
  EXPECT_DOUBLE_EQ(q("200 Gbps", Unit::gbps), 200);
}

// Issue 24: ports are named by their bit rate alone ("400G", "800G", "1.6T").
TEST(Units, NetworkPortsAsPeopleNameThem) {
  EXPECT_DOUBLE_EQ(q("400G", Unit::gbps), 400);
  EXPECT_DOUBLE_EQ(q("800G", Unit::gbps), 800);
  EXPECT_DOUBLE_EQ(q("1.6T", Unit::gbps), 1600);
  EXPECT_DOUBLE_EQ(q("400Gbit/s", Unit::gbps), 400);
  EXPECT_DOUBLE_EQ(q("400GbE", Unit::gbps), 400);
  EXPECT_DOUBLE_EQ(q("400GB/s", Unit::gbps), 3200);  // bytes: read as written, validate warns
  // In a bytes field "400G" is ambiguous and stays an error.
  EXPECT_FALSE(parse_quantity("400G", Unit::gbytes_per_s).value);
}

TEST(Units, Durations) {
  EXPECT_DOUBLE_EQ(q("2us", Unit::microseconds), 2);
  EXPECT_DOUBLE_EQ(q("1.5ms", Unit::microseconds), 1500);
  EXPECT_DOUBLE_EQ(q("1h", Unit::seconds), 3600);
  EXPECT_DOUBLE_EQ(q("54d", Unit::seconds), 54 * 86400);
  EXPECT_DOUBLE_EQ(q("10min", Unit::seconds), 600);
  EXPECT_DOUBLE_EQ(q("125d", Unit::hours), 3000);
}

TEST(Units, CountsAndSizes) {
  EXPECT_DOUBLE_EQ(q("300e9", Unit::count), 300e9);
  EXPECT_DOUBLE_EQ(q("15T", Unit::count), 15e12);
  EXPECT_DOUBLE_EQ(q("2.5B", Unit::count), 2.5e9);
  EXPECT_DOUBLE_EQ(q("80GiB", Unit::gib), 80);
  EXPECT_DOUBLE_EQ(q("1TiB", Unit::gib), 1024);
  EXPECT_DOUBLE_EQ(q("1.2kW", Unit::watts), 1200);
}

TEST(Units, RejectsWrongDimensionUnknownUnitAndGarbage) {
  EXPECT_FALSE(parse_quantity("2us", Unit::gbps).value);
  EXPECT_FALSE(parse_quantity("400Gb/s", Unit::seconds).value);
  EXPECT_FALSE(parse_quantity("5 parsecs", Unit::seconds).value);
  EXPECT_FALSE(parse_quantity("fast", Unit::gbps).value);
  EXPECT_FALSE(parse_quantity("", Unit::seconds).value);
  EXPECT_FALSE(parse_quantity("inf", Unit::seconds).value);
  EXPECT_FALSE(parse_quantity("nan h", Unit::seconds).value);
  EXPECT_FALSE(parse_quantity("1e999s", Unit::seconds).value);
  // A number without a unit inside a string is ambiguous for a dimensioned field.
  EXPECT_FALSE(parse_quantity("400", Unit::gbps).value);
  auto r = parse_quantity("5 parsecs", Unit::seconds);
  EXPECT_NE(r.error.find("unknown unit \"parsecs\""), std::string::npos) << r.error;
}

TEST(Units, FormatsDurations) {
  EXPECT_EQ(format_duration(54 * 86400), "54d");
  EXPECT_EQ(format_duration(7200), "2h");
  EXPECT_EQ(format_duration(2e-6), "2us");
}

}  // namespace
}  // namespace meshwork::plan
