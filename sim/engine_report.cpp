// What the step was: the Report's attribution, the trace and the hottest links (engine.hpp).
#include "sim/engine.hpp"

#include "models/calibration_set.hpp"
#include "models/regime.hpp"

namespace meshwork::sim::engine {

void Simulation::record(ActorState& st, const models::StageProgram& sp, const Instr& in, double start, double end) {
  st.trace.push_back({static_cast<std::int32_t>(&in - sp.instrs.data()), 0, start * 1e6, end * 1e6});
}

std::string Simulation::trace_json() const {
  std::vector<std::int64_t> traced = traced_;
  std::sort(traced.begin(), traced.end());
  traced.erase(std::unique(traced.begin(), traced.end()), traced.end());
  report::Trace trace;
  for (const std::int64_t r : traced) {
    // A TP group's ranks share their actor's timeline.
    const ActorState& st = actors_[played_actor_of(r)];
    models::append_rank_trace(program_, stage_of(r), r, st.trace, options_.fine, trace);
  }
  return report::chrome_trace_json(trace);
}

report::Report Simulation::make_report() const {
  report::Report r = models::estimate(p_);
  r.method = report::Method::simulated;
  r.notes = models::regime_notes(p_);  // the estimate's own notes are its tier's
  // The critical rank: the one that computed longest (its stage sets the pace). Stages of equal
  // work (Llama 3's 14 middle stages of 8 layers) differ only by the order their durations were
  // summed in: among those within 1e-9 of the longest, the first stage, as the estimate picks its
  // reported stage (models::estimate), so that which stage's waits are reported does not follow
  // rounding (at 8559d15 a 0.3% change of compute moved 0.32 s of the 8K Llama plan's waits
  // from PP to DP, the step unchanged).
  auto computed = [&](const ActorState& a) { return a.busy_s + a.recompute_s + a.straggle_s; };
  double longest = 0;
  for (const auto& a : actors_) longest = std::max(longest, computed(a));
  std::size_t crit = 0;
  bool found = false;
  for (std::size_t i = 0; i < actors_.size(); ++i) {
    if (computed(actors_[i]) < longest * (1 - 1e-9)) continue;
    if (!found || layout_.coord(leads_[i]).pp < layout_.coord(leads_[crit]).pp) crit = i;
    found = true;
  }
  const ActorState& c = actors_[crit];
  auto waited = [&](Wait w) {
    const auto it = c.waited_s.find(w);
    return it == c.waited_s.end() ? 0.0 : it->second;
  };
  report::Breakdown& b = r.breakdown;
  b = report::Breakdown{};
  b.compute_s = c.busy_s;
  b.recompute_s = c.recompute_s;
  b.optimizer_s = c.optimizer_s;
  b.tp_s = waited(Wait::tp);
  b.cp_s = waited(Wait::cp);
  b.ep_s = waited(Wait::ep);
  b.dp_s = waited(Wait::dp);
  // Waiting for a pipeline neighbour (a rank done before the step ends waits for the pipeline
  // to drain elsewhere too). One bubble in both tiers (issue 18): the part of it the stage
  // would wait with free communication, for its neighbours' compute, which the Program's
  // replay gives; the rest waited for communication on the way (the transfers, and what the
  // neighbours themselves waited for): exposed pipeline communication.
  const double waiting = waited(Wait::pipeline) + waited(Wait::none) + (makespan_ - c.end_s);
  b.bubble_s = std::min(waiting, compute_bubble_s(layout_.coord(leads_[crit]).pp));
  b.pp_s = waiting - b.bubble_s;
  b.stalls_s = std::max(0.0, makespan_ - b.total());
  r.bubble_fraction = (c.busy_s + c.recompute_s) > 0 ? b.bubble_s / (c.busy_s + c.recompute_s) : 0;
  models::set_headline_figures(r, p_, makespan_, models::step_flops(p_), plan::peak_tflops(p_.cluster.gpu, p_.training.precision) * 1e12);
  models::attach_power(p_, r);
  models::attach_interval(p_, r);
  if (options_.free_communication) {
    r.notes.emplace_back("simulated with free communication");
    r.interval.reset();  // not a prediction of a run
  }
  return r;
}

double Simulation::compute_bubble_s(std::int64_t stage) const {
  const auto replayed = models::replay(program_, [&](const models::StageProgram& sp, const Instr& in) {
    if (in.kind != InstrKind::compute) return 0.0;
    const BlockTime& bt = blocks_[static_cast<std::size_t>(sp.stage)][static_cast<std::size_t>(&in - sp.instrs.data())];
    return bt.compute_s + bt.recompute_s + bt.optimizer_s;
  });
  if (!replayed.error.empty() || static_cast<std::size_t>(stage) >= replayed.idle_s.size()) return 0;
  return replayed.idle_s[static_cast<std::size_t>(stage)];
}

std::vector<LinkUse> Simulation::hottest_links() const {
  std::vector<LinkUse> out;
  for (std::size_t slot = 0; slot < link_bytes_.size(); ++slot) {
    const double bytes = link_bytes_[slot];
    if (bytes <= 0) continue;
    const auto& l = links_[slot / 2];
    const bool up = slot % 2 == 0;
    const topology::VertexId low = std::min(l.a, l.b), high = std::max(l.a, l.b);
    const std::string from = topology::vertex_name(topo_, up ? low : high), to = topology::vertex_name(topo_, up ? high : low);
    out.push_back({from + "->" + to, makespan_ > 0 ? bytes / (l.bytes_per_s * makespan_) : 0, bytes});
  }
  std::sort(out.begin(), out.end(), [](const LinkUse& x, const LinkUse& y) { return x.bytes > y.bytes || (x.bytes == y.bytes && x.name < y.name); });
  if (out.size() > 10) out.resize(10);
  return out;
}

}  // namespace meshwork::sim::engine
