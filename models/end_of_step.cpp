#include "models/end_of_step.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>

namespace meshwork::models {

std::vector<double> end_of_step(const std::vector<double>& start_s, CallableRef<double(std::size_t k, const std::vector<char>& running)> seconds,
                                const StagesMet& meets) {
  const std::size_t P = start_s.size();
  for (std::size_t k = 0; k < P; ++k) {
    if (!std::isfinite(start_s[k]) || start_s[k] < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " starts at a negative or non-finite time");
  }
  const bool listed = !meets.first.empty();
  if (listed && (meets.first.size() != P + 1 || meets.first.front() != 0 || meets.first.back() != meets.stages.size() ||
                 !std::is_sorted(meets.first.begin(), meets.first.end()))) {
    throw std::invalid_argument("end_of_step: meets does not list " + std::to_string(P) + " stages in order");
  }
  std::vector<double> end(P, 0.0);
  if (P == 0) return end;
  // Whose pace a stage's start or end changes (those that meet it), by counting sort: stage j's
  // are affected[affected_first[j]] to affected[affected_first[j + 1] - 1].
  std::vector<std::size_t> affected_first(listed ? P + 1 : 0, 0), affected;
  if (listed) {
    for (const std::size_t j : meets.stages) {
      if (j >= P) throw std::invalid_argument("end_of_step: meets names stage " + std::to_string(j) + " of " + std::to_string(P));
      ++affected_first[j + 1];
    }
    std::partial_sum(affected_first.begin(), affected_first.end(), affected_first.begin());
    affected.resize(meets.stages.size());
    // Filled with each stage's start as its cursor, which ends at the next stage's start...
    for (std::size_t k = 0; k < P; ++k) {
      for (std::size_t i = meets.first[k]; i < meets.first[k + 1]; ++i) affected[affected_first[meets.stages[i]]++] = k;
    }
    // ... so shifted back by one.
    std::copy_backward(affected_first.begin(), affected_first.end() - 1, affected_first.end());
    affected_first[0] = 0;
  }
  std::vector<char> is_running(P, 0);
  // A stage listed as meeting nobody, whom nobody meets, runs at one pace from its start to its
  // end: timed at once, outside the events (the shipped plans' stages mostly meet nobody).
  // The others in the order they start (ties by index: deterministic).
  std::vector<std::size_t> order;
  order.reserve(P);
  for (std::size_t k = 0; k < P; ++k) {
    if (listed && meets.first[k] == meets.first[k + 1] && affected_first[k] == affected_first[k + 1]) {
      is_running[k] = 1;
      const double alone = seconds(k, is_running);
      is_running[k] = 0;
      if (!std::isfinite(alone) || alone < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " has negative or non-finite seconds");
      end[k] = start_s[k] + alone;
    } else {
      order.push_back(k);
    }
  }
  if (order.empty()) return end;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start_s[a] < start_s[b] || (start_s[a] == start_s[b] && a < b); });
  const std::size_t n = order.size();
  struct Run {
    double left = 1.0;  // of the stage's collectives, the fraction still to run
    double pace_s = 0.0;  // their seconds beside those running now
    bool dirty = false;  // its pace to ask for again
  };
  std::vector<Run> run(P);
  std::vector<std::size_t> running;
  running.reserve(n);
  auto touch = [&](std::size_t j) {
    for (std::size_t i = affected_first[j]; i < affected_first[j + 1]; ++i) run[affected[i]].dirty = true;
  };
  std::size_t next = 0;  // in `order`, the next stage to start
  double now = start_s[order[0]];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  while (next < n || !running.empty()) {
    // Stages that start now.
    const std::size_t before = running.size();
    while (next < n && start_s[order[next]] <= now) {
      const std::size_t k = order[next++];
      is_running[k] = 1;
      running.push_back(k);
      if (listed) touch(k);
      run[k].dirty = true;
    }
    if (!listed && running.size() != before) {
      for (const std::size_t k : running) run[k].dirty = true;
    }
    if (running.empty()) {
      now = start_s[order[next]];
      continue;
    }
    // Until the next start or the first of the running to end, each at its pace beside those
    // running now; one with nothing to run ends at once.
    double step = next < n ? start_s[order[next]] - now : kInf;
    std::size_t first = P;  // the stage that ends at now + step, if one does before the next start
    for (const std::size_t k : running) {
      Run& r = run[k];
      if (r.dirty) {
        r.pace_s = seconds(k, is_running);
        if (!std::isfinite(r.pace_s) || r.pace_s < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " has negative or non-finite seconds");
        r.dirty = false;
      }
      const double dt = r.left * r.pace_s;
      if (dt < step) {
        step = dt;
        first = k;
      }
    }
    now += step;
    // Each runs its share of the step; the stage found first, and any other that ends within
    // rounding of it, end now, and the stages they met ask for their pace again.
    bool any_ended = false;
    std::erase_if(running, [&](std::size_t k) {
      Run& r = run[k];
      r.left = k == first || r.pace_s <= 0 ? 0.0 : r.left - step / r.pace_s;
      if (r.left > 1e-12) return false;
      end[k] = now;
      is_running[k] = 0;
      any_ended = true;
      if (listed) touch(k);
      return true;
    });
    if (!listed && any_ended) {
      for (const std::size_t k : running) run[k].dirty = true;
    }
  }
  return end;
}

