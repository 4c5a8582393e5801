#pragma once
// A Megatron-LM training log as a measured Report. Megatron-LM prints, every log interval
// (megatron/training/training.py, training_log()):
//   [ts] iteration 10/ 500 | consumed samples: 640 | elapsed time per iteration (ms): 1234.5 |
//        throughput per GPU (TFLOP/s/GPU): 150.3 | learning rate: ... | global batch size: 64 | ...
// where the elapsed time is the interval's wall-clock time over its iterations and the
// throughput (with --log-throughput) is num_floating_point_operations() over that time and
// the world size. The step time is the median over the intervals after the warm-up.

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
  bool warmup = false;
};

struct MegatronLog {
  std::vector<MegatronInterval> intervals;
  Report report;  // method measured: step_time_s, model_tflops_per_gpu when logged, notes
  std::vector<std::string> lacks;   // what the Report does not give, as compare() names it
  std::vector<std::string> errors;  // "LINE: message", or one message without a line
  [[nodiscard]] bool ok() const { return errors.empty(); }
};

// Every problem is collected; a log without a single iteration line is an error.
MegatronLog parse_megatron_log(std::string_view text, const MegatronLogOptions& options = {});

}  // namespace meshwork::report
