#pragma once
// A Megatron training log as a measured Report, in either of the two formats in use:
// - Megatron-LM (megatron/training/training.py, training_log()), every log interval:
//     [ts] iteration 10/ 500 | consumed samples: 640 | elapsed time per iteration (ms): 1234.5 |
//          throughput per GPU (TFLOP/s/GPU): 150.3 | learning rate: ... | global batch size: 64 | ...
//   The throughput (with --log-throughput) is num_floating_point_operations() over the time
//   and the world size: model FLOPs.
// - Megatron-DeepSpeed (BigScience's fork, megatron/training.py), often behind a launcher's rank
//   prefix ("[default7]:"):
//     iteration 31214/ 115311 | consumed samples: 47768496 | consumed tokens: 97829879808 |
//     elapsed time per iteration (s): 106.46 | ... | samples per second: 19.238 | TFLOPs: 147.29 |
//   Seconds, not milliseconds; TFLOPs per GPU are hardware FLOPs (recomputation included).
// The elapsed time is the interval's wall-clock time over its iterations; the step time is the
// median over the intervals after the warm-up. What the log says of the run's shape (world
// size and mesh from "using world size: ..." or the arguments dump, the global batch, the
// sequence from consumed tokens over samples or seq_length) is kept for checking the prediction.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report/report.hpp"

namespace meshwork::report {

struct MegatronLogOptions {
  // Intervals holding any of each run segment's first iterations are skipped: the first
  // iterations build CUDA graphs and NCCL communicators, compile kernels and fill the caching
  // allocator.
  std::int64_t warmup_iterations = 3;
};

// One "iteration N/M | ..." line.
struct MegatronInterval {
  std::int64_t line = 0;       // 1-based line of the log
  std::int64_t iteration = 0;  // the last iteration of the interval
  std::int64_t first_iteration = 0;
  double elapsed_ms = 0;  // per iteration, the interval's mean
  std::optional<double> tflops_per_gpu;
  std::optional<std::int64_t> global_batch_size;
  std::optional<double> hardware_tflops_per_gpu;  // Megatron-DeepSpeed's TFLOPs
  std::optional<double> samples_per_s;
  std::optional<std::int64_t> consumed_samples, consumed_tokens;
  bool warmup = false;
};

enum class MegatronLogFormat { megatron_lm, megatron_deepspeed };
std::string_view to_string(MegatronLogFormat f);

// What a log says of the run it measured; empty where it says nothing.
struct LoggedShape {
  std::optional<std::int64_t> world_size, tensor, pipeline, data, context, expert;
  std::optional<std::int64_t> global_batch_size, micro_batch_size, seq_length;
};

struct MegatronLog {
  MegatronLogFormat format = MegatronLogFormat::megatron_lm;
  std::vector<MegatronInterval> intervals;
  LoggedShape shape;
  Report report;  // method measured: step_time_s, model_tflops_per_gpu when logged, notes
  std::vector<std::string> lacks;   // what the Report does not give, as compare() names it
  std::vector<std::string> errors;  // "LINE: message", or one message without a line
  [[nodiscard]] bool ok() const { return errors.empty(); }
};

// Every problem is collected; a log without a single iteration line is an error.
MegatronLog parse_megatron_log(std::string_view text, const MegatronLogOptions& options = {});

}  // namespace meshwork::report
