// `meshwork compare` end to end, in-process: an estimate against itself and against the
// Megatron-LM sample logs, and the errors that name the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.hpp"

namespace meshwork::cli {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = MESHWORK_SOURCE_DIR;

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome meshwork(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

class Compare : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_);
    const Outcome r =
        meshwork({"estimate", "--json", (kSource / "scenarios/gpt3-175b-a100-1024.yaml").string()});
    ASSERT_EQ(r.code, 0) << r.err;
    std::ofstream(predicted_) << r.out;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  // One directory per test: ctest runs this fixture's tests in parallel processes, and one
  // test's clean-up must not remove another's files.
  const fs::path dir_ = fs::temp_directory_path() / ("meshwork-compare-test-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  const std::string predicted_ = (dir_ / "predicted.json").string();
  const std::string log_ = (kSource / "tests/data/megatron/gpt-tp2-pp2-interval1.log").string();
};

TEST_F(Compare, AReportAgainstItselfHasNoError) {
  const Outcome r = meshwork({"compare", predicted_, predicted_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("step_time_error_s"), 0.0);
  for (const auto& row : j.at("rows")) EXPECT_EQ(row.at("abs_error"), 0.0) << row;
  EXPECT_EQ(j.at("measured_source"), "Report");
}

TEST_F(Compare, AMegatronLogGivesStepTimeAndThroughputAndSaysWhatItLacks) {
  Outcome r = meshwork({"compare", predicted_, log_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("measured_source"), "Megatron-LM log");
  EXPECT_EQ(j.at("rows")[0].at("what"), "step_time_s");
  EXPECT_DOUBLE_EQ(j.at("rows")[0].at("measured").get<double>(), 12.5104);
  EXPECT_EQ(j.at("rows")[3].at("what"), "tflops_per_gpu.model");
  EXPECT_DOUBLE_EQ(j.at("rows")[3].at("measured").get<double>(), 155.7);
  EXPECT_TRUE(j.at("rows")[1].at("measured").is_null());  // mfu
  r = meshwork({"compare", predicted_, log_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      r.out.find(
          "measured lacks: mfu, hfu, tflops_per_gpu.hardware, tokens_per_s, breakdown, op_times"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("3 warm-up interval(s) skipped"), std::string::npos) << r.out;
}

// Issue 24: a GPT-3 1,024-GPU prediction was compared with a 16-GPU Mixtral log without a word.
TEST_F(Compare, ALogOfAnotherRunIsNamedAndBothLogFormatsAreRead) {
  const std::string logs = (kSource / "docs/reference/megatron-logs").string();
  Outcome r = meshwork({"compare", predicted_, logs + "/megatron-lm-issue756_mixtral-8x7b_16xH100_tp4dp4_turn0.log", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: not the predicted run: the measured run's world size is 16, the predicted run's 1024"),
            std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("mismatches").size(), 5u);

  // The BLOOM run as predicted, against its Megatron-DeepSpeed log: batch and sequence agree;
  // the log does not give its world size, and the warning says so.
  const fs::path bloom = dir_ / "bloom.json";
  r = meshwork({"estimate", "--json", (kSource / "scenarios/heldout/bloom-176b-a100-384.yaml").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ofstream(bloom) << r.out;
  r = meshwork({"compare", bloom.string(), logs + "/bloom-176b_megatron-deepspeed_384xA100-80G_tp4pp12dp8.log", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("measured_source"), "Megatron-DeepSpeed log");
  EXPECT_TRUE(j.at("mismatches").empty()) << j.at("mismatches");
  EXPECT_NE(r.err.find("the log does not give its world size"), std::string::npos) << r.err;
  EXPECT_NEAR(j.at("rows")[0].at("measured").get<double>(), 106.315, 1e-9);
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;

  // Both turns of the issue-756 log read.
  r = meshwork({"compare", predicted_, logs + "/megatron-lm-issue756_mixtral-8x7b_16xH100_ep8_turn1.log"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Compare, BadInputsAreNamedAndExitOne) {
  auto fails = [](const std::vector<std::string>& args, const std::string& message) {
    const Outcome r = meshwork(args);
    EXPECT_EQ(r.code, 1) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << "wanted \"" << message << "\", got:\n"
                                                      << r.err;
  };
  fails({"compare", "/nonexistent/p.json", log_},
        "/nonexistent/p.json: error: the file does not exist");
  const std::string empty = write("empty.json", "{}");
  fails({"compare", predicted_, empty}, empty + ": error: not a meshwork Report: ");
  fails({"compare", log_, predicted_},
        log_ + ": error: not a meshwork Report: PREDICTED is a Report as JSON");
  const std::string no_lines = write("no-lines.log", "starting\nbye\n");
  fails({"compare", predicted_, no_lines}, no_lines + ": error: no Megatron-LM or Megatron-DeepSpeed iteration lines");
  const std::string bad =
      write("bad.log", "x\n iteration 1/ 9 | elapsed time per iteration (ms): soon |\n");
  fails({"compare", predicted_, bad},
        bad + ":2: error: 'elapsed time per iteration (ms)' must be a positive number");
}

TEST_F(Compare, UsageErrorsExitTwo) {
  EXPECT_EQ(meshwork({"compare", predicted_}).code, 2);
  EXPECT_EQ(meshwork({"compare", predicted_, log_, "--csv"}).code, 2);
  const Outcome help = meshwork({"compare", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("MEASURED"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace meshwork::cli
