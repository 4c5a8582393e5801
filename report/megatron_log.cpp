#include "report/megatron_log.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace meshwork::report {
namespace {

// Megatron-LM's field names (training.py, training_log()), and Megatron-DeepSpeed's.
constexpr std::string_view kElapsed = "elapsed time per iteration (ms)";
constexpr std::string_view kElapsedSeconds = "elapsed time per iteration (s)";  // Megatron-DeepSpeed
constexpr std::string_view kThroughput = "throughput per GPU (TFLOP/s/GPU)";
constexpr std::string_view kHardwareTflops = "TFLOPs";  // Megatron-DeepSpeed: hardware FLOPs per GPU
constexpr std::string_view kSamplesPerSecond = "samples per second";
constexpr std::string_view kConsumedSamples = "consumed samples";
constexpr std::string_view kConsumedTokens = "consumed tokens";
constexpr std::string_view kGlobalBatch = "global batch size";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The whole of `s` as a number; "nan" and "inf", which from_chars reads, are not measurements.
template <typename T>
std::optional<T> number(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return std::nullopt;
  }
  return v;
}

// "iteration <N>/ <M> |": the iteration and where the fields after the '|' start. Other lines
// that mention iterations ("validation loss at iteration 100 |", "elapsed time per
// iteration (ms)") have no "N/M".
std::optional<std::pair<std::int64_t, std::size_t>> header(std::string_view line) {
  constexpr std::string_view word = "iteration";
  for (std::size_t at = line.find(word); at != std::string_view::npos;
       at = line.find(word, at + 1)) {
    std::size_t i = at + word.size();
    auto spaces = [&] {
      const std::size_t from = i;
      while (i < line.size() && line[i] == ' ') ++i;
      return i - from;
    };
    auto digits = [&] {
      const std::size_t from = i;
      while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
      return line.substr(from, i - from);
    };
    if (spaces() == 0) continue;
    const std::string_view n = digits();
    if (n.empty()) continue;
    spaces();
    if (i >= line.size() || line[i] != '/') continue;
    ++i;
    spaces();
    if (digits().empty()) continue;
    spaces();
    if (i >= line.size() || line[i] != '|') continue;
    const auto iteration = number<std::int64_t>(n);
    if (!iteration) continue;
    return std::pair{*iteration, i + 1};
  }
  return std::nullopt;
}

// "using world size: 16, data-parallel size: 4, context-parallel size: 1 tensor-model-parallel
// size: 4, pipeline-model-parallel size: 1" (Megatron-LM's initialize, rank 0): the number after
// `key` and a colon.
std::optional<std::int64_t> after(std::string_view line, std::string_view key) {
  const std::size_t at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + key.size());
  if (rest.empty() || rest.front() != ':') return std::nullopt;
  rest = trim(rest.substr(1));
  std::size_t n = 0;
  while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
  return number<std::int64_t>(rest.substr(0, n));
}

// The arguments dump both forks print at start-up: "  seq_length ...................... 4096".
std::optional<std::pair<std::string_view, std::string_view>> argument(std::string_view line) {
  line = trim(line);
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return std::nullopt;
  std::string_view rest = trim(line.substr(space));
  std::size_t dots = 0;
  while (dots < rest.size() && rest[dots] == '.') ++dots;
  if (dots < 3) return std::nullopt;
  return std::pair{line.substr(0, space), trim(rest.substr(dots))};
}

