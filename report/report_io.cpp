#include "report/report_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace meshwork::report {

std::string_view to_string(Method m) {
  switch (m) {
    case Method::estimated: return "estimated";
    case Method::simulated: return "simulated";
    case Method::measured: return "measured";
  }
  return "?";
}

std::string_view to_string(MemoryVerdict v) {
  switch (v) {
    case MemoryVerdict::fits: return "fits";
    case MemoryVerdict::tight: return "tight";
    case MemoryVerdict::does_not_fit: return "does_not_fit";
  }
  return "?";
}

namespace {

constexpr const char* kDefinitions[][2] = {
    {"mfu", "model FLOPs per second over the dense peak of the precision used; model FLOPs as Korthikanti et al. 2022 eq. 7 (no recomputation), attention counted as mfu_attention says"},
    {"mfu_attention", "full: the whole s x s attention matrix, as the papers count it (Korthikanti et al. 2022 eq. 7); causal: its causal half, as Megatron-LM's throughput counts it (training.attention_flops)"},
    {"hfu", "hardware FLOPs per second (recomputation included) over the same peak"},
    {"bubble_fraction", "pipeline idle time over ideal compute time, the papers' convention: (p-1)/m for 1F1B"},
    {"breakdown", "seconds of the step; the parts add up to step_time_s; communication is what is exposed, not hidden under compute"},
    {"memory", "per GPU of each pipeline stage, GiB (2^30 bytes)"},
    {"memory_verdict", "fits: every stage within its GPU's memory with the headroom (cluster.memory_headroom_fraction) left; tight: within it, with less than the headroom left; does_not_fit: some stage needs more than its GPU has"},
    {"tokens_per_s", "global batch x sequence length / step time"},
    {"shape", "what the figures are of: batch, sequence and mesh of the plan (compare warns when a measured run's differ)"},
    {"parameters", "the model's parameters: embedding counts the input table, learned positions and an untied LM head (a tied head once); non_embedding the rest; active what one token multiplies by (MoE: the top-k routed experts and the shared ones); a DeepSeek multi-token-prediction module is not modelled and not counted"},
    {"op_times", "seconds per step of each op kind on the GPU of the slowest pipeline stage, forward, backward and recomputation of all its micro-batches and layers; they add up to breakdown compute_s + recompute_s; count is the ops of the kind per step"},
    {"interval", "where step_time_s and mfu lie with probability `level`, from this tier's errors on the published runs of the GPU's generation (models/calibration_set.hpp: for the estimate on Ampere its leave-one-out residuals, otherwise the tier's errors at the shipped factor; `basis` says which); absent when no published run checks the generation and precision, or for a measured Report"},
    {"reliability", "a whole run by Monte Carlo: goodput (ETTR) is training kept over wall-clock time; means per run over trials, ci95 the half-width of the 95% interval; losses_s by cause add up with the training kept to the wall-clock time"},
};

}  // namespace

