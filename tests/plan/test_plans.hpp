#pragma once
// Plans for tests: a small valid base in YAML, and helpers to load variations of it.

#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "plan/plan_io.hpp"

namespace meshwork::plan::testing {

// 64 GPUs: TP 8 x PP 2 x DP 4 of a GPT-3-shaped model.
inline constexpr std::string_view kBasePlan = R"(schema_version: 1
name: base
model:
  num_layers: 24
  hidden_size: 4096
  num_attention_heads: 32
  seq_length: 2048
  vocab_size: 51200
training:
  global_batch_size: 64
  micro_batch_size: 2
parallelism:
  tp: 8
  pp: 2
cluster:
  gpu: h100-sxm
  num_gpus: 64
)";

inline LoadResult load_yaml(std::string_view text) { return load_plan_text(text, Format::yaml); }

inline Plan base_plan() {
  auto r = load_yaml(kBasePlan);
  EXPECT_TRUE(r.ok());
  return r.plan;
}

inline std::string dump(const Diagnostics& d) {
  std::string out;
  for (const auto& item : d.items()) out += format(item) + "\n";
  return out;
}

// True when there is an error at `path` whose message contains `text`.
inline bool has_error(const Diagnostics& d, std::string_view path, std::string_view text = {}) {
  for (const auto& item : d.items()) {
    if (item.severity == Severity::error && item.path == path && item.message.find(text) != std::string::npos) return true;
  }
  return false;
}

inline bool has_warning(const Diagnostics& d, std::string_view path, std::string_view text = {}) {
  for (const auto& item : d.items()) {
    if (item.severity == Severity::warning && item.path == path && item.message.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace meshwork::plan::testing