void read_shape_line(std::string_view line, LoggedShape& shape) {
  if (line.find("using world size") != std::string_view::npos) {
    shape.world_size = after(line, "world size");
    shape.data = after(line, "data-parallel size");
    shape.context = after(line, "context-parallel size");
    shape.tensor = after(line, "tensor-model-parallel size");
    shape.pipeline = after(line, "pipeline-model-parallel size");
    return;
  }
  const auto arg = argument(line);
  if (!arg) return;
  const auto v = number<std::int64_t>(arg->second);
  if (!v) return;
  const std::string_view key = arg->first;
  if (key == "world_size") shape.world_size = v;
  else if (key == "tensor_model_parallel_size") shape.tensor = v;
  else if (key == "pipeline_model_parallel_size") shape.pipeline = v;
  else if (key == "data_parallel_size") shape.data = v;
  else if (key == "context_parallel_size") shape.context = v;
  else if (key == "expert_model_parallel_size") shape.expert = v;
  else if (key == "global_batch_size") shape.global_batch_size = v;
  else if (key == "micro_batch_size") shape.micro_batch_size = v;
  else if (key == "seq_length") shape.seq_length = v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Marks the warm-up: a segment restarts when the iteration count does not grow (a job
// restarted from a checkpoint, or a second run in the same file). Each line's interval runs
// from the previous line's iteration; the first line of a segment is taken to span the log
// interval (the gap to the next line).
std::int64_t mark_warmup(std::vector<MegatronInterval>& v, std::int64_t warmup_iterations) {
  std::int64_t segments = 0;
  for (std::size_t begin = 0; begin < v.size();) {
    std::size_t end = begin + 1;
    while (end < v.size() && v[end].iteration > v[end - 1].iteration) ++end;
    ++segments;
    const std::int64_t gap = end - begin > 1 ? v[begin + 1].iteration - v[begin].iteration : 1;
    v[begin].first_iteration = std::max<std::int64_t>(1, v[begin].iteration - gap + 1);
    for (std::size_t i = begin + 1; i < end; ++i) v[i].first_iteration = v[i - 1].iteration + 1;
    const std::int64_t start = v[begin].first_iteration;
    for (std::size_t i = begin; i < end; ++i)
      v[i].warmup = v[i].first_iteration < start + warmup_iterations;
    begin = end;
  }
  return segments;
}

}  // namespace

MegatronLog parse_megatron_log(std::string_view text, const MegatronLogOptions& options) {
  MegatronLog log;
  std::int64_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    const auto h = header(line);
    if (!h) {
      read_shape_line(line, log.shape);
      continue;
    }
    MegatronInterval it;
    it.line = line_no;
    it.iteration = h->first;
    bool elapsed_key = false;
    auto error = [&](const std::string& message) {
      log.errors.push_back(std::to_string(line_no) + ": " + message);
    };
    std::string_view rest = line.substr(h->second);
    while (!rest.empty()) {
      const std::size_t bar = rest.find('|');
      const std::string_view field = trim(rest.substr(0, bar));
      rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
      const std::size_t colon = field.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view key = trim(field.substr(0, colon)),
                             value = trim(field.substr(colon + 1));
      if (key == kElapsed || key == kElapsedSeconds) {
        elapsed_key = true;
        if (key == kElapsedSeconds) log.format = MegatronLogFormat::megatron_deepspeed;
        const auto v = number<double>(value);
        if (!v || !(*v > 0)) {
          error("'" + std::string(key) + "' must be a positive number, not '" + std::string(value) + "'");
        } else {
          it.elapsed_ms = key == kElapsedSeconds ? *v * 1e3 : *v;
        }
      } else if (key == kHardwareTflops || key == kSamplesPerSecond) {
        const auto v = number<double>(value);
        if (!v || *v < 0) {
          error("'" + std::string(key) + "' must be a number >= 0, not '" + std::string(value) + "'");
        } else {
          (key == kHardwareTflops ? it.hardware_tflops_per_gpu : it.samples_per_s) = *v;
        }
      } else if (key == kConsumedSamples) {
        it.consumed_samples = number<std::int64_t>(value);
      } else if (key == kConsumedTokens) {
        it.consumed_tokens = number<std::int64_t>(value);
      } else if (key == kThroughput) {
        const auto v = number<double>(value);
        if (!v || *v < 0) {
          error("'" + std::string(kThroughput) + "' must be a number >= 0, not '" +
                std::string(value) + "'");
        } else {
          it.tflops_per_gpu = *v;
        }
      } else if (key == kGlobalBatch) {
        it.global_batch_size = number<std::int64_t>(value);
      }
    }
    if (!elapsed_key) {
      error("an iteration line without '" + std::string(kElapsed) + "' (Megatron-LM) or '" +
            std::string(kElapsedSeconds) + "' (Megatron-DeepSpeed)");
    }
    if (it.elapsed_ms > 0) log.intervals.push_back(it);
  }
  if (log.intervals.empty() && log.errors.empty()) {
    log.errors.push_back("no Megatron-LM or Megatron-DeepSpeed iteration lines (\" iteration N/ M | ... | " +
                         std::string(kElapsed) + ": T |\", or '" + std::string(kElapsedSeconds) + "')");
  }
  if (!log.ok()) return log;

  const std::int64_t segments = mark_warmup(log.intervals, options.warmup_iterations);
  std::vector<const MegatronInterval*> used;
  for (const auto& it : log.intervals) {
    if (!it.warmup) used.push_back(&it);
  }
  Report& r = log.report;
  r.method = Method::measured;
  const bool all_warmup = used.empty();
  if (all_warmup) {
    for (const auto& it : log.intervals) used.push_back(&it);
  }
  std::vector<double> ms, tflops, hardware_tflops, samples_per_s;
  std::int64_t batch_lo = 0, batch_hi = 0;
  for (const auto* it : used) {
    ms.push_back(it->elapsed_ms);
    if (it->tflops_per_gpu) tflops.push_back(*it->tflops_per_gpu);
    if (it->hardware_tflops_per_gpu) hardware_tflops.push_back(*it->hardware_tflops_per_gpu);
    if (it->samples_per_s) samples_per_s.push_back(*it->samples_per_s);
    if (it->global_batch_size) {
      batch_lo =
          batch_lo == 0 ? *it->global_batch_size : std::min(batch_lo, *it->global_batch_size);
      batch_hi = std::max(batch_hi, *it->global_batch_size);
    }
  }
  r.step_time_s = median(ms) / 1e3;
  const std::size_t skipped = log.intervals.size() - (all_warmup ? 0 : used.size());
  const std::string name = log.format == MegatronLogFormat::megatron_lm ? "Megatron-LM" : "Megatron-DeepSpeed";
  r.notes.push_back(name + " log: step time is the median over " + std::to_string(used.size()) +
                    " logged interval(s) (iterations " +
                    std::to_string(used.front()->first_iteration) + "-" +
                    std::to_string(used.back()->iteration) +
                    ") of the elapsed time per iteration; " + std::to_string(skipped) +
                    " warm-up interval(s) skipped (those holding any of a run's first " +
                    std::to_string(options.warmup_iterations) + " iterations)");
  if (all_warmup) {
    r.notes.push_back("every logged interval holds warm-up iterations: the median includes them");
  }
  if (segments > 1) {
    r.notes.push_back(
        std::to_string(segments) +
        " runs in the log (the iteration count restarts); each one's warm-up skipped");
  }
  if (!tflops.empty()) {
    // Megatron-LM's throughput is num_floating_point_operations() / (time x world size):
    // model FLOPs (no recomputation), with causal attention counted as half the score matrix
    // in current versions ("causal mask (only half of the mask is non-zero)").
    r.model_tflops_per_gpu = median(tflops);
    r.notes.push_back("throughput per GPU (TFLOP/s/GPU) " + fmt("%.1f", r.model_tflops_per_gpu) +
                      " is Megatron-LM's model FLOPs: no recomputation, causal attention as half "
                      "the score matrix "
                      "in current versions (compare with `meshwork estimate --causal-flops`)");
  }
  if (batch_hi > 0) {
    r.notes.push_back(batch_lo == batch_hi
                          ? "global batch size " + std::to_string(batch_hi)
                          : "global batch size varies from " + std::to_string(batch_lo) + " to " +
                                std::to_string(batch_hi) + " (batch-size ramp-up)");
  }
  if (!hardware_tflops.empty()) {
    // Megatron-DeepSpeed's TFLOPs: per GPU, hardware FLOPs with activation recomputation
    // (BigScience's throughput formula counts the recomputed forward; docs/reference/megatron-logs/SOURCES.md).
    r.hardware_tflops_per_gpu = median(hardware_tflops);
    r.notes.push_back("TFLOPs " + fmt("%.1f", r.hardware_tflops_per_gpu) +
                      " is Megatron-DeepSpeed's hardware FLOPs per GPU: recomputation included");
  }

  // The run's shape: the arguments dump first, then what the iteration lines imply.
  LoggedShape& shape = log.shape;
  if (!shape.global_batch_size && batch_hi > 0 && batch_lo == batch_hi) shape.global_batch_size = batch_hi;
  if (!shape.seq_length) {
    for (auto it = used.rbegin(); it != used.rend(); ++it) {
      const auto& x = **it;
      if (x.consumed_samples && x.consumed_tokens && *x.consumed_samples > 0 && *x.consumed_tokens % *x.consumed_samples == 0) {
        shape.seq_length = *x.consumed_tokens / *x.consumed_samples;
        break;
      }
    }
  }
  if (shape.world_size) r.num_gpus = *shape.world_size;
  r.shape = {shape.global_batch_size.value_or(0), shape.micro_batch_size.value_or(0), shape.seq_length.value_or(0),
             shape.tensor.value_or(0),            shape.pipeline.value_or(0),         shape.data.value_or(0),
             shape.context.value_or(0),           shape.expert.value_or(0)};
  if (!samples_per_s.empty() && shape.seq_length) {
    r.tokens_per_s = median(samples_per_s) * static_cast<double>(*shape.seq_length);
    r.notes.push_back("tokens/s is the logged samples per second x the sequence length " +
                      std::to_string(*shape.seq_length) + " (consumed tokens over consumed samples)");
  }

  log.lacks = {"mfu", "hfu"};
  if (tflops.empty()) log.lacks.push_back("tflops_per_gpu.model");
  if (hardware_tflops.empty()) log.lacks.push_back("tflops_per_gpu.hardware");
  if (r.tokens_per_s <= 0) log.lacks.push_back("tokens_per_s");
  log.lacks.insert(log.lacks.end(), {"breakdown", "op_times"});
  return log;
}

std::string_view to_string(MegatronLogFormat f) {
  return f == MegatronLogFormat::megatron_lm ? "Megatron-LM" : "Megatron-DeepSpeed";
}

}  // namespace meshwork::report