nlohmann::json to_json(const Report& r) {
  nlohmann::json j;
  j["schema_version"] = r.schema_version;
  j["method"] = std::string(to_string(r.method));
  j["plan"] = r.plan_name;
  j["num_gpus"] = r.num_gpus;
  j["step_time_s"] = r.step_time_s;
  j["mfu"] = r.mfu;
  j["mfu_attention"] = r.mfu_attention;
  j["hfu"] = r.hfu;
  j["tflops_per_gpu"] = {{"model", r.model_tflops_per_gpu}, {"hardware", r.hardware_tflops_per_gpu}};
  j["tokens_per_s"] = r.tokens_per_s;
  j["bubble_fraction"] = r.bubble_fraction;
  j["time_to_train_s"] = r.time_to_train_s;
  const auto& b = r.breakdown;
  j["breakdown"] = {{"compute_s", b.compute_s}, {"recompute_s", b.recompute_s}, {"tp_s", b.tp_s},
                    {"cp_s", b.cp_s},           {"ep_s", b.ep_s},               {"dp_s", b.dp_s},
                    {"pp_s", b.pp_s},           {"bubble_s", b.bubble_s},       {"optimizer_s", b.optimizer_s},
                    {"stalls_s", b.stalls_s}};
  j["op_times"] = nlohmann::json::array();
  for (const auto& o : r.op_times) j["op_times"].push_back({{"kind", o.kind}, {"seconds", o.seconds}, {"count", o.count}});
  j["memory"] = nlohmann::json::array();
  for (const auto& m : r.memory) {
    j["memory"].push_back({{"stage", m.stage},
                           {"layers", m.layers},
                           {"weights_gib", m.weights_gib},
                           {"gradients_gib", m.gradients_gib},
                           {"optimizer_gib", m.optimizer_gib},
                           {"activations_gib", m.activations_gib},
                           {"buffers_gib", m.buffers_gib},
                           {"total_gib", m.total_gib},
                           {"capacity_gib", m.capacity_gib},
                           {"headroom_gib", m.headroom_gib},
                           {"fits", m.fits},
                           {"tight", m.tight}});
  }
  j["fits"] = r.fits;
  if (const auto* big = r.largest_stage()) {
    j["memory_verdict"] = {{"verdict", to_string(r.memory_verdict())},
                           {"largest_stage", big->stage},
                           {"largest_gib", big->total_gib},
                           {"capacity_gib", big->capacity_gib},
                           {"headroom_gib", big->headroom_gib}};
  }
  j["parameters"] = {{"total", r.parameters.total},
                     {"active", r.parameters.active},
                     {"embedding", r.parameters.embedding},
                     {"non_embedding", r.parameters.non_embedding()}};
  const RunShape& sh = r.shape;
  j["shape"] = {{"global_batch_size", sh.global_batch_size}, {"micro_batch_size", sh.micro_batch_size},
                {"seq_length", sh.seq_length},               {"tensor_model_parallel_size", sh.tensor},
                {"pipeline_model_parallel_size", sh.pipeline}, {"data_parallel_size", sh.data},
                {"context_parallel_size", sh.context},       {"expert_model_parallel_size", sh.expert}};
  j["power"] = {{"gpu_watts", r.power.gpu_watts},
                {"node_watts", r.power.node_watts},
                {"cluster_megawatts", r.power.cluster_megawatts},
                {"joules_per_token", r.power.joules_per_token}};
  j["notes"] = r.notes;
  if (r.interval) {
    const Interval& i = *r.interval;
    j["interval"] = {{"level", i.level},     {"step_time_lo_s", i.step_time_lo_s}, {"step_time_hi_s", i.step_time_hi_s},
                     {"mfu_lo", i.mfu_lo}, {"mfu_hi", i.mfu_hi},                 {"basis", i.basis}};
  }
  j["provenance"] = {{"meshwork_version", r.provenance.meshwork_version},
                     {"meshwork_commit", r.provenance.meshwork_commit},
                     {"plan_hash", r.provenance.plan_hash},
                     {"hardware_profile", r.provenance.hardware_profile},
                     {"seed", r.provenance.seed},
                     {"method", std::string(to_string(r.method))}};
  if (r.reliability) {
    const Reliability& x = *r.reliability;
    nlohmann::json by_cause = nlohmann::json::object(), losses = nlohmann::json::object();
    for (const auto& [k, v] : x.interruptions_by_cause) by_cause[k] = v;
    for (const auto& [k, v] : x.losses_s) losses[k] = v;
    j["reliability"] = {{"horizon_s", x.horizon_s},
                        {"trials", x.trials},
                        {"seed", x.seed},
                        {"goodput", x.goodput},
                        {"goodput_ci95", x.goodput_ci95},
                        {"interruptions", x.interruptions},
                        {"mtti_s", x.mtti_s},
                        {"time_to_train_s", x.time_to_train_s},
                        {"time_to_train_ci95", x.time_to_train_ci95},
                        {"checkpoint_interval_s", x.checkpoint_interval_s},
                        {"checkpoint_bytes", x.checkpoint_bytes},
                        {"checkpoint_persist_s", x.checkpoint_persist_s},
                        {"checkpoint_snapshot_s", x.checkpoint_snapshot_s},
                        {"checkpoint_min_interval_s", x.checkpoint_min_interval_s},
                        {"best_interval_s", x.best_interval_s},
                        {"interruptions_by_cause", by_cause},
                        {"losses_s", losses}};
  }
  nlohmann::json defs = nlohmann::json::object();
  for (const auto& [key, text] : kDefinitions) defs[key] = text;
  j["definitions"] = defs;
  return j;
}

