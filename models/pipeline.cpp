#include "models/pipeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "models/kept_last.hpp"
#include "models/sm_share.hpp"

namespace meshwork::models {

StageOrders stage_orders(const PipelineSpec& spec) {
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  StageOrders order(static_cast<std::size_t>(p));
  for (std::int64_t s = 0; s < p; ++s) {
    order[static_cast<std::size_t>(s)] =
        stage_schedule(spec.schedule, p, s, std::max<std::int64_t>(1, spec.microbatches), std::max<std::int64_t>(1, spec.chunks));
  }
  return order;
}

namespace {

// One schedule's traversal, the same for any times: every item of every stage, in an order in
// which each comes after the item whose send it waits for. Which item a stage can run next
// depends only on which sends have happened, never on their times, so the traversal is made
// once per (schedule, stages, micro-batches, chunks) and timed as a flat loop (issue 18: the
// estimate's speed; the traversal with its bookkeeping was two thirds of the replay's time).
struct Traversal {
  StageOrders orders;  // per stage, its items
  // 16 bytes (the timed loop reads one a step). Step i's end is kept at i + 1: the end at 0,
  // zero on every lane, is what a stage's first item follows, and what an item that waits for
  // no send waits for, over a transfer of zero seconds (boundary `stages`), so the timed loop
  // has no branch and keeps no clock per stage (issue 18).
  struct Step {
    std::int32_t after = 0;     // where the end of the stage's item before it is kept
    std::int32_t from = 0;      // where the end of the item whose send it waits for is kept
    std::int32_t boundary = 0;  // the boundary that send crosses: a forward's the stage before
                                // (stage 0's the last), a backward's its own
    std::int32_t slot = 0;      // (stage * chunks + chunk) * 4 + pass: its seconds' index
  };
  std::vector<Step> steps;
  // Where item i of stage s's end is kept: at[first[s] + i] (the steady-state check reads a
  // stage's items in order).
  std::vector<std::int32_t> at, first;
};

Traversal traverse(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t m, std::int64_t v) {
  Traversal t;
  PipelineSpec shape;
  shape.schedule = schedule;
  shape.stages = p;
  shape.microbatches = m;
  shape.chunks = v;
  t.orders = stage_orders(shape);
  const auto P = static_cast<std::size_t>(p);
  std::size_t items = 0;
  for (const auto& o : t.orders) items += o.size();
  // Steps are numbered in 32 bits from 1 (half the memory of the replay's hot loop).
  if (items > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::length_error("a pipeline schedule of " + std::to_string(items) + " items: more than the replay numbers (2^31)");
  }
  // The interleaved schedule numbers micro-batches in groups of p (models/schedules.cpp): with a
  // partial last group it would name micro-batches past the step's (plan::validate refuses
  // such plans, as Megatron-core does).
  if (schedule == plan::PipelineSchedule::interleaved && p > 1 && m % p != 0) {
    throw std::invalid_argument("the interleaved schedule of " + std::to_string(m) + " micro-batches on " + std::to_string(p) +
                                " stages: not a multiple of the stages");
  }
  t.steps.reserve(items);
  t.at.assign(items, 0);
  t.first.assign(P, 0);
  for (std::size_t s = 1; s < P; ++s) t.first[s] = t.first[s - 1] + static_cast<std::int32_t>(t.orders[s - 1].size());
  // Where the end of the item that sent what a stage's chunk needs for a micro-batch is kept: by
  // receiver, [(stage * v + chunk) * m + micro-batch]; 0 until it is sent.
  const auto slots = static_cast<std::size_t>(p * v * m);
  std::vector<std::int32_t> activation(slots, 0), gradient(slots, 0);
  auto slot = [&](std::int64_t s, std::int64_t c, std::int64_t mb) { return static_cast<std::size_t>((s * v + c) * m + mb); };
  std::vector<std::size_t> next(P, 0);
  std::vector<std::int32_t> last(P, 0);  // where each stage's last placed item's end is kept
  // Round by round, each stage takes its next item if what it waits for was sent: consecutive
  // steps are mostly of different stages, so the timed loop's chains through each stage's clock
  // overlap in the processor (issue 18: a stage drained at a time made one chain of them all).
  for (std::size_t placed = 0; placed < items;) {
    const std::size_t before = placed;
    for (std::int64_t s = 0; s < p; ++s) {
      const auto S = static_cast<std::size_t>(s);
      if (next[S] == t.orders[S].size()) continue;
      const ScheduleItem& it = t.orders[S][next[S]];
      const std::int64_t c = it.chunk, mb = it.microbatch;
      const bool forward = it.pass == Pass::forward;
      const bool needs = forward ? !(s == 0 && c == 0) : !(s == p - 1 && c == v - 1) && it.pass != Pass::backward_weight;
      Traversal::Step step;
      step.after = last[S];
      step.slot = static_cast<std::int32_t>((s * v + c) * 4 + static_cast<std::int64_t>(it.pass));
      step.boundary = static_cast<std::int32_t>(p);
      if (needs) {
        step.from = (forward ? activation : gradient)[slot(s, c, mb)];
        if (step.from == 0) continue;  // its sender has not got there yet
        step.boundary = static_cast<std::int32_t>(forward ? (s == 0 ? p - 1 : s - 1) : s);
      }
      const auto kept = static_cast<std::int32_t>(t.steps.size() + 1);
      t.at[static_cast<std::size_t>(t.first[S]) + next[S]] = kept;
      last[S] = kept;
      t.steps.push_back(step);
      ++next[S];
      ++placed;
      // The send: forward to the next stage (the last one wraps to the first, next chunk),
      // backward to the previous (the first wraps to the last, previous chunk).
      std::int64_t to = -1, to_chunk = c;
      if (forward) {
        if (s + 1 < p) to = s + 1;
        else if (c + 1 < v) to = 0, to_chunk = c + 1;
      } else if (it.pass != Pass::backward_weight) {
        if (s > 0) to = s - 1;
        else if (c > 0) to = p - 1, to_chunk = c - 1;
      }
      if (to >= 0) (forward ? activation : gradient)[slot(to, to_chunk, mb)] = kept;
    }
    // Every stage waits for a send nobody will make: the schedule's orders deadlock.
    if (placed == before) throw std::logic_error("a pipeline schedule whose stages all wait for each other");
  }
  return t;
}

// The traversals made last on this thread (models::KeptLast): a sweep or search prices many
// plans of one schedule shape (every ZeRO stage, TP size or fabric of a mesh). A traversal of
// more than kLargest steps is made for its call alone.
const Traversal& traversal(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t m, std::int64_t v,
                           std::shared_ptr<const Traversal>& hold) {
  // A step, its order's item and where its end is kept, 32 bytes: 8 MiB a traversal, at most
  // 8 x 8 MiB kept.
  constexpr std::size_t kLargest = std::size_t{1} << 18;
  thread_local KeptLast<std::tuple<plan::PipelineSchedule, std::int64_t, std::int64_t, std::int64_t>, Traversal> kept;
  hold = kept.get({schedule, p, m, v}, [&] { return traverse(schedule, p, m, v); },
                  [](const Traversal& t) { return t.steps.size() <= kLargest; });
  return *hold;
}

template <std::size_t N>
using Lanes = std::array<double, N>;

// One item's seconds in a spec.
double item_s(const PipelineSpec& sp, const ScheduleItem& it, std::int64_t s) {
  const auto at = static_cast<std::size_t>(s * std::max<std::int64_t>(1, sp.chunks) + it.chunk);
  switch (it.pass) {
    case Pass::forward: return sp.forward_s[at];
    case Pass::backward: return sp.backward_s[at];
    // weight_s: only zero-bubble schedules need it; an empty one is no split.
    case Pass::backward_input: return sp.backward_s[at] - (at < sp.weight_s.size() ? sp.weight_s[at] : 0);
    case Pass::backward_weight: return at < sp.weight_s.size() ? sp.weight_s[at] : 0;
  }
  return 0;
}

// Each lane's seconds per (stage, chunk, pass): a Traversal::Step's slot.
template <std::size_t N>
std::vector<Lanes<N>> item_seconds(const std::array<const PipelineSpec*, N>& specs) {
  const std::int64_t p = std::max<std::int64_t>(1, specs[0]->stages);
  const std::int64_t v = std::max<std::int64_t>(1, specs[0]->chunks);
  std::vector<Lanes<N>> seconds(static_cast<std::size_t>(p * v * 4));
  for (std::int64_t s = 0; s < p; ++s) {
    for (std::int64_t c = 0; c < v; ++c) {
      for (const Pass pass : {Pass::forward, Pass::backward, Pass::backward_input, Pass::backward_weight}) {
        Lanes<N>& dt = seconds[static_cast<std::size_t>((s * v + c) * 4 + static_cast<std::int64_t>(pass))];
        for (std::size_t k = 0; k < N; ++k) {
          dt[k] = item_s(*specs[k], {pass, 0, static_cast<std::int32_t>(c)}, s);
          // The timed loop's zero end stands for "nothing to wait for" (time_steps).
          if (!(dt[k] >= 0)) {
            throw std::invalid_argument("a pipeline item of " + std::to_string(dt[k]) + " s (stage " + std::to_string(s) + ", chunk " +
                                        std::to_string(c) + ", " + std::string(to_string(pass)) + "): an item's seconds must be at least zero");
          }
        }
      }
    }
  }
  return seconds;
}

// Each step's end on every lane, timed over the traversal in one pass (`ends`: step i's at
// i + 1, the end at 0 zero). `transfer`: per boundary, and a last of zero seconds
// (Traversal::Step). kPosted: 1 every lane posts its receives ahead, 0 none does, -1 as each
// lane's spec says. A stage's first item follows the zero end; an item that waits for no send
// waits for the zero end over the zero transfer; no end is before zero.
// kDelayed: each step i starts no earlier than held[i].not_before_s and adds held[i].delay_s
// on each lane (PipelineSpec::not_before and delays), and keeps in held[i].waited_s how long
// the first held it beyond what else it waited for. Where its stage has a DP stream on a lane
// (`streams`, [lane * stages + stage], empty for none), its compute runs beside the stream's
// collectives, and issues held[i]'s (from `issued`, per lane) on the way; it keeps in slowed_s
// what the stream took from it.
template <std::size_t N>
struct Held {
  Lanes<N> not_before_s{}, delay_s{}, waited_s{}, slowed_s{};
  std::int32_t stage = 0;
  std::array<std::int32_t, N> issue_from{}, issue_count{};
};
struct Stream {
  SharedSms sms;
  double free_s = 0;  // when its last collective ends
  bool on = false;
};
struct Issued {
  double after_s = 0, seconds = 0;
};
// `nic_loss_fraction`, [lane * stages + boundary] where any lane has streams: the fraction of a
// transfer's rate over that boundary it loses while the DP stream of its sender or receiver
// runs a collective (PipelineSpec::shared_transfer_s). The receiver's collectives are all
// known when its receive is timed; the sender's only those issued by items the traversal has
// timed by then (a round over the stages: a collective the sender issues in a later item while
// the transfer still runs is not seen).
template <std::size_t N, int kPosted, bool kDelayed>
void time_steps(const Traversal& t, const std::vector<Lanes<N>>& seconds, const std::vector<Lanes<N>>& transfer, const Lanes<N>& preposted,
                std::vector<Held<N>>& held, std::vector<Stream>& streams, const std::array<std::vector<Issued>, N>& issued,
                const std::vector<double>& nic_loss_fraction, std::vector<Lanes<N>>& ends) {
  ends.resize(t.steps.size() + 1);
  ends[0] = Lanes<N>{};
  const std::size_t P = t.orders.size();
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const Traversal::Step& step = t.steps[i];
    // Posted ahead, the transfer left when it was sent; otherwise when this stage reached the
    // item (when its item before it ended).
    const Lanes<N>& free = ends[static_cast<std::size_t>(step.after)];
    const Lanes<N>& sent = ends[static_cast<std::size_t>(step.from)];
    const Lanes<N>& tr = transfer[static_cast<std::size_t>(step.boundary)];
    const Lanes<N>& dt = seconds[static_cast<std::size_t>(step.slot)];
    Lanes<N> end;
    for (std::size_t k = 0; k < N; ++k) {
      const bool posted = kPosted == 1 || (kPosted == -1 && preposted[k] != 0);
      const double leaves_s = posted ? sent[k] : std::max(sent[k], free[k]);
      double arrives_s = leaves_s + tr[k];
      if constexpr (kDelayed) {
        const auto b = static_cast<std::size_t>(step.boundary);
        if (!nic_loss_fraction.empty() && b < P && nic_loss_fraction[k * P + b] > 0) {
          // The boundary's two stages: b and the next (stage 0 after the last).
          for (const std::size_t s : {b, (b + 1) % P}) {
            const Stream& st = streams[k * P + s];
            if (st.on) arrives_s = std::max(arrives_s, st.sms.run_at(leaves_s, tr[k], nic_loss_fraction[k * P + b]));
          }
        }
      }
      end[k] = std::max(free[k], arrives_s);
      if constexpr (kDelayed) {
        Held<N>& h = held[i];
        h.waited_s[k] = std::max(0.0, h.not_before_s[k] - end[k]);
        end[k] += h.waited_s[k] + h.delay_s[k];
        if (!streams.empty()) {
          Stream& st = streams[k * P + static_cast<std::size_t>(h.stage)];
          if (st.on) {
            double at_s = end[k], done_s = 0;
            for (std::int32_t j = h.issue_from[k]; j < h.issue_from[k] + h.issue_count[k]; ++j) {
              const Issued& c = issued[k][static_cast<std::size_t>(j)];
              // At most the item's compute (the replay that found it summed it in another order).
              const double after_s = std::min(c.after_s, dt[k]);
              at_s = st.sms.run(at_s, std::max(0.0, after_s - done_s));
              done_s = std::max(done_s, after_s);
              const double start_s = std::max(st.free_s, at_s);
              st.sms.busy(start_s, start_s + c.seconds);
              st.free_s = start_s + c.seconds;
            }
            at_s = st.sms.run(at_s, dt[k] - done_s);
            h.slowed_s[k] = at_s - end[k] - dt[k];
            end[k] = at_s;
            continue;
          }
        }
      }
      end[k] += dt[k];
    }
    ends[i + 1] = end;
  }
}

// The replay of N specs that share their schedule (stages, micro-batches, chunks), timed in one
// pass over its traversal of `m` micro-batches (the specs' own count, or fewer: see replay
// below). `seconds`: item_seconds(specs); `ends`: each item's end (Traversal::at).
// Each stage's busy time is its items' seconds over the specs' whole step: every stage runs
// each pass of each of its chunks once per micro-batch (one chunk unless interleaved).
template <std::size_t N>
std::array<PipelineTimes, N> replay_traversal(const std::array<const PipelineSpec*, N>& specs, std::int64_t m, const Traversal& t,
                                              const std::vector<Lanes<N>>& seconds, std::vector<Lanes<N>>& ends) {
  const PipelineSpec& spec = *specs[0];
  const auto P = static_cast<std::size_t>(std::max<std::int64_t>(1, spec.stages));
  const auto V = static_cast<std::size_t>(std::max<std::int64_t>(1, spec.chunks));
  using Lanes = models::Lanes<N>;
  // Each lane's transfer over each boundary, and none (time_steps).
  std::vector<Lanes> transfer(P + 1, Lanes{});
  Lanes preposted{};
  std::size_t posted = 0;
  for (std::size_t k = 0; k < N; ++k) {
    const PipelineSpec& sp = *specs[k];
    preposted[k] = sp.preposted ? 1 : 0;
    posted += sp.preposted ? 1 : 0;
    for (std::size_t b = 0; b < P; ++b) {
      transfer[b][k] = b < sp.boundary_transfer_s.size() ? sp.boundary_transfer_s[b] : sp.transfer_s;
      if (!(transfer[b][k] >= 0)) {
        throw std::invalid_argument("a pipeline transfer of " + std::to_string(transfer[b][k]) + " s (boundary " + std::to_string(b) +
                                    "): a transfer's seconds must be at least zero");
      }
    }
  }
  // Each step's earliest start, delay, stage and issues on each lane, where a spec has any:
  // found in its stage's order; each stage's DP stream.
  std::vector<Held<N>> held;
  std::vector<Stream> streams;
  std::array<std::vector<Issued>, N> issued;
  for (std::size_t k = 0; k < N; ++k) {
    const PipelineSpec& sp = *specs[k];
    if (sp.delays.empty() && sp.not_before.empty() && sp.dp_streams.empty() && sp.issues.empty()) continue;
    if (m != sp.microbatches) {
      throw std::invalid_argument("a pipeline replay with delays, earliest starts or DP streams of " + std::to_string(sp.microbatches) + " micro-batches beside a lane of " +
                                  std::to_string(m) + ": the lanes share their schedule");
    }
    if (held.empty()) {
      held.resize(t.steps.size());
      for (std::size_t s = 0; s < P; ++s) {
        for (std::size_t i = 0; i < t.orders[s].size(); ++i) held[static_cast<std::size_t>(t.at[static_cast<std::size_t>(t.first[s]) + i]) - 1].stage = static_cast<std::int32_t>(s);
      }
    }
    if (sp.dp_streams.size() > P) {
      throw std::invalid_argument("DP streams on " + std::to_string(sp.dp_streams.size()) + " stages of a pipeline of " + std::to_string(P));
    }
    for (std::size_t s = 0; s < sp.dp_streams.size(); ++s) {
      const PipelineSpec::DpStream& w = sp.dp_streams[s];
      if (!(w.busy_until_s >= 0) || !std::isfinite(w.busy_until_s) || !(w.fraction >= 0) || !(w.fraction < 1)) {
        throw std::invalid_argument("a DP stream on stage " + std::to_string(s) + " busy until " + std::to_string(w.busy_until_s) + " s at a fraction of " +
                                    std::to_string(w.fraction) + ": a time is at least zero, a fraction in [0, 1)");
      }
      if (w.fraction <= 0) continue;
      if (streams.empty()) streams.assign(N * P, Stream{SharedSms(0)});
      Stream& st = streams[k * P + s];
      st = Stream{SharedSms(w.fraction), w.busy_until_s, true};
      st.sms.busy(0, w.busy_until_s);
    }
    std::vector<std::vector<std::int32_t>> index(P);  // per stage, [(chunk * 4 + pass) * m + micro-batch]: its step + 1
    // `what()` names the item's time or times, `s1` and `s2`, in the error.
    auto step_of = [&](auto&& what, std::int32_t stage, std::int32_t chunk, Pass pass_of, std::int32_t microbatch, double s1, double s2) {
      const auto pass = static_cast<std::size_t>(pass_of);
      if (stage < 0 || static_cast<std::size_t>(stage) >= P || chunk < 0 || static_cast<std::size_t>(chunk) >= V || pass >= 4 || microbatch < 0 ||
          microbatch >= m || !(s1 >= 0) || !std::isfinite(s1) || !(s2 >= 0) || !std::isfinite(s2)) {
        throw std::invalid_argument(what() + " on stage " + std::to_string(stage) + ", chunk " + std::to_string(chunk) +
                                    ", pass " + std::to_string(pass) + ", micro-batch " + std::to_string(microbatch) + ": the schedule has " +
                                    std::to_string(P) + " stages, " + std::to_string(V) + " chunks, 4 passes and " + std::to_string(m) +
                                    " micro-batches, and a time is at least zero");
      }
      const auto s = static_cast<std::size_t>(stage);
      auto& at = index[s];
      if (at.empty()) {
        at.assign(V * 4 * static_cast<std::size_t>(m), 0);
        const auto& order = t.orders[s];
        for (std::size_t i = 0; i < order.size(); ++i) {
          const ScheduleItem& it = order[i];
          at[(static_cast<std::size_t>(it.chunk) * 4 + static_cast<std::size_t>(it.pass)) * static_cast<std::size_t>(m) +
             static_cast<std::size_t>(it.microbatch)] = t.at[static_cast<std::size_t>(t.first[s]) + i];
        }
      }
      // A pass the schedule does not run (a split backward's parts under 1F1B) has no item:
      // nothing to hold (PipelineSpec::delays); 0.
      return at[(static_cast<std::size_t>(chunk) * 4 + pass) * static_cast<std::size_t>(m) + static_cast<std::size_t>(microbatch)];
    };
    for (const bool starts : {true, false}) {
      for (const PipelineSpec::Delay& d : starts ? sp.not_before : sp.delays) {
        auto what = [&] {
          return std::string(starts ? "a pipeline item's earliest start of " : "a pipeline delay of ") + std::to_string(d.seconds) + " s";
        };
        const std::int32_t kept = step_of(what, d.stage, d.chunk, d.pass, d.microbatch, d.seconds, 0);
        if (kept <= 0) continue;
        Held<N>& h = held[static_cast<std::size_t>(kept) - 1];
        if (starts) h.not_before_s[k] = std::max(h.not_before_s[k], d.seconds);
        else h.delay_s[k] += d.seconds;
      }
    }
    // The issues by step, each step's in order of their compute before them.
    std::vector<std::pair<std::int32_t, Issued>> by_step;
    by_step.reserve(sp.issues.size());
    for (const PipelineSpec::Issue& c : sp.issues) {
      auto what = [&] { return "a DP collective of " + std::to_string(c.seconds) + " s issued after " + std::to_string(c.after_s) + " s"; };
      const std::int32_t kept = step_of(what, c.stage, c.chunk, c.pass, c.microbatch, c.seconds, c.after_s);
      if (kept <= 0) continue;
      if (static_cast<std::size_t>(c.stage) >= sp.dp_streams.size() || sp.dp_streams[static_cast<std::size_t>(c.stage)].fraction <= 0) continue;
      // Rounding aside (the replay that found it summed the item's compute in another order).
      if (c.after_s > seconds[static_cast<std::size_t>(t.steps[static_cast<std::size_t>(kept) - 1].slot)][k] * (1 + 1e-9) + 1e-15) {
        throw std::invalid_argument("a DP collective issued after " + std::to_string(c.after_s) + " s of an item of stage " + std::to_string(c.stage) +
                                    ", chunk " + std::to_string(c.chunk) + ": after the item's compute");
      }
      by_step.push_back({kept - 1, {c.after_s, c.seconds}});
    }
    std::stable_sort(by_step.begin(), by_step.end(), [](const auto& a, const auto& b) { return a.first < b.first || (a.first == b.first && a.second.after_s < b.second.after_s); });
    issued[k].reserve(by_step.size());
    for (const auto& [step, c] : by_step) {
      Held<N>& h = held[static_cast<std::size_t>(step)];
      if (h.issue_count[k] == 0) h.issue_from[k] = static_cast<std::int32_t>(issued[k].size());
      ++h.issue_count[k];
      issued[k].push_back(c);
    }
  }
  // Each lane's transfers' loss beside a DP stream, per boundary.
  std::vector<double> nic_loss_fraction;
  for (std::size_t k = 0; k < N && !streams.empty(); ++k) {
    const PipelineSpec& sp = *specs[k];
    for (std::size_t b = 0; b < P; ++b) {
      const double shared = b < sp.boundary_shared_transfer_s.size() ? sp.boundary_shared_transfer_s[b] : sp.shared_transfer_s;
      if (!(shared >= 0) || !std::isfinite(shared)) {
        throw std::invalid_argument("a pipeline transfer of " + std::to_string(shared) + " s beside a DP stream (boundary " + std::to_string(b) +
                                    "): a transfer's seconds must be at least zero");
      }
      if (shared <= transfer[b][k]) continue;
      if (nic_loss_fraction.empty()) nic_loss_fraction.assign(N * P, 0.0);
      nic_loss_fraction[k * P + b] = 1 - transfer[b][k] / shared;
    }
  }
  if (held.empty()) {
    if (posted == N) time_steps<N, 1, false>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
    else if (posted == 0) time_steps<N, 0, false>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
    else time_steps<N, -1, false>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
  } else {
    if (posted == N) time_steps<N, 1, true>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
    else if (posted == 0) time_steps<N, 0, true>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
    else time_steps<N, -1, true>(t, seconds, transfer, preposted, held, streams, issued, nic_loss_fraction, ends);
  }
  // Each stage's clock at the end: its last item's end (zero for a stage with none).
  std::vector<Lanes> free_s(P, Lanes{});
  for (std::size_t s = 0; s < P; ++s) {
    if (!t.orders[s].empty()) free_s[s] = ends[static_cast<std::size_t>(t.at[static_cast<std::size_t>(t.first[s]) + t.orders[s].size() - 1])];
  }
  const bool split = spec.schedule == plan::PipelineSchedule::zero_bubble;
  // Only the interleaved schedule runs more than one chunk a stage (models::stage_schedule).
  const std::size_t chunks_run = spec.schedule == plan::PipelineSchedule::interleaved ? V : 1;
  const auto whole_m = static_cast<double>(std::max<std::int64_t>(1, spec.microbatches));
  std::array<PipelineTimes, N> out;
  for (std::size_t k = 0; k < N; ++k) {
    PipelineTimes& o = out[k];
    o.replayed_microbatches = m;
    const bool starts = !specs[k]->not_before.empty(), shared = !specs[k]->dp_streams.empty();
    if (starts) o.held_back_s.assign(P, 0.0);
    if (shared) {
      o.slowed_s.assign(P, 0.0);
      o.dp_end_s.assign(P, 0.0);
      for (std::size_t s = 0; s < P && !streams.empty(); ++s) o.dp_end_s[s] = streams[k * P + s].on ? streams[k * P + s].free_s : 0.0;
    }
    for (std::size_t s = 0; s < P && (starts || shared); ++s) {
      for (std::size_t i = 0; i < t.orders[s].size(); ++i) {
        const Held<N>& h = held[static_cast<std::size_t>(t.at[static_cast<std::size_t>(t.first[s]) + i]) - 1];
        if (starts) o.held_back_s[s] += h.waited_s[k];
        if (shared) o.slowed_s[s] += h.slowed_s[k];
      }
    }
    o.busy_s.resize(P);
    o.idle_s.resize(P);
    o.end_s.resize(P);
    for (std::size_t s = 0; s < P; ++s) o.end_s[s] = free_s[s][k];
    for (std::size_t s = 0; s < P; ++s) o.makespan_s = std::max(o.makespan_s, free_s[s][k]);
    for (std::size_t s = 0; s < P; ++s) {
      double per_microbatch = 0;
      for (std::size_t c = 0; c < chunks_run; ++c) {
        auto at = [&](Pass pass) { return seconds[(s * V + c) * 4 + static_cast<std::size_t>(pass)][k]; };
        per_microbatch += at(Pass::forward) + (split ? at(Pass::backward_input) + at(Pass::backward_weight) : at(Pass::backward));
      }
      o.busy_s[s] = whole_m * per_microbatch;
      o.idle_s[s] = o.makespan_s - o.busy_s[s];
    }
  }
  return out;
}

// The steady state of a schedule's orders: each period of `microbatches` more micro-batches
// adds the same `items` to every stage's order, at the end of its steady section (1F1B's
// forward-backward pairs, ZB-H1's triples, the interleaved schedule's pairs over a group of p
// micro-batches in every chunk). 0: none the replay extrapolates (GPipe; interleaved with m not
// a multiple of p is refused by traverse).
struct Period {
  std::int64_t microbatches = 0, items = 0;
};

Period period_of(const PipelineSpec& spec, std::int64_t p, std::int64_t v, std::int64_t m) {
  switch (spec.schedule) {
    case plan::PipelineSchedule::one_f_one_b: return {1, 2};
    case plan::PipelineSchedule::zero_bubble: return {1, 3};
    case plan::PipelineSchedule::interleaved: return m % p == 0 ? Period{p, 2 * p * v} : Period{};
    case plan::PipelineSchedule::gpipe: return {};
  }
  return {};
}

// Where stage s's steady section begins and ends (its first cool-down item) in its order of m
// micro-batches (models/schedules.cpp builds the orders; m >= p here).
std::pair<std::int64_t, std::int64_t> steady_section(plan::PipelineSchedule schedule, std::int64_t p, std::int64_t s, std::int64_t m,
                                                     std::int64_t v) {
  switch (schedule) {
    case plan::PipelineSchedule::one_f_one_b: {
      const std::int64_t warmup = std::min(p - s - 1, m);
      return {warmup, warmup + 2 * (m - warmup)};
    }
    case plan::PipelineSchedule::interleaved: {
      const std::int64_t total = m * v;
      const std::int64_t warmup = m == p ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
      return {warmup, warmup + 2 * (total - warmup)};
    }
    case plan::PipelineSchedule::zero_bubble: return {p - 1 + s, p - 1 + s + 3 * (m - p + 1)};
    case plan::PipelineSchedule::gpipe: break;
  }
  return {0, 0};
}

// The replay, extrapolated over its steady state where it has one (issue 18: the estimate's
// speed). Timing a schedule is a max-plus linear recurrence: once every stage's items of a
// period end a constant delta after the same items of the period before, the state the next
// period starts from is the last one's shifted by delta, and so is all that follows. So the
// replay plays a shorter step (the warm-up, the periods the check needs, the cool-down),
// checks that the last period of every stage's steady section repeats the one before it
// shifted, on every lane, and adds the skipped periods' delta to the makespan (each stage's
// busy time is its items' over the whole step already). The first short step leaves no room
// for a transient; where the check fails there, a second leaves p micro-batches more (one
// period of the interleaved schedule's p), and where that fails too, every micro-batch is
// replayed.
template <std::size_t N>
std::array<PipelineTimes, N> replay(const std::array<const PipelineSpec*, N>& specs) {
  const PipelineSpec& spec = *specs[0];
  const std::int64_t p = std::max<std::int64_t>(1, spec.stages);
  const std::int64_t v = std::max<std::int64_t>(1, spec.chunks);
  const std::int64_t m = std::max<std::int64_t>(1, spec.microbatches);
  const Period period = period_of(spec, p, v, m);
  thread_local std::vector<Lanes<N>> ends;  // scratch, kept between calls
  // ... but not the memory of one very long replay (a schedule too large to keep).
  if (ends.capacity() > (std::size_t{1} << 20)) std::vector<Lanes<N>>().swap(ends);
  std::shared_ptr<const Traversal> hold;
  const std::vector<Lanes<N>> seconds = item_seconds<N>(specs);
  auto whole = [&] { return replay_traversal<N>(specs, m, traversal(spec.schedule, p, m, v, hold), seconds, ends); };
  const bool delayed = std::any_of(specs.begin(), specs.end(),
                                   [](const PipelineSpec* s) { return !s->delays.empty() || !s->not_before.empty() || !s->dp_streams.empty() || !s->issues.empty(); });
  if (!spec.extrapolate || delayed || period.microbatches == 0 || p < 2) return whole();
  const auto P = static_cast<std::size_t>(p);
  const auto L = static_cast<std::size_t>(period.items);
  // The fewest micro-batches (as many as m modulo the period) whose step has room on every stage
  // for `transient` items and the two periods the check compares, besides the warm-up and
  // cool-down; m where there is none.
  auto short_step = [&](std::int64_t transient) {
    for (std::int64_t k = m % period.microbatches; k < m; k += period.microbatches) {
      if (k < p + 1) continue;
      bool room = true;
      for (std::int64_t s = 0; s < p && room; ++s) {
        const auto [from, to] = steady_section(spec.schedule, p, s, k, v);
        room = to - from >= transient + 2 * period.items;
      }
      if (room) return k;
    }
    return m;
  };
  std::int64_t tried = -1;
  for (const std::int64_t transient : {std::int64_t{0}, p / period.microbatches * period.items}) {
    const std::int64_t short_m = short_step(transient);
    if (short_m == tried) continue;
    tried = short_m;
    const std::int64_t skipped = (m - short_m) / period.microbatches;
    if (skipped < 2) break;
    const Traversal& t = traversal(spec.schedule, p, short_m, v, hold);
    std::array<PipelineTimes, N> out = replay_traversal<N>(specs, short_m, t, seconds, ends);
    auto end_of = [&](std::size_t s, std::size_t i) -> const Lanes<N>& {
      return ends[static_cast<std::size_t>(t.at[static_cast<std::size_t>(t.first[s]) + i])];
    };
    std::array<double, N> delta{};
    bool steady = true;
    for (std::size_t s = 0; s < P && steady; ++s) {
      const auto to = static_cast<std::size_t>(steady_section(spec.schedule, p, static_cast<std::int64_t>(s), short_m, v).second);
      if (s == 0) {
        for (std::size_t k = 0; k < N; ++k) {
          delta[k] = end_of(0, to - 1)[k] - end_of(0, to - 1 - L)[k];
          steady = steady && std::isfinite(delta[k]);
        }
      }
      // Every item tested, by the sum of their deviations from the shift on each lane, held to
      // a billionth of the period's first end (no later end of the stage's is below it: a
      // stage's items end in order): stricter than each item's alone, a NaN fails it, and the
      // loop has no branch (issue 18: a verdict per item was a twentieth of the estimate).
      // Four sums a lane, so that the additions do not wait for each other.
      std::array<Lanes<N>, 4> deviation{};
      for (std::size_t i = to - L; i < to; ++i) {
        const Lanes<N>& now = end_of(s, i);
        const Lanes<N>& before = end_of(s, i - L);
        for (std::size_t k = 0; k < N; ++k) deviation[i & 3][k] += std::abs(now[k] - before[k] - delta[k]);
      }
      for (std::size_t k = 0; k < N; ++k) {
        const double sum = deviation[0][k] + deviation[1][k] + deviation[2][k] + deviation[3][k];
        steady = steady && sum <= 1e-9 * std::max(1.0, std::abs(end_of(s, to - L)[k]));
      }
    }
    if (!steady) continue;
    // The busy times are the whole step's already (replay_traversal).
    const auto n = static_cast<double>(skipped);
    for (std::size_t k = 0; k < N; ++k) {
      PipelineTimes& o = out[k];
      o.makespan_s += n * delta[k];
      // Every stage's last item is in its cool-down, after the skipped periods.
      for (std::size_t s = 0; s < P; ++s) o.end_s[s] += n * delta[k];
      for (std::size_t s = 0; s < P; ++s) o.idle_s[s] = o.makespan_s - o.busy_s[s];
    }
    return out;
  }
  return whole();
}

}  // namespace

PipelineTimes pipeline_times(const PipelineSpec& spec) { return replay<1>({&spec})[0]; }

std::pair<PipelineTimes, PipelineTimes> pipeline_times(const PipelineSpec& a, const PipelineSpec& b) {
  auto both = replay<2>({&a, &b});
  return {std::move(both[0]), std::move(both[1])};
}

}  // namespace meshwork::models