std::vector<double> dp_end_of_step(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price,
                                   const std::vector<double>& start_s, const std::vector<double>& scale) {
  const std::size_t P = start_s.size();
  if (scale.size() != P) throw std::invalid_argument("dp_end_of_step: start_s and scale differ in length");
  const std::array<const GroupNetwork*, 4> groups{&nets.dense, &nets.expert, &nets.dense_replica, &nets.expert_replica};
  // Per group with per-stage figures, a table of the pairs' shares ([k * P + j]; [k * P + k]
  // alone), as stage_pair_nic_bytes_per_s gives them; the others at their group's.
  std::array<std::vector<double>, 4> pair_rates;
  std::array<double, 4> fixed{};
  // A group that moves nothing after the last item (the expert groups of a dense model) takes
  // no time at any share: no pairs to count for it.
  bool dense_work = work.gathered.dense > 0, expert_work = work.gathered.expert > 0;
  for (const auto& [g, count] : work.reductions) {
    dense_work = dense_work || (count > 0 && g.dense > 0);
    expert_work = expert_work || (count > 0 && g.expert > 0);
  }
  for (std::size_t n = 0; n < groups.size(); ++n) {
    const GroupNetwork& g = *groups[n];
    fixed[n] = g.nic_bytes_per_s;
    const bool expert = n % 2 == 1;  // groups: dense, expert, dense_replica, expert_replica
    if (g.stage_fabric_fractions.size() != P || !(expert ? expert_work : dense_work)) continue;
    pair_rates[n].resize(P * P);
    for (std::size_t k = 0; k < P; ++k) {
      stage_pair_row_nic_bytes_per_s(g, static_cast<std::int64_t>(k), std::span<double>(pair_rates[n].data() + k * P, P));
    }
  }
  // Per stage, the stages beside which one of its groups runs slower than alone (a neighbour or
  // two on the fabric).
  StagesMet meets;
  meets.first.reserve(P + 1);
  meets.stages.reserve(4 * P);
  meets.first.push_back(0);
  for (std::size_t k = 0; k < P; ++k) {
    for (std::size_t j = 0; j < P; ++j) {
      bool slower = false;
      for (const auto& rates : pair_rates) slower = slower || (!rates.empty() && rates[k * P + j] < rates[k * P + k]);
      if (slower) meets.stages.push_back(j);
    }
    meets.first.push_back(meets.stages.size());
  }
  // Priced once per distinct set of shares (most stages share theirs), and per stage its last.
  std::vector<std::pair<std::array<double, 4>, double>> priced;
  priced.reserve(4);
  struct Last {
    std::array<double, 4> rates{-1, -1, -1, -1};
    double s = 0;
  };
  std::vector<Last> last(P);
  auto seconds = [&](std::size_t k, const std::vector<char>& running) {
    std::array<double, 4> rate = fixed;
    for (std::size_t n = 0; n < groups.size(); ++n) {
      if (pair_rates[n].empty()) continue;
      const double* row = pair_rates[n].data() + k * P;
      double least = row[k];
      for (std::size_t i = meets.first[k]; i < meets.first[k + 1]; ++i) {
        if (running[meets.stages[i]]) least = std::min(least, row[meets.stages[i]]);
      }
      rate[n] = least;
    }
    if (rate == last[k].rates) return last[k].s;
    const auto known = std::find_if(priced.begin(), priced.end(), [&](const auto& e) { return e.first == rate; });
    const double whole =
        known != priced.end() ? known->second
                              : priced.emplace_back(rate, after_last_item_s(p, nets, work, price, {rate[0], rate[1], rate[2], rate[3]})).second;
    last[k].rates = rate;
    return last[k].s = scale[k] * whole;
  };
  return end_of_step(start_s, seconds, meets);
}

}  // namespace meshwork::models