namespace {

// An integer field: a JSON integer, or a number with an integral value in range. A float
// past int64's range, converted as nlohmann does, is undefined behaviour (found by
// fuzz/report_reader_fuzz.cpp); it is refused as the reader refuses any wrong type.
std::int64_t integer(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == std::floor(d)) return static_cast<std::int64_t>(d);
  }
  throw nlohmann::json::type_error::create(302, "expected an integer, got " + v.dump().substr(0, 40), &v);
}

}  // namespace

Report from_json(const nlohmann::json& j) {
  Report r;
  r.schema_version = integer(j.at("schema_version"));
  const std::string method = j.at("method").get<std::string>();
  r.method = method == "measured" ? Method::measured : method == "simulated" ? Method::simulated : Method::estimated;
  r.plan_name = j.at("plan").get<std::string>();
  r.num_gpus = integer(j.at("num_gpus"));
  r.step_time_s = j.at("step_time_s").get<double>();
  r.mfu = j.at("mfu").get<double>();
  if (j.contains("mfu_attention")) r.mfu_attention = j.at("mfu_attention").get<std::string>();  // optional: older Reports count full
  r.hfu = j.at("hfu").get<double>();
  r.model_tflops_per_gpu = j.at("tflops_per_gpu").at("model").get<double>();
  r.hardware_tflops_per_gpu = j.at("tflops_per_gpu").at("hardware").get<double>();
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  r.bubble_fraction = j.at("bubble_fraction").get<double>();
  r.time_to_train_s = j.at("time_to_train_s").get<double>();
  const auto& b = j.at("breakdown");
  r.breakdown = {b.at("compute_s"), b.at("recompute_s"), b.at("tp_s"), b.at("cp_s"), b.at("ep_s"),
                 b.at("dp_s"),      b.at("pp_s"),        b.at("bubble_s"), b.at("optimizer_s"), b.at("stalls_s")};
  // Optional: Reports written before op times were added have none.
  if (j.contains("op_times")) {
    for (const auto& o : j.at("op_times")) r.op_times.push_back({o.at("kind"), o.at("seconds"), integer(o.at("count"))});
  }
  for (const auto& m : j.at("memory")) {
    r.memory.push_back({integer(m.at("stage")), integer(m.at("layers")), m.at("weights_gib"), m.at("gradients_gib"),
                        m.at("optimizer_gib"), m.at("activations_gib"), m.at("buffers_gib"), m.at("total_gib"),
                        m.at("capacity_gib"), m.at("fits")});
    // Optional: Reports written before the headroom was added have none.
    if (m.contains("headroom_gib")) r.memory.back().headroom_gib = m.at("headroom_gib");
    if (m.contains("tight")) r.memory.back().tight = m.at("tight").get<bool>();
  }
  r.fits = j.at("fits").get<bool>();
  // Optional: Reports written before the run's shape was recorded have none.
  if (j.contains("shape")) {
    const auto& sh = j.at("shape");
    r.shape = {integer(sh.at("global_batch_size")), integer(sh.at("micro_batch_size")), integer(sh.at("seq_length")),
               integer(sh.at("tensor_model_parallel_size")), integer(sh.at("pipeline_model_parallel_size")),
               integer(sh.at("data_parallel_size")), integer(sh.at("context_parallel_size")),
               integer(sh.at("expert_model_parallel_size"))};
  }
  // Optional: Reports written before parameter counts were added have none.
  if (j.contains("parameters")) {
    const auto& n = j.at("parameters");
    r.parameters = {n.at("total"), n.at("active"), n.at("embedding")};
  }
  const auto& p = j.at("power");
  r.power = {p.at("gpu_watts"), p.at("node_watts"), p.at("cluster_megawatts"), p.at("joules_per_token")};
  r.notes = j.at("notes").get<std::vector<std::string>>();
  if (j.contains("interval")) {
    const auto& i = j.at("interval");
    r.interval = Interval{i.at("level"), i.at("step_time_lo_s"), i.at("step_time_hi_s"), i.at("mfu_lo"), i.at("mfu_hi"), i.at("basis")};
  }
  const auto& pv = j.at("provenance");
  r.provenance = {pv.at("meshwork_version"), pv.at("meshwork_commit"), pv.at("plan_hash"), pv.at("hardware_profile"),
                  integer(pv.at("seed"))};
  if (j.contains("reliability")) {
    const auto& x = j.at("reliability");
    Reliability y;
    y.horizon_s = x.at("horizon_s");
    y.trials = integer(x.at("trials"));
    y.seed = integer(x.at("seed"));
    y.goodput = x.at("goodput");
    y.goodput_ci95 = x.at("goodput_ci95");
    y.interruptions = x.at("interruptions");
    y.mtti_s = x.at("mtti_s");
    y.time_to_train_s = x.at("time_to_train_s");
    y.time_to_train_ci95 = x.at("time_to_train_ci95");
    y.checkpoint_interval_s = x.at("checkpoint_interval_s");
    y.checkpoint_bytes = x.at("checkpoint_bytes");
    // Reports written before the persist stage was priced lack these: 0, as "not given".
    y.checkpoint_persist_s = x.value("checkpoint_persist_s", 0.0);
    y.checkpoint_snapshot_s = x.value("checkpoint_snapshot_s", 0.0);
    y.checkpoint_min_interval_s = x.value("checkpoint_min_interval_s", 0.0);
    y.best_interval_s = x.at("best_interval_s");
    for (const auto& [k, v] : x.at("interruptions_by_cause").items()) y.interruptions_by_cause.emplace_back(k, v.get<double>());
    for (const auto& [k, v] : x.at("losses_s").items()) y.losses_s.emplace_back(k, v.get<double>());
    r.reliability = std::move(y);
  }
  return r;
}

