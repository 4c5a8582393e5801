#pragma once
// The output IR (docs/DESIGN.md, "The report"): one schema for estimated, simulated and measured
// figures. Plain values; the writers are in report_io.hpp.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshwork::report {

inline constexpr std::int64_t kReportSchemaVersion = 1;

enum class Method { estimated, simulated, measured };
std::string_view to_string(Method m);

// Where the step time goes, in seconds; the parts add up to the step time.
struct Breakdown {
  double compute_s = 0;      // forward and backward of the slowest stage, all micro-batches
  double recompute_s = 0;    // forward work repeated by activation recomputation
  double tp_s = 0;           // exposed tensor-parallel communication
  double cp_s = 0;           // exposed context-parallel communication
  double ep_s = 0;           // exposed expert-parallel all-to-all
  double dp_s = 0;           // exposed data-parallel gradient reduction and parameter gather
  double pp_s = 0;           // exposed pipeline sends and receives
  double bubble_s = 0;       // pipeline fill and drain
  double optimizer_s = 0;
  double stalls_s = 0;       // checkpoint stalls, stragglers (simulator, executor)

  [[nodiscard]] double total() const {
    return compute_s + recompute_s + tp_s + cp_s + ep_s + dp_s + pp_s + bubble_s + optimizer_s + stalls_s;
  }
};

// Compute time of one op kind (models::to_string(OpKind): gemm, attention, elementwise, norm,
// embedding, loss) per step on the GPU of the slowest pipeline stage: forward, backward and
// recomputation of all its micro-batches and layers. The kinds add up to compute_s +
// recompute_s of the breakdown.
struct OpTime {
  std::string kind;
  double seconds = 0;
  std::int64_t count = 0;  // ops of this kind per step on that GPU
};

struct StageMemory {
  std::int64_t stage = 0;
  std::int64_t layers = 0;
  double weights_gib = 0, gradients_gib = 0, optimizer_gib = 0, activations_gib = 0, buffers_gib = 0;
  double total_gib = 0, capacity_gib = 0;
  bool fits = true;
  double headroom_gib = 0;  // what the plan should leave free (cluster.memory_headroom_fraction)
  bool tight = false;       // fits, with less than the headroom left
};

// The memory verdict of a plan: its fullest stage against its GPU's memory and headroom.
enum class MemoryVerdict { fits, tight, does_not_fit };
std::string_view to_string(MemoryVerdict v);

// The model's parameters (models/params.hpp). Embedding: the input table, learned positions and
// an untied LM head (a tied head is the input table, counted once). Active: what one token
// multiplies by, the routed top-k experts instead of all of them.
struct Parameters {
  double total = 0;
  double active = 0;
  double embedding = 0;
  [[nodiscard]] double non_embedding() const { return total - embedding; }
};

// What a prediction is of: a measured run of another shape is not its measurement (compare
// checks a log against it).
struct RunShape {
  std::int64_t global_batch_size = 0;  // 0: not known
  std::int64_t micro_batch_size = 0;
  std::int64_t seq_length = 0;
  std::int64_t tensor = 0, pipeline = 0, data = 0, context = 0, expert = 0;
};

struct Power {
  double gpu_watts = 0;          // one GPU, averaged over the step
  double node_watts = 0;         // one node at the wall
  double cluster_megawatts = 0;  // all nodes
  double joules_per_token = 0;
};

struct Provenance {
  std::string meshwork_version;
  std::string meshwork_commit;
  std::string plan_hash;         // FNV-1a of the resolved plan's JSON
  std::string hardware_profile;  // GPU and calibration generation
  std::int64_t seed = 0;
};

// A whole run with failures (sim/reliability.hpp): Monte Carlo means over trials, 95%
// intervals as half-widths.
struct Reliability {
  double horizon_s = 0;          // the run modelled (0 when it runs to the token target)
  std::int64_t trials = 0;
  std::int64_t seed = 0;
  double goodput = 0, goodput_ci95 = 0;  // ETTR: training kept over wall-clock time
  double interruptions = 0;              // per run
  double mtti_s = 0;                     // mean time to interruption (the plan's rates)
  double time_to_train_s = 0, time_to_train_ci95 = 0;  // with a token target
  double checkpoint_interval_s = 0;      // used
  double checkpoint_bytes = 0;
  double checkpoint_persist_s = 0;       // one persistent write: the slowest of storage, host links, snapshot
  double checkpoint_snapshot_s = 0;      // the device-to-host copy (an async checkpoint's stall)
  double checkpoint_min_interval_s = 0;  // one step, and one persistent write
  double best_interval_s = 0;            // from a sweep; 0 when none was run
  std::vector<std::pair<std::string, double>> interruptions_by_cause;  // per run
  std::vector<std::pair<std::string, double>> losses_s;               // per run, by cause
};

// The interval a prediction's step time and MFU lie in, from the errors of its tier on its GPU
// generation's published runs (models/calibration_set.hpp, prediction_interval); absent for a
// generation no published run checks, or a profile measured on the machine.
struct Interval {
  double level = 0;  // nominal coverage: 0.91 for a range of 21 cases, 0.90 for a normal interval
  double step_time_lo_s = 0, step_time_hi_s = 0;
  double mfu_lo = 0, mfu_hi = 0;
  std::string basis;  // the set and the method
};

struct Report {
  std::int64_t schema_version = kReportSchemaVersion;
  Method method = Method::estimated;
  std::string plan_name;
  std::int64_t num_gpus = 0;

  double step_time_s = 0;
  double mfu = 0;
  std::string mfu_attention = "full";  // how model FLOPs count causal attention: full or causal
  double hfu = 0;
  double model_tflops_per_gpu = 0;
  double hardware_tflops_per_gpu = 0;
  double tokens_per_s = 0;
  double bubble_fraction = 0;  // pipeline idle time over ideal compute time: (p-1)/m for 1F1B
  double time_to_train_s = 0;  // 0 when the plan gives no token count

  Breakdown breakdown;
  std::vector<OpTime> op_times;  // empty when the method does not time ops
  std::vector<StageMemory> memory;
  bool fits = true;
  Power power;
  Parameters parameters;
  RunShape shape;
  std::vector<std::string> notes;  // what the model assumed or could not do
  std::optional<Interval> interval;
  Provenance provenance;
  std::optional<Reliability> reliability;  // when a run was modelled

  // The fullest GPU of any pipeline stage, GiB.
  [[nodiscard]] double max_memory_gib() const {
    double most = 0;
    for (const auto& m : memory) most = most < m.total_gib ? m.total_gib : most;
    return most;
  }
  // That stage (nullptr without a memory figure).
  [[nodiscard]] const StageMemory* largest_stage() const {
    const StageMemory* most = nullptr;
    for (const auto& m : memory) {
      if (!most || most->total_gib < m.total_gib) most = &m;
    }
    return most;
  }
  [[nodiscard]] MemoryVerdict memory_verdict() const {
    if (!fits) return MemoryVerdict::does_not_fit;
    for (const auto& m : memory) {
      if (m.tight) return MemoryVerdict::tight;
    }
    return MemoryVerdict::fits;
  }
};

}  // namespace meshwork::report
