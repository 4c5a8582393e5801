#include "report/report_io.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace meshwork::report {
namespace {

Report sample() {
  Report r;
  r.method = Method::measured;
  r.plan_name = "p, \"quoted\"";
  r.num_gpus = 64;
  r.step_time_s = 13.75;
  r.mfu = 0.514;
  r.hfu = 0.528;
  r.model_tflops_per_gpu = 160.4;
  r.hardware_tflops_per_gpu = 164.7;
  r.tokens_per_s = 9532.1;
  r.bubble_fraction = 7.0 / 192;
  r.breakdown = {10, 0.5, 1, 0, 0, 0.25, 0.1, 1.5, 0.4, 0};
  r.memory.push_back({0, 12, 5.1, 5.1, 30.2, 12.5, 1.8, 54.7, 80, true});
  r.fits = true;
  r.power = {400, 5200, 0.0416, 4.3};
  r.notes = {"a note"};
  r.provenance = {"0.1.0", "abc123", "0123456789abcdef", "a100-sxm-80gb (ampere calibration)", 7};
  return r;
}

TEST(ReportIo, JsonRoundTripIsExact) {
  const Report r = sample();
  const auto j = to_json(r);
  EXPECT_EQ(to_json(from_json(j)), j);
  EXPECT_EQ(j["method"], "measured");
  EXPECT_EQ(j["provenance"]["method"], "measured");
}

TEST(ReportIo, CsvQuotesNamesAndKeepsColumnsAligned) {
  const std::string header = csv_header();
  const std::string row = csv_row(sample());
  EXPECT_EQ(row.rfind("\"p, \"\"quoted\"\"\",measured,64,", 0), 0u) << row;
  // One more comma inside the quoted name than the header has.
  EXPECT_EQ(std::count(row.begin(), row.end(), ','), std::count(header.begin(), header.end(), ',') + 1);
}

TEST(ReportIo, MalformedJsonThrowsAJsonException) {
  EXPECT_THROW(from_json(nlohmann::json::object()), nlohmann::json::exception);
}

TEST(ReportIo, Fnv1aIsTheStandardHash) {
  EXPECT_EQ(fnv1a_hex(""), "cbf29ce484222325");   // FNV-1a 64 offset basis
  EXPECT_EQ(fnv1a_hex("a"), "af63dc4c8601ec8c");  // published test vector
}

}  // namespace
}  // namespace meshwork::report