std::string csv_header() {
  return "plan,method,num_gpus,step_time_s,mfu,hfu,model_tflops_per_gpu,hardware_tflops_per_gpu,tokens_per_s,"
         "bubble_fraction,time_to_train_s,compute_s,recompute_s,tp_s,cp_s,ep_s,dp_s,pp_s,bubble_s,optimizer_s,"
         "stalls_s,max_memory_gib,fits,cluster_megawatts,joules_per_token";
}

std::string csv_row(const Report& r) {
  const double max_mem = r.max_memory_gib();
  std::ostringstream s;
  s.precision(6);
  // Plan names are ours or the user's: quote them when they hold a comma or a quote.
  std::string name = r.plan_name;
  if (name.find_first_of(",\"\n") != std::string::npos) {
    std::string quoted = "\"";
    for (char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    name = quoted + "\"";
  }
  const auto& b = r.breakdown;
  s << name << ',' << to_string(r.method) << ',' << r.num_gpus << ',' << r.step_time_s << ',' << r.mfu << ',' << r.hfu
    << ',' << r.model_tflops_per_gpu << ',' << r.hardware_tflops_per_gpu << ',' << r.tokens_per_s << ','
    << r.bubble_fraction << ',' << r.time_to_train_s << ',' << b.compute_s << ',' << b.recompute_s << ',' << b.tp_s
    << ',' << b.cp_s << ',' << b.ep_s << ',' << b.dp_s << ',' << b.pp_s << ',' << b.bubble_s << ',' << b.optimizer_s
    << ',' << b.stalls_s << ',' << max_mem << ',' << (r.fits ? "true" : "false") << ',' << r.power.cluster_megawatts
    << ',' << r.power.joules_per_token;
  return s.str();
}

std::string fnv1a_hex(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis (Fowler/Noll/Vo)
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV 64-bit prime
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {
std::string billions(double v) {
  char buf[32];
  // Below 1e9: three significant figures, but never "1e+03M" (999.5M and up round to 1000M).
  std::snprintf(buf, sizeof buf, v >= 100e9 ? "%.1fB" : v >= 1e9 ? "%.2fB" : v >= 100e6 ? "%.0fM" : "%.3gM", v >= 1e9 ? v / 1e9 : v / 1e6);
  return buf;
}
}  // namespace

std::string parameters_line(const Parameters& p) {
  std::string out = billions(p.total) + " parameters (" + billions(p.non_embedding()) + " non-embedding, " +
                    billions(p.embedding) + " embedding)";
  if (p.active < p.total) out += ", " + billions(p.active) + " active per token";
  return out;
}

std::string interval_line(const Report& r) {
  if (!r.interval) return "";
  const Interval& i = *r.interval;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.0f%% interval: step %.4g-%.4g s, MFU %.1f-%.1f%% (", 100 * i.level, i.step_time_lo_s, i.step_time_hi_s,
                100 * i.mfu_lo, 100 * i.mfu_hi);
  return buf + i.basis + ")";
}

std::string memory_table_text(const Report& r) {
  std::string out = "  memory per GPU (GiB): stage  weights  grads  optim  activ  buffers  total / capacity\n";
  const std::size_t n = r.memory.size();
  const auto* big = r.largest_stage();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& m = r.memory[i];
    const bool shown = n <= 4 || i < 2 || i + 1 == n || &m == big;
    if (!shown) {
      if (i == 2 || (i > 2 && &r.memory[i - 1] == big)) out += "                        ...\n";
      continue;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "                        %5lld %8.1f %6.1f %6.1f %6.1f %8.1f %6.1f / %.1f%s\n",
                  static_cast<long long>(m.stage), m.weights_gib, m.gradients_gib, m.optimizer_gib, m.activations_gib,
                  m.buffers_gib, m.total_gib, m.capacity_gib, m.fits ? (m.tight ? "  TIGHT" : "") : "  DOES NOT FIT");
    out += buf;
  }
  return out;
}

std::string memory_verdict_line(const report::Report& r) {
  const auto* big = r.largest_stage();
  if (!big) return "memory: no figure";
  char buf[320];
  switch (r.memory_verdict()) {
    case report::MemoryVerdict::fits:
      std::snprintf(buf, sizeof buf, "memory: fits; the fullest stage, %lld, needs %.1f of %.1f GiB per GPU (%.1f GiB free, headroom %.1f)",
                    static_cast<long long>(big->stage), big->total_gib, big->capacity_gib, big->capacity_gib - big->total_gib, big->headroom_gib);
      break;
    case report::MemoryVerdict::tight:
      std::snprintf(buf, sizeof buf, "memory: fits TIGHTLY; the fullest stage, %lld, needs %.1f of %.1f GiB per GPU, leaving less than the %.1f GiB headroom "
                    "(cluster.memory_headroom_fraction) for the allocator's fragmentation and what the model does not count",
                    static_cast<long long>(big->stage), big->total_gib, big->capacity_gib, big->headroom_gib);
      break;
    case report::MemoryVerdict::does_not_fit:
      std::snprintf(buf, sizeof buf, "memory: DOES NOT FIT; stage %lld needs %.1f GiB per GPU of %.1f GiB", static_cast<long long>(big->stage),
                    big->total_gib, big->capacity_gib);
      break;
  }
  return buf;
}

std::string_view memory_verdict_word(const report::Report& r) {
  switch (r.memory_verdict()) {
    case report::MemoryVerdict::fits: return "fits";
    case report::MemoryVerdict::tight: return "tight";
    case report::MemoryVerdict::does_not_fit: return "OOM";
  }
  return "?";
}

}  // namespace meshwork::report
